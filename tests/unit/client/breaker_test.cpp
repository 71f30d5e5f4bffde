// Circuit breakers: when they open, how long they stay open, how many probes a half-open breaker
// lets through, and what closes or re-opens it. Times are passed explicitly, as a clock's
// time_since_epoch() would be.
#include <catch2/catch.hpp>
#include <idem/idem.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace std::chrono_literals;
using idem::breaker_state;
using std::chrono::nanoseconds;

idem::consecutive_failure_breaker consecutive(int threshold, nanoseconds open_for, int probes) {
  idem::consecutive_failure_breaker::options s;
  s.threshold = threshold;
  s.open_for = open_for;
  s.probes = probes;
  return idem::consecutive_failure_breaker{s};
}

idem::failure_rate_breaker failure_rate(int window, int minimum_calls, int threshold_percent,
                                        nanoseconds open_for, int probes) {
  idem::failure_rate_breaker::options s;
  s.window = window;
  s.minimum_calls = minimum_calls;
  s.threshold_percent = threshold_percent;
  s.open_for = open_for;
  s.probes = probes;
  return idem::failure_rate_breaker{s};
}

template <class Breaker>
void fail(Breaker& breaker, int times, nanoseconds now) {
  for (int i = 0; i < times; ++i)
    breaker.on_failure(now);
}

template <class Breaker>
void succeed(Breaker& breaker, int times, nanoseconds now) {
  for (int i = 0; i < times; ++i)
    breaker.on_success(now);
}

/// How many of `calls` calls to allow(now) are let through.
template <class Breaker>
int admitted(Breaker& breaker, int calls, nanoseconds now) {
  int count = 0;
  for (int i = 0; i < calls; ++i)
    count += breaker.allow(now) ? 1 : 0;
  return count;
}

/// Starts `threads` threads together on `body(thread_index)` and waits for them all.
template <class Body>
void run_together(int threads, Body body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads)
        std::this_thread::yield();
      body(t);
    });
  }
  for (auto& thread : pool)
    thread.join();
}

}  // namespace

// --- consecutive_failure_breaker -------------------------------------------------------------

TEST_CASE("a closed consecutive-failure breaker allows every call") {
  auto breaker = consecutive(3, 10s, 1);
  CHECK(breaker.state(0s) == breaker_state::closed);
  CHECK(admitted(breaker, 1000, 1s) == 1000);
  CHECK(breaker.state(1s) == breaker_state::closed);
}

TEST_CASE("a consecutive-failure breaker opens on the threshold-th failure in a row, not before") {
  auto breaker = consecutive(3, 10s, 1);
  fail(breaker, 2, 1s);
  CHECK(breaker.state(1s) == breaker_state::closed);
  CHECK(breaker.allow(1s));
  breaker.on_failure(2s);
  CHECK(breaker.state(2s) == breaker_state::open);
  CHECK_FALSE(breaker.allow(2s));
}

TEST_CASE("a success resets the count of consecutive failures") {
  auto breaker = consecutive(3, 10s, 1);
  fail(breaker, 2, 1s);
  breaker.on_success(1s);
  fail(breaker, 2, 2s);
  CHECK(breaker.state(2s) == breaker_state::closed);
  CHECK(breaker.allow(2s));
  breaker.on_failure(3s);  // the third in a row since the success
  CHECK(breaker.state(3s) == breaker_state::open);
}

TEST_CASE("an open breaker refuses every call until open_for has passed") {
  auto breaker = consecutive(1, 10s, 1);
  breaker.on_failure(5s);
  REQUIRE(breaker.state(5s) == breaker_state::open);
  CHECK(admitted(breaker, 100, 5s) == 0);
  CHECK(admitted(breaker, 100, 14s) == 0);
  CHECK_FALSE(breaker.allow(15s - 1ns));
  CHECK(breaker.state(15s - 1ns) == breaker_state::open);
  CHECK(breaker.state(15s) == breaker_state::half_open);
  CHECK(breaker.allow(15s));
}

