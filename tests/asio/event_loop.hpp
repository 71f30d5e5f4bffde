// The server tests' event loop: runs an io_context until a call completes, without sleeping.
// Whatever is ready runs first; when nothing is, a manual clock jumps to its next wake (a
// coalescing pause, a heartbeat, a handler's downstream timer). Work handed to another thread
// (a blocking store's calls on a thread pool) is waited for in real time before the clock moves.
#ifndef IDEM_TESTS_ASIO_EVENT_LOOP_HPP
#define IDEM_TESTS_ASIO_EVENT_LOOP_HPP

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <idem/asio.hpp>

#include "asio/net.hpp"

namespace test_async {

namespace asio = idem::asio;

/// Runs `io` until `done()`. `offloads`: some of the work runs on other threads (a store
/// executor), so an idle loop first waits a little for it before moving a manual clock.
template <class Clock>
void run_until(asio::io_context& io, Clock& clock, const std::function<bool()>& done,
               bool offloads = false) {
  using namespace std::chrono_literals;
  while (!done()) {
    io.restart();
    if (io.poll() > 0) continue;
    if (done()) break;
    if constexpr (std::is_same_v<Clock, idem::manual_clock>) {
      if (offloads && io.run_one_for(5ms) > 0) continue;
      if (clock.advance_to_next_wake()) continue;
    }
    io.restart();
    if (io.run_one_for(10s) == 0 && !done()) {
      throw std::logic_error("test event loop: nothing left to run, and the call never completed");
    }
  }
}

/// What an asynchronous call completed with: (exception_ptr, Outcome).
template <class Outcome>
struct completion {
  std::exception_ptr error;
  std::optional<Outcome> outcome;
  bool done = false;

  auto handler() {
    return [this](std::exception_ptr thrown, Outcome value) {
      error = std::move(thrown);
      outcome.emplace(std::move(value));
      done = true;
    };
  }
  /// The outcome, or the exception the call completed with, thrown.
  Outcome take() {
    if (error) std::rethrow_exception(error);
    return std::move(*outcome);
  }
};

}  // namespace test_async

#endif  // IDEM_TESTS_ASIO_EVENT_LOOP_HPP
