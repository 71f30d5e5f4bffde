// Backoff: how long to wait before the next attempt.
//
// Retrying at once, or at the same fixed intervals, makes every client that failed together
// retry together, and the retries arrive as a wave that knocks the dependency over again.
// Jitter spreads them. The formulas follow Marc Brooker, "Exponential Backoff And Jitter"
// (AWS Architecture Blog, 2015), where full jitter does the least total work:
//
//   full jitter         random(0, min(cap, base * 2^n))                      (the default)
//   equal jitter        t/2 + random(0, t/2), t = min(cap, base * 2^n)
//   decorrelated jitter min(cap, random(base, previous * 3))
//   exponential_backoff min(cap, base * 2^n)                                  (no jitter)
//   constant_backoff    value
//
// n counts retries from 0: the wait before the second attempt uses n = 0. The defaults, base
// 100 ms and cap 20 s, are those of the AWS SDKs' standard retry mode.
#ifndef IDEM_CORE_POLICY_BACKOFF_HPP
#define IDEM_CORE_POLICY_BACKOFF_HPP

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>

#include <idem/core/policy/random.hpp>

namespace idem {

/// What a `backoff` policy must provide: the delay before retry number `retry_index` (0 for the
/// first retry), given the delay chosen before the previous retry (zero for the first), drawing
/// any chance it needs from `rng`.
template <class B, class R>
concept Backoff = RandomSource<R> &&
    requires(const B& backoff, int retry_index, std::chrono::nanoseconds previous, R& rng) {
  { backoff.delay(retry_index, previous, rng) } -> std::same_as<std::chrono::nanoseconds>;
};

namespace detail {

/// min(cap, base * 2^n) without overflow, for any n >= 0.
constexpr std::chrono::nanoseconds capped_exponential(std::chrono::nanoseconds base,
                                                      std::chrono::nanoseconds cap,
                                                      int n) noexcept {
  if (base <= std::chrono::nanoseconds::zero()) return std::chrono::nanoseconds::zero();
  if (base >= cap) return cap;
  // base >= 1 ns, so from n = 63 on the product exceeds any int64 count, and so any cap.
  if (n >= 63 || base.count() > (cap.count() >> n)) return cap;
  return base * (std::int64_t{1} << n);
}

template <class R>
std::chrono::nanoseconds random_up_to(R& rng, std::chrono::nanoseconds bound) noexcept {
  if (bound <= std::chrono::nanoseconds::zero()) return std::chrono::nanoseconds::zero();
  return std::chrono::nanoseconds{
      static_cast<std::int64_t>(uniform_up_to(rng, static_cast<std::uint64_t>(bound.count())))};
}

}  // namespace detail

/// random(0, min(cap, base * 2^n)): the default.
struct full_jitter {
  std::chrono::nanoseconds base = std::chrono::milliseconds{100};
  std::chrono::nanoseconds cap = std::chrono::seconds{20};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int retry_index, std::chrono::nanoseconds, R& rng) const noexcept {
    return detail::random_up_to(rng, detail::capped_exponential(base, cap, retry_index));
  }
};

/// t/2 + random(0, t/2) with t = min(cap, base * 2^n): never shorter than half the exponential
/// delay, for dependencies that must not see an early retry.
struct equal_jitter {
  std::chrono::nanoseconds base = std::chrono::milliseconds{100};
  std::chrono::nanoseconds cap = std::chrono::seconds{20};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int retry_index, std::chrono::nanoseconds, R& rng) const noexcept {
    const auto t = detail::capped_exponential(base, cap, retry_index);
    const auto half = t / 2;
    return (t - half) + detail::random_up_to(rng, half);
  }
};

/// min(cap, random(base, previous * 3)): grows from the delay actually taken, not the count.
struct decorrelated_jitter {
  std::chrono::nanoseconds base = std::chrono::milliseconds{100};
  std::chrono::nanoseconds cap = std::chrono::seconds{20};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int, std::chrono::nanoseconds previous, R& rng) const noexcept {
    if (base >= cap) return cap;
    const auto last = std::max(previous, base);
    // previous * 3, saturating at cap: beyond it the draw is clipped anyway.
    const auto upper = last > cap / 3 ? cap : last * 3;
    return std::min(cap, base + detail::random_up_to(rng, upper - base));
  }
};

/// min(cap, base * 2^n): no jitter. Predictable, and therefore synchronised across clients.
struct exponential_backoff {
  std::chrono::nanoseconds base = std::chrono::milliseconds{100};
  std::chrono::nanoseconds cap = std::chrono::seconds{20};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int retry_index, std::chrono::nanoseconds, R&) const noexcept {
    return detail::capped_exponential(base, cap, retry_index);
  }
};

/// The same delay every time.
struct constant_backoff {
  std::chrono::nanoseconds value = std::chrono::milliseconds{100};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int, std::chrono::nanoseconds, R&) const noexcept {
    return value;
  }
};

}  // namespace idem

#endif  // IDEM_CORE_POLICY_BACKOFF_HPP