TEST_CASE("a half-open breaker admits exactly `probes` calls and refuses the rest") {
  for (int probes : {1, 3}) {
    CAPTURE(probes);
    auto breaker = consecutive(1, 10s, probes);
    breaker.on_failure(0s);
    CHECK(admitted(breaker, 100, 10s) == probes);
    CHECK(breaker.state(10s) == breaker_state::half_open);
    CHECK(admitted(breaker, 100, 1h) == 0);  // waiting longer admits no more
  }
}

TEST_CASE("a probe success closes a half-open breaker") {
  auto breaker = consecutive(2, 10s, 1);
  fail(breaker, 2, 0s);
  REQUIRE(breaker.allow(10s));
  breaker.on_success(11s);
  CHECK(breaker.state(11s) == breaker_state::closed);
  CHECK(admitted(breaker, 100, 11s) == 100);
  // Closed again, it counts failures afresh: one short of the threshold keeps it closed.
  breaker.on_failure(12s);
  CHECK(breaker.state(12s) == breaker_state::closed);
  breaker.on_failure(12s);
  CHECK(breaker.state(12s) == breaker_state::open);
}

TEST_CASE("with several probes, a half-open breaker closes only after that many successes") {
  auto breaker = consecutive(1, 10s, 3);
  breaker.on_failure(0s);
  REQUIRE(admitted(breaker, 3, 10s) == 3);
  breaker.on_success(11s);
  breaker.on_success(11s);
  CHECK(breaker.state(11s) == breaker_state::half_open);
  CHECK_FALSE(breaker.allow(11s));
  breaker.on_success(11s);
  CHECK(breaker.state(11s) == breaker_state::closed);
  CHECK(breaker.allow(11s));
}

TEST_CASE("a probe failure re-opens the breaker for a fresh open_for") {
  auto breaker = consecutive(1, 10s, 2);
  breaker.on_failure(0s);
  REQUIRE(breaker.allow(10s));
  breaker.on_success(11s);  // one probe of two succeeded...
  breaker.on_failure(13s);  // ...and the other failed
  CHECK(breaker.state(13s) == breaker_state::open);
  CHECK_FALSE(breaker.allow(20s));  // the first open_for would be over: it counts from 13 s
  CHECK_FALSE(breaker.allow(23s - 1ns));
  CHECK(breaker.state(23s) == breaker_state::half_open);
  // A fresh half-open period: both probes again, and both successes needed.
  CHECK(admitted(breaker, 10, 23s) == 2);
  breaker.on_success(24s);
  CHECK(breaker.state(24s) == breaker_state::half_open);
  breaker.on_success(24s);
  CHECK(breaker.state(24s) == breaker_state::closed);
}

TEST_CASE("a failure reported late, while the breaker is open, does not extend open_for") {
  auto breaker = consecutive(1, 10s, 1);
  breaker.on_failure(0s);
  breaker.on_failure(5s);  // a call admitted before the breaker opened, ending now
  CHECK(breaker.state(10s) == breaker_state::half_open);
  CHECK(breaker.allow(10s));
}

TEST_CASE("open_for zero half-opens the breaker at once") {
  auto breaker = consecutive(1, 0s, 1);
  breaker.on_failure(3s);
  CHECK(breaker.state(3s) == breaker_state::half_open);
  CHECK(admitted(breaker, 5, 3s) == 1);
}

TEST_CASE("invalid consecutive-failure breaker settings are rejected") {
  CHECK_THROWS_AS(consecutive(0, 10s, 1), std::invalid_argument);
  CHECK_THROWS_AS(consecutive(-1, 10s, 1), std::invalid_argument);
  CHECK_THROWS_AS(consecutive(3, 10s, 0), std::invalid_argument);
  CHECK_THROWS_AS(consecutive(3, -1ns, 1), std::invalid_argument);
  CHECK_THROWS_WITH(consecutive(0, 10s, 1), Catch::Contains("threshold"));
  CHECK_THROWS_WITH(consecutive(3, 10s, 0), Catch::Contains("probe"));
  CHECK_NOTHROW(consecutive(1, 0s, 1));
}

// --- failure_rate_breaker ------------------------------------------------------------------

