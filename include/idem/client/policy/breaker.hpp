// Circuit breakers: may this call go at all?
//
// A dependency that keeps failing is not helped by more calls, and callers are not helped by
// waiting for timeouts that will come. A breaker counts failures; past a threshold it opens and
// every call fails fast, without reaching the dependency. After `open_for` it half-opens and lets
// a few probe calls through: if they all succeed it closes, if one fails it opens again.
//
// Only what the classifier marks as a fault of the dependency counts as a failure (timeouts,
// connection errors, 5xx); a request the dependency rightly refused (4xx) proves it is alive.
// Times are a clock's `time_since_epoch()`, so the breaker follows whatever clock the policies
// choose, manual_clock in tests included. Copies share state; every member is thread-safe.
//
// A breaker can report its state changes (`options::on_change`): a metrics gauge
// (idem::prometheus_observer::breaker_listener), a log line. Transitions are rare, so a listener
// costs the hot path nothing; it is called while the breaker's transition lock is held, so that
// listeners hear the changes in the order they happened, and it must not call the breaker back.
#ifndef IDEM_CLIENT_POLICY_BREAKER_HPP
#define IDEM_CLIENT_POLICY_BREAKER_HPP

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

namespace idem {

enum class breaker_state : std::uint8_t { closed, open, half_open };

constexpr std::string_view to_string(breaker_state s) noexcept {
  switch (s) {
    case breaker_state::closed:
      return "closed";
    case breaker_state::open:
      return "open";
    case breaker_state::half_open:
      return "half_open";
  }
  return "unknown";
}

/// Hears a breaker's state changes: the state it has just entered. Called with the breaker's
/// transition lock held; must not call the breaker.
using breaker_listener = std::function<void(breaker_state)>;

/// What a `breaker` policy must provide.
template <class B>
concept Breaker = std::copy_constructible<B> && requires(B& breaker, std::chrono::nanoseconds now) {
  { breaker.allow(now) } -> std::same_as<bool>;  // may a call go now? counts a half-open probe
  breaker.on_success(now);
  breaker.on_failure(now);
  { breaker.state(now) } -> std::same_as<breaker_state>;
};

/// Never opens.
struct no_breaker {
  bool allow(std::chrono::nanoseconds) const noexcept { return true; }
  void on_success(std::chrono::nanoseconds) const noexcept {}
  void on_failure(std::chrono::nanoseconds) const noexcept {}
  breaker_state state(std::chrono::nanoseconds) const noexcept { return breaker_state::closed; }
};

namespace detail {

/// The open / half-open / closed machine both breakers share; they differ only in when a closed
/// breaker trips. The closed state is read with one atomic load, so the hot path takes no lock;
/// transitions are rare and take the mutex.
class breaker_machine {
 public:
  breaker_machine(std::chrono::nanoseconds open_for, int probes, breaker_listener on_change)
      : open_for_(open_for), probes_(probes), on_change_(std::move(on_change)) {
    if (open_for < std::chrono::nanoseconds::zero() || probes < 1) {
      throw std::invalid_argument(
          "idem breaker: open_for must not be negative and at least one probe must be allowed");
    }
  }

  bool closed() const noexcept {
    return mode_.load(std::memory_order_acquire) == breaker_state::closed;
  }

  bool allow(std::chrono::nanoseconds now) {
    if (closed()) return true;
    std::lock_guard lock(mutex_);
    if (mode_.load(std::memory_order_relaxed) == breaker_state::open) {
      if (now - opened_at_ < open_for_) return false;
      enter(breaker_state::half_open);
      admitted_ = 0;
      succeeded_ = 0;
    }
    if (mode_.load(std::memory_order_relaxed) == breaker_state::half_open) {
      if (admitted_ >= probes_) return false;
      ++admitted_;
    }
    return true;
  }

