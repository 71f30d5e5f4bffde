// The retry rules, apart from any way of waiting: one decider, two drivers.
//
// retry_core holds a wrapper's policies (clock, backoff, budget, breaker, classifier, observer,
// key generator, limits, random streams) and applies every rule between attempts: the breaker
// before one, the classification, history and observer events after it, and then the decision
// that answers *stop with verdict v* or *wait d, then (after an ambiguous failure) ask the
// resolve hook first, then try again*. It never waits and never calls the wrapped call: a driver
// does that. The blocking idem::retrying sleeps on the clock between its steps; the asynchronous
// idem::async_retrying (idem/asio.hpp) co_awaits a timer. Whatever the driver, an operation is:
//
//   retry_run run = core.begin(may_repeat);          // the start time, the budget's request
//   outcome = core.make_outcome<R>(given)             // the key, made once
//   loop:
//     context = core.start_attempt(run, outcome)     // the breaker; nullopt: it refused
//     ... the driver runs the attempt, storing its value or exception in the outcome ...
//     decision = core.judge(run, outcome, core.classify(outcome, threw), threw)
//     stop: break
//     ... the driver waits decision.delay ...
//     resolve_first and the call has a resolve hook: ask it, with core.resolve_context(run, ...)
//   core.finish(run, outcome)                        // the observer's finish event
//
// With a latency tracker in the policies (Policies::latency), each attempt's context carries a
// timeout derived from it (attempt_timeouts), and judge records how long the attempt took.
// With a rate limiter (Policies::limiter), each attempt first asks core.permit(run, outcome):
// go, or wait this long and ask again (the driver's wait), or stop rate_limited.
#ifndef IDEM_CLIENT_DETAIL_RETRY_CORE_HPP
#define IDEM_CLIENT_DETAIL_RETRY_CORE_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <idem/client/attempt.hpp>
#include <idem/client/retry_after.hpp>
#include <idem/client/retry_options.hpp>
#include <idem/client/retry_outcome.hpp>
#include <idem/core/key.hpp>
#include <idem/policies.hpp>

