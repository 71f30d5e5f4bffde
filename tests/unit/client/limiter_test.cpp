// Rate limiters (idem/client/policy/limiter.hpp): when each admits and how long it says to wait,
// the rate each keeps over 10 s of a manual clock from 1, 2 and 8 threads, bad settings, and
// retrying waiting for permits or ending rate_limited.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

namespace limiter_test {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

idem::token_bucket_limiter bucket(double rate, int burst) {
  return idem::token_bucket_limiter{{.rate = rate, .burst = burst}};
}

idem::sliding_window_limiter window(std::int64_t limit, nanoseconds length) {
  return idem::sliding_window_limiter{{.limit = limit, .window = length}};
}

// Offers permits from `threads` threads over `span` of a shared manual time that each offer
// moves on by `step`: answers how many were admitted. The times the threads offer at
// interleave out of order, as real threads' clock reads do.
template <class Limiter>
std::int64_t admitted_over(Limiter limiter, int threads, nanoseconds span, nanoseconds step) {
  std::atomic<std::int64_t> time{0};
  std::atomic<std::int64_t> admitted{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, limiter]() mutable {
      std::int64_t mine = 0;
      for (;;) {
        const std::int64_t at = time.fetch_add(step.count());
        if (at >= span.count()) break;
        if (limiter.try_acquire(nanoseconds{at}).admitted) ++mine;
      }
      admitted += mine;
    });
  }
  for (auto& thread : pool)
    thread.join();
  return admitted.load();
}

}  // namespace

TEST_CASE("token bucket limiter: a permit every 1/rate, a burst at once after a quiet spell") {
  auto limiter = bucket(100, 1);
  CHECK(limiter.interval() == 10ms);
  CHECK(limiter.try_acquire(1s).admitted);
  const idem::limiter_answer refused = limiter.try_acquire(1s);
  CHECK_FALSE(refused.admitted);
  CHECK(refused.retry_in == 10ms);
  CHECK(limiter.try_acquire(1s + 4ms).retry_in == 6ms);
  CHECK(limiter.try_acquire(1s + 10ms).admitted);

  auto bursty = bucket(100, 5);
  for (int i = 0; i < 5; ++i)
    CHECK(bursty.try_acquire(2s).admitted);
  CHECK(bursty.try_acquire(2s).retry_in == 10ms);
  // After a second of nothing the burst is back, and no more than it.
  int at_once = 0;
  while (bursty.try_acquire(3s).admitted)
    ++at_once;
  CHECK(at_once == 5);
}

TEST_CASE("sliding window limiter: a window's limit, then the previous window sliding out") {
  auto limiter = window(10, 1s);
  for (int i = 0; i < 10; ++i)
    CHECK(limiter.try_acquire(500ms).admitted);
  const idem::limiter_answer full = limiter.try_acquire(500ms);
  CHECK_FALSE(full.admitted);
  CHECK(full.retry_in == 500ms);  // this window is full: the next one
  // At the next window's start all ten are still counted: the estimate is the previous
  // window's count times the share of it the sliding window still covers, in whole permits, so
  // one fits as soon as the first sliver has slid out ...
  const idem::limiter_answer slid = limiter.try_acquire(1s);
  CHECK_FALSE(slid.admitted);
  CHECK(slid.retry_in <= 1us);
  CHECK(limiter.try_acquire(1s + slid.retry_in).admitted);
  // ... and the next once a tenth of it has.
  const idem::limiter_answer next = limiter.try_acquire(1s + slid.retry_in);
  CHECK_FALSE(next.admitted);
  CHECK(next.retry_in > 99ms);
  CHECK(next.retry_in < 101ms);
  CHECK(limiter.try_acquire(1s + slid.retry_in + next.retry_in).admitted);
}

TEST_CASE("sliding window limiter: a late clock read counts in the newer window") {
  auto limiter = window(2, 1s);
  CHECK(limiter.try_acquire(2500ms).admitted);  // window 2
  // A thread whose clock read was window 0 (two back, the same slot) must not reset window 2.
  CHECK(limiter.try_acquire(100ms).admitted);
  CHECK_FALSE(limiter.try_acquire(2600ms).admitted);  // window 2 holds both
}

TEST_CASE("limiters keep their rate within 1 percent over 10 s from 1, 2 and 8 threads",
          "[concurrency]") {
  for (const int threads : {1, 2, 8}) {
    CAPTURE(threads);
    // 1,000 a second, offered 100,000 a second: 10,000 over 10 s (and the burst).
    const std::int64_t by_bucket = admitted_over(bucket(1000, 10), threads, 10s, 10us);
    CHECK(by_bucket >= 9900);
    CHECK(by_bucket <= 10100);
    const std::int64_t by_window = admitted_over(window(100, 100ms), threads, 10s, 10us);
    CHECK(by_window >= 9900);
    CHECK(by_window <= 10100);
  }
}

