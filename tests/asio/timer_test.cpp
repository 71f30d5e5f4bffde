// idem::clock_timer: real waits on a steady_timer, manual ones completed by moving the clock.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include "asio/net.hpp"

#include <chrono>
#include <optional>

using namespace std::chrono_literals;

TEST_CASE("a wait on the manual clock completes when the clock reaches it, not before") {
  idem::asio::io_context io;
  idem::manual_clock clock;
  idem::clock_timer timer{io.get_executor(), clock};
  std::optional<idem::asio_error_code> result;
  timer.async_wait_for(100ms, [&](idem::asio_error_code error) { result = error; });
  io.poll();
  CHECK_FALSE(result);
  clock.advance(99ms);
  io.poll();
  CHECK_FALSE(result);
  clock.advance(1ms);
  CHECK_FALSE(result);  // posted, not run inside advance
  io.poll();
  REQUIRE(result);
  CHECK_FALSE(*result);
  CHECK(clock.sleeps() == 1);
  CHECK(clock.slept() == 100ms);
  CHECK(clock.waiting_wakes() == 0);
}

TEST_CASE("a wait until a time point is not counted as a sleep") {
  idem::asio::io_context io;
  idem::manual_clock clock;
  idem::clock_timer timer{io.get_executor(), clock};
  bool done = false;
  timer.async_wait_until(clock.now() + 5s, [&](idem::asio_error_code error) { done = !error; });
  CHECK(clock.advance_to_next_wake());
  io.poll();
  CHECK(done);
  CHECK(clock.elapsed() == 5s);
  CHECK(clock.sleeps() == 0);
}

TEST_CASE("cancelling a manual wait completes it with operation_aborted, once") {
  idem::asio::io_context io;
  idem::manual_clock clock;
  idem::clock_timer timer{io.get_executor(), clock};
  int calls = 0;
  idem::asio_error_code seen;
  timer.async_wait_for(1s, [&](idem::asio_error_code error) {
    ++calls;
    seen = error;
  });
  timer.cancel();
  clock.advance(2s);
  io.poll();
  CHECK(calls == 1);
  CHECK(seen == idem::asio::error::operation_aborted);
  CHECK(clock.waiting_wakes() == 0);
}

TEST_CASE("a cancellation slot ends a manual wait") {
  idem::asio::io_context io;
  idem::manual_clock clock;
  idem::clock_timer timer{io.get_executor(), clock};
  idem::asio::cancellation_signal signal;
  std::optional<idem::asio_error_code> seen;
  timer.async_wait_for(1s, idem::asio::bind_cancellation_slot(
                               signal.slot(), [&](idem::asio_error_code error) { seen = error; }));
  io.poll();
  signal.emit(idem::asio::cancellation_type::terminal);
  io.poll();
  REQUIRE(seen);
  CHECK(*seen == idem::asio::error::operation_aborted);
}

TEST_CASE("a manual wait keeps the event loop's work until it completes") {
  idem::asio::io_context io;
  idem::manual_clock clock;
  idem::clock_timer timer{io.get_executor(), clock};
  bool done = false;
  timer.async_wait_for(1s, [&](idem::asio_error_code) { done = true; });
  CHECK_FALSE(io.stopped());
  io.poll();
  CHECK_FALSE(io.stopped());  // poll returned with work outstanding
  clock.advance(1s);
  io.run();  // returns once the completion ran and no work is left
  CHECK(done);
}

TEST_CASE("with a real clock the wait is a steady_timer that really passes") {
  idem::asio::io_context io;
  idem::steady_clock clock;
  idem::clock_timer timer{io.get_executor(), clock};
  const auto start = std::chrono::steady_clock::now();
  bool done = false;
  timer.async_wait_for(20ms, [&](idem::asio_error_code error) { done = !error; });
  io.run();
  CHECK(done);
  CHECK(std::chrono::steady_clock::now() - start >= 20ms);
}