namespace idem {

namespace detail {

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
template <class Call, class... Args>
concept has_resolve_hook = resolvable_with_arguments<Call, Args...> || resolvable<Call>;

/// The call's resolve hook's answer for `context`, given the call's arguments where it takes
/// them: what either driver hands take_resolution (the asynchronous one after co_await, when
/// the hook answers with an awaitable).
template <class Call, class... Args>
requires has_resolve_hook<Call, Args...>
decltype(auto) ask_resolve_hook(Call& call, const attempt_context& context, Args&... args) {
  if constexpr (resolvable_with_arguments<Call, Args...>) {
    return call.resolve(context, args...);
  } else {
    return call.resolve(context);
  }
}

// The engine each thread draws from for one wrapper. A thread seeds it when it starts using the
// wrapper, or comes back to it after using another: from the wrapper's 256-bit seed with a
// stream number mixed in that the wrapper never hands out twice (one atomic add). After that,
// operations just draw from it, so the hot path neither seeds nor writes anything shared.
// Streams of one wrapper differ in their seed, so keys drawn on different threads are
// independent 122-bit values; a single thread using one fixed-seed wrapper replays exactly.
template <class Random>
struct thread_engine {
  std::uint64_t object = 0;  // the id of the wrapper the engine is seeded for; 0 for none
  std::optional<Random> engine;
  std::uint32_t untimed = 0;  // attempts to leave untimed before the next timed one
};
template <class Random>
inline constinit thread_local thread_engine<Random> thread_engines{};
inline std::atomic<std::uint64_t> next_object_id{1};

template <class TimePoint>
constexpr std::chrono::nanoseconds since_epoch(const TimePoint& t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
}

/// What follows an attempt.
struct retry_decision {
  bool stop = false;  // the operation ends with `verdict`; else it waits `delay` and retries
  retry_verdict verdict{};
  std::chrono::nanoseconds delay{};
  bool from_retry_after = false;
  /// The attempt was ambiguous: after the wait, the call's resolve hook (if it has one) is
  /// asked whether the effect landed before the next attempt goes out.
  bool resolve_first = false;
};

/// One operation's place in the rules, kept by its driver between steps.
template <class TimePoint>
struct retry_run {
  TimePoint start{};
  TimePoint attempt_start{};
  std::chrono::nanoseconds previous_delay{0};
  retry_reason last_retry = retry_reason::none;
  int attempt = 0;  // attempts started
  bool may_repeat = true;
  bool timed = false;                          // the attempt's duration goes to the latency tracker
  std::chrono::nanoseconds limiter_waited{0};  // waits for the rate limiter's permits, in all
};

template <class Policies>
class retry_core {
 public:
  using clock_type = typename Policies::clock;
  using random_type = typename Policies::random;
  using backoff_type = typename Policies::backoff;
  using budget_type = typename Policies::budget;
  using breaker_type = typename Policies::breaker;
  using classifier_type = typename Policies::classifier;
  using observer_type = typename Policies::observer;
  using key_generator_type = typename Policies::key_generator;
  using latency_type = typename Policies::latency;
  using limiter_type = typename Policies::limiter;
  using run_type = retry_run<typename clock_type::time_point>;

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
  static_assert(LatencyTracker<latency_type>,
                "Policies::latency must be copyable and provide record(nanoseconds), "
                "estimate(double) returning std::optional<std::chrono::nanoseconds> and "
                "tracks(double) returning bool (idem/client/policy/latency.hpp).");
  static_assert(Limiter<limiter_type>,
                "Policies::limiter must be copyable and provide try_acquire(nanoseconds) "
                "returning idem::limiter_answer (idem/client/policy/limiter.hpp).");
  static_assert(Policies::max_attempts >= 1,
                "Policies::max_attempts counts the first attempt, so it must be at least 1.");
  static_assert(Policies::deadline > decltype(Policies::deadline)::zero(),
                "Policies::deadline must be positive.");

  using options = retry_options<Policies>;

  /// Throws std::invalid_argument, naming `who`, for limits that can never work.
  retry_core(options parts, const char* who)
      : clock_(std::move(parts.clock)),
        backoff_(std::move(parts.backoff)),
        budget_(std::move(parts.budget)),
        breaker_(std::move(parts.breaker)),
        classifier_(std::move(parts.classifier)),
        observer_(std::move(parts.observer)),
        key_generator_(std::move(parts.key_generator)),
        latency_(std::move(parts.latency)),
        timeouts_(parts.timeouts),
        limiter_(std::move(parts.limiter)),
        limiter_wait_(parts.limiter_wait),
        seed_(parts.seed ? seed_from(*parts.seed) : nondeterministic_seed()),
        limits_(parts.limits) {
    if (limits_.max_attempts < 1) {
      throw std::invalid_argument(std::string(who) +
                                  ": max_attempts counts the first attempt and must be at least 1");
    }
    if (limits_.deadline <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument(std::string(who) + ": the deadline must be positive");
    }
    if constexpr (tracks_latency) check_attempt_timeouts(latency_, timeouts_, who);
    if (limiter_wait_ < std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument(std::string(who) + ": limiter_wait cannot be negative");
    }
  }

  /// Whether attempts ask a rate limiter for permits (not no_limiter).
  static constexpr bool limits_rate = !std::is_same_v<limiter_type, no_limiter>;

  /// The limiter's answer before the next attempt (see permit).
  struct permit_step {
    bool go = true;                   // a permit is taken: start the attempt
    std::chrono::nanoseconds wait{};  // else, when not refused: wait this, then ask again
    bool refused = false;             // no permit in time: the outcome's verdict is set
  };