  /// Returns true when this success closed the breaker (the caller resets its counters).
  bool probe_succeeded() {
    std::lock_guard lock(mutex_);
    if (mode_.load(std::memory_order_relaxed) != breaker_state::half_open) return false;
    if (++succeeded_ < probes_) return false;
    enter(breaker_state::closed);
    return true;
  }

  void trip(std::chrono::nanoseconds now) {
    std::lock_guard lock(mutex_);
    opened_at_ = now;
    if (mode_.load(std::memory_order_relaxed) != breaker_state::open) enter(breaker_state::open);
  }

  /// A failure reported while half-open re-opens; while open it is a late report of a call
  /// admitted before the breaker opened, and changes nothing.
  bool failure_when_not_closed(std::chrono::nanoseconds now) {
    std::lock_guard lock(mutex_);
    const auto mode = mode_.load(std::memory_order_relaxed);
    if (mode == breaker_state::closed) return false;
    if (mode == breaker_state::half_open) {
      opened_at_ = now;
      enter(breaker_state::open);
    }
    return true;
  }

  breaker_state state(std::chrono::nanoseconds now) {
    std::lock_guard lock(mutex_);
    const auto mode = mode_.load(std::memory_order_relaxed);
    if (mode == breaker_state::open && now - opened_at_ >= open_for_)
      return breaker_state::half_open;
    return mode;
  }

 private:
  // A transition, with the mutex held: the new mode, then the listener told.
  void enter(breaker_state next) {
    mode_.store(next, std::memory_order_release);
    if (on_change_) on_change_(next);
  }

  std::atomic<breaker_state> mode_{breaker_state::closed};
  std::mutex mutex_;
  std::chrono::nanoseconds opened_at_{};
  std::chrono::nanoseconds open_for_;
  int probes_;
  breaker_listener on_change_;
  int admitted_ = 0;
  int succeeded_ = 0;
};

}  // namespace detail

/// Opens after `threshold` failures in a row (Polly's "consecutive failures" breaker).
class consecutive_failure_breaker {
 public:
  struct options {
    int threshold = 5;                                             // failures in a row that open it
    std::chrono::nanoseconds open_for = std::chrono::seconds{30};  // before the first probe
    int probes = 1;                // successes in a row that close it
    breaker_listener on_change{};  // told of each state change (see above); none by default
  };

  consecutive_failure_breaker() : consecutive_failure_breaker(options{}) {}
  explicit consecutive_failure_breaker(const options& s) : state_(std::make_shared<shared>(s)) {
    if (s.threshold < 1) {
      throw std::invalid_argument(
          "idem::consecutive_failure_breaker: threshold must be at least 1");
    }
  }

  bool allow(std::chrono::nanoseconds now) { return state_->machine.allow(now); }

  void on_success(std::chrono::nanoseconds) {
    auto& s = *state_;
    if (s.machine.closed()) {
      // Load before store: a healthy dependency then never writes the shared line.
      if (s.failures.load(std::memory_order_relaxed) != 0) {
        s.failures.store(0, std::memory_order_relaxed);
      }
      return;
    }
    if (s.machine.probe_succeeded()) s.failures.store(0, std::memory_order_relaxed);
  }

  void on_failure(std::chrono::nanoseconds now) {
    auto& s = *state_;
    if (s.machine.failure_when_not_closed(now)) return;
    if (s.failures.fetch_add(1, std::memory_order_relaxed) + 1 >= s.threshold) {
      s.failures.store(0, std::memory_order_relaxed);
      s.machine.trip(now);
    }
  }

  breaker_state state(std::chrono::nanoseconds now) { return state_->machine.state(now); }

