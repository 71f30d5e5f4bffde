// idem::async_retrying<Call, Policies>: retrying on an event loop. The waits are timers on the
// executor, never a sleeping thread.
//
//   idem::async_retrying charge{executor, [&](const idem::attempt_context& attempt)
//                                             -> asio::awaitable<response> {
//     co_return co_await http.async_post("/charges", body, attempt.key(), asio::use_awaitable);
//   }};
//   idem::retry_outcome<response> outcome = co_await charge.async_call(asio::use_awaitable);
//
// The rules are the blocking retrying's, from the same decider (detail::retry_core): one key per
// operation, classification, backoff, Retry-After, the attempt cap, the deadline, the budget, the
// breaker, the resolve hook, the observer. What this driver adds:
//
//   * The call is `(const attempt_context&, Args&...) -> asio::awaitable<R>` (the context may be
//     left out), or an Asio initiating function taking a completion token last, which is given
//     `asio::redirect_error(asio::use_awaitable, error)`: a completion with an error code is an
//     attempt that threw std::system_error of it. A resolve hook may return its answer or an
//     awaitable of it.
//   * `async_call(args..., token)` takes any completion token (use_awaitable, a callback,
//     use_future, deferred) and completes with (std::exception_ptr, retry_outcome<R>), as co_spawn
//     does: the exception is null unless something other than an attempt threw (an attempt's
//     exception is the outcome's error()). The arguments are copied into the operation, which
//     keeps them for every attempt. The operation runs on the handler's associated executor, else
//     the wrapper's.
//   * Cancellation: the handler's cancellation slot (terminal cancellation) ends the wait or the
//     attempt in flight, and the operation with the verdict `cancelled`; an attempt it cut short
//     is recorded as ambiguous. The key is never used for another operation.
//   * Attempt timeouts: an attempt still running after its timeout is cancelled and judged a
//     timeout (ambiguous: std::errc::timed_out), so it is resolved or retried under the same key.
//     With a latency tracker in the policies (Policies::latency) the timeout is the context's,
//     derived from the dependency's measured latency (attempt_timeouts); without one, the fixed
//     options::attempt_timeout, if set.
//   * Hedging (Policies::hedge = idem::hedging): when an attempt has run longer than the
//     latency tracker's p95 (or the start delay), a second goes out under the same key, taken
//     from the hedge budget; the first decisive answer (a success, or a failure repeating cannot
//     fix) wins and the other is cancelled. A transient failure of one lets the other run on;
//     the primary failing before the hedge went out ends the race (the retry rules apply).
//     Only the outermost layer hedges (nested layers make one attempt each).
//   * A rate limiter's permits (Policies::limiter) are waited for on a timer; a cancellation
//     during that wait ends the operation cancelled, with no attempt made.
//   * Nesting is per operation, not per thread (idem/client/detail/async_layer.hpp): an
//   async_retrying
//     started inside an attempt makes one attempt; an unrelated operation interleaved on the
//     same thread still retries.
//   * Under a clock with wakes (manual_clock) the waits are the clock's wakes: a test completes
//     them by moving the clock (idem/async/timer.hpp).
//
// The wrapper must outlive its operations. Like retrying, one wrapper serves many operations at
// once, from any thread.
#ifndef IDEM_CLIENT_ASYNC_RETRYING_HPP
#define IDEM_CLIENT_ASYNC_RETRYING_HPP

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/async/detail/recycled.hpp>
#include <idem/async/timer.hpp>
#include <idem/client/attempt.hpp>
#include <idem/client/detail/async_call.hpp>
#include <idem/client/detail/async_layer.hpp>
#include <idem/client/detail/retry_core.hpp>
#include <idem/client/retry_outcome.hpp>
#include <idem/core/key.hpp>
#include <idem/policies.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem {

