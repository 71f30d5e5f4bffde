// idem::async_inbox: consumers that are coroutines act once per event. The rows shared with the
// blocking inbox run in async_conformance_test.cpp; here, what is the asynchronous driver's.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include <chrono>
#include <stdexcept>
#include <string>
#include <variant>

#include "asio/event_loop.hpp"
#include "asio/net.hpp"
#include "asio/server_support.hpp"

namespace async_inbox_test {

namespace {

using namespace std::chrono_literals;
namespace asio = idem::asio;
using idem::verdict;
using test_async::completion;
using test_async::run_until;

using inbox = idem::async_inbox<test_async::manual_policies>;

inbox::options on(const idem::manual_clock& clock) {
  inbox::options parts;
  parts.clock = clock;
  return parts;
}

template <class R, class F>
idem::idempotent_outcome<R> deliver(asio::io_context& io, idem::manual_clock& clock,
                                    inbox& consumed, std::string_view event_id, F fn) {
  completion<idem::idempotent_outcome<R>> call;
  consumed.async_deduplicate("orders", event_id, std::move(fn), call.handler());
  run_until(io, clock, [&] { return call.done; });
  return call.take();
}

}  // namespace

TEST_CASE("an async consumer runs each event once and later deliveries replay its result") {
  asio::io_context io;
  idem::manual_clock clock;
  inbox consumed{io.get_executor(), on(clock)};
  int shipped = 0;
  auto ship = [&](idem::async_handler_context& ctx) -> asio::awaitable<int> {
    co_return co_await ctx.async_step("ship", [&]() -> asio::awaitable<int> {
      co_await test_async::downstream(clock, 5s);
      co_return ++shipped;
    });
  };
  for (int delivery = 0; delivery < 3; ++delivery) {
    const auto outcome = deliver<int>(io, clock, consumed, "evt-1", ship);
    CHECK(outcome.verdict() == (delivery == 0 ? verdict::executed : verdict::replayed));
    CHECK(outcome.value() == 1);
  }
  auto note = [&]() -> asio::awaitable<void> {
    ++shipped;
    co_return;
  };
  CHECK(deliver<std::monostate>(io, clock, consumed, "evt-2", note).verdict() == verdict::executed);
  CHECK(deliver<std::monostate>(io, clock, consumed, "evt-2", note).verdict() == verdict::replayed);
  CHECK(deliver<std::monostate>(io, clock, consumed, "", note).verdict() == verdict::invalid_key);
  CHECK(shipped == 2);
}

TEST_CASE("an async consumer that throws releases the event, and the redelivery runs again") {
  asio::io_context io;
  idem::manual_clock clock;
  inbox consumed{io.get_executor(), on(clock)};
  int attempts = 0;
  auto flaky = [&]() -> asio::awaitable<std::string> {
    if (++attempts == 1) throw std::runtime_error("broker hiccup");
    co_return "done";
  };
  CHECK_THROWS_WITH(deliver<std::string>(io, clock, consumed, "evt-9", flaky), "broker hiccup");
  const auto redelivered = deliver<std::string>(io, clock, consumed, "evt-9", flaky);
  CHECK(redelivered.verdict() == verdict::executed);
  CHECK(redelivered.value() == "done");
  CHECK(attempts == 2);
}

}  // namespace async_inbox_test