TEST_CASE("a failure-rate breaker does not open before minimum_calls, even at 100% failure") {
  auto breaker = failure_rate(20, 10, 50, 10s, 1);
  fail(breaker, 9, 1s);
  CHECK(breaker.state(1s) == breaker_state::closed);
  CHECK(breaker.allow(1s));
  breaker.on_failure(2s);
  CHECK(breaker.state(2s) == breaker_state::open);
  CHECK_FALSE(breaker.allow(2s));
}

TEST_CASE("a failure-rate breaker opens when the failure rate reaches the threshold") {
  auto breaker = failure_rate(100, 100, 50, 10s, 1);
  // 49 failures among 100 calls: 49% stays closed.
  for (int i = 0; i < 100; ++i) {
    if (i % 2 == 1 && i < 98) {
      breaker.on_failure(1s);
    } else {
      breaker.on_success(1s);
    }
  }
  CHECK(breaker.state(1s) == breaker_state::closed);
  CHECK(breaker.allow(1s));
  // The next failure replaces the oldest call, a success: 50 of the last 100 failed.
  breaker.on_failure(2s);
  CHECK(breaker.state(2s) == breaker_state::open);
}

TEST_CASE("a failure-rate breaker judges only the last `window` calls") {
  auto breaker = failure_rate(10, 10, 50, 10s, 1);
  fail(breaker, 4, 1s);
  succeed(breaker, 16, 1s);  // the four failures slide out of the window
  fail(breaker, 4, 2s);      // 4 failures in the last 10 calls; 8 if old ones never left
  CHECK(breaker.state(2s) == breaker_state::closed);
  breaker.on_failure(3s);  // 5 of the last 10
  CHECK(breaker.state(3s) == breaker_state::open);
}

TEST_CASE("a failure-rate breaker half-opens, and closes after `probes` probe successes") {
  auto breaker = failure_rate(10, 10, 50, 10s, 2);
  fail(breaker, 10, 0s);
  REQUIRE(breaker.state(0s) == breaker_state::open);
  CHECK_FALSE(breaker.allow(10s - 1ns));
  CHECK(admitted(breaker, 10, 10s) == 2);
  breaker.on_success(11s);
  CHECK(breaker.state(11s) == breaker_state::half_open);
  breaker.on_success(11s);
  CHECK(breaker.state(11s) == breaker_state::closed);
  // Closed again, the window starts empty: nine failures are below minimum_calls.
  fail(breaker, 9, 12s);
  CHECK(breaker.state(12s) == breaker_state::closed);
  breaker.on_failure(12s);
  CHECK(breaker.state(12s) == breaker_state::open);
}

TEST_CASE("a failure-rate breaker's probe failure re-opens it for a fresh open_for") {
  auto breaker = failure_rate(10, 10, 50, 10s, 1);
  fail(breaker, 10, 0s);
  REQUIRE(breaker.allow(10s));
  breaker.on_failure(12s);
  CHECK(breaker.state(12s) == breaker_state::open);
  CHECK_FALSE(breaker.allow(21s));
  CHECK(breaker.allow(22s));
}

TEST_CASE("invalid failure-rate breaker settings are rejected") {
  CHECK_THROWS_AS(failure_rate(0, 1, 50, 10s, 1), std::invalid_argument);
  CHECK_THROWS_AS(failure_rate(10, 0, 50, 10s, 1), std::invalid_argument);
  CHECK_THROWS_AS(failure_rate(10, 11, 50, 10s, 1), std::invalid_argument);
  CHECK_THROWS_AS(failure_rate(10, 10, 0, 10s, 1), std::invalid_argument);
  CHECK_THROWS_AS(failure_rate(10, 10, 101, 10s, 1), std::invalid_argument);
  CHECK_THROWS_AS(failure_rate(10, 10, 50, -1s, 1), std::invalid_argument);
  CHECK_THROWS_AS(failure_rate(10, 10, 50, 10s, 0), std::invalid_argument);
  CHECK_THROWS_WITH(failure_rate(10, 11, 50, 10s, 1), Catch::Contains("minimum_calls"));
  CHECK_NOTHROW(failure_rate(10, 10, 100, 0s, 1));
  CHECK_NOTHROW(failure_rate(1, 1, 1, 10s, 1));
}

