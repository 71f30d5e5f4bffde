// Latency trackers (idem/client/policy/latency.hpp): the sketch's stated error on a heavy-tailed
// distribution, how fast it follows a shift, the timeouts derived from it, bad settings, merging,
// many threads recording at once, retrying handing each attempt its derived timeout, and
// retrying timing a random one attempt in sample_every without losing the p99.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

// A dependency whose latency is heavy-tailed: log-normal around a median, with 2% of answers
// 100 times slower (a GC pause, a cold cache), as the hedging issue describes.
class heavy_tail {
 public:
  explicit heavy_tail(nanoseconds median, std::uint64_t seed = 7)
      : median_(median), random_(seed) {}
  nanoseconds next() {
    double ns = static_cast<double>(median_.count()) * std::exp(0.25 * normal_(random_));
    if (slow_(random_) < 0.02) ns *= 100;
    return nanoseconds{static_cast<std::int64_t>(ns)};
  }

 private:
  nanoseconds median_;
  std::mt19937_64 random_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  std::uniform_real_distribution<double> slow_{0.0, 1.0};
};

// The exact quantile of `samples` at rank ceil(q * n), as the tracker ranks.
nanoseconds exact_quantile(std::vector<nanoseconds> samples, double q) {
  std::sort(samples.begin(), samples.end());
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(samples.size())));
  rank = std::clamp<std::size_t>(rank, 1, samples.size());
  return samples[rank - 1];
}

double relative_error(nanoseconds got, nanoseconds want) {
  return std::abs(static_cast<double>(got.count() - want.count())) /
         static_cast<double>(want.count());
}

idem::latency_tracker tracker(std::uint32_t window, std::uint32_t min_samples = 1) {
  idem::latency_tracker::options s;
  s.window = window;
  s.min_samples = min_samples;
  return idem::latency_tracker{s};
}

}  // namespace

TEST_CASE("latency tracker: every duration's bucket stands for it within 1/128") {
  std::size_t previous = 0;
  for (std::int64_t ns = 0; ns < 5'000'000; ns += 1 + ns / 50) {
    const std::size_t bucket = idem::latency_tracker::bucket_of(nanoseconds{ns});
    CHECK(bucket >= previous);  // buckets grow with durations
    previous = bucket;
    const nanoseconds value = idem::latency_tracker::value_of(bucket);
    if (ns < 64) {
      CHECK(value.count() == ns);
    } else {
      CHECK(relative_error(value, nanoseconds{ns}) <= 1.0 / 128);
    }
  }
  CHECK(idem::latency_tracker::bucket_of(-5ns) == 0);
  CHECK(idem::latency_tracker::bucket_of(nanoseconds{std::int64_t{1} << 50}) ==
        idem::latency_tracker::buckets - 1);
}

