// idem::retrying<Call, Policies>: a call retried only when that is safe, under one idempotency key.
//
//   auto charge = idem::retrying{[&](const idem::attempt_context& attempt) {
//     return http.post("/charges", body, {{"Idempotency-Key", attempt.key()}},
//                      attempt.time_left());
//   }};
//   auto outcome = charge();            // an idem::retry_outcome<response>
//   if (outcome) use(outcome.value());
//
// What it guarantees:
//   * the key is generated once per operation, before the first attempt, and every attempt gets
//     it: a retry can never go out under a new key;
//   * only what the classifier calls transient or ambiguous is repeated, and only when the call
//     is keyed or idempotent by nature;
//   * at most max_attempts attempts (the first counts), and never a wait that ends past the
//     deadline; a Retry-After that the server sends is honoured, one beyond the deadline ends
//     the retries at once;
//   * a retrying call inside another one on the same thread makes one attempt: only the
//     outermost layer retries;
//   * after an ambiguous failure, the call's optional `resolve` hook is asked whether the effect
//     landed, and a yes ends the retries;
//   * a budget and a circuit breaker can refuse, and the operation then ends with their verdict;
//   * a rate limiter (Policies::limiter) gives each attempt its permit, waited for on the clock
//     up to options.limiter_wait, or ends the operation rate_limited.
//
// The rules live in detail::retry_core (idem/client/detail/retry_core.hpp), which the
// asynchronous driver (idem::async_retrying, idem/asio.hpp) shares: this file is the blocking
// driver, which runs attempts on the calling thread and sleeps on the clock between them.
//
// Concurrency: one retrying object may be called from many threads at once. Each operation has
// its own history, each thread its own random engine; the budget, breaker and observer are
// shared and thread-safe. The success path writes no memory shared between threads.
#ifndef IDEM_CLIENT_RETRYING_HPP
#define IDEM_CLIENT_RETRYING_HPP

#include <concepts>
#include <exception>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/client/attempt.hpp>
#include <idem/client/detail/retry_core.hpp>
#include <idem/client/retry_outcome.hpp>
#include <idem/core/key.hpp>
#include <idem/policies.hpp>

namespace idem {

namespace detail {

// How many blocking retrying operations are running on this thread, outermost first. constinit
// keeps the access a plain thread-local load, with no initialisation guard. (An asynchronous
// operation cannot count on its thread: it carries its layer in its executor.)
inline constinit thread_local int retry_depth = 0;

class retry_layer {
 public:
  retry_layer() noexcept : nested_(retry_depth++ > 0) {}
  ~retry_layer() { --retry_depth; }
  retry_layer(const retry_layer&) = delete;
  retry_layer& operator=(const retry_layer&) = delete;
  bool nested() const noexcept { return nested_; }

 private:
  bool nested_;
};

}  // namespace detail

/// A call with a resolve hook: `resolver(attempt_context)` (or with the call's arguments too)
/// asks the downstream system, by the key, whether an ambiguous attempt took effect after all.
/// It returns std::optional<Result> (bool for a call returning void): a value, or true, when it
/// landed.
template <class Call, class Resolver>
struct resolvable_call {
  Call call;
  Resolver resolver;

  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return std::invoke(call, std::forward<Args>(args)...);
  }
  template <class... Args>
  decltype(auto) resolve(const attempt_context& context, Args&... args) {
    if constexpr (std::invocable<Resolver&, const attempt_context&, Args&...>) {
      return std::invoke(resolver, context, args...);
    } else {
      return std::invoke(resolver, context);
    }
  }
};

template <class Call, class Resolver>
resolvable_call<Call, Resolver> with_resolver(Call call, Resolver resolver) {
  return {std::move(call), std::move(resolver)};
}

template <class Call, class Policies = default_policies>
class retrying {
  using core_type = detail::retry_core<Policies>;

 public:
  using clock_type = typename core_type::clock_type;
  using random_type = typename core_type::random_type;
  using backoff_type = typename core_type::backoff_type;
  using budget_type = typename core_type::budget_type;
  using breaker_type = typename core_type::breaker_type;
  using classifier_type = typename core_type::classifier_type;
  using observer_type = typename core_type::observer_type;
  using key_generator_type = typename core_type::key_generator_type;

  /// The parts a wrapper is built from (idem/client/retry_options.hpp): clock, backoff,
  /// budget, breaker, classifier, observer, key_generator, latency, limiter, seed and limits,
  /// each defaulting to its policy.
  using options = retry_options<Policies>;

  explicit retrying(Call call) : retrying(std::move(call), options{}) {}

  /// Throws std::invalid_argument for limits that can never work.
  retrying(Call call, options parts)
      : call_(std::move(call)), core_(std::move(parts), "idem::retrying") {}