namespace detail {

// A completion token's type as async_initiate wants it, from a forward_as_tuple element.
template <class Element>
using token_type = std::conditional_t<std::is_lvalue_reference_v<Element>, Element,
                                      std::remove_reference_t<Element>>;

/// co_spawn's completion handler for an async_retrying operation: hands the user's handler the
/// outcome out of its recycled block (idem/async/detail/recycled.hpp). It has the user's
/// handler's associated executor, cancellation slot and allocator (the associator below), so
/// co_spawn respects them as if it had been given that handler.
template <class Box, class Handler>
struct unboxing {
  Handler handler;
  void operator()(std::exception_ptr error, Box box) {
    if (box) {
      std::move(handler)(std::move(error), std::move(*box));
    } else {
      std::move(handler)(std::move(error), std::remove_cvref_t<decltype(*box)>{});
    }
  }
};

/// What async_call passes where async_with_key passes the key.
struct no_given_key {};

inline bool is_cancelled(const asio::cancellation_state& state) noexcept {
  return state.cancelled() != asio::cancellation_type::none;
}

}  // namespace detail

template <class Call, class Policies = default_policies>
class async_retrying {
  using core_type = detail::retry_core<Policies>;

 public:
  using executor_type = asio::any_io_executor;
  using clock_type = typename core_type::clock_type;
  using budget_type = typename core_type::budget_type;
  using breaker_type = typename core_type::breaker_type;
  using observer_type = typename core_type::observer_type;
  using hedge_type = typename Policies::hedge;

  static_assert(!detail::hedges<hedge_type> || Policies::safety != call_safety::unsafe,
                "idem::async_retrying: an unsafe call cannot be hedged. A hedge sends the request "
                "a second time while the first may be running: only keyed or naturally "
                "idempotent calls (Policies::safety) may be.");

  /// retry_options (idem/client/retry_options.hpp), the blocking retrying's, and:
  struct options : retry_options<Policies> {
    /// An attempt still running after this long is cancelled and judged a timeout (ambiguous).
    /// Zero: attempts are not timed (the deadline still bounds the waits).
    std::chrono::nanoseconds attempt_timeout{0};
    /// When to hedge, and the hedge budget (one per dependency, shared by copies).
    [[no_unique_address]] hedge_type hedge{};
  };

  async_retrying(executor_type executor, Call call)
      : async_retrying(std::move(executor), std::move(call), options{}) {}

  /// Throws std::invalid_argument for limits that can never work.
  async_retrying(executor_type executor, Call call, options parts)
      : executor_(std::move(executor)),
        call_(std::move(call)),
        attempt_timeout_(parts.attempt_timeout),
        hedge_(parts.hedge),
        core_(std::move(static_cast<retry_options<Policies>&>(parts)), "idem::async_retrying") {
    if (attempt_timeout_ < std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument("idem::async_retrying: attempt_timeout cannot be negative");
    }
    if constexpr (detail::hedges<hedge_type> && core_type::tracks_latency) {
      if (!core_.latency().tracks(hedge_.settings().quantile)) {
        throw std::invalid_argument(
            "idem::async_retrying: the latency tracker does not keep the hedging quantile (add "
            "it to latency_tracker::options::quantiles)");
      }
    }
  }

  async_retrying(const async_retrying&) = delete;
  async_retrying& operator=(const async_retrying&) = delete;

  /// Starts one operation: `args...` (copied into it) then the completion token, which gets
  /// (std::exception_ptr, retry_outcome<R>).
  template <class... ArgsAndToken>
  auto async_call(ArgsAndToken&&... args_and_token) {
    static_assert(sizeof...(ArgsAndToken) >= 1,
                  "idem::async_retrying::async_call takes the call's arguments and then a "
                  "completion token (asio::use_awaitable, a callback, asio::use_future, ...).");
    return initiate(detail::no_given_key{},
                    std::forward_as_tuple(std::forward<ArgsAndToken>(args_and_token)...),
                    std::make_index_sequence<sizeof...(ArgsAndToken) - 1>{});
  }

  /// The same, under a key that already exists (see retrying::with_key). Throws
  /// std::invalid_argument, before anything starts, unless `key` is 1 to 255 bytes of visible
  /// ASCII.
  template <class... ArgsAndToken>
  auto async_with_key(std::string_view key, ArgsAndToken&&... args_and_token) {
    static_assert(sizeof...(ArgsAndToken) >= 1,
                  "idem::async_retrying::async_with_key takes the key, the call's arguments and "
                  "then a completion token.");
    return initiate(key_buffer{key},
                    std::forward_as_tuple(std::forward<ArgsAndToken>(args_and_token)...),
                    std::make_index_sequence<sizeof...(ArgsAndToken) - 1>{});
  }