TEST_CASE("latency tracker: p99.9 of a heavy tail is within the sketch's 0.8 percent") {
  heavy_tail dependency{2ms};
  auto sketch = tracker(100'000);
  std::vector<nanoseconds> samples;
  for (int i = 0; i < 100'000; ++i) {
    samples.push_back(dependency.next());
    sketch.record(samples.back());
  }
  for (const double q : {0.5, 0.95, 0.99, 0.999}) {
    CAPTURE(q);
    const std::optional<nanoseconds> estimate = sketch.quantile(q);
    REQUIRE(estimate);
    CHECK(relative_error(*estimate, exact_quantile(samples, q)) <= 1.0 / 128);
  }
  // And the kept answers (what timeouts read) are the same as a fresh computation.
  CHECK(sketch.estimate(0.999) == sketch.quantile(0.999));
  CHECK(sketch.estimate(0.95) == sketch.quantile(0.95));
  // The tail is the slow 2%: p99.9 is about 100 times the median.
  CHECK(*sketch.quantile(0.999) > 100 * *sketch.quantile(0.5) / 2);
}

TEST_CASE("latency tracker: after a shift it follows within two windows of samples") {
  constexpr std::uint32_t window = 2048;
  auto sketch = tracker(window);
  heavy_tail before{1ms, 1}, after{10ms, 2};
  for (int i = 0; i < 3 * static_cast<int>(window); ++i)
    sketch.record(before.next());
  const nanoseconds old_median = *sketch.estimate(0.95);

  std::vector<nanoseconds> recent;
  for (int i = 0; i < static_cast<int>(window); ++i) {
    recent.push_back(after.next());
    sketch.record(recent.back());
  }
  // One window in: the older window still holds the old latency, so the answer lies between.
  const nanoseconds halfway = *sketch.estimate(0.95);
  CHECK(halfway > old_median);
  for (int i = 0; i < static_cast<int>(window); ++i) {
    recent.push_back(after.next());
    sketch.record(recent.back());
  }
  // Two windows in: only samples from after the shift are left, and the answer is theirs.
  CHECK(sketch.samples() <= 2 * window);
  const std::vector<nanoseconds> kept(recent.end() - static_cast<std::ptrdiff_t>(sketch.samples()),
                                      recent.end());
  CHECK(relative_error(*sketch.quantile(0.95), exact_quantile(kept, 0.95)) <= 1.0 / 128);
  CHECK(*sketch.estimate(0.95) > 5 * old_median);
}

TEST_CASE("latency tracker: no answer until min_samples, then one") {
  idem::latency_tracker::options s;
  s.window = 4096;
  s.min_samples = 100;
  idem::latency_tracker sketch{s};
  for (int i = 0; i < 99; ++i)
    sketch.record(5ms);
  CHECK_FALSE(sketch.estimate(0.999));
  CHECK_FALSE(sketch.quantile(0.5));
  sketch.record(5ms);
  REQUIRE(sketch.estimate(0.999));
  CHECK(relative_error(*sketch.estimate(0.999), 5ms) <= 1.0 / 128);
}

TEST_CASE("latency tracker: copies share one sketch, and merge adds another's samples") {
  auto a = tracker(10'000);
  auto copy = a;
  auto b = tracker(10'000);
  for (int i = 1; i <= 500; ++i) {
    copy.record(nanoseconds{i * 1000});
    b.record(nanoseconds{(i + 500) * 1000});
  }
  CHECK(a.samples() == 500);
  a.merge(b);
  CHECK(a.samples() == 1000);
  CHECK(b.samples() == 500);
  CHECK(relative_error(*a.quantile(0.5), 500us) <= 1.0 / 128);
  CHECK(relative_error(*a.estimate(0.999), 999us) <= 1.0 / 128);
  a.merge(copy);  // itself: nothing changes
  CHECK(a.samples() == 1000);
}

TEST_CASE("latency tracker: bad settings are refused with a sentence") {
  const auto refused = [](auto change) {
    idem::latency_tracker::options s;
    change(s);
    CHECK_THROWS_AS(idem::latency_tracker{s}, std::invalid_argument);
  };
  refused([](auto& s) { s.window = 0; });
  refused([](auto& s) { s.min_samples = 0; });
  refused([](auto& s) { s.min_samples = s.window + 1; });
  refused([](auto& s) { s.sample_every = 0; });
  refused([](auto& s) { s.sample_every = 12; });
  refused([](auto& s) { s.refresh_every = 0; });
  refused([](auto& s) { s.refresh_every = 100; });  // not a power of two
  refused([](auto& s) { s.quantiles = {}; });
  refused([](auto& s) { s.quantiles = {0.5, 0.9, 0.95, 0.99, 0.999}; });
  refused([](auto& s) { s.quantiles = {1.0}; });
  refused([](auto& s) { s.quantiles = {0.0}; });
  refused([](auto& s) { s.quantiles = {std::nan("")}; });
  CHECK_THROWS_WITH(idem::latency_tracker({.window = 0}),
                    Catch::Matchers::Contains("idem::latency_tracker"));
}

TEST_CASE("latency tracker: threads recording at once lose no sample and keep answering",
          "[concurrency]") {
  constexpr int threads = 4;
  constexpr int each = 20'000;
  SECTION("within one window: every sample counted") {
    auto sketch = tracker(threads * each + 1);
    std::vector<std::thread> pool;
    std::atomic<bool> reading{true};
    std::thread reader([&] {
      while (reading.load())
        (void)sketch.estimate(0.999);
    });
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&sketch, t] {
        for (int i = 0; i < each; ++i)
          sketch.record(nanoseconds{(t + 1) * 1'000'000 + i});
      });
    }
    for (auto& thread : pool)
      thread.join();
    reading = false;
    reader.join();
    CHECK(sketch.samples() == static_cast<std::uint64_t>(threads) * each);
    CHECK(relative_error(*sketch.quantile(1.0), nanoseconds{4'000'000 + each - 1}) <= 1.0 / 128);
  }
  SECTION("across many windows: the answers stay among the durations recorded") {
    auto sketch = tracker(512, 64);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&sketch] {
        for (int i = 0; i < each; ++i) {
          sketch.record(3ms);
          if (const auto e = sketch.estimate(0.999)) {
            if (relative_error(*e, 3ms) > 1.0 / 128) throw std::logic_error("off");
          }
        }
      });
    }
    for (auto& thread : pool)
      thread.join();
    CHECK(sketch.samples() <= 2 * 512 + threads);
    CHECK(relative_error(*sketch.estimate(0.999), 3ms) <= 1.0 / 128);
  }
}

