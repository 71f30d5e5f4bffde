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
//   * a budget and a circuit breaker can refuse, and the operation then ends with their verdict.
//
// Concurrency: one retrying object may be called from many threads at once. Each operation has
// its own history, each thread its own random engine; the budget, breaker and observer are
// shared and thread-safe. The success path writes no memory shared between threads.
#ifndef IDEM_CLIENT_RETRYING_HPP
#define IDEM_CLIENT_RETRYING_HPP

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <idem/client/attempt.hpp>
#include <idem/client/retry_after.hpp>
#include <idem/client/retry_outcome.hpp>
#include <idem/key.hpp>
#include <idem/policies.hpp>

namespace idem {

/// How many attempts one operation may make and how long it may take. Defaults come from the
/// policies; a wrapper can be given others at construction.
struct retry_limits {
  int max_attempts;                   // the first attempt included; at least 1
  std::chrono::nanoseconds deadline;  // for all attempts and waits together; positive
};

namespace detail {

// How many retrying operations are running on this thread, outermost first. constinit keeps the
// access a plain thread-local load, with no initialisation guard.
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

template <class Call, class... Args>
concept takes_context = std::invocable<Call&, const attempt_context&, Args&...>;

template <class Call, class... Args>
struct call_result {
  using type = std::invoke_result_t<Call&, Args&...>;
};
template <class Call, class... Args>
requires takes_context<Call, Args...>
struct call_result<Call, Args...> {
  using type = std::invoke_result_t<Call&, const attempt_context&, Args&...>;
};
template <class Call, class... Args>
using call_result_t = typename call_result<Call, Args...>::type;

template <class Call, class... Args>
concept resolvable_with_arguments = requires(Call& call, const attempt_context& context,
                                             Args&... args) {
  call.resolve(context, args...);
};
template <class Call>
concept resolvable = requires(Call& call, const attempt_context& context) {
  call.resolve(context);
};

// The engine each thread draws from for one retrying object. A thread seeds it when it starts
// using the object, or comes back to it after using another: from the object's 256-bit seed
// with a stream number mixed in that the object never hands out twice (one atomic add). After
// that, operations just draw from it, so the hot path neither seeds nor writes anything shared.
// Streams of one object differ in their seed, so keys drawn on different threads are
// independent 122-bit values; a single thread using one fixed-seed object replays exactly.
template <class Random>
struct thread_engine {
  std::uint64_t object = 0;  // the id of the object the engine is seeded for; 0 for none
  std::optional<Random> engine;
};
template <class Random>
inline constinit thread_local thread_engine<Random> thread_engines{};
inline std::atomic<std::uint64_t> next_object_id{1};

template <class TimePoint>
constexpr std::chrono::nanoseconds since_epoch(const TimePoint& t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
}

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
 public:
  using clock_type = typename Policies::clock;
  using random_type = typename Policies::random;
  using backoff_type = typename Policies::backoff;
  using budget_type = typename Policies::budget;
  using breaker_type = typename Policies::breaker;
  using classifier_type = typename Policies::classifier;
  using observer_type = typename Policies::observer;
  using key_generator_type = typename Policies::key_generator;

  static_assert(Clock<clock_type>,
                "Policies::clock must provide now() returning its time_point, wall_now() "
                "returning std::chrono::system_clock::time_point, and sleep_for(nanoseconds).");
  static_assert(RandomSource<random_type>,
                "Policies::random must be a std::uniform_random_bit_generator of 64-bit words "
                "that can be constructed from an idem::random_seed, like idem::xoshiro256ss.");
  static_assert(Backoff<backoff_type, random_type>,
                "Policies::backoff must provide delay(int retry_index, nanoseconds previous, "
                "Random&) returning std::chrono::nanoseconds.");
  static_assert(Budget<budget_type>,
                "Policies::budget must be copyable and provide on_request(), "
                "try_acquire_retry(retry_reason) returning bool, and on_success(retry_reason).");
  static_assert(Breaker<breaker_type>,
                "Policies::breaker must be copyable and provide allow(nanoseconds) returning "
                "bool, on_success(nanoseconds), on_failure(nanoseconds), and state(nanoseconds) "
                "returning idem::breaker_state.");
  static_assert(Observer<observer_type>,
                "Policies::observer must be copyable and provide on_attempt(const "
                "attempt_event&), on_delay(const delay_event&) and on_finish(const "
                "finish_event&).");
  static_assert(KeyGenerator<key_generator_type, random_type, clock_type>,
                "Policies::key_generator must provide generate(Random&, Clock&) returning "
                "idem::key_buffer.");
  static_assert(Policies::max_attempts >= 1,
                "Policies::max_attempts counts the first attempt, so it must be at least 1.");
  static_assert(Policies::deadline > decltype(Policies::deadline)::zero(),
                "Policies::deadline must be positive.");

