// Observers: telemetry for every attempt, every wait and every end of a retried operation.
//
// The default, no_observer, has empty inline members: the calls vanish when inlined, so a
// configuration that watches nothing pays nothing. counting_observer keeps totals in atomics
// (copies share them); callback_observer forwards to user functions (std::function).
//
// Events carry the operation's key redacted (idem/client/redacted_key.hpp): an observer that logs
// `event.key.str()` writes a stable hash, never the key, which the caller may treat as a secret.
#ifndef IDEM_CLIENT_POLICY_OBSERVER_HPP
#define IDEM_CLIENT_POLICY_OBSERVER_HPP

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/client/attempt.hpp>
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
  cancelled,           // the caller cancelled the operation (an asynchronous one) during a wait
                       // or an attempt; the key is never used for another operation
  rate_limited,        // the rate limiter had no permit for the next attempt within
                       // options.limiter_wait (or before the deadline)
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
    case retry_verdict::cancelled:
      return "cancelled";
    case retry_verdict::rate_limited:
      return "rate_limited";
  }
  return "unknown";
}

/// An attempt has ended.
struct attempt_event {
  redacted_key key;
  const attempt_record& record;
  /// From the attempt's start to its classification, on the wrapper's clock; zero under
  /// no_observer, which reads no clock for it.
  std::chrono::nanoseconds duration;
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
class counting_observer {
 public:
  counting_observer() : counts_(std::make_shared<counters>()) {}

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

/// A user function that takes one event. Any callable that accepts `const Event&` can be
/// assigned (a lambda, a function pointer, a pointer to member); its result is discarded.
template <class Event>
using event_callback = std::function<void(const Event&)>;

/// Forwards each event to a user function; an unset function is skipped.
struct callback_observer {
  event_callback<attempt_event> attempt;
  event_callback<delay_event> delay;
  event_callback<finish_event> finish;

  void on_attempt(const attempt_event& e) const {
    if (attempt) attempt(e);
  }
  void on_delay(const delay_event& e) const {
    if (delay) delay(e);
  }
  void on_finish(const finish_event& e) const {
    if (finish) finish(e);
  }
};

}  // namespace idem

#endif  // IDEM_CLIENT_POLICY_OBSERVER_HPP
