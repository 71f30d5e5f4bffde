// Observers: telemetry for every attempt, every wait and every end of a retried operation.
//
// The default, no_observer, has empty inline members: the calls vanish when inlined, so a
// configuration that watches nothing pays nothing. counting_observer keeps totals in atomics
// (copies share them); callback_observer forwards to user functions, held in event_callback
// (a small std::function of our own, so that idem does not include <functional>).
//
// Events carry the operation's key redacted (idem/client/redacted_key.hpp): an observer that logs
// `event.key.str()` writes a stable hash, never the key, which the caller may treat as a secret.
#ifndef IDEM_CLIENT_POLICY_OBSERVER_HPP
#define IDEM_CLIENT_POLICY_OBSERVER_HPP

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/client/attempt.hpp>
#include <idem/detail/invoke.hpp>
#include <idem/client/redacted_key.hpp>

namespace idem {

/// How a retried operation ended.
enum class retry_verdict : std::uint8_t {
  succeeded,           // an attempt succeeded
  resolved,            // an ambiguous attempt had taken effect after all: the resolve hook said so
  permanent_failure,   // an attempt failed in a way repeating cannot fix
  attempts_exhausted,  // the attempt cap was reached
  deadline_exceeded,   // the next attempt could not start before the deadline
  budget_exhausted,    // the retry budget refused the next retry
  circuit_open,        // the circuit breaker refused the call
  not_retried,         // a transient failure that this call may not repeat: unkeyed and not
                       // idempotent, or a nested layer (the outer layer retries)
};

constexpr std::string_view to_string(retry_verdict v) noexcept {
  switch (v) {
    case retry_verdict::succeeded:
      return "succeeded";
    case retry_verdict::resolved:
      return "resolved";
    case retry_verdict::permanent_failure:
      return "permanent_failure";
    case retry_verdict::attempts_exhausted:
      return "attempts_exhausted";
    case retry_verdict::deadline_exceeded:
      return "deadline_exceeded";
    case retry_verdict::budget_exhausted:
      return "budget_exhausted";
    case retry_verdict::circuit_open:
      return "circuit_open";
    case retry_verdict::not_retried:
      return "not_retried";
  }
  return "unknown";
}

/// An attempt has ended.
struct attempt_event {
  redacted_key key;
  const attempt_record& record;
};

/// The loop is about to wait before attempt `next_attempt`.
struct delay_event {
  redacted_key key;
  int next_attempt;
  std::chrono::nanoseconds delay;
  bool from_retry_after;
};

/// The operation has ended.
struct finish_event {
  redacted_key key;
  retry_verdict verdict;
  int attempts;
  std::chrono::nanoseconds elapsed;
};

/// What an `observer` policy must provide.
template <class O>
concept Observer = std::copy_constructible<O> &&
    requires(O& observer, const attempt_event& a, const delay_event& d, const finish_event& f) {
  observer.on_attempt(a);
  observer.on_delay(d);
  observer.on_finish(f);
};

/// Watches nothing, costs nothing.
struct no_observer {
  constexpr void on_attempt(const attempt_event&) const noexcept {}
  constexpr void on_delay(const delay_event&) const noexcept {}
  constexpr void on_finish(const finish_event&) const noexcept {}
};

/// Totals, shared by copies, safe from many threads.
template <class Lazy>
class basic_counting_observer {
 public:
  basic_counting_observer() : counts_(std::make_shared<counters>()) {}

  void on_attempt(const attempt_event&) noexcept { add(counts_->attempts); }
  void on_delay(const delay_event& e) noexcept {
    add(counts_->retries);
    counts_->delay_ns.fetch_add(e.delay.count(), std::memory_order_relaxed);
  }
  void on_finish(const finish_event& e) noexcept {
    add(counts_->operations);
    add(e.verdict == retry_verdict::succeeded || e.verdict == retry_verdict::resolved
            ? counts_->successes
            : counts_->give_ups);
  }