  /// The parts a wrapper is built from. Each is default-constructed from its policy type unless
  /// given; budgets, breakers, manual clocks and counting observers share state with the copy
  /// they were given, so one budget can guard several wrappers.
  struct options {
    clock_type clock{};
    backoff_type backoff{};
    budget_type budget{};
    breaker_type breaker{};
    classifier_type classifier{};
    observer_type observer{};
    key_generator_type key_generator{};
    /// Seeds the jitter and the keys, for tests that replay; unset, 256 nondeterministic bits
    /// are drawn. Never fix it in production: two processes with one seed make the same keys.
    std::optional<std::uint64_t> seed{};
    retry_limits limits{Policies::max_attempts, Policies::deadline};
  };

  explicit retrying(Call call) : retrying(std::move(call), options{}) {}

  retrying(Call call, options parts)
      : call_(std::move(call)),
        clock_(std::move(parts.clock)),
        backoff_(std::move(parts.backoff)),
        budget_(std::move(parts.budget)),
        breaker_(std::move(parts.breaker)),
        classifier_(std::move(parts.classifier)),
        observer_(std::move(parts.observer)),
        key_generator_(std::move(parts.key_generator)),
        seed_(parts.seed ? seed_from(*parts.seed) : nondeterministic_seed()),
        limits_(parts.limits) {
    if (limits_.max_attempts < 1) {
      throw std::invalid_argument(
          "idem::retrying: max_attempts counts the first attempt and "
          "must be at least 1");
    }
    if (limits_.deadline <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument("idem::retrying: the deadline must be positive");
    }
  }

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
  clock_type& clock() noexcept { return clock_; }
  budget_type& budget() noexcept { return budget_; }
  breaker_type& breaker() noexcept { return breaker_; }
  observer_type& observer() noexcept { return observer_; }
  const retry_limits& limits() const noexcept { return limits_; }