 private:
  struct shared {
    explicit shared(const options& s)
        : machine(s.open_for, s.probes, s.on_change), threshold(s.threshold) {}
    detail::breaker_machine machine;
    int threshold;
    std::atomic<int> failures{0};
  };
  std::shared_ptr<shared> state_;
};

/// Opens when at least `threshold_percent` of the last `window` calls failed, once at least
/// `minimum_calls` have been seen (resilience4j's count-based sliding window; its defaults).
/// Every call, successes included, claims a slot of the shared window with one atomic add: on
/// many cores calling one dependency that line is contended, where the consecutive-failure
/// breaker only reads on success.
class failure_rate_breaker {
 public:
  struct options {
    int window = 100;            // calls remembered
    int minimum_calls = 100;     // calls before the rate is trusted
    int threshold_percent = 50;  // failure rate that opens it
    std::chrono::nanoseconds open_for = std::chrono::seconds{60};
    int probes = 10;               // successes in a row that close it
    breaker_listener on_change{};  // told of each state change (see above); none by default
  };

  failure_rate_breaker() : failure_rate_breaker(options{}) {}
  explicit failure_rate_breaker(const options& s) : state_(std::make_shared<shared>(s)) {
    if (s.window < 1 || s.minimum_calls < 1 || s.minimum_calls > s.window ||
        s.threshold_percent < 1 || s.threshold_percent > 100) {
      throw std::invalid_argument(
          "idem::failure_rate_breaker: window and minimum_calls must be positive with "
          "minimum_calls <= window, and threshold_percent within 1..100");
    }
  }

  bool allow(std::chrono::nanoseconds now) { return state_->machine.allow(now); }

  void on_success(std::chrono::nanoseconds) {
    auto& s = *state_;
    if (s.machine.closed()) {
      s.record(false);
      return;
    }
    if (s.machine.probe_succeeded()) s.reset();
  }

  void on_failure(std::chrono::nanoseconds now) {
    auto& s = *state_;
    if (s.machine.failure_when_not_closed(now)) return;
    s.record(true);
    const std::int64_t calls =
        std::min<std::int64_t>(s.recorded.load(std::memory_order_relaxed), s.window);
    if (calls >= s.minimum_calls && s.failures() * 100 >= s.threshold_percent * calls) {
      s.machine.trip(now);
      s.reset();
    }
  }

  breaker_state state(std::chrono::nanoseconds now) { return state_->machine.state(now); }

 private:
  struct shared {
    explicit shared(const options& s)
        : machine(s.open_for, s.probes, s.on_change),
          window(s.window),
          minimum_calls(s.minimum_calls),
          threshold_percent(s.threshold_percent),
          bits(static_cast<std::size_t>((s.window + 63) / 64)) {}

    // The last `window` outcomes as a ring of bits (1: failed), lock-free: each call claims a
    // slot with one fetch_add and sets or clears its bit. The failure count is read from the
    // ring itself when a failure asks whether to trip, so no separate counter can drift from it.
    void record(bool failed) {
      const auto slot =
          static_cast<std::uint64_t>(recorded.fetch_add(1, std::memory_order_relaxed) % window);
      auto& word = bits[slot / 64];
      const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
      // Load first: a healthy dependency overwrites 0 with 0, and then need not write at all.
      const bool was_failed = (word.load(std::memory_order_relaxed) & bit) != 0;
      if (failed && !was_failed) word.fetch_or(bit, std::memory_order_relaxed);
      if (!failed && was_failed) word.fetch_and(~bit, std::memory_order_relaxed);
    }
    std::int64_t failures() const {
      std::int64_t count = 0;
      for (const auto& word : bits)
        count += std::popcount(word.load(std::memory_order_relaxed));
      return count;
    }
    void reset() {
      for (auto& word : bits)
        word.store(0, std::memory_order_relaxed);
      recorded.store(0, std::memory_order_relaxed);
    }

    detail::breaker_machine machine;
    std::int64_t window, minimum_calls, threshold_percent;
    std::vector<std::atomic<std::uint64_t>> bits;
    std::atomic<std::int64_t> recorded{0};
  };
  std::shared_ptr<shared> state_;
};

}  // namespace idem

#endif  // IDEM_CLIENT_POLICY_BREAKER_HPP
