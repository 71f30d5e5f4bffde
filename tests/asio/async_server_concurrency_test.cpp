// async_idempotent under threads: many coroutines on an io_context run by two threads, racing
// for one key. Tagged [concurrency], so the ThreadSanitizer build runs them.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include <atomic>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "asio/net.hpp"
#include "asio/server_support.hpp"

namespace {

namespace asio = idem::asio;
using outcome = idem::idempotent_outcome<idem::http_response>;
using idem::verdict;

}  // namespace

TEST_CASE("64 coroutines on two threads racing one key have one effect and the rest wait or replay",
          "[concurrency]") {
  constexpr int racers = 64;
  asio::io_context io{2};
  idem::manual_clock clock;
  std::atomic<int> effects{0};
  auto handler = [&effects](
                     idem::async_handler_context& ctx,
                     const idem::http_request& request) -> asio::awaitable<idem::http_response> {
    const int charge = co_await ctx.async_step("charge", [&]() -> asio::awaitable<int> {
      const int made = effects.fetch_add(1) + 1;
      co_await asio::post(asio::use_awaitable);  // the provider answers later
      co_return made;
    });
    co_await asio::post(asio::use_awaitable);
    co_return idem::http_response{201, {}, "charge " + std::to_string(charge) + " " + request.body};
  };
  using guard = idem::async_idempotent<decltype(handler), test_async::manual_policies>;
  guard::options parts;
  parts.clock = clock;
  guard payments{io.get_executor(), handler, parts};
  const idem::http_request request = test_async::charge("the-one-key");

  std::vector<std::optional<outcome>> answers(racers);
  std::vector<std::exception_ptr> errors(racers);
  for (int i = 0; i < racers; ++i) {
    // Each caller on a strand of its own, as a connection's coroutine would be.
    asio::co_spawn(
        asio::make_strand(io),
        [&, i]() -> asio::awaitable<void> {
          answers[i] = co_await payments.async_call("tenant", request, asio::use_awaitable);
        },
        [&, i](std::exception_ptr error) { errors[i] = error; });
  }
  std::thread second([&] { io.run(); });
  io.run();
  second.join();

  int executed = 0;
  int replayed = 0;
  int conflicts = 0;
  std::optional<idem::http_response> the_response;
  for (int i = 0; i < racers; ++i) {
    INFO("caller " << i);
    REQUIRE_FALSE(errors[i]);
    REQUIRE(answers[i]);
    if (answers[i]->verdict() == verdict::executed) {
      ++executed;
      the_response = answers[i]->value();
    }
  }
  REQUIRE(the_response);
  for (const auto& answer : answers) {
    switch (answer->verdict()) {
      case verdict::executed:
        break;
      case verdict::replayed:
        ++replayed;
        CHECK(answer->value() == *the_response);
        break;
      case verdict::in_progress:
        ++conflicts;
        CHECK(answer->http_status() == 409);
        break;
      default:
        FAIL("unexpected verdict " << idem::to_string(answer->verdict()));
    }
  }
  CHECK(executed == 1);
  CHECK(replayed + conflicts == racers - 1);
  CHECK(effects == 1);
  CHECK(the_response->body == "charge 1 {\"amount\":100}");
  CHECK(clock.waiting_wakes() == 0);
}
