// Backoff policies and the random source behind them: the delays have the documented bounds and
// the documented distribution, the arithmetic never overflows, and a seed fixes every draw.
//
// Distribution checks use a one-sample Kolmogorov-Smirnov test against the continuous uniform
// CDF, at alpha = 0.001 (critical value 1.949 / sqrt(N)); the seeds are fixed, so each check is
// deterministic. A negative control shows the test rejects what it must.
#include <catch2/catch.hpp>
#include <idem/idem.hpp>

#include "support/scripted_words.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

constexpr std::size_t sample_count = 100'000;

/// The KS critical value at alpha = 0.001 for n samples.
double ks_critical(std::size_t n) {
  return 1.949 / std::sqrt(static_cast<double>(n));
}

/// D = sup |F_n(x) - F(x)| for samples `x` against the uniform CDF on [low, high].
double ks_distance_from_uniform(std::vector<double> x, double low, double high) {
  std::sort(x.begin(), x.end());
  const auto n = static_cast<double>(x.size());
  double d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double f = std::clamp((x[i] - low) / (high - low), 0.0, 1.0);
    const double rank = static_cast<double>(i + 1);
    d = std::max({d, rank / n - f, f - (rank - 1) / n});
  }
  return d;
}

template <class Backoff>
std::vector<double> draw_delays(const Backoff& backoff, int retry_index, nanoseconds previous,
                                std::uint64_t seed, std::size_t n = sample_count) {
  idem::xoshiro256ss rng{seed};
  std::vector<double> delays;
  delays.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    delays.push_back(static_cast<double>(backoff.delay(retry_index, previous, rng).count()));
  }
  return delays;
}

std::size_t count_outside(const std::vector<double>& values, double low, double high) {
  return static_cast<std::size_t>(
      std::count_if(values.begin(), values.end(), [&](double v) { return v < low || v > high; }));
}

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values)
    sum += v;
  return sum / static_cast<double>(values.size());
}

/// min(cap, base * 2^n), computed by saturating doubling: the reference for the backoff's bound.
nanoseconds reference_exponential(nanoseconds base, nanoseconds cap, int n) {
  if (base <= 0ns) return 0ns;
  std::int64_t value = base.count();
  for (int i = 0; i < n; ++i) {
    if (value > cap.count() / 2) return cap;
    value *= 2;
  }
  return std::min(nanoseconds{value}, cap);
}

using idem_test::scripted_words;

}  // namespace

TEST_CASE("full jitter delays are uniform on [0, min(cap, base*2^n)]") {
  struct scenario {
    nanoseconds base, cap;
    int retry_index;
    nanoseconds bound;
  };
  const scenario scenarios[] = {
      {100ms, 20s, 0, 100ms},   // the first retry: base
      {100ms, 20s, 1, 200ms},   //
      {100ms, 20s, 4, 1600ms},  //
      {100ms, 20s, 10, 20s},    // 102.4 s: the cap binds
      {100ms, 20s, 1000, 20s},  //
      {3ms, 7s, 5, 96ms},       // another base and cap
  };
  std::uint64_t seed = 1;
  for (const auto& s : scenarios) {
    CAPTURE(s.base.count(), s.cap.count(), s.retry_index, s.bound.count());
    const auto delays = draw_delays(idem::full_jitter{s.base, s.cap}, s.retry_index, 0ns, seed++);
    const auto bound = static_cast<double>(s.bound.count());
    CHECK(count_outside(delays, 0, bound) == 0);
    CHECK(ks_distance_from_uniform(delays, 0, bound) < ks_critical(delays.size()));
    CHECK(mean_of(delays) == Approx(bound / 2).epsilon(0.02));
  }
}

TEST_CASE("the KS test rejects delays that are not uniform on the claimed interval") {
  const nanoseconds t = 400ms;  // 100 ms * 2^2
  SECTION("equal jitter lives on [t/2, t], far from uniform on [0, t]") {
    const auto delays = draw_delays(idem::equal_jitter{}, 2, 0ns, 7);
    // The empirical CDF is 0 up to t/2, where the uniform CDF is already 1/2.
    CHECK(ks_distance_from_uniform(delays, 0, static_cast<double>(t.count())) > 0.45);
  }
  SECTION("a bound 3% short of the claimed one is detected") {
    const auto delays = draw_delays(idem::full_jitter{97ms, 20s}, 2, 0ns, 8);
    const double d = ks_distance_from_uniform(delays, 0, static_cast<double>(t.count()));
    CHECK(d > ks_critical(delays.size()));
    CHECK(d == Approx(0.03).margin(0.005));
  }
}

