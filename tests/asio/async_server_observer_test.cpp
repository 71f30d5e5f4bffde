// async_idempotent's server observer (idem/server/observer.hpp): one call event a call, with its
// verdict and its duration on the wrapper's clock.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
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
  std::shared_ptr<int> handlers = std::make_shared<int>(0);
  void on_call(const idem::server_call_event& e) const { calls->push_back(e); }
  void on_handler(const idem::handler_event&) const { ++*handlers; }
};

struct observed_policies : test_async::manual_policies {
  using server_observer = recording_observer;
};

}  // namespace

TEST_CASE("async_idempotent tells its server observer each call's verdict and duration") {
  asio::io_context io;
  idem::manual_clock clock;
  auto handler = [&clock](const idem::http_request& request) -> asio::awaitable<std::string> {
    clock.advance(4ms);
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

  REQUIRE(seen.calls->size() == 3);
  CHECK((*seen.calls)[0].verdict == idem::verdict::executed);
  CHECK((*seen.calls)[0].duration == 4ms);
  CHECK((*seen.calls)[1].verdict == idem::verdict::replayed);
  CHECK((*seen.calls)[2].verdict == idem::verdict::missing_key);
  for (const auto& e : *seen.calls)
    CHECK_FALSE(e.coalesced);
  // The asynchronous driver reports calls only.
  CHECK(*seen.handlers == 0);
}