  retrying(const retrying&) = delete;
  retrying& operator=(const retrying&) = delete;

  /// Runs one operation: as many attempts as the policies allow, each given an attempt_context
  /// (when the call accepts one) and `args` as lvalues, since they may be needed again.
  template <class... Args>
  requires detail::takes_context<Call, Args...> || std::invocable<Call&, Args&...>
      retry_outcome<detail::call_result_t<Call, Args...>>
  operator()(Args&&... args) { return run_operation(nullptr, args...); }

  /// Runs one operation under a key that already exists instead of a generated one: the key a
  /// server handler derived for its downstream call (handler_context::downstream_key), or one
  /// the caller persisted before a crash so that the resumed operation keeps it. Throws
  /// std::invalid_argument, before any attempt, unless `key` is 1 to 255 bytes of visible ASCII.
  template <class... Args>
  requires detail::takes_context<Call, Args...> || std::invocable<Call&, Args&...>
      retry_outcome<detail::call_result_t<Call, Args...>> with_key(std::string_view key,
                                                                   Args&&... args) {
    const key_buffer given{key};
    return run_operation(&given, args...);
  }

  Call& call() noexcept { return call_; }
  clock_type& clock() noexcept { return core_.clock(); }
  budget_type& budget() noexcept { return core_.budget(); }
  breaker_type& breaker() noexcept { return core_.breaker(); }
  observer_type& observer() noexcept { return core_.observer(); }
  typename core_type::latency_type& latency() noexcept { return core_.latency(); }
  typename core_type::limiter_type& limiter() noexcept { return core_.limiter(); }
  const retry_limits& limits() const noexcept { return core_.limits(); }

 private:
  template <class... Args>
  retry_outcome<detail::call_result_t<Call, Args...>> run_operation(const key_buffer* given,
                                                                    Args&... args) {
    using result_type = detail::call_result_t<Call, Args...>;
    static_assert(core_type::template check_result<result_type>());
    static_assert(!detail::hedges<typename Policies::hedge>,
                  "idem::retrying cannot hedge: a blocking call cannot wait for two answers at "
                  "once. Use idem::async_retrying (idem/asio.hpp), or leave Policies::hedge "
                  "idem::no_hedging.");

    const detail::retry_layer layer;
    retry_outcome<result_type> outcome = core_.template make_outcome<result_type>(given);
    auto run = core_.begin(layer.nested());
    for (;;) {
      if constexpr (core_type::limits_rate) {
        if (!permitted(run, outcome)) break;
      }
      const std::optional<attempt_context> context = core_.start_attempt(run, outcome);
      if (!context) break;
      bool threw = false;
      try {
        core_type::set_value(outcome,
                             [&]() -> decltype(auto) { return invoke_call(*context, args...); });
      } catch (...) {
        core_type::set_error(outcome, std::current_exception());
        threw = true;
      }
      const detail::retry_decision decision =
          core_.judge(run, outcome, core_.classify(outcome, threw), threw);
      if (decision.stop) break;
      core_.clock().sleep_for(decision.delay);
      if (decision.resolve_first &&
          effect_landed(outcome, core_.resolve_context(run, outcome), args...)) {
        core_type::end(outcome, retry_verdict::resolved);
        break;
      }
    }
    core_.finish(run, outcome);
    return outcome;
  }

  // Waits, sleeping on the clock, for the rate limiter's permit for the next attempt: false when
  // there was none in time (the outcome's verdict is rate_limited).
  template <class Result>
  bool permitted(typename core_type::run_type& run, retry_outcome<Result>& outcome) {
    for (;;) {
      const auto step = core_.permit(run, outcome);
      if (step.go) return true;
      if (step.refused) return false;
      core_.clock().sleep_for(step.wait);
    }
  }

  template <class... Args>
  decltype(auto) invoke_call(const attempt_context& context, Args&... args) {
    if constexpr (detail::takes_context<Call, Args...>) {
      return std::invoke(call_, context, args...);
    } else {
      return std::invoke(call_, args...);
    }
  }

  // Asks the call's resolve hook, if it has one, whether the ambiguous attempt took effect.
  template <class Result, class... Args>
  bool effect_landed(retry_outcome<Result>& outcome, const attempt_context& context,
                     Args&... args) {
    if constexpr (detail::has_resolve_hook<Call, Args...>) {
      return core_type::take_resolution(outcome, detail::ask_resolve_hook(call_, context, args...));
    } else {
      return false;
    }
  }

  Call call_;
  core_type core_;
};

template <class Call>
retrying(Call) -> retrying<Call, default_policies>;

}  // namespace idem

#endif  // IDEM_CLIENT_RETRYING_HPP