  executor_type get_executor() const noexcept { return executor_; }
  Call& call() noexcept { return call_; }
  clock_type& clock() noexcept { return core_.clock(); }
  budget_type& budget() noexcept { return core_.budget(); }
  breaker_type& breaker() noexcept { return core_.breaker(); }
  observer_type& observer() noexcept { return core_.observer(); }
  typename core_type::latency_type& latency() noexcept { return core_.latency(); }
  typename core_type::limiter_type& limiter() noexcept { return core_.limiter(); }
  const retry_limits& limits() const noexcept { return core_.limits(); }
  std::chrono::nanoseconds attempt_timeout() const noexcept { return attempt_timeout_; }
  hedge_type& hedge() noexcept { return hedge_; }

 private:
  template <class Result>
  using stored = std::conditional_t<std::is_void_v<Result>, detail::no_value, Result>;

  template <class Result>
  using outcome_box = detail::recycled<retry_outcome<Result>>;

  // Starts the operation: makes its outcome (and key), then its coroutine on the handler's
  // executor, wrapped in the next layer.
  struct starter {
    async_retrying* self;

    template <class Handler, class Given, class... Args>
    void operator()(Handler&& handler, const Given& given, Args&&... args) const {
      using result_type = detail::async_call_result_t<Call, std::decay_t<Args>...>;
      const asio::any_io_executor executor = where_to_run(handler, self->executor_);
      const detail::layer next = detail::next_layer(executor);
      auto outcome = outcome_box<result_type>::made_by(
          [&] { return self->core_.template make_outcome<result_type>(given_key(given)); });
      asio::co_spawn(next.executor,
                     self->template operation<result_type>(next.depth > 1, std::move(outcome),
                                                           std::forward<Args>(args)...),
                     detail::unboxing<outcome_box<result_type>, std::decay_t<Handler>>{
                         std::forward<Handler>(handler)});
    }
  };

  static const key_buffer* given_key(const key_buffer& given) noexcept { return &given; }
  static const key_buffer* given_key(detail::no_given_key) noexcept { return nullptr; }

  // The handler's associated executor, else the wrapper's: also where the associated one is
  // not an I/O executor (standalone Asio's use_future associates a promise executor).
  template <class Handler>
  static asio::any_io_executor where_to_run(const Handler& handler, const executor_type& fallback) {
    auto associated = asio::get_associated_executor(handler, fallback);
    if constexpr (std::is_convertible_v<decltype(associated), asio::any_io_executor>) {
      return associated;
    } else {
      return fallback;
    }
  }

  // `given` is a key_buffer, or no_given_key: nothing to store while a deferred operation (or
  // use_awaitable's own frame) holds the arguments until the start.
  template <class Given, class Tuple, std::size_t... I>
  auto initiate(Given given, Tuple all, std::index_sequence<I...>) {
    using result_type =
        detail::async_call_result_t<Call, std::decay_t<std::tuple_element_t<I, Tuple>>...>;
    static_assert(detail::async_form_of<Call, std::decay_t<std::tuple_element_t<I, Tuple>>...>() !=
                      detail::async_form::none,
                  "idem::async_retrying: the call must return an asio::awaitable when called with "
                  "(const idem::attempt_context&, args...) or (args...), or be an Asio initiating "
                  "function that takes a completion token after those arguments.");
    static_assert(core_type::template check_result<result_type>());
    using token = detail::token_type<std::tuple_element_t<sizeof...(I), Tuple>>;
    return asio::async_initiate<token, void(std::exception_ptr, retry_outcome<result_type>)>(
        starter{this}, std::get<sizeof...(I)>(all), std::move(given),
        std::decay_t<std::tuple_element_t<I, Tuple>>(
            std::forward<std::tuple_element_t<I, Tuple>>(std::get<I>(all)))...);
  }