  /// Asks the limiter for the next attempt's permit. Not admitted, the wait it names is allowed
  /// while the waits so far stay within limiter_wait and the wait ends before the deadline;
  /// past that the operation ends rate_limited.
  template <class Result>
  permit_step permit(run_type& run, retry_outcome<Result>& outcome) {
    const auto now = clock_.now();
    const limiter_answer answer = limiter_.try_acquire(since_epoch(now));
    if (answer.admitted) return {};
    const std::chrono::nanoseconds wait = std::max(answer.retry_in, std::chrono::nanoseconds{1});
    if (run.limiter_waited + wait > limiter_wait_ || wait >= time_left(now - run.start)) {
      outcome.verdict_ = retry_verdict::rate_limited;
      return {.go = false, .refused = true};
    }
    run.limiter_waited += wait;
    return {.go = false, .wait = wait};
  }

  /// Whether attempts are timed for a latency tracker (not for no_latency_tracker).
  static constexpr bool tracks_latency = !std::is_same_v<latency_type, no_latency_tracker>;

  retry_core(const retry_core&) = delete;
  retry_core& operator=(const retry_core&) = delete;

  /// Stops, with a sentence, a result the policies cannot judge.
  template <class Result>
  static constexpr bool check_result() {
    static_assert(
        !std::same_as<classifier_type, default_classifier> || judged_by_default_classifier<Result>,
        "idem::retrying: the default classifier cannot tell whether this call's result "
        "failed, so it would never be retried. Give the result type an HTTP status (a "
        "`status` member or `status()` function), return a std::error_code, or choose "
        "a classifier in the policies: `using classifier = "
        "idem::exception_classifier<>;` when failures are exceptions and every value "
        "is a success, or `idem::classify_with<F>` for rules of your own.");
    static_assert(Classifier<classifier_type, Result>,
                  "Policies::classifier must provide classify(const Result&) for this call's "
                  "result type and classify_exception(std::exception_ptr), both returning "
                  "idem::classification.");
    return true;
  }

// GCC 12 reports the key made in place here, once inlined into a coroutine's frame (the
// asynchronous driver's), as 256 bytes written into the 255 of key_buffer's text: a false
// positive of -Wstringop-overflow on coroutine frames (the generators write at most 36 bytes;
// key_buffer is 255 bytes and its length). Silenced for this function alone.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
  /// A new operation's outcome, with its key made in place: `given` (already checked) or a
  /// fresh one. (Returned as a prvalue, it initialises the driver's variable directly.)
  template <class Result>
  retry_outcome<Result> make_outcome(const key_buffer* given) {
    return retry_outcome<Result>{[&]() -> key_buffer {
      if (given != nullptr) return *given;
      return key_generator_.generate(engine(), clock_);
    }};
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  /// Starts an operation: its start time, and the budget counts a request. A nested layer
  /// (`nested`) or an unsafe call does not repeat failures.
  run_type begin(bool nested) {
    run_type run;
    run.may_repeat =
        Policies::safety != call_safety::unsafe && (Policies::retry_when_nested || !nested);
    run.start = clock_.now();
    budget_.on_request();
    return run;
  }

  /// Starts the next attempt: its context, or nullopt when the breaker refuses it (the
  /// outcome's verdict is then circuit_open).
  template <class Result>
  std::optional<attempt_context> start_attempt(run_type& run, retry_outcome<Result>& outcome) {
    ++run.attempt;
    run.attempt_start = run.attempt == 1 ? run.start : clock_.now();
    if (!breaker_.allow(since_epoch(run.attempt_start))) {
      outcome.verdict_ = retry_verdict::circuit_open;
      return std::nullopt;
    }
    if (outcome.error_) outcome.error_ = nullptr;
    const std::chrono::nanoseconds left = time_left(run.attempt_start - run.start);
    if constexpr (tracks_latency) {
      run.timed = times_attempt();
      return attempt_context{run.attempt, outcome.key(), left,
                             attempt_timeout(latency_, timeouts_, left)};
    } else {
      return attempt_context{run.attempt, outcome.key(), left};
    }
  }

  /// What the classifier makes of the attempt's value or exception (`threw`).
  template <class Result>
  classification classify(const retry_outcome<Result>& outcome, bool threw) const {
    if (threw) return classifier_.classify_exception(outcome.error_);
    if constexpr (std::is_void_v<Result>) {
      return classification{};
    } else {
      return classifier_.classify(*outcome.value_);
    }
  }

  /// What the classifier makes of an attempt's value (a driver that keeps it apart first).
  template <class Value>
  classification classify_value(const Value& value) const {
    return classifier_.classify(value);
  }

  /// What the classifier makes of an exception (a driver that translates one first).
  classification classify_exception(const std::exception_ptr& error) const {
    return classifier_.classify_exception(error);
  }

  /// The attempt was cut short by the caller's cancellation: it is recorded as ambiguous (it
  /// may have been sent), the observer hears of it, and the operation ends cancelled. Neither
  /// the breaker nor the budget counts it: the dependency did nothing wrong.
  template <class Result>
  retry_decision judge_cancelled(run_type& run, retry_outcome<Result>& outcome, bool threw) {
    const attempt_record& record = outcome.history_.emplace(
        run.attempt, disposition::ambiguous, 0, threw, run.attempt_start - run.start,
        std::chrono::nanoseconds{}, false, false);
    observer_.on_attempt(attempt_event{redacted_key{outcome.key()}, record, attempt_took(run)});
    return end(outcome, retry_verdict::cancelled);
  }

  /// The attempt ended with `verdict`: records it, tells the observer, the breaker and the
  /// budget, and decides what follows. `hedged`: a hedge went out for it (async_retrying).
  template <class Result>
  retry_decision judge(run_type& run, retry_outcome<Result>& outcome, const classification& verdict,
                       bool threw, bool hedged = false) {
    attempt_record& record = outcome.history_.emplace(run.attempt, verdict.kind, verdict.code,
                                                      threw, run.attempt_start - run.start,
                                                      std::chrono::nanoseconds{}, false, hedged);
    observer_.on_attempt(attempt_event{redacted_key{outcome.key()}, record, attempt_took(run)});

    if (verdict.kind == disposition::success) {
      if constexpr (tracks_latency) {
        if (run.timed) latency_.record(clock_.now() - run.attempt_start);
      }
      breaker_.on_success(since_epoch(run.attempt_start));
      budget_.on_success(run.last_retry);
      return end(outcome, retry_verdict::succeeded);
    }

    const auto now = clock_.now();
    // A failed attempt's duration too: a timed-out one counts as its timeout, a slow one as
    // slow, so the tracker sees what the dependency does, not only its successes. Sampled as a
    // success is, though the clock is read here anyway: failures would be over-weighted else.
    if constexpr (tracks_latency) {
      if (run.timed) latency_.record(now - run.attempt_start);
    }
    if (verdict.fault) {
      breaker_.on_failure(since_epoch(now));
    } else {
      breaker_.on_success(since_epoch(now));
    }
    retry_decision decision = after_failure(run, verdict, now - run.start);
    if (decision.stop) {
      outcome.verdict_ = decision.verdict;
      return decision;
    }
    record.delay_after = decision.delay;
    record.delay_from_retry_after = decision.from_retry_after;
    observer_.on_delay(delay_event{redacted_key{outcome.key()}, run.attempt + 1, decision.delay,
                                   decision.from_retry_after});
    run.previous_delay = decision.delay;
    return decision;
  }

  /// The context the resolve hook is given after the wait that followed an ambiguous attempt.
  template <class Result>
  attempt_context resolve_context(const run_type& run, const retry_outcome<Result>& outcome) {
    return attempt_context{run.attempt + 1, outcome.key(), time_left(clock_.now() - run.start)};
  }

  /// Ends the operation with `verdict` (an asynchronous driver's cancellation, the resolve
  /// hook's yes); the observer hears of it in finish.
  template <class Result>
  static retry_decision end(retry_outcome<Result>& outcome, retry_verdict verdict) noexcept {
    outcome.verdict_ = verdict;
    return {.stop = true, .verdict = verdict};
  }

  /// How long the attempt that began at run.attempt_start took, for the observer's attempt
  /// event: the clock is read for it only when there is an observer.
  std::chrono::nanoseconds attempt_took(const run_type& run) {
    if constexpr (std::is_same_v<observer_type, no_observer>) {
      (void)run;
      return std::chrono::nanoseconds::zero();
    } else {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_.now() - run.attempt_start);
    }
  }

