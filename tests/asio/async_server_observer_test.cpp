// async_idempotent's server observer (idem/server/observer.hpp): one call event a call, with its
// verdict and its duration on the wrapper's clock; one handler event a run of the handler; and a
// duplicate that waited for the first call's response is told apart as coalesced.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "asio/event_loop.hpp"
#include "asio/server_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace asio = idem::asio;

// Keeps the events; copies share the lists.
struct recording_observer {
  std::shared_ptr<std::vector<idem::server_call_event>> calls =
      std::make_shared<std::vector<idem::server_call_event>>();
  std::shared_ptr<std::vector<idem::handler_event>> handlers =
      std::make_shared<std::vector<idem::handler_event>>();
  void on_call(const idem::server_call_event& e) const { calls->push_back(e); }
  void on_handler(const idem::handler_event& e) const { handlers->push_back(e); }
};

struct observed_policies : test_async::manual_policies {
  using server_observer = recording_observer;
};

}  // namespace

TEST_CASE("async_idempotent tells its server observer each call's verdict and duration") {
  asio::io_context io;
  idem::manual_clock clock;
  bool decline = false;
  auto handler = [&clock,
                  &decline](const idem::http_request& request) -> asio::awaitable<std::string> {
    clock.advance(4ms);
    if (decline) throw std::runtime_error("declined");
    co_return "echo " + request.body;
  };
  using guard_type = idem::async_idempotent<decltype(handler), observed_policies>;
  recording_observer seen;
  guard_type::options parts;
  parts.clock = clock;
  parts.server_observer = seen;
  guard_type guarded{io.get_executor(), handler, parts};
  const idem::http_request request{"POST", "/charges", {}, "{\"amount\":100}"};

  auto call = [&](std::optional<std::string_view> key) {
    test_async::completion<idem::idempotent_outcome<std::string>> done;
    asio::co_spawn(io, guarded.async_call("tenant", key, request, asio::use_awaitable),
                   done.handler());
    test_async::run_until(io, clock, [&] { return done.done; });
    return done.take();
  };
  CHECK(call("k-1").verdict() == idem::verdict::executed);
  CHECK(call("k-1").verdict() == idem::verdict::replayed);
  CHECK(call(std::nullopt).verdict() == idem::verdict::missing_key);
  decline = true;
  CHECK_THROWS_WITH(call("k-2"), "declined");

  REQUIRE(seen.calls->size() == 3);
  CHECK((*seen.calls)[0].verdict == idem::verdict::executed);
  CHECK((*seen.calls)[0].duration == 4ms);
  CHECK((*seen.calls)[1].verdict == idem::verdict::replayed);
  CHECK((*seen.calls)[2].verdict == idem::verdict::missing_key);
  for (const auto& e : *seen.calls)
    CHECK_FALSE(e.coalesced);
  // The handler ran twice: once to an answer, once to a throw (whose call is not reported: the
  // exception passes through).
  REQUIRE(seen.handlers->size() == 2);
  CHECK((*seen.handlers)[0].duration == 4ms);
  CHECK_FALSE((*seen.handlers)[0].threw);
  CHECK((*seen.handlers)[1].duration == 4ms);
  CHECK((*seen.handlers)[1].threw);
}

TEST_CASE("async_idempotent tells a duplicate that waited for the response apart as coalesced") {
  asio::io_context io;
  idem::manual_clock clock;
  int runs = 0;
  auto handler = [&](const idem::http_request&) -> asio::awaitable<std::string> {
    ++runs;
    co_await test_async::downstream(clock, 50ms);
    co_return "done";
  };
  using guard_type = idem::async_idempotent<decltype(handler), observed_policies>;
  recording_observer seen;
  guard_type::options parts;
  parts.clock = clock;
  parts.coalesce = 10s;
  parts.server_observer = seen;
  guard_type guarded{io.get_executor(), handler, parts};
  const idem::http_request request{"POST", "/charges", {}, "{\"amount\":100}"};

  test_async::completion<idem::idempotent_outcome<std::string>> first, duplicate, later;
  asio::co_spawn(io, guarded.async_call("tenant", "k", request, asio::use_awaitable),
                 first.handler());
  io.poll();
  REQUIRE(runs == 1);  // the first holds the claim and waits downstream
  asio::co_spawn(io, guarded.async_call("tenant", "k", request, asio::use_awaitable),
                 duplicate.handler());
  test_async::run_until(io, clock, [&] { return first.done && duplicate.done; });
  CHECK(first.take().verdict() == idem::verdict::executed);
  CHECK(duplicate.take().verdict() == idem::verdict::replayed);
  asio::co_spawn(io, guarded.async_call("tenant", "k", request, asio::use_awaitable),
                 later.handler());
  test_async::run_until(io, clock, [&] { return later.done; });
  CHECK(later.take().verdict() == idem::verdict::replayed);

  CHECK(runs == 1);
  REQUIRE(seen.calls->size() == 3);
  int coalesced = 0;
  for (const auto& e : *seen.calls)
    coalesced += e.coalesced ? 1 : 0;
  CHECK(coalesced == 1);  // the duplicate that waited; not the later replay
  CHECK(seen.handlers->size() == 1);
}

TEST_CASE("async_inbox tells its server observer each delivery and each run") {
  asio::io_context io;
  idem::manual_clock clock;
  recording_observer seen;
  idem::async_inbox<observed_policies>::options parts;
  parts.clock = clock;
  parts.server_observer = seen;
  idem::async_inbox<observed_policies> consumed{io.get_executor(), parts};
  int shipped = 0;
  auto ship = [&]() -> asio::awaitable<void> {
    co_await test_async::downstream(clock, 3ms);
    ++shipped;
  };
  auto deliver = [&](std::string_view id) {
    test_async::completion<idem::idempotent_outcome<std::monostate>> done;
    consumed.async_deduplicate("orders", id, ship, done.handler());
    test_async::run_until(io, clock, [&] { return done.done; });
    return done.take();
  };
  CHECK(deliver("event-1").verdict() == idem::verdict::executed);
  CHECK(deliver("event-1").verdict() == idem::verdict::replayed);
  CHECK(deliver("").verdict() == idem::verdict::invalid_key);

  CHECK(shipped == 1);
  REQUIRE(seen.calls->size() == 3);
  CHECK((*seen.calls)[0].verdict == idem::verdict::executed);
  CHECK((*seen.calls)[0].duration == 3ms);
  CHECK((*seen.calls)[1].verdict == idem::verdict::replayed);
  CHECK((*seen.calls)[2].verdict == idem::verdict::invalid_key);
  REQUIRE(seen.handlers->size() == 1);
  CHECK((*seen.handlers)[0].duration == 3ms);
  CHECK_FALSE((*seen.handlers)[0].threw);
}