TEST_CASE("attempt timeouts: the start value, then the quantile times the factor, clamped") {
  auto sketch = tracker(4096, 100);
  idem::attempt_timeouts settings;  // p99.9, x1.5, floor 1 ms, start 1 s
  CHECK(idem::detail::attempt_timeout(sketch, settings, 10s) == 1s);
  CHECK(idem::detail::attempt_timeout(sketch, settings, 300ms) == 300ms);  // the time left
  for (int i = 0; i < 1000; ++i)
    sketch.record(20ms);
  const nanoseconds derived = idem::detail::attempt_timeout(sketch, settings, 10s);
  CHECK(relative_error(derived, 30ms) <= 1.0 / 128);
  CHECK(idem::detail::attempt_timeout(sketch, settings, 25ms) == 25ms);
  settings.floor = 50ms;
  CHECK(idem::detail::attempt_timeout(sketch, settings, 10s) == 50ms);
  CHECK(idem::detail::attempt_timeout(idem::no_latency_tracker{}, settings, 10s) == 1s);
}

TEST_CASE("attempt timeouts: settings no timeout can come from are refused") {
  const auto sketch = tracker(4096);
  const auto refused = [&](auto change) {
    idem::attempt_timeouts s;
    change(s);
    CHECK_THROWS_AS(idem::detail::check_attempt_timeouts(sketch, s, "test"), std::invalid_argument);
  };
  refused([](auto& s) { s.quantile = 0; });
  refused([](auto& s) { s.quantile = 1; });
  refused([](auto& s) { s.factor = 0; });
  refused([](auto& s) { s.floor = -1ns; });
  refused([](auto& s) { s.start = 0ns; });
  refused([](auto& s) { s.quantile = 0.99; });  // not one the tracker keeps
  CHECK_NOTHROW(idem::detail::check_attempt_timeouts(sketch, idem::attempt_timeouts{}, "test"));
}

namespace {

struct tracked_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using latency = idem::latency_tracker;
};

struct answer {
  int status = 200;
};

}  // namespace

TEST_CASE("retrying hands each attempt a timeout from the dependency's measured latency") {
  idem::manual_clock clock;
  idem::latency_tracker dependency{{.window = 4096, .min_samples = 100, .sample_every = 1}};
  std::vector<nanoseconds> timeouts;
  nanoseconds takes = 40ms;
  auto call = [&](const idem::attempt_context& attempt) {
    timeouts.push_back(attempt.timeout());
    clock.advance(takes);
    return answer{};
  };
  using wrapper = idem::retrying<decltype(call), tracked_policies>;
  wrapper::options options;
  options.clock = clock;
  options.latency = dependency;
  options.timeouts.start = 2s;
  wrapper retried{call, options};

  for (int i = 0; i < 100; ++i)
    REQUIRE(retried().verdict() == idem::retry_verdict::succeeded);
  CHECK(timeouts.front() == 2s);  // too few samples: the start value
  CHECK(timeouts[99] == 2s);
  CHECK(dependency.samples() == 100);  // the wrapper fed the tracker it was given
  REQUIRE(retried().verdict() == idem::retry_verdict::succeeded);
  CHECK(relative_error(timeouts.back(), 60ms) <= 1.0 / 128);  // 40 ms x 1.5

  // The dependency slows down: two windows later the timeouts have followed.
  takes = 400ms;
  for (int i = 0; i < 2 * 4096; ++i)
    retried();
  REQUIRE(retried().verdict() == idem::retry_verdict::succeeded);
  CHECK(relative_error(timeouts.back(), 600ms) <= 1.0 / 128);
  CHECK(retried.latency().samples() <= 2 * 4096);
}

