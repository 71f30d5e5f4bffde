// Rate limiters: at most so many calls to a dependency per second, from every thread together.
//
// A limiter answers each attempt's request for a permit: admitted now, or not yet, with how long
// until one may be. retrying waits for it (the blocking driver sleeps on its clock, the
// asynchronous one waits on a timer) for at most options.limiter_wait and never past the
// operation's deadline; a call that cannot get one in that time ends with its own verdict,
// retry_verdict::rate_limited, without reaching the dependency. Retries take permits as first
// attempts do: they are calls to the same dependency.
//
//   token_bucket_limiter    `rate` permits a second, bursts of up to `burst` at once: the
//                           generic cell rate algorithm (one atomic time, one compare-and-swap
//                           per permit), which is a token bucket exactly.
//   sliding_window_limiter  at most `limit` permits in any `window`, estimated as the count of
//                           the current fixed window plus the previous one's, weighted by how
//                           much of it the sliding window still covers (Cloudflare's and
//                           Redis's sliding-window counter): two words, one compare-and-swap.
//
// Neither takes a lock: a permit is a compare-and-swap loop on one word that copies of the
// limiter share. Times are a clock's time_since_epoch(), as the breaker's are, so a limiter
// follows whatever clock the policies choose, manual_clock in tests included.
#ifndef IDEM_CLIENT_POLICY_LIMITER_HPP
#define IDEM_CLIENT_POLICY_LIMITER_HPP

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace idem {

/// A limiter's answer: admitted (a permit taken), or not, and when to ask again.
struct limiter_answer {
  bool admitted = true;
  /// When not admitted: how long until a permit may be had (at least 1 ns).
  std::chrono::nanoseconds retry_in{};
};

/// What a `limiter` policy must provide.
template <class L>
concept Limiter = std::copy_constructible<L> && requires(L& limiter, std::chrono::nanoseconds now) {
  { limiter.try_acquire(now) } -> std::same_as<limiter_answer>;
};

/// Admits everything, costs nothing (retrying reads no clock for it).
struct no_limiter {
  constexpr limiter_answer try_acquire(std::chrono::nanoseconds) const noexcept { return {}; }
};

/// `rate` permits a second, `burst` of them at once after a quiet spell: GCRA. One shared
/// word, the theoretical arrival time of the next permit; a permit moves it on by 1/rate.
class token_bucket_limiter {
 public:
  struct options {
    double rate = 100;  // permits a second
    int burst = 1;      // permits that may be taken at once
  };

  /// 100 permits a second, one at a time (a placeholder until options are given the
  /// dependency's own limiter, which copies then share).
  token_bucket_limiter() : token_bucket_limiter(options{}) {}
  explicit token_bucket_limiter(options s) : state_(std::make_shared<shared>()) {
    if (!(s.rate > 0) || s.rate > 1e9 || s.burst < 1) {
      throw std::invalid_argument(
          "idem::token_bucket_limiter: rate must be within (0, 1e9] permits a second and burst "
          "at least 1");
    }
    state_->interval = std::chrono::nanoseconds{static_cast<std::int64_t>(1e9 / s.rate)};
    if (state_->interval <= std::chrono::nanoseconds::zero()) {
      state_->interval = std::chrono::nanoseconds{1};
    }
    state_->tolerance = state_->interval * (s.burst - 1);
  }

  limiter_answer try_acquire(std::chrono::nanoseconds now) noexcept {
    shared& s = *state_;
    std::int64_t arrival = s.arrival.load(std::memory_order_relaxed);
    for (;;) {
      const std::int64_t due = std::max(arrival, now.count());
      const std::int64_t early = due - now.count() - s.tolerance.count();
      if (early > 0) return {false, std::chrono::nanoseconds{early}};
      if (s.arrival.compare_exchange_weak(arrival, due + s.interval.count(),
                                          std::memory_order_relaxed)) {
        return {};
      }
    }
  }

  /// The time between permits at the steady rate.
  std::chrono::nanoseconds interval() const noexcept { return state_->interval; }

 private:
  struct shared {
    std::atomic<std::int64_t> arrival{0};  // the next permit's theoretical arrival time
    std::chrono::nanoseconds interval{};
    std::chrono::nanoseconds tolerance{};
  };
  std::shared_ptr<shared> state_;
};

/// At most `limit` permits in any `window` (estimated: see above). Each of the two fixed
/// windows that the sliding one spans is one word, its number and its count packed together,
/// so that starting a new window and counting in it are one compare-and-swap.
class sliding_window_limiter {
 public:
  struct options {
    std::int64_t limit = 100;                                   // permits a window
    std::chrono::nanoseconds window = std::chrono::seconds{1};  // the sliding window's length
  };

  /// 100 permits a second (a placeholder, as token_bucket_limiter's).
  sliding_window_limiter() : sliding_window_limiter(options{}) {}
  explicit sliding_window_limiter(options s) : state_(std::make_shared<shared>()) {
    if (s.limit < 1 || s.limit > max_count || s.window < std::chrono::microseconds{1}) {
      throw std::invalid_argument(
          "idem::sliding_window_limiter: limit must be within 1..16777215 and the window at "
          "least 1 microsecond");
    }
    state_->limit = s.limit;
    state_->window = s.window;
  }

  limiter_answer try_acquire(std::chrono::nanoseconds now) noexcept {
    shared& s = *state_;
    const std::int64_t at = std::max<std::int64_t>(now.count(), 0);
    // The window `at` falls in: the last one seen, most of the time, without a division.
    const std::int64_t length = s.window.count();
    std::int64_t whole = s.latest.load(std::memory_order_relaxed);
    std::int64_t into = at - whole * length;
    if (into < 0 || into >= length) {
      whole = at / length;
      into = at - whole * length;
      s.latest.store(whole, std::memory_order_relaxed);
    }
    std::uint64_t number = static_cast<std::uint64_t>(whole) & number_mask;
    std::atomic<std::uint64_t>& slot = s.slots[static_cast<std::size_t>(number % 2)];
    std::uint64_t current = slot.load(std::memory_order_relaxed);
    for (;;) {
      // A thread whose clock read later has already started a newer window in this slot (two
      // windows on: same parity): this call counts as at that window's start, never as an
      // older window's, whose count would overwrite the newer one.
      const std::uint64_t held = current >> 24;
      const std::uint64_t ahead = (held - number) & number_mask;
      if (ahead != 0 && ahead < number_mask / 2) {
        number = held;
        into = 0;
      }
      const std::int64_t previous_count = count_in(
          s.slots[static_cast<std::size_t>((number + 1) % 2)].load(std::memory_order_relaxed),
          (number - 1) & number_mask);
      const std::int64_t current_count = count_in(current, number);
      // Below the limit even with all of the previous window counted: no need to weigh it.
      if (previous_count + current_count + 1 > s.limit) {
        // The previous window's permits still inside the sliding window: its share not yet
        // slid past, in whole permits.
        const double covered =
            1.0 - static_cast<double>(into) / static_cast<double>(s.window.count());
        const auto estimate =
            static_cast<std::int64_t>(static_cast<double>(previous_count) * covered);
        if (estimate + current_count + 1 > s.limit) {
          return {false, wait_for(s, previous_count, current_count, into)};
        }
      }
      const std::uint64_t next = pack(number, current_count + 1);
      if (slot.compare_exchange_weak(current, next, std::memory_order_relaxed)) return {};
    }
  }

 private:
  static constexpr std::int64_t max_count = (std::int64_t{1} << 24) - 1;
  // Window numbers are kept modulo 2^40 (they wrap after 2^40 windows: 12 days of 1 us
  // windows, 35,000 years of 1 s ones).
  static constexpr std::uint64_t number_mask = (std::uint64_t{1} << 40) - 1;

  struct shared {
    // Window number modulo 2^40 (high 40 bits) and count (low 24 bits), for even and odd
    // window numbers.
    std::array<std::atomic<std::uint64_t>, 2> slots{};
    std::atomic<std::int64_t> latest{0};  // the number of the window last asked about (a hint)
    std::int64_t limit = 0;
    std::chrono::nanoseconds window{};
  };

  static std::uint64_t pack(std::uint64_t number, std::int64_t count) noexcept {
    return (number << 24) | static_cast<std::uint64_t>(count);
  }
  // The count a slot holds for window `number`: zero if it holds another window's.
  static std::int64_t count_in(std::uint64_t slot, std::uint64_t number) noexcept {
    if ((slot >> 24) != number) return 0;
    return static_cast<std::int64_t>(slot & static_cast<std::uint64_t>(max_count));
  }

  // How long until one more permit fits: within this window, once enough of the previous one
  // has slid out; else at the next window's start (and the estimate there is asked again).
  static std::chrono::nanoseconds wait_for(const shared& s, std::int64_t previous_count,
                                           std::int64_t current_count, std::int64_t into) noexcept {
    const std::int64_t length = s.window.count();
    const std::int64_t to_next = length - into;
    if (current_count + 1 <= s.limit && previous_count > 0) {
      // floor(previous * (1 - f)) + current + 1 <= limit  <=>  previous * (1 - f) < limit -
      // current  <=>  f > 1 - (limit - current) / previous
      const double f =
          1.0 - static_cast<double>(s.limit - current_count) / static_cast<double>(previous_count);
      const auto at = static_cast<std::int64_t>(std::ceil(f * static_cast<double>(length))) + 1;
      if (at > into && at < length) return std::chrono::nanoseconds{at - into};
    }
    return std::chrono::nanoseconds{std::max<std::int64_t>(to_next, 1)};
  }

  std::shared_ptr<shared> state_;
};

static_assert(Limiter<no_limiter>);
static_assert(Limiter<token_bucket_limiter>);
static_assert(Limiter<sliding_window_limiter>);

}  // namespace idem

#endif  // IDEM_CLIENT_POLICY_LIMITER_HPP