TEST_CASE("limiters: settings no rate can come from are refused with a sentence") {
  CHECK_THROWS_AS(bucket(0, 1), std::invalid_argument);
  CHECK_THROWS_AS(bucket(-5, 1), std::invalid_argument);
  CHECK_THROWS_AS(bucket(2e9, 1), std::invalid_argument);
  CHECK_THROWS_AS(bucket(10, 0), std::invalid_argument);
  CHECK_THROWS_WITH(bucket(std::nan(""), 1), Catch::Matchers::Contains("token_bucket_limiter"));
  CHECK_THROWS_AS(window(0, 1s), std::invalid_argument);
  CHECK_THROWS_AS(window(std::int64_t{1} << 24, 1s), std::invalid_argument);
  CHECK_THROWS_WITH(window(10, 0s), Catch::Matchers::Contains("sliding_window_limiter"));
}

namespace {

struct limited_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using backoff = idem::constant_backoff;
  using limiter = idem::token_bucket_limiter;
};

struct answer {
  int status = 200;
};

}  // namespace

TEST_CASE("retrying waits on its clock for the limiter's permit, or ends rate_limited") {
  idem::manual_clock clock;
  std::vector<nanoseconds> calls;  // when each attempt reached the dependency
  int status = 200;
  auto call = [&](const idem::attempt_context&) {
    calls.push_back(clock.elapsed());
    return answer{status};
  };
  using wrapper = idem::retrying<decltype(call), limited_policies>;
  wrapper::options options;
  options.clock = clock;
  options.limiter = bucket(10, 1);  // one attempt every 100 ms
  options.backoff = idem::constant_backoff{0ms};
  wrapper limited{call, options};

  SECTION("each operation waits for its permit") {
    for (int i = 0; i < 3; ++i)
      CHECK(limited().verdict() == idem::retry_verdict::succeeded);
    CHECK(calls == std::vector<nanoseconds>{0ms, 100ms, 200ms});
  }
  SECTION("a retry takes a permit as a first attempt does") {
    status = 503;
    const auto outcome = limited();
    CHECK(outcome.verdict() == idem::retry_verdict::attempts_exhausted);
    CHECK(calls == std::vector<nanoseconds>{0ms, 100ms, 200ms});
  }
  SECTION("past limiter_wait it ends rate_limited, the dependency never called") {
    options.limiter_wait = 50ms;
    wrapper impatient{call, options};
    CHECK(impatient().verdict() == idem::retry_verdict::succeeded);
    const auto refused = impatient();
    CHECK(refused.verdict() == idem::retry_verdict::rate_limited);
    CHECK(idem::to_string(refused.verdict()) == "rate_limited");
    CHECK(refused.attempts() == 0);
    CHECK(calls.size() == 1);
    CHECK(clock.elapsed() == 0ms);  // refused at once: the 100 ms wait was past 50 ms
  }
  SECTION("a wait that would end past the deadline ends rate_limited") {
    options.limits.deadline = 80ms;
    wrapper hurried{call, options};
    CHECK(hurried().verdict() == idem::retry_verdict::succeeded);
    CHECK(hurried().verdict() == idem::retry_verdict::rate_limited);
    CHECK(calls.size() == 1);
  }
  SECTION("a negative limiter_wait is refused") {
    options.limiter_wait = -1ms;
    CHECK_THROWS_WITH(wrapper(call, options), Catch::Matchers::Contains("limiter_wait"));
  }
}

TEST_CASE("one limiter shared by two wrappers keeps one rate for the dependency") {
  idem::manual_clock clock;
  int calls = 0;
  auto call = [&](const idem::attempt_context&) {
    ++calls;
    return answer{};
  };
  using wrapper = idem::retrying<decltype(call), limited_policies>;
  wrapper::options options;
  options.clock = clock;
  options.limiter = bucket(10, 1);
  options.limiter_wait = 0ms;
  wrapper first{call, options}, second{call, options};
  CHECK(first().verdict() == idem::retry_verdict::succeeded);
  CHECK(second().verdict() == idem::retry_verdict::rate_limited);
  clock.advance(100ms);
  CHECK(second().verdict() == idem::retry_verdict::succeeded);
  CHECK(calls == 2);
}

}  // namespace limiter_test