  /// The operation is over: the observer's finish event.
  template <class Result>
  void finish(const run_type& run, const retry_outcome<Result>& outcome) {
    if constexpr (!std::is_same_v<observer_type, no_observer>) {
      const std::chrono::nanoseconds total = clock_.now() - run.start;
      observer_.on_finish(
          finish_event{redacted_key{outcome.key()}, outcome.verdict_, outcome.attempts(), total});
    }
  }

  /// The attempt's value (made by `make`, whose exception passes through), in the outcome.
  template <class Result, class Make>
  static void set_value(retry_outcome<Result>& outcome, Make&& make) {
    if constexpr (std::is_void_v<Result>) {
      std::forward<Make>(make)();
      outcome.value_.emplace();
    } else {
      outcome.value_.emplace(std::forward<Make>(make)());
    }
  }
  /// The attempt's value, already made (a driver that co_awaited it), in the outcome.
  template <class Result, class... Value>
  static void emplace_value(retry_outcome<Result>& outcome, Value&&... value) {
    outcome.value_.emplace(std::forward<Value>(value)...);
  }
  /// The attempt's exception, in the outcome in place of a value.
  template <class Result>
  static void set_error(retry_outcome<Result>& outcome, const std::exception_ptr& error) noexcept {
    outcome.value_.reset();
    outcome.error_ = error;
  }
  /// The resolve hook's answer: true when it found the effect, whose value (for a Result that
  /// is not void) it then supplies, replacing the ambiguous attempt's error.
  template <class Result, class Answer>
  static bool take_resolution(retry_outcome<Result>& outcome, Answer&& answer) {
    if constexpr (std::is_void_v<Result>) {
      static_assert(std::is_convertible_v<Answer, bool>,
                    "resolve(attempt_context) of a call returning void must return bool: true "
                    "when the effect landed.");
      if (!static_cast<bool>(answer)) return false;
      outcome.value_.emplace();
    } else {
      static_assert(std::is_convertible_v<Answer, std::optional<Result>>,
                    "resolve(attempt_context) must return std::optional<Result>: the result "
                    "when the effect landed, std::nullopt when it did not.");
      std::optional<Result> found = std::forward<Answer>(answer);
      if (!found) return false;
      outcome.value_.emplace(std::move(*found));
    }
    outcome.error_ = nullptr;
    return true;
  }