  // One operation, from its first attempt to its last; the rules are core_'s.
  template <class Result, class... Args>
  asio::awaitable<outcome_box<Result>> operation(bool nested, outcome_box<Result> box,
                                                 Args... args) {
    retry_outcome<Result>& outcome = *box;
    auto run = core_.begin(nested);
    if constexpr (detail::hedges<hedge_type>) {
      if (!nested) hedge_.on_operation();
    }
    for (;;) {
      if constexpr (core_type::limits_rate) {
        const std::optional<retry_verdict> refused = co_await wait_for_permit(outcome, run);
        if (refused) {
          core_type::end(outcome, *refused);
          break;
        }
      }
      const std::optional<attempt_context> context = core_.start_attempt(run, outcome);
      if (!context) break;

      bool threw = false;
      bool timed_out = false;
      bool hedged = false;
      bool raced = false;  // the attempt ran hedged
      const std::chrono::nanoseconds timeout = timeout_of(*context);
      if constexpr (detail::hedges<hedge_type>) {
        if (!nested) {
          const attempt_end ended = co_await hedged_attempt(outcome, *context, timeout, args...);
          threw = ended.threw;
          timed_out = ended.timed_out;
          hedged = ended.hedged;
          raced = true;
        }
      }
      if (raced) {
        // done above
      } else if (timeout > std::chrono::nanoseconds::zero()) {
        timed_out = co_await timed_attempt(outcome, *context, timeout, threw, args...);
      } else {
        try {
          if constexpr (std::is_void_v<Result>) {
            co_await attempt(*context, args...);
            core_type::emplace_value(outcome);
          } else {
            core_type::emplace_value(outcome, co_await attempt(*context, args...));
          }
        } catch (...) {
          core_type::set_error(outcome, std::current_exception());
          threw = true;
        }
      }

      const classification verdict = timed_out ? timeout_verdict()
                                     : threw   ? classify_thrown(outcome.error())
                                               : core_.classify(outcome, false);
      if (verdict.kind != disposition::success &&
          detail::is_cancelled(co_await asio::this_coro::cancellation_state)) {
        core_.judge_cancelled(run, outcome, threw);
        break;
      }
      const detail::retry_decision decision = core_.judge(run, outcome, verdict, threw, hedged);
      if (decision.stop) break;

      const std::optional<retry_verdict> ended =
          co_await between_attempts(outcome, run, decision, args...);
      if (ended) {
        core_type::end(outcome, *ended);
        break;
      }
    }
    core_.finish(run, outcome);
    co_return std::move(box);
  }

  // After a failed attempt: the wait, then the resolve hook's question if the attempt was
  // ambiguous. Answers the verdict that ends the operation there (cancelled during the wait,
  // resolved), or nothing to go on. A coroutine of its own, so that the success path's frame
  // stays small enough for Asio to recycle.
  template <class Result, class... Args>
  asio::awaitable<std::optional<retry_verdict>> between_attempts(
      retry_outcome<Result>& outcome, const typename core_type::run_type& run,
      detail::retry_decision decision, Args&... args) {
    clock_timer<clock_type> timer{co_await asio::this_coro::executor, core_.clock()};
    asio_error_code waited;
    co_await timer.async_wait_for(decision.delay,
                                  asio::redirect_error(asio::use_awaitable, waited));
    if (waited) co_return retry_verdict::cancelled;
    if (!decision.resolve_first) co_return std::nullopt;
    // Awaited on a statement of its own: GCC 12 miscompiles a co_await inside a condition with
    // && or || (the program dies of SIGILL).
    const bool landed =
        co_await effect_landed(outcome, core_.resolve_context(run, outcome), args...);
    if (landed) co_return retry_verdict::resolved;
    co_return std::nullopt;
  }

  // The rate limiter's permit for the next attempt, waited for on a timer: the verdict that
  // ends the operation (rate_limited; cancelled during a wait), or nothing to go on.
  template <class Result>
  asio::awaitable<std::optional<retry_verdict>> wait_for_permit(retry_outcome<Result>& outcome,
                                                                typename core_type::run_type& run) {
    std::optional<clock_timer<clock_type>> timer;
    for (;;) {
      const auto step = core_.permit(run, outcome);
      if (step.go) co_return std::nullopt;
      if (step.refused) co_return retry_verdict::rate_limited;
      if (!timer) timer.emplace(co_await asio::this_coro::executor, core_.clock());
      asio_error_code waited;
      co_await timer->async_wait_for(step.wait, asio::redirect_error(asio::use_awaitable, waited));
      if (waited) co_return retry_verdict::cancelled;
    }
  }