TEST_CASE("equal jitter delays are uniform on [t/2, t]") {
  struct scenario {
    int retry_index;
    nanoseconds t;
  };
  const scenario scenarios[] = {{0, 100ms}, {3, 800ms}, {12, 20s}};
  std::uint64_t seed = 100;
  for (const auto& s : scenarios) {
    CAPTURE(s.retry_index, s.t.count());
    const auto delays = draw_delays(idem::equal_jitter{}, s.retry_index, 0ns, seed++);
    const auto t = static_cast<double>(s.t.count());
    CHECK(count_outside(delays, t / 2, t) == 0);
    CHECK(ks_distance_from_uniform(delays, t / 2, t) < ks_critical(delays.size()));
  }
}

TEST_CASE("equal jitter of an odd number of nanoseconds stays within [t/2, t]") {
  // t = 3 ns: half rounds down, and the draw must still reach neither below 1.5 nor above 3.
  const idem::equal_jitter jitter{3ns, 1s};
  idem::xoshiro256ss rng{5};
  int twos = 0, threes = 0, others = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto d = jitter.delay(0, 0ns, rng);
    (d == 2ns ? twos : d == 3ns ? threes : others) += 1;
  }
  CHECK(others == 0);
  CHECK(twos > 0);
  CHECK(threes > 0);
}