 private:
  template <class... Args>
  retry_outcome<detail::call_result_t<Call, Args...>> run_operation(const key_buffer* given,
                                                                    Args&... args) {
    using result_type = detail::call_result_t<Call, Args...>;
    static_assert(!std::same_as<classifier_type, default_classifier> ||
                      judged_by_default_classifier<result_type>,
                  "idem::retrying: the default classifier cannot tell whether this call's result "
                  "failed, so it would never be retried. Give the result type an HTTP status (a "
                  "`status` member or `status()` function), return a std::error_code, or choose "
                  "a classifier in the policies: `using classifier = "
                  "idem::exception_classifier<>;` when failures are exceptions and every value "
                  "is a success, or `idem::classify_with<F>` for rules of your own.");
    static_assert(Classifier<classifier_type, result_type>,
                  "Policies::classifier must provide classify(const Result&) for this call's "
                  "result type and classify_exception(std::exception_ptr), both returning "
                  "idem::classification.");

    const detail::retry_layer layer;
    const bool may_repeat =
        Policies::safety != call_safety::unsafe && (Policies::retry_when_nested || !layer.nested());

    random_type& rng = operation_engine();
    retry_outcome<result_type> outcome{[&]() -> key_buffer {
      if (given != nullptr) return *given;
      return key_generator_.generate(rng, clock_);
    }};
    const auto start = clock_.now();
    budget_.on_request();

    std::chrono::nanoseconds previous_delay{0};
    retry_reason last_retry = retry_reason::none;
    for (int attempt = 1;; ++attempt) {
      const auto attempt_start = attempt == 1 ? start : clock_.now();
      const std::chrono::nanoseconds elapsed = attempt_start - start;
      if (!breaker_.allow(detail::since_epoch(attempt_start))) {
        outcome.verdict_ = retry_verdict::circuit_open;
        break;
      }
      const attempt_context context{attempt, outcome.key(), time_left(elapsed)};

      bool threw = false;
      try {
        run_attempt(outcome, context, args...);
      } catch (...) {
        outcome.value_.reset();
        outcome.error_ = std::current_exception();
        threw = true;
      }
      classification verdict;
      if (threw) {
        verdict = classifier_.classify_exception(outcome.error_);
      } else if constexpr (std::is_void_v<result_type>) {
        verdict = classification{};
      } else {
        verdict = classifier_.classify(*outcome.value_);
      }

      attempt_record& record = outcome.history_.emplace(attempt, verdict.kind, verdict.code, threw,
                                                        elapsed, std::chrono::nanoseconds{}, false);
      observer_.on_attempt(attempt_event{redacted_key{outcome.key()}, record});

      if (verdict.kind == disposition::success) {
        breaker_.on_success(detail::since_epoch(attempt_start));
        budget_.on_success(last_retry);
        outcome.verdict_ = retry_verdict::succeeded;
        break;
      }

      const auto now = clock_.now();
      if (verdict.fault) {
        breaker_.on_failure(detail::since_epoch(now));
      } else {
        breaker_.on_success(detail::since_epoch(now));
      }
      const next_step step =
          after_failure(verdict, attempt, may_repeat, now - start, previous_delay, rng);
      if (step.stop) {
        outcome.verdict_ = step.verdict;
        break;
      }
      last_retry = step.reason;
      record.delay_after = step.delay;
      record.delay_from_retry_after = step.from_retry_after;
      observer_.on_delay(
          delay_event{redacted_key{outcome.key()}, attempt + 1, step.delay, step.from_retry_after});
      clock_.sleep_for(step.delay);
      previous_delay = step.delay;

      if (verdict.kind == disposition::ambiguous) {
        const attempt_context next{attempt + 1, outcome.key(), time_left(clock_.now() - start)};
        if (effect_landed(outcome, next, args...)) {
          outcome.verdict_ = retry_verdict::resolved;
          break;
        }
      }
    }

    if constexpr (!std::is_same_v<observer_type, no_observer>) {
      const std::chrono::nanoseconds total = clock_.now() - start;
      observer_.on_finish(
          finish_event{redacted_key{outcome.key()}, outcome.verdict_, outcome.attempts(), total});
    }
    return outcome;
  }

  std::chrono::nanoseconds time_left(std::chrono::nanoseconds elapsed) const noexcept {
    const auto left = limits_.deadline - elapsed;
    return left > std::chrono::nanoseconds::zero() ? left : std::chrono::nanoseconds::zero();
  }

  // What follows a failed attempt: stop with a verdict, or wait and try again. The rules live
  // here, apart from the loop that runs attempts and waits, so that an asynchronous version can
  // apply the same rules between co_awaits.
  struct next_step {
    bool stop = false;  // the operation ends, with `verdict`; else it waits `delay` and retries
    retry_verdict verdict{};
    std::chrono::nanoseconds delay{};
    bool from_retry_after = false;
    retry_reason reason = retry_reason::none;
  };
  static next_step end_with(retry_verdict verdict) noexcept {
    return {.stop = true, .verdict = verdict};
  }