  clock_type& clock() noexcept {
    return clock_;
  }
  budget_type& budget() noexcept {
    return budget_;
  }
  breaker_type& breaker() noexcept {
    return breaker_;
  }
  observer_type& observer() noexcept {
    return observer_;
  }
  latency_type& latency() noexcept {
    return latency_;
  }
  limiter_type& limiter() noexcept {
    return limiter_;
  }
  const attempt_timeouts& timeouts() const noexcept {
    return timeouts_;
  }
  const retry_limits& limits() const noexcept {
    return limits_;
  }

 private:
  std::chrono::nanoseconds time_left(std::chrono::nanoseconds elapsed) const noexcept {
    const auto left = limits_.deadline - elapsed;
    return left > std::chrono::nanoseconds::zero() ? left : std::chrono::nanoseconds::zero();
  }

  retry_decision after_failure(run_type& run, const classification& verdict,
                               std::chrono::nanoseconds elapsed) {
    if (verdict.kind == disposition::permanent) return stop(retry_verdict::permanent_failure);
    if (!run.may_repeat) return stop(retry_verdict::not_retried);
    if (run.attempt >= limits_.max_attempts) return stop(retry_verdict::attempts_exhausted);

    // The wait: the server's Retry-After when it sent a valid one, else the backoff.
    std::chrono::nanoseconds delay{};
    bool from_retry_after = false;
    if (!verdict.retry_after.empty()) {
      if (const auto asked = parse_retry_after(verdict.retry_after, clock_.wall_now())) {
        delay = *asked;
        from_retry_after = true;
      }
    }
    if (!from_retry_after) delay = backoff_.delay(run.attempt - 1, run.previous_delay, engine());
    if (delay < std::chrono::nanoseconds::zero()) delay = std::chrono::nanoseconds::zero();

    // A wait that ends at or past the deadline would leave the next attempt no time at all.
    if (delay >= time_left(elapsed)) return stop(retry_verdict::deadline_exceeded);

    // Asked last, so that a refusal for any other reason spends no token.
    const bool ambiguous = verdict.kind == disposition::ambiguous;
    const auto reason = ambiguous ? retry_reason::ambiguous : retry_reason::transient;
    if (!budget_.try_acquire_retry(reason)) return stop(retry_verdict::budget_exhausted);
    run.last_retry = reason;
    return {.delay = delay, .from_retry_after = from_retry_after, .resolve_first = ambiguous};
  }
  static retry_decision stop(retry_verdict verdict) noexcept {
    return {.stop = true, .verdict = verdict};
  }