TEST_CASE("decorrelated jitter draws uniformly from [base, min(cap, 3 * previous)]") {
  const idem::decorrelated_jitter jitter{100ms, 20s};
  struct scenario {
    nanoseconds previous, upper;
  };
  const scenario scenarios[] = {
      {0ns, 300ms},    // the first retry: previous is zero, so the range starts from base
      {50ms, 300ms},   // a previous delay below base counts as base
      {100ms, 300ms},  //
      {1s, 3s},        //
      {6s, 18s},       //
      {7s, 20s},       // 21 s is past the cap
      {20s, 20s},      //
      {1h, 20s},       //
  };
  std::uint64_t seed = 200;
  for (const auto& s : scenarios) {
    CAPTURE(s.previous.count(), s.upper.count());
    const auto delays = draw_delays(jitter, 0, s.previous, seed++, 20'000);
    const double low = 100e6;
    const auto high = static_cast<double>(s.upper.count());
    CHECK(count_outside(delays, low, high) == 0);
    CHECK(ks_distance_from_uniform(delays, low, high) < ks_critical(delays.size()));
  }
}

TEST_CASE("decorrelated jitter grows from the delay actually taken, and never passes the cap") {
  const idem::decorrelated_jitter jitter{100ms, 20s};
  constexpr int chains = 2000;
  constexpr int steps = 30;
  std::vector<double> mean_at_step(steps, 0.0);
  nanoseconds smallest = nanoseconds::max();
  nanoseconds largest = 0ns;
  idem::xoshiro256ss rng{300};
  for (int c = 0; c < chains; ++c) {
    nanoseconds previous = 0ns;
    for (int step = 0; step < steps; ++step) {
      previous = jitter.delay(step, previous, rng);
      mean_at_step[static_cast<std::size_t>(step)] +=
          static_cast<double>(previous.count()) / chains;
      smallest = std::min(smallest, previous);
      largest = std::max(largest, previous);
    }
  }
  CHECK(smallest >= 100ms);
  CHECK(largest <= 20s);
  CHECK(largest > 19900ms);
  // From [100 ms, 300 ms] the expected delay grows by half again each step, until the cap holds
  // it (near 5.4 s, where a draw below cap / 3 pulls the next range down again).
  CHECK(mean_at_step[0] == Approx(200e6).epsilon(0.03));
  CHECK(mean_at_step[1] > 1.3 * mean_at_step[0]);
  CHECK(mean_at_step[5] > 4 * mean_at_step[0]);
  CHECK(mean_at_step[steps - 1] > 15 * mean_at_step[0]);
}

TEST_CASE("decorrelated jitter with base at or above cap always waits the cap") {
  idem::xoshiro256ss rng{9};
  CHECK(idem::decorrelated_jitter{20s, 20s}.delay(0, 0ns, rng) == 20s);
  CHECK(idem::decorrelated_jitter{30s, 20s}.delay(3, 1s, rng) == 20s);
}

TEST_CASE("exponential backoff doubles from base and then saturates at cap") {
  const idem::exponential_backoff backoff{};  // 100 ms, cap 20 s
  idem::xoshiro256ss rng{1};
  for (int n = 0; n <= 7; ++n) {
    CAPTURE(n);
    CHECK(backoff.delay(n, 0ns, rng) == 100ms * (std::int64_t{1} << n));
  }
  for (int n : {8, 9, 20, 61, 62, 63, 64, 1000, std::numeric_limits<int>::max()}) {
    CAPTURE(n);
    CHECK(backoff.delay(n, 0ns, rng) == 20s);
  }
}

TEST_CASE("exponential backoff never overflows, whatever the retry index and base") {
  idem::xoshiro256ss rng{1};
  const auto max = nanoseconds::max();
  SECTION("a huge retry index") {
    for (int n : {62, 63, 64, 1000, std::numeric_limits<int>::max()}) {
      CAPTURE(n);
      CHECK(idem::exponential_backoff{1s, max}.delay(n, 0ns, rng) == max);
      CHECK(idem::exponential_backoff{100ms, 20s}.delay(n, 0ns, rng) == 20s);
    }
  }
  SECTION("a huge base") {
    const nanoseconds half{max.count() / 2};
    CHECK(idem::exponential_backoff{half, max}.delay(0, 0ns, rng) == half);
    CHECK(idem::exponential_backoff{half, max}.delay(1, 0ns, rng) == half * 2);
    CHECK(idem::exponential_backoff{half, max}.delay(2, 0ns, rng) == max);
    CHECK(idem::exponential_backoff{max, max}.delay(1, 0ns, rng) == max);
    CHECK(idem::exponential_backoff{max, 20s}.delay(0, 0ns, rng) == 20s);
    CHECK(idem::exponential_backoff{3ns, max}.delay(61, 0ns, rng) == 3ns * (std::int64_t{1} << 61));
  }
  SECTION("every combination agrees with saturating doubling") {
    const nanoseconds bases[] = {1ns, 3ns, 1ms, 100ms, 7s, 1h, nanoseconds{1'000'000'000'000'000}};
    const nanoseconds caps[] = {20s, 1h, nanoseconds{1'000'000'000'000'000'000}};
    for (auto base : bases) {
      for (auto cap : caps) {
        for (int n = 0; n <= 100; ++n) {
          CAPTURE(base.count(), cap.count(), n);
          REQUIRE(idem::exponential_backoff{base, cap}.delay(n, 0ns, rng) ==
                  reference_exponential(base, cap, n));
        }
      }
    }
  }
  SECTION("jittered delays under a cap near the limit still use the whole range") {
    // Wrapped arithmetic would give a negative or small bound; the draws must reach past max / 4.
    const idem::full_jitter full{1s, max};
    const idem::equal_jitter equal{1s, max};
    for (int n : {40, 62, 63, 1000}) {
      CAPTURE(n);
      nanoseconds largest = 0ns;
      nanoseconds smallest_equal = max;
      for (int i = 0; i < 100; ++i) {
        largest = std::max(largest, full.delay(n, 0ns, rng));
        smallest_equal = std::min(smallest_equal, equal.delay(n, 0ns, rng));
      }
      CHECK(largest > max / 4);
      CHECK(smallest_equal >= max / 2);
    }
  }
}

TEST_CASE("constant backoff waits the same time whatever the retry and the previous delay") {
  idem::xoshiro256ss rng{1};
  const idem::constant_backoff fixed{250ms};
  for (int n : {0, 1, 5, 1000}) {
    for (auto previous : {0ns, nanoseconds{1ms}, nanoseconds{1h}}) {
      CHECK(fixed.delay(n, previous, rng) == 250ms);
    }
  }
  CHECK(idem::constant_backoff{}.delay(3, 0ns, rng) == 100ms);
}

TEST_CASE("a seed fixes every delay: the same seed repeats the sequence, another seed does not") {
  auto sequence = [](std::uint64_t seed) {
    idem::xoshiro256ss rng{seed};
    std::vector<nanoseconds> delays;
    nanoseconds previous = 0ns;
    for (int n = 0; n < 300; ++n) {
      delays.push_back(idem::full_jitter{}.delay(n % 10, previous, rng));
      delays.push_back(idem::equal_jitter{}.delay(n % 10, previous, rng));
      previous = idem::decorrelated_jitter{}.delay(n, previous, rng);
      delays.push_back(previous);
    }
    return delays;
  };
  const auto first = sequence(42);
  CHECK(sequence(42) == first);
  const auto other = sequence(43);
  std::size_t same = 0;
  for (std::size_t i = 0; i < first.size(); ++i)
    same += first[i] == other[i] ? 1 : 0;
  CHECK(same < first.size() / 100);
}

TEST_CASE("uniform_up_to never exceeds its bound") {
  idem::xoshiro256ss rng{11};
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t bounds[] = {1,
                                  2,
                                  5,
                                  6,
                                  7,
                                  100,
                                  1000,
                                  (1ULL << 32) - 1,
                                  1ULL << 32,
                                  1ULL << 63,
                                  (1ULL << 63) + (1ULL << 62),
                                  max - 1};
  for (std::uint64_t bound : bounds) {
    CAPTURE(bound);
    std::uint64_t largest = 0;
    for (int i = 0; i < 20'000; ++i)
      largest = std::max(largest, idem::uniform_up_to(rng, bound));
    CHECK(largest <= bound);
    // The top of the range is reached, or nearly: the draws are not confined below the bound.
    CHECK(static_cast<double>(largest) >= 0.99 * static_cast<double>(bound));
  }
}

TEST_CASE("uniform_up_to with bound 0 always gives 0") {
  idem::xoshiro256ss rng{12};
  std::uint64_t largest = 0;
  for (int i = 0; i < 1000; ++i)
    largest = std::max(largest, idem::uniform_up_to(rng, 0));
  CHECK(largest == 0);
}

TEST_CASE("uniform_up_to with bound UINT64_MAX covers the whole 64-bit range") {
  idem::xoshiro256ss rng{13};
  constexpr int n = 100'000;
  int top_half = 0;
  int top_sixteenth = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t value = idem::uniform_up_to(rng, std::numeric_limits<std::uint64_t>::max());
    top_half += value >> 63;
    top_sixteenth += (value >> 60) == 0xf ? 1 : 0;
  }
  CHECK(top_half == Approx(n / 2).epsilon(0.02));
  CHECK(top_sixteenth == Approx(n / 16).epsilon(0.05));
}

TEST_CASE("uniform_up_to gives every value of a small range equally often") {
  idem::xoshiro256ss rng{14};
  for (std::uint64_t bound = 1; bound <= 5; ++bound) {
    CAPTURE(bound);
    const std::size_t values = bound + 1;
    const std::size_t n = 60'000 * values;
    std::vector<std::size_t> counts(values, 0);
    for (std::size_t i = 0; i < n; ++i)
      ++counts[idem::uniform_up_to(rng, bound)];
    const double expected = static_cast<double>(n) / static_cast<double>(values);
    double chi_square = 0;
    for (std::size_t c : counts) {
      CHECK(c > 0);
      chi_square +=
          (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
    }
    // At most 5 degrees of freedom: 30 is far beyond the 0.1% critical value (20.5).
    CHECK(chi_square < 30);
  }
}

TEST_CASE("uniform_up_to redraws the words that would bias the result") {
  // 2^64 words cannot be split evenly among 6 results: 2^64 mod 6 = 4 of them must be redrawn
  // for the result to be exactly uniform, and the word 0 is one of those.
  scripted_words rng{0};
  rng.words = {0, std::numeric_limits<std::uint64_t>::max()};
  CHECK(idem::uniform_up_to(rng, 5) == 5);
  CHECK(rng.next == 2);
  // An ordinary word is used as it is.
  scripted_words plain{0};
  plain.words = {std::numeric_limits<std::uint64_t>::max() / 2, 0};
  CHECK(idem::uniform_up_to(plain, 5) == 2);
  CHECK(plain.next == 1);
}

TEST_CASE("exponential backoff is exact up to the largest shift that fits") {
  idem::xoshiro256ss rng{1};
  const idem::exponential_backoff huge_cap{std::chrono::nanoseconds{1},
                                           std::chrono::nanoseconds::max()};
  CHECK(huge_cap.delay(62, {}, rng).count() == (std::int64_t{1} << 62));
  CHECK(huge_cap.delay(63, {}, rng) == std::chrono::nanoseconds::max());
  const idem::exponential_backoff two{std::chrono::nanoseconds{2}, std::chrono::nanoseconds::max()};
  CHECK(two.delay(62, {}, rng) == std::chrono::nanoseconds::max());  // 2^63 does not fit
}