TEST_CASE(
    "retrying times one attempt in sample_every once its tracker answers, and the sampled p99 is "
    "as close to the dependency's as an unsampled tracker's") {
  idem::manual_clock clock;
  heavy_tail latency{2ms, 11};
  std::vector<nanoseconds> all;  // every attempt's duration, timed or not
  auto call = [&](const idem::attempt_context&) {
    all.push_back(latency.next());
    clock.advance(all.back());
    return answer{};
  };
  using wrapper = idem::retrying<decltype(call), tracked_policies>;
  const auto tracked_by = [&](const idem::latency_tracker& sketch) {
    wrapper::options options;
    options.clock = clock;
    options.latency = sketch;
    options.timeouts.quantile = 0.99;
    return wrapper{call, options};
  };
  constexpr std::uint32_t kept = 20'000;
  idem::latency_tracker every{
      {.window = 2 * kept, .min_samples = 1000, .quantiles = {0.99}, .sample_every = 1}};
  idem::latency_tracker sampled{
      {.window = 2 * kept, .min_samples = 1000, .quantiles = {0.99}, .sample_every = 16}};

  auto all_timed = tracked_by(every);
  for (std::uint32_t i = 0; i < kept; ++i)
    REQUIRE(all_timed().verdict() == idem::retry_verdict::succeeded);
  CHECK(every.samples() == kept);

  // Until it answers, the sampling tracker is fed every attempt, as one that does not sample.
  auto sampling = tracked_by(sampled);
  for (int i = 0; i < 1000; ++i)
    REQUIRE(sampling().verdict() == idem::retry_verdict::succeeded);
  CHECK(sampled.samples() == 1000);
  REQUIRE(sampled.estimate(0.99));
  // Then one in 16, at random: 19,000 more samples expected, within five standard deviations.
  constexpr std::uint64_t attempts = 16ull * (kept - 1000);
  for (std::uint64_t i = 0; i < attempts; ++i)
    REQUIRE(sampling().verdict() == idem::retry_verdict::succeeded);
  const double spread = 5 * std::sqrt(static_cast<double>(attempts) * (1.0 / 16) * (15.0 / 16));
  CHECK(std::abs(static_cast<double>(sampled.samples()) - kept) <= spread);

  // Each tracker's p99 is the dependency's, over every attempt made, at a rank within four
  // standard deviations of the estimate from `kept` samples, and within the sketch's 1/128.
  const double rank_spread = 4 * std::sqrt(0.99 * 0.01 / kept);
  const nanoseconds low = exact_quantile(all, 0.99 - rank_spread) * 127 / 128;
  const nanoseconds high = exact_quantile(all, 0.99 + rank_spread) * 129 / 128;
  for (const idem::latency_tracker* sketch : {&every, &sampled}) {
    const std::optional<nanoseconds> p99 = sketch->estimate(0.99);
    REQUIRE(p99);
    CAPTURE(p99->count(), low.count(), high.count(), exact_quantile(all, 0.99).count());
    CHECK(*p99 >= low);
    CHECK(*p99 <= high);
  }
}

TEST_CASE("retrying refuses timeouts from a quantile its tracker does not keep") {
  auto call = [](const idem::attempt_context&) { return answer{}; };
  using wrapper = idem::retrying<decltype(call), tracked_policies>;
  wrapper::options options;
  options.timeouts.quantile = 0.99;
  CHECK_THROWS_WITH(wrapper(call, options), Catch::Matchers::Contains("does not keep"));
}