  // The attempt as an awaitable of its result: the call's own, or for an initiating function
  // one that turns its error code into a std::system_error.
  template <class... Args>
  decltype(auto) attempt(const attempt_context& context, Args&... args) {
    constexpr detail::async_form form = detail::async_form_of<Call, Args...>();
    if constexpr (form == detail::async_form::awaits_with_context) {
      return std::invoke(call_, context, args...);
    } else if constexpr (form == detail::async_form::awaits) {
      return std::invoke(call_, args...);
    } else {
      return initiated(context, args...);
    }
  }

  template <class... Args>
  asio::awaitable<detail::async_call_result_t<Call, Args...>> initiated(
      const attempt_context& context, Args&... args) {
    constexpr bool with_context =
        detail::async_form_of<Call, Args...>() == detail::async_form::initiates_with_context;
    asio_error_code error;
    auto token = [&error] { return asio::redirect_error(asio::use_awaitable, error); };
    if constexpr (std::is_void_v<detail::async_call_result_t<Call, Args...>>) {
      if constexpr (with_context) {
        co_await std::invoke(call_, context, args..., token());
      } else {
        co_await std::invoke(call_, args..., token());
      }
      if (error) throw std::system_error(detail::portable_error(error));
    } else {
      std::optional<detail::async_call_result_t<Call, Args...>> result;
      if constexpr (with_context) {
        result.emplace(co_await std::invoke(call_, context, args..., token()));
      } else {
        result.emplace(co_await std::invoke(call_, args..., token()));
      }
      if (error) throw std::system_error(detail::portable_error(error));
      co_return std::move(*result);
    }
  }

  // How an attempt ended, for judge.
  struct attempt_end {
    bool threw = false;
    bool timed_out = false;
    bool hedged = false;  // a hedge went out for it
  };

  // What one run of an attempt gave (a timed attempt's, or one of a hedged attempt's two).
  template <class Result>
  struct attempt_run {
    std::optional<stored<Result>> value;
    std::exception_ptr error;
    bool timed_out = false;
  };

  // Thrown, inside a hedged attempt only, by a run whose answer does not end the race.
  struct race_goes_on {};

  // The hedge's delay: the tracker's quantile (hedging's, 0.95 by default), or the start delay
  // before it can say; never below the floor.
  std::chrono::nanoseconds hedge_delay() {
    const auto& config = hedge_.settings();
    std::chrono::nanoseconds delay = config.start_delay;
    if constexpr (core_type::tracks_latency) {
      if (const auto estimate = core_.latency().estimate(config.quantile)) delay = *estimate;
    }
    return std::max(delay, config.floor);
  }

  // Whether a run's answer ends the race: a success, or a failure that repeating cannot fix.
  template <class Result>
  bool decisive(const attempt_run<Result>& ran) const {
    if (ran.timed_out) return false;
    if (ran.value) {
      if constexpr (std::is_void_v<Result>) {
        return true;
      } else {
        return core_.classify_value(*ran.value).kind != disposition::transient &&
               core_.classify_value(*ran.value).kind != disposition::ambiguous;
      }
    }
    return classify_thrown(ran.error).kind == disposition::permanent;
  }