  next_step after_failure(const classification& verdict, int attempt, bool may_repeat,
                          std::chrono::nanoseconds elapsed, std::chrono::nanoseconds previous_delay,
                          random_type& rng) {
    if (verdict.kind == disposition::permanent) return end_with(retry_verdict::permanent_failure);
    if (!may_repeat) return end_with(retry_verdict::not_retried);
    if (attempt >= limits_.max_attempts) return end_with(retry_verdict::attempts_exhausted);

    // The wait: the server's Retry-After when it sent a valid one, else the backoff.
    std::chrono::nanoseconds delay{};
    bool from_retry_after = false;
    if (!verdict.retry_after.empty()) {
      if (const auto asked = parse_retry_after(verdict.retry_after, clock_.wall_now())) {
        delay = *asked;
        from_retry_after = true;
      }
    }
    if (!from_retry_after) delay = backoff_.delay(attempt - 1, previous_delay, rng);
    if (delay < std::chrono::nanoseconds::zero()) delay = std::chrono::nanoseconds::zero();

    // A wait that ends at or past the deadline would leave the next attempt no time at all.
    if (delay >= time_left(elapsed)) return end_with(retry_verdict::deadline_exceeded);

    // Asked last, so that a refusal for any other reason spends no token.
    const auto reason =
        verdict.kind == disposition::ambiguous ? retry_reason::ambiguous : retry_reason::transient;
    if (!budget_.try_acquire_retry(reason)) return end_with(retry_verdict::budget_exhausted);
    return {.delay = delay, .from_retry_after = from_retry_after, .reason = reason};
  }

  random_type& operation_engine() {
    auto& local = detail::thread_engines<random_type>;
    if (local.object != id_) {
      random_seed seed = seed_;
      std::uint64_t stream = streams_.fetch_add(1, std::memory_order_relaxed);
      for (auto& word : seed.words)
        word ^= detail::splitmix64(stream);
      local.engine.emplace(seed);
      local.object = id_;
    }
    return *local.engine;
  }

  template <class Result, class... Args>
  void run_attempt(retry_outcome<Result>& outcome, const attempt_context& context, Args&... args) {
    if (outcome.error_) outcome.error_ = nullptr;
    if constexpr (std::is_void_v<Result>) {
      invoke_call(context, args...);
      outcome.value_.emplace();
    } else {
      outcome.value_.emplace(invoke_call(context, args...));
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
    if constexpr (detail::resolvable_with_arguments<Call, Args...> || detail::resolvable<Call>) {
      auto answer = [&] {
        if constexpr (detail::resolvable_with_arguments<Call, Args...>) {
          return call_.resolve(context, args...);
        } else {
          return call_.resolve(context);
        }
      }();
      if constexpr (std::is_void_v<Result>) {
        static_assert(std::is_convertible_v<decltype(answer), bool>,
                      "resolve(attempt_context) of a call returning void must return bool: true "
                      "when the effect landed.");
        if (!answer) return false;
        outcome.value_.emplace();
      } else {
        static_assert(std::is_convertible_v<decltype(answer), std::optional<Result>>,
                      "resolve(attempt_context) must return std::optional<Result>: the result "
                      "when the effect landed, std::nullopt when it did not.");
        std::optional<Result> found = std::move(answer);
        if (!found) return false;
        outcome.value_.emplace(std::move(*found));
      }
      outcome.error_ = nullptr;
      return true;
    } else {
      return false;
    }
  }

  Call call_;
  [[no_unique_address]] clock_type clock_;
  [[no_unique_address]] backoff_type backoff_;
  [[no_unique_address]] budget_type budget_;
  [[no_unique_address]] breaker_type breaker_;
  [[no_unique_address]] classifier_type classifier_;
  [[no_unique_address]] observer_type observer_;
  [[no_unique_address]] key_generator_type key_generator_;
  random_seed seed_;
  const std::uint64_t id_ = detail::next_object_id.fetch_add(1, std::memory_order_relaxed);
  std::atomic<std::uint64_t> streams_{0};
  retry_limits limits_;
};

template <class Call>
retrying(Call) -> retrying<Call, default_policies>;

}  // namespace idem

#endif  // IDEM_CLIENT_RETRYING_HPP
