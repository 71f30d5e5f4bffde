// What starts one asynchronous call of a server face (async_idempotent, async_inbox), before the
// engine (async_engine.hpp) runs it: which completion tokens run it in the caller's coroutine,
// which executor runs it otherwise, the cancellation a spawned call hears, the outcome of a
// cancelled call, and call_start, what a call knows before its first suspension.
#ifndef IDEM_SERVER_DETAIL_ASYNC_OPERATION_HPP
#define IDEM_SERVER_DETAIL_ASYNC_OPERATION_HPP

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include <idem/async/asio.hpp>
#include <idem/core/fingerprint/digest.hpp>
#include <idem/server/detail/held_claim.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/outcome.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

/// Whether a completion token is use_awaitable (on any_io_executor): the call is then the
/// caller's awaitable itself, run in the caller's coroutine, as co_await of a sub-coroutine is,
/// with no co_spawn. The completion is the same: the outcome, or the handler's exception thrown.
/// The call then shares the caller's cancellation state, so it hears what the caller's filter
/// lets through (terminal cancellation, by default).
template <class Token>
inline constexpr bool awaits_in_caller =
    std::is_same_v<std::decay_t<Token>, asio::use_awaitable_t<asio::any_io_executor>>;

/// A call on a coroutine of its own (co_spawn): it hears every cancellation type, where
/// co_spawn's coroutines hear only terminal ones.
template <class T>
asio::awaitable<T> hearing_every_cancellation(asio::awaitable<T> call) {
  co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
  co_return co_await std::move(call);
}

// The executors a call may run on: an event loop's, any_io_executor (use_awaitable's), and
// strands of them.
template <class Executor>
inline constexpr bool event_loop_executor =
    std::is_same_v<Executor, asio::any_io_executor> ||
    std::is_same_v<Executor, asio::io_context::executor_type>;
template <class Executor>
inline constexpr bool event_loop_executor<asio::strand<Executor>> = event_loop_executor<Executor>;

/// Where one call runs: the completion handler's associated executor when it is an event loop's
/// (with use_awaitable, the calling coroutine's, often a strand), else `fallback`, the
/// wrapper's: a plain callback names the system executor, which would run the call on a thread
/// of its own pool, and use_future's executor only completes a promise.
template <class Handler>
asio::any_io_executor operation_executor(const Handler& handler,
                                         const asio::any_io_executor& fallback) {
  auto associated = asio::get_associated_executor(handler, fallback);
  if constexpr (event_loop_executor<decltype(associated)>) {
    return associated;
  } else {
    return fallback;
  }
}

template <class Response>
idempotent_outcome<Response> cancelled_outcome(std::string_view when) {
  return idempotent_outcome<Response>{verdict::cancelled,
                                      "the call was cancelled " + std::string(when)};
}

/// What a call knows before its first suspension, made by plain functions so that a
/// coroutine's frame keeps only this: Asio recycles frames of up to 1020 bytes, and a larger one
/// costs a malloc and a free per call.
template <class Response>
struct call_start {
  // Each member made as its own initializer says, where a defaulted constructor let GCC 12 clear
  // the whole object first (256 bytes with `rep stos`, on every call).
  call_start() noexcept {}

  std::optional<idempotent_outcome<Response>> answer;  // the call is answered
  // Else the claim held, made at once; or a replay's stored response, whose outcome is made by
  // the call's co_return where the caller reads it (replay()), not made here and moved there.
  // Never both: they share their bytes.
  std::variant<std::monostate, held_claim, Response> found;
  digest print{};  // the request's fingerprint

  held_claim& claim() noexcept { return *std::get_if<1>(&found); }
  bool replays() const noexcept { return found.index() == 2; }

  /// co_return started.replay(): the replayed outcome, made from the response in place.
  struct replayed_answer {
    Response* response;
    operator idempotent_outcome<Response>() const {
      return idempotent_outcome<Response>::replayed(std::move(*response));
    }
  };
  replayed_answer replay() noexcept { return {std::get_if<2>(&found)}; }
  // A resumable wrapper's kept request (engine::keep_request), or null: behind a pointer, so a
  // call that keeps nothing adds 8 bytes to its frame, not two strings, and the view into them
  // (kept_bytes::stored) stays valid however the call_start moves.
  std::unique_ptr<kept_bytes> kept;
};

/// What a handler run under a claim left: its answer or its exception.
template <class Response>
struct handler_run {
  std::optional<Response> response;
  std::exception_ptr thrown;
  bool returned = false;   // the handler's awaitable ended; its coroutine may still unwind
  bool finished = false;   // its coroutine has unwound
  bool never_ran = false;  // the caller cancelled before the handler started
};

inline bool cancelled(const asio::cancellation_state& state) noexcept {
  return state.cancelled() != asio::cancellation_type::none;
}

inline bool is_lease_lost(const std::exception_ptr& thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const lease_lost&) {
    return true;
  } catch (...) {
    return false;
  }
}

/// What a handler cancelled before it ran is settled as: Asio's operation_aborted.
inline std::exception_ptr aborted() {
  return std::make_exception_ptr(asio_system_error(asio::error::operation_aborted));
}

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_OPERATION_HPP