// --- no_breaker and copies -------------------------------------------------------------------

TEST_CASE("no_breaker allows every call, whatever failed before") {
  idem::no_breaker breaker;
  for (int i = 0; i < 1000; ++i)
    breaker.on_failure(nanoseconds{i});
  CHECK(admitted(breaker, 100, 1s) == 100);
  CHECK(breaker.state(1s) == breaker_state::closed);
}

TEST_CASE("copies of a breaker share its state") {
  auto original = consecutive(2, 10s, 1);
  auto copy = original;
  copy.on_failure(0s);
  original.on_failure(0s);
  CHECK(copy.state(0s) == breaker_state::open);
  CHECK_FALSE(original.allow(1s));
  auto rate = failure_rate(4, 4, 50, 10s, 1);
  auto rate_copy = rate;
  fail(rate_copy, 2, 0s);
  fail(rate, 2, 0s);
  CHECK(rate_copy.state(0s) == breaker_state::open);
}

// --- concurrency -----------------------------------------------------------------------------

TEST_CASE("a half-open breaker admits exactly `probes` calls even under contention",
          "[concurrency]") {
  constexpr int threads = 8;
  constexpr int probes = 3;
  for (int iteration = 0; iteration < 200; ++iteration) {
    auto breaker = iteration % 2 == 0 ? consecutive(1, 10s, probes) : consecutive(2, 10s, probes);
    fail(breaker, 2, 0s);
    REQUIRE(breaker.state(0s) == breaker_state::open);
    std::atomic<int> let_through{0};
    run_together(threads, [&, breaker](int) mutable {
      int mine = 0;
      for (int i = 0; i < 50; ++i)
        mine += breaker.allow(10s) ? 1 : 0;
      let_through.fetch_add(mine);
    });
    CAPTURE(iteration);
    REQUIRE(let_through.load() == probes);
  }
  for (int iteration = 0; iteration < 50; ++iteration) {
    auto breaker = failure_rate(10, 10, 50, 10s, probes);
    fail(breaker, 10, 0s);
    std::atomic<int> let_through{0};
    run_together(threads, [&, breaker](int) mutable {
      int mine = 0;
      for (int i = 0; i < 50; ++i)
        mine += breaker.allow(10s) ? 1 : 0;
      let_through.fetch_add(mine);
    });
    CAPTURE(iteration);
    REQUIRE(let_through.load() == probes);
  }
}

namespace {

/// Many threads call allow / on_success / on_failure at once with times that move forward.
template <class Breaker>
void storm(Breaker breaker, std::atomic<std::int64_t>& clock_ms) {
  run_together(8, [&, breaker](int t) mutable {
    std::uint64_t x = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(t + 1);
    for (int i = 0; i < 20'000; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const nanoseconds now = std::chrono::milliseconds{clock_ms.fetch_add(1)};
      switch (x % 4) {
        case 0:
          (void)breaker.state(now);
          [[fallthrough]];
        case 1:
          if (breaker.allow(now)) breaker.on_success(now);
          break;
        case 2:
          (void)breaker.allow(now);
          breaker.on_failure(now);
          break;
        default:
          breaker.on_failure(now);
          break;
      }
    }
  });
}

/// From whatever state the storm left, a single thread can bring the breaker to open at `t` and
/// then through half-open to closed, and a closed breaker then opens at exactly `threshold`
/// failures: the shared state is consistent.
template <class Breaker>
void check_consistent_after_storm(Breaker& breaker, nanoseconds t, nanoseconds open_for, int probes,
                                  int threshold) {
  (void)breaker.allow(t);  // an open breaker past open_for half-opens here
  fail(breaker, threshold, t);
  REQUIRE(breaker.state(t) == breaker_state::open);
  CHECK_FALSE(breaker.allow(t + open_for - 1ns));
  CHECK(admitted(breaker, probes + 5, t + open_for) == probes);
  succeed(breaker, probes, t + open_for);
  REQUIRE(breaker.state(t + open_for) == breaker_state::closed);
  fail(breaker, threshold - 1, t + open_for);
  CHECK(breaker.state(t + open_for) == breaker_state::closed);
  breaker.on_failure(t + open_for);
  CHECK(breaker.state(t + open_for) == breaker_state::open);
}

}  // namespace