  // Whether the attempt starting now is timed for the latency tracker: each one, unless the
  // tracker samples (latency_tracker::sample_every): then one in `every`, the gaps between
  // them drawn uniformly from 0 to 2 (every - 1) on this thread's engine, so that an attempt's
  // chance does not depend on anything it does and the draw is paid once per timed attempt.
  bool times_attempt() {
    if constexpr (requires(const latency_type& tracker) {
                    { tracker.sample_every() } -> std::convertible_to<std::uint32_t>;
                  }) {
      const std::uint32_t every = latency_.sample_every();
      if (every <= 1) return true;
      thread_engine<random_type>& local = this_thread_engine();
      if (local.untimed > 0) {
        --local.untimed;
        return false;
      }
      local.untimed = static_cast<std::uint32_t>(static_cast<std::uint64_t>((*local.engine)()) %
                                                 (2 * std::uint64_t{every} - 1));
      return true;
    } else {
      return true;
    }
  }

  // This thread's engine for this wrapper. Asked afresh at each use: an asynchronous operation
  // may go on on another thread after a wait.
  random_type& engine() {
    return *this_thread_engine().engine;
  }

  thread_engine<random_type>& this_thread_engine() {
    auto& local = thread_engines<random_type>;
    if (local.object != id_) {
      random_seed seed = seed_;
      std::uint64_t stream = streams_.fetch_add(1, std::memory_order_relaxed);
      for (auto& word : seed.words)
        word ^= splitmix64(stream);
      local.engine.emplace(seed);
      local.object = id_;
      local.untimed = 0;
    }
    return local;
  }

  [[no_unique_address]] clock_type clock_;
  [[no_unique_address]] backoff_type backoff_;
  [[no_unique_address]] budget_type budget_;
  [[no_unique_address]] breaker_type breaker_;
  [[no_unique_address]] classifier_type classifier_;
  [[no_unique_address]] observer_type observer_;
  [[no_unique_address]] key_generator_type key_generator_;
  [[no_unique_address]] latency_type latency_;
  attempt_timeouts timeouts_;
  [[no_unique_address]] limiter_type limiter_;
  std::chrono::nanoseconds limiter_wait_;
  random_seed seed_;
  const std::uint64_t id_ = next_object_id.fetch_add(1, std::memory_order_relaxed);
  std::atomic<std::uint64_t> streams_{0};
  retry_limits limits_;
};

}  // namespace detail
}  // namespace idem

#endif  // IDEM_CLIENT_DETAIL_RETRY_CORE_HPP
