// The options of the client side's faces, declared once for both drivers: retry_options<Policies>
// is retrying::options and the base of async_retrying::options, which adds only what is
// asynchronous (an attempt's timeout, hedging). Every field means the same on both.
//
//   idem::retrying<Call>::options parts;    // idem::retry_options<idem::default_policies>
//   parts.limits = {5, std::chrono::seconds(10)};
//   parts.budget = shared_budget;           // one budget guarding several wrappers
#ifndef IDEM_CLIENT_RETRY_OPTIONS_HPP
#define IDEM_CLIENT_RETRY_OPTIONS_HPP

#include <chrono>
#include <cstdint>
#include <optional>

#include <idem/client/policy/latency.hpp>

namespace idem {

/// How many attempts one operation may make and how long it may take. Defaults come from the
/// policies; a wrapper can be given others at construction.
struct retry_limits {
  int max_attempts;                   // the first attempt included; at least 1
  std::chrono::nanoseconds deadline;  // for all attempts and waits together; positive
};

/// The parts a wrapper is built from. Each is default-constructed from its policy type unless
/// given; budgets, breakers, manual clocks and counting observers share state with the copy
/// they were given, so one budget can guard several wrappers.
template <class Policies>
struct retry_options {
  typename Policies::clock clock{};
  typename Policies::backoff backoff{};
  typename Policies::budget budget{};
  typename Policies::breaker breaker{};
  typename Policies::classifier classifier{};
  typename Policies::observer observer{};
  typename Policies::key_generator key_generator{};
  /// The dependency's latency (one tracker per dependency, shared by its wrappers).
  typename Policies::latency latency{};
  /// How an attempt's timeout comes from `latency` (ignored without a tracker).
  attempt_timeouts timeouts{};
  /// The dependency's rate limiter (one per dependency, shared by its wrappers).
  typename Policies::limiter limiter{};
  /// The longest an attempt waits for the limiter's permit, in all (never past the
  /// deadline); zero: refused at once when there is none.
  std::chrono::nanoseconds limiter_wait = std::chrono::seconds{5};
  /// Seeds the jitter and the keys, for tests that replay; unset, 256 nondeterministic bits
  /// are drawn. Never fix it in production: two processes with one seed make the same keys.
  std::optional<std::uint64_t> seed{};
  retry_limits limits{Policies::max_attempts, Policies::deadline};
};

}  // namespace idem

#endif  // IDEM_CLIENT_RETRY_OPTIONS_HPP