TEST_CASE("a storm of calls from many threads leaves a breaker consistent", "[concurrency]") {
  for (int round = 0; round < 5; ++round) {
    CAPTURE(round);
    std::atomic<std::int64_t> clock_ms{0};
    {
      auto breaker = consecutive(5, 20ms, 2);
      storm(breaker, clock_ms);
      const nanoseconds after = std::chrono::milliseconds{clock_ms.load()} + 1s;
      check_consistent_after_storm(breaker, after, 20ms, 2, 5);
    }
    clock_ms = 0;
    {
      // window = minimum_calls, so `window` failures in a row open it.
      auto breaker = failure_rate(8, 8, 50, 20ms, 2);
      storm(breaker, clock_ms);
      const nanoseconds after = std::chrono::milliseconds{clock_ms.load()} + 1s;
      check_consistent_after_storm(breaker, after, 20ms, 2, 8);
    }
  }
}

TEMPLATE_TEST_CASE("breaker: the listener hears each state change once, in order", "",
                   idem::consecutive_failure_breaker, idem::failure_rate_breaker) {
  std::vector<breaker_state> heard;
  typename TestType::options s;
  if constexpr (std::is_same_v<TestType, idem::failure_rate_breaker>) {
    s.window = 2;
    s.minimum_calls = 2;
  } else {
    s.threshold = 2;
  }
  s.open_for = 1s;
  s.probes = 2;
  s.on_change = [&](breaker_state entered) { heard.push_back(entered); };
  TestType breaker{s};

  fail(breaker, 2, 0s);  // opens
  fail(breaker, 3, 0s);  // late reports while open: no change
  CHECK(admitted(breaker, 1, 500ms) == 0);
  CHECK(heard == std::vector{breaker_state::open});
  CHECK(admitted(breaker, 3, 1s) == 2);  // half-opens, two probes
  breaker.on_success(1s);
  breaker.on_failure(1s);  // a probe failed: open again
  CHECK(admitted(breaker, 2, 2s) == 2);
  succeed(breaker, 2, 2s);  // both probes succeeded: closed
  succeed(breaker, 5, 2s);  // no change
  CHECK(heard == std::vector{breaker_state::open, breaker_state::half_open, breaker_state::open,
                             breaker_state::half_open, breaker_state::closed});
  CHECK(breaker.state(2s) == breaker_state::closed);
}

TEST_CASE("breaker: copies report to the one listener, from many threads, in order") {
  // The listener is called under the breaker's transition lock, so what it hears is one
  // sequence, each change a legal step from the one before.
  std::vector<breaker_state> heard;
  idem::consecutive_failure_breaker::options s;
  s.threshold = 1;
  s.open_for = 0s;  // every allow after a failure is a probe at once
  s.probes = 1;
  s.on_change = [&](breaker_state entered) { heard.push_back(entered); };
  idem::consecutive_failure_breaker breaker{s};
  run_together(4, [copy = breaker](int thread) mutable {
    for (int i = 0; i < 2000; ++i) {
      if (!copy.allow(nanoseconds{i})) continue;
      if ((i + thread) % 3 == 0) {
        copy.on_failure(nanoseconds{i});
      } else {
        copy.on_success(nanoseconds{i});
      }
    }
  });
  REQUIRE(heard.size() > 2);
  breaker_state before = breaker_state::closed;
  for (const breaker_state entered : heard) {
    const bool legal = (before == breaker_state::closed && entered == breaker_state::open) ||
                       (before == breaker_state::open && entered == breaker_state::half_open) ||
                       (before == breaker_state::half_open && entered != breaker_state::half_open);
    REQUIRE(legal);
    before = entered;
  }
  // What it heard last is where the breaker is (open reads half-open at once: open_for is 0).
  const breaker_state now = breaker.state(nanoseconds{2000});
  CHECK((now == before || (before == breaker_state::open && now == breaker_state::half_open)));
}