  // The attempt, and after hedge_delay() a second under the same key if the hedge budget has a
  // token: the first decisive answer wins and the other is cancelled (a parallel group waiting
  // for one success: a run whose answer does not end the race completes with race_goes_on).
  // The primary failing before the hedge went out ends the race at once; a hedge that has gone
  // out lets the other run on. The winner's value or exception goes into the outcome.
  template <class Result, class... Args>
  asio::awaitable<attempt_end> hedged_attempt(retry_outcome<Result>& outcome,
                                              const attempt_context& context,
                                              std::chrono::nanoseconds timeout, Args&... args) {
    const auto executor = co_await asio::this_coro::executor;
    std::array<attempt_run<Result>, 2> runs;
    // 0: the primary runs alone; 1: the hedge went out; 2: the primary ended first, alone.
    std::atomic<int> phase{0};
    const std::chrono::nanoseconds delay = hedge_delay();
    auto run = [&](int which) -> asio::awaitable<void> {
      if (which == 1) {
        clock_timer<clock_type> wait{co_await asio::this_coro::executor, core_.clock()};
        co_await wait.async_wait_for(delay, asio::use_awaitable);  // cancelled: throws
        int alone = 0;
        // No hedge once the primary has ended, or without a token (a token taken in the
        // moment the primary ends is lost: fewer hedges, never more).
        if (phase.load() != 0 || !hedge_.try_hedge() || !phase.compare_exchange_strong(alone, 1)) {
          throw race_goes_on{};
        }
      }
      attempt_run<Result>& ran = runs[static_cast<std::size_t>(which)];
      co_await run_into(ran, context, timeout, args...);
      // Cancelled (the other run won, or the caller gave up): this run's end decides nothing.
      if (detail::is_cancelled(co_await asio::this_coro::cancellation_state)) throw race_goes_on{};
      int alone = 0;
      // The primary that ended alone ends the race, whatever its answer; otherwise only a
      // decisive answer does, and the other run goes on.
      if (which == 0 && phase.compare_exchange_strong(alone, 2)) co_return;
      if (!decisive(ran)) throw race_goes_on{};
    };
    auto [order, primary_error, hedge_error] =
        co_await asio::experimental::make_parallel_group(
            asio::co_spawn(executor, run(0), asio::experimental::deferred),
            asio::co_spawn(executor, run(1), asio::experimental::deferred))
            .async_wait(asio::experimental::wait_for_one_success(), asio::use_awaitable);
    // The winner: the run that ended the race; with none (both failed and the race went on),
    // the one that ended last.
    std::size_t winner = 0;
    if (!primary_error) {
      winner = 0;
    } else if (!hedge_error) {
      winner = 1;
    } else if (phase.load() == 1) {
      winner = order[1];
    }
    attempt_run<Result>& won = runs[winner];
    attempt_end end;
    end.hedged = phase.load() == 1;
    end.timed_out = won.timed_out;
    if (won.value) {
      if constexpr (std::is_void_v<Result>) {
        core_type::emplace_value(outcome);
      } else {
        core_type::emplace_value(outcome, std::move(*won.value));
      }
    } else {
      end.threw = true;
      core_type::set_error(outcome, won.error ? won.error : primary_error);
    }
    co_return end;
  }

  // One run of the attempt, raced against `timeout` when it is set: its value, exception or
  // timeout into `ran`.
  template <class Result, class... Args>
  asio::awaitable<void> run_into(attempt_run<Result>& ran, const attempt_context& context,
                                 std::chrono::nanoseconds timeout, Args&... args) {
    if (timeout <= std::chrono::nanoseconds::zero()) {
      try {
        if constexpr (std::is_void_v<Result>) {
          co_await attempt(context, args...);
          ran.value.emplace();
        } else {
          ran.value.emplace(co_await attempt(context, args...));
        }
      } catch (...) {
        ran.error = std::current_exception();
      }
      co_return;
    }
    const auto executor = co_await asio::this_coro::executor;
    clock_timer<clock_type> deadline{executor, core_.clock()};
    auto [order, error, waited] =
        co_await asio::experimental::make_parallel_group(
            asio::co_spawn(
                executor,
                [&]() -> asio::awaitable<void> {
                  if constexpr (std::is_void_v<Result>) {
                    co_await attempt(context, args...);
                    ran.value.emplace();
                  } else {
                    ran.value.emplace(co_await attempt(context, args...));
                  }
                },
                asio::experimental::deferred),
            deadline.async_wait_until(core_.clock().now() + timeout, asio::experimental::deferred))
            .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
    if (ran.value) co_return;
    ran.timed_out = order[0] == 1 && !waited;
    ran.error = ran.timed_out ? std::make_exception_ptr(std::system_error(
                                    std::make_error_code(std::errc::timed_out),
                                    "idem::async_retrying: the attempt outlived its timeout"))
                              : error;
  }

  // How long an attempt may run before it is cancelled: the context's timeout, derived from
  // measured latency, with a latency tracker; else attempt_timeout (zero: not timed).
  std::chrono::nanoseconds timeout_of(const attempt_context& context) const noexcept {
    if constexpr (core_type::tracks_latency) {
      return context.timeout();
    } else {
      return attempt_timeout_;
    }
  }

