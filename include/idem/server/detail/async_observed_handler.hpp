// A handler's run told to a server observer (idem/server/observer.hpp), for the asynchronous
// wrappers: async_idempotent and async_inbox.
//
// The handler's awaitable is awaited in one more coroutine frame that reads the clock around it,
// but only for an observer that watches: for no_server_observer the awaitable is handed on as it
// is, and the wrapper awaits the handler's own frame directly, as it did before observers.
#ifndef IDEM_SERVER_DETAIL_ASYNC_OBSERVED_HANDLER_HPP
#define IDEM_SERVER_DETAIL_ASYNC_OBSERVED_HANDLER_HPP

#include <chrono>
#include <type_traits>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/server/observer.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

/// `ran`, awaited in a frame that tells `observer` how long it took on `clock` and whether it
/// ended in an exception (which passes on). A frame destroyed before `ran` ended (its caller's
/// operation abandoned) reports a throw.
template <class Observer, class Clock, class Result, class Executor>
asio::awaitable<Result, Executor> timed_handler(Observer& observer, Clock& clock,
                                                asio::awaitable<Result, Executor> ran) {
  struct report {
    Observer& observer;
    Clock& clock;
    typename Clock::time_point start;
    bool threw = true;
    ~report() {
      observer.on_handler(handler_event{
          std::chrono::duration_cast<std::chrono::nanoseconds>(clock.now() - start), threw});
    }
  } reported{observer, clock, clock.now()};
  if constexpr (std::is_void_v<Result>) {
    co_await std::move(ran);
    reported.threw = false;
  } else {
    Result result = co_await std::move(ran);
    reported.threw = false;
    co_return result;
  }
}

/// The awaitable a wrapper awaits for a handler's run `ran`: timed_handler's for an observer
/// that watches, `ran` itself for no_server_observer.
template <class Observer, class Clock, class Result, class Executor>
asio::awaitable<Result, Executor> observed_handler(Observer& observer, Clock& clock,
                                                   asio::awaitable<Result, Executor> ran) {
  if constexpr (observes_server<Observer>) {
    return timed_handler(observer, clock, std::move(ran));
  } else {
    return ran;
  }
}

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_OBSERVED_HANDLER_HPP