  long long attempts() const noexcept { return get(counts_->attempts); }
  long long retries() const noexcept { return get(counts_->retries); }
  long long operations() const noexcept { return get(counts_->operations); }
  long long successes() const noexcept { return get(counts_->successes); }
  long long give_ups() const noexcept { return get(counts_->give_ups); }
  std::chrono::nanoseconds total_delay() const noexcept {
    return std::chrono::nanoseconds{counts_->delay_ns.load(std::memory_order_relaxed)};
  }

 private:
  struct counters {
    std::atomic<long long> attempts{0}, retries{0}, operations{0}, successes{0}, give_ups{0};
    std::atomic<std::chrono::nanoseconds::rep> delay_ns{0};
  };
  static void add(std::atomic<long long>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
  static long long get(const std::atomic<long long>& c) noexcept {
    return c.load(std::memory_order_relaxed);
  }
  std::shared_ptr<counters> counts_;
};

// A template only so that it compiles where it is used (see basic_memory_store).
using counting_observer = basic_counting_observer<void>;

template <class Event>
class event_callback;

namespace detail {
// What an event_callback<Event> can hold: a copyable callable that takes `const Event&`. Another
// event_callback is copied or moved, not wrapped.
template <class F, class Event>
concept event_function = !std::same_as<F, event_callback<Event>> && std::copy_constructible<F> &&
                         std::invocable<F&, const Event&>;
}  // namespace detail

/// A user function that takes one event: what std::function<void(const Event&)> would hold,
/// without <functional>. Assign any callable that accepts `const Event&` (a lambda, a function
/// pointer, a std::function, a pointer to member); its result is discarded. Copies copy the
/// callable, as std::function's do. Empty when default-constructed or given nullptr or a null
/// pointer, which `if (callback)` tells; calling an empty one does nothing (where an empty
/// std::function would throw std::bad_function_call).
template <class Event>
class event_callback {
 public:
  event_callback() noexcept = default;
  event_callback(std::nullptr_t) noexcept {}

  // Implicit, as std::function's, so that `observer.attempt = [&](const attempt_event& e) {...};`
  // reads as it did when the fields were std::functions. By value: a lambda is moved in.
  template <detail::event_function<Event> F>
  event_callback(F f) {
    if constexpr (std::is_pointer_v<F> || std::is_member_pointer_v<F>) {
      if (f == nullptr) return;
    }
    target_ = std::make_unique<holder<F>>(std::move(f));
  }

  event_callback(const event_callback& other)
      : target_(other.target_ ? other.target_->clone() : nullptr) {}
  event_callback(event_callback&&) noexcept = default;
  event_callback& operator=(event_callback other) noexcept {
    target_ = std::move(other.target_);
    return *this;
  }

  explicit operator bool() const noexcept { return target_ != nullptr; }

  // const, like std::function's: the callable itself may still change (a mutable lambda).
  void operator()(const Event& event) const {
    if (target_ != nullptr) target_->call(event);
  }

 private:
  struct callable {
    virtual ~callable() = default;
    virtual void call(const Event& event) = 0;
    virtual std::unique_ptr<callable> clone() const = 0;
  };
  template <class F>
  struct holder final : callable {
    explicit holder(F g) : f(std::move(g)) {}
    void call(const Event& event) override { static_cast<void>(detail::invoke(f, event)); }
    std::unique_ptr<callable> clone() const override { return std::make_unique<holder>(f); }
    F f;
  };

  std::unique_ptr<callable> target_;
};

/// Forwards each event to a user function; an unset function is skipped.
template <class Lazy>
struct basic_callback_observer {
  event_callback<attempt_event> attempt;
  event_callback<delay_event> delay;
  event_callback<finish_event> finish;

  void on_attempt(const attempt_event& e) const { attempt(e); }
  void on_delay(const delay_event& e) const { delay(e); }
  void on_finish(const finish_event& e) const { finish(e); }
};

// A template only so that it compiles where it is used (see basic_memory_store).
using callback_observer = basic_callback_observer<void>;

}  // namespace idem

#endif  // IDEM_CLIENT_POLICY_OBSERVER_HPP