  // The attempt raced against `timeout`: answers whether the timeout won (the attempt then
  // ended without a value, cancelled); the value or exception is in the outcome.
  template <class Result, class... Args>
  asio::awaitable<bool> timed_attempt(retry_outcome<Result>& outcome,
                                      const attempt_context& context,
                                      std::chrono::nanoseconds timeout, bool& threw,
                                      Args&... args) {
    attempt_run<Result> ran;
    co_await run_into(ran, context, timeout, args...);
    if (ran.value) {
      if constexpr (std::is_void_v<Result>) {
        core_type::emplace_value(outcome);
      } else {
        core_type::emplace_value(outcome, std::move(*ran.value));
      }
      co_return false;
    }
    threw = true;
    core_type::set_error(outcome, ran.error);
    co_return ran.timed_out;
  }

  // A timed-out attempt: it may have taken effect, and the dependency was slow.
  static classification timeout_verdict() noexcept {
    return {disposition::ambiguous, static_cast<int>(std::errc::timed_out), true, {}};
  }

  // An attempt's exception, judged by the classifier. What Asio operations throw (Boost's
  // system_error under Boost.Asio; under standalone Asio a std::system_error in Asio's own
  // category) is judged as the std::system_error of the portable code, which the classifiers
  // know. The outcome keeps the exception as it was thrown.
  classification classify_thrown(const std::exception_ptr& error) const {
    try {
      std::rethrow_exception(error);
#if defined(IDEM_ASIO_STANDALONE)
    } catch (const std::system_error& thrown) {
      if (thrown.code().category() == asio::system_category()) {
        return judged_as(detail::portable_error(thrown.code()), thrown.what());
      }
#else
    } catch (const boost::system::system_error& thrown) {
      return judged_as(detail::portable_error(thrown.code()), thrown.what());
#endif
    } catch (...) {
    }
    return core_.classify_exception(error);
  }
  classification judged_as(std::error_code code, const char* what) const {
    return core_.classify_exception(std::make_exception_ptr(std::system_error(code, what)));
  }

  // Asks the resolve hook, if the call has one, whether the ambiguous attempt took effect. The
  // hook may answer at once or with an awaitable.
  template <class Result, class... Args>
  asio::awaitable<bool> effect_landed(retry_outcome<Result>& outcome,
                                      const attempt_context& context, Args&... args) {
    if constexpr (detail::has_resolve_hook<Call, Args...>) {
      using answer = decltype(detail::ask_resolve_hook(call_, context, args...));
      if constexpr (detail::an_awaitable<answer>) {
        co_return core_type::take_resolution(
            outcome, co_await detail::ask_resolve_hook(call_, context, args...));
      } else {
        co_return core_type::take_resolution(outcome,
                                             detail::ask_resolve_hook(call_, context, args...));
      }
    } else {
      co_return false;
    }
  }

  executor_type executor_;
  Call call_;
  std::chrono::nanoseconds attempt_timeout_;
  [[no_unique_address]] hedge_type hedge_;
  core_type core_;
};

template <class Executor, class Call>
async_retrying(Executor, Call) -> async_retrying<Call, default_policies>;

}  // namespace idem

// unboxing's associated executor, cancellation slot and allocator are its handler's.
#if defined(IDEM_ASIO_STANDALONE)
namespace asio {
#else
namespace boost::asio {
#endif
template <template <class, class> class Associator, class Box, class Handler, class Default>
struct associator<Associator, idem::detail::unboxing<Box, Handler>, Default> {
  using type = typename Associator<Handler, Default>::type;
  static type get(const idem::detail::unboxing<Box, Handler>& unboxing) noexcept {
    return Associator<Handler, Default>::get(unboxing.handler);
  }
  static type get(const idem::detail::unboxing<Box, Handler>& unboxing,
                  const Default& fallback) noexcept {
    return Associator<Handler, Default>::get(unboxing.handler, fallback);
  }
};
#if defined(IDEM_ASIO_STANDALONE)
}  // namespace asio
#else
}  // namespace boost::asio
#endif

IDEM_ASIO_CODE_END

#endif  // IDEM_CLIENT_ASYNC_RETRYING_HPP
