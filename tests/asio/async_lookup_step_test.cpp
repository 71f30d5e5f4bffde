// Lookup before retry in an asynchronous handler: async_step(name, fn, lookup) follows the rules
// of the blocking step(name, fn, lookup) (tests/unit/server/lookup_step_test.cpp): never asked on
// a first attempt; after a takeover asked before fn may run again; landed records the found
// result, not_landed runs fn, unknown or a throw fails the step with effect_unknown without
// running fn, and the claim is kept. The lookup answers at once or is awaited.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "asio/event_loop.hpp"
#include "asio/server_support.hpp"

namespace {

using namespace std::chrono_literals;
using test_async::charge;
using test_async::completion;
using test_async::downstream;
using test_async::run_until;
namespace asio = idem::asio;
using outcome = idem::idempotent_outcome<idem::http_response>;
using idem::verdict;
using answer = idem::lookup_answer<std::string>;

// Runs `work` on an event loop of its own to its end (nothing in it waits on a clock).
template <class T>
T run(asio::awaitable<T> work) {
  asio::io_context io;
  std::optional<T> result;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(work), [&](std::exception_ptr thrown, T value) {
    error = thrown;
    if (!thrown) result.emplace(std::move(value));
  });
  io.run();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

// Where a context's recovery points go in these tests: the bytes last written.
struct capture final : idem::detail::async_recovery_writer {
  std::string* into = nullptr;
  bool write(std::string_view bytes) override {
    *into = std::string(bytes);
    return true;
  }
  asio::awaitable<bool> async_write(std::string_view bytes) override { co_return write(bytes); }
  bool lost() const noexcept override { return false; }
};

asio::awaitable<std::string> transfer_made(std::vector<std::string>& order) {
  order.push_back("call");
  co_return "tr_2";
}

}  // namespace

TEST_CASE("an async lookup step is never asked on a first attempt", "[lookup]") {
  idem::async_handler_context ctx{"s", "k"};
  int lookups = 0;
  const std::string id = run(ctx.async_step(
      "transfer", []() -> asio::awaitable<std::string> { co_return "tr_1"; },
      [&](std::string_view) {
        ++lookups;
        return answer::not_landed();
      }));
  CHECK(id == "tr_1");
  CHECK(lookups == 0);
  CHECK(ctx.steps_recorded() == 1);
  CHECK_FALSE(ctx.in_doubt());
}

TEST_CASE("after a takeover a started async step asks its lookup before it may call again",
          "[lookup]") {
  // The recovery bytes of an attempt that started "transfer" and died before recording it.
  std::string recovery;
  capture writer;
  writer.into = &recovery;
  idem::async_handler_context dying{"s", "k", 1, false, {}, &writer};
  CHECK_THROWS_WITH(run(dying.async_step(
                        "transfer",
                        []() -> asio::awaitable<std::string> {
                          throw std::runtime_error("answer lost");
                          co_return "";
                        },
                        [](std::string_view) { return answer::unknown(""); })),
                    "answer lost");
  CHECK(dying.in_doubt());
  REQUIRE(idem::detail::find_started(recovery, "transfer"));

  std::vector<std::string> order;
  const auto call = [&] { return transfer_made(order); };
  const std::string reference(idem::downstream_key("s", "k", "transfer").view());

  SECTION("landed: the found result is recorded and the function is not called") {
    idem::async_handler_context resumed{"s", "k", 2, true, recovery, &writer};
    const std::string id = run(resumed.async_step("transfer", call, [&](std::string_view asked) {
      order.push_back("lookup");
      CHECK(asked == reference);
      return answer::landed("tr_1");
    }));
    CHECK(id == "tr_1");
    CHECK(order == std::vector<std::string>{"lookup"});
    CHECK(resumed.steps_recorded() == 1);
    std::string_view value;
    CHECK(idem::detail::find_step(recovery, "transfer", value));
    CHECK(value == idem::encode(std::string("tr_1")));
  }
  SECTION("landed, answered by an awaited lookup") {
    idem::async_handler_context resumed{"s", "k", 2, true, recovery, &writer};
    const std::string id = run(resumed.async_step(
        "transfer", call, [&](std::string_view asked) -> asio::awaitable<answer> {
          order.push_back("lookup");
          CHECK(asked == reference);
          co_return answer::landed("tr_1");
        }));
    CHECK(id == "tr_1");
    CHECK(order == std::vector<std::string>{"lookup"});
  }
  SECTION("not_landed: the function is called, after the lookup") {
    idem::async_handler_context resumed{"s", "k", 2, true, recovery, &writer};
    const std::string id = run(resumed.async_step("transfer", call, [&](std::string_view) {
      order.push_back("lookup");
      return answer::not_landed();
    }));
    CHECK(id == "tr_2");
    CHECK(order == std::vector<std::string>{"lookup", "call"});
    CHECK_FALSE(resumed.in_doubt());
  }
  SECTION("unknown, or a lookup that throws: effect_unknown, nothing called, claim in doubt") {
    for (bool throws : {false, true}) {
      for (bool awaited : {false, true}) {
        idem::async_handler_context resumed{"s", "k", 2, true, recovery, &writer};
        auto lookup = [&](std::string_view) {
          order.push_back("lookup");
          if (throws) throw std::runtime_error("search down");
          return answer::unknown("pending");
        };
        auto awaited_lookup = [&](std::string_view asked) -> asio::awaitable<answer> {
          co_return lookup(asked);
        };
        try {
          if (awaited) {
            (void)run(resumed.async_step("transfer", call, awaited_lookup));
          } else {
            (void)run(resumed.async_step("transfer", call, lookup));
          }
          FAIL("the step went on without knowing");
        } catch (const idem::effect_unknown& error) {
          CHECK(error.step() == "transfer");
          CHECK_THAT(std::string(error.what()),
                     Catch::Matchers::Contains(throws ? "search down" : "pending"));
        }
        CHECK(resumed.in_doubt());
      }
    }
    CHECK(order == std::vector<std::string>(4, "lookup"));
  }
}

TEST_CASE("a void async lookup step that landed is recorded without calling", "[lookup]") {
  std::string recovery;
  capture writer;
  writer.into = &recovery;
  idem::async_handler_context resumed{"s", "k", 2, true, {}, &writer};
  int calls = 0;
  run([&]() -> asio::awaitable<int> {
    co_await resumed.async_step(
        "notify",
        [&]() -> asio::awaitable<void> {
          ++calls;
          co_return;
        },
        [](std::string_view) { return idem::lookup_answer<void>::landed(); });
    co_return 0;
  }());
  CHECK(calls == 0);
  CHECK(resumed.steps_recorded() == 1);
  std::string_view value;
  CHECK(idem::detail::find_step(recovery, "notify", value));
}

namespace {

// A bank that takes no idempotency key: the first holder's transfer lands, and the holder stalls
// before the answer comes back (its lease runs out there); a retry takes the claim over.
struct bank_handler {
  idem::manual_clock clock;
  std::shared_ptr<int> transfers = std::make_shared<int>(0);
  std::shared_ptr<int> lookups = std::make_shared<int>(0);
  std::shared_ptr<idem::landing> says = std::make_shared<idem::landing>(idem::landing::landed);

  asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                  const idem::http_request&) const {
    const std::string id = co_await ctx.async_step(
        "transfer",
        [&]() -> asio::awaitable<std::string> {
          ++*transfers;
          const std::string made = "tr_" + std::to_string(*transfers);
          if (ctx.fence() == 1) co_await downstream(clock, 1h);  // the answer is late
          co_return made;
        },
        [&](std::string_view) -> asio::awaitable<answer> {
          ++*lookups;
          if (*says == idem::landing::landed) co_return answer::landed("tr_1");
          if (*says == idem::landing::not_landed) co_return answer::not_landed();
          co_return answer::unknown("the bank cannot tell yet");
        });
    co_return idem::http_response{201, {}, id};
  }
};

}  // namespace

TEST_CASE("an async wrapper's takeover asks the lookup before the step may call the bank again",
          "[lookup]") {
  asio::io_context io;
  idem::manual_clock clock;
  bank_handler handler{clock};
  using guard = idem::async_idempotent<bank_handler, test_async::manual_policies>;
  guard::options parts;
  parts.clock = clock;
  parts.heartbeat = false;
  guard bank{io.get_executor(), handler, parts};
  const idem::http_request request = charge();

  completion<outcome> stalled;
  bank.async_call("tenant", request, stalled.handler());
  run_until(io, clock, [&] { return clock.waiting_wakes() == 1; });
  REQUIRE(*handler.transfers == 1);
  clock.advance(31s);

  completion<outcome> retry;
  SECTION("landed: the transfer found is the response, and the bank is not called again") {
    bank.async_call("tenant", request, retry.handler());
    run_until(io, clock, [&] { return retry.done; });
    const outcome taken = retry.take();
    REQUIRE(taken.verdict() == verdict::executed);
    CHECK(taken.resumed());
    CHECK(taken->body == "tr_1");
    CHECK(*handler.transfers == 1);
    CHECK(*handler.lookups == 1);
  }
  SECTION("unknown: effect_unknown, the bank is not called, and the claim is kept") {
    *handler.says = idem::landing::unknown;
    bank.async_call("tenant", request, retry.handler());
    run_until(io, clock, [&] { return retry.done; });
    CHECK_THROWS_AS(retry.take(), idem::effect_unknown);
    CHECK(*handler.transfers == 1);
    CHECK(*handler.lookups == 1);
    // Kept, not released as the failure policy releases a handler that threw: in progress under
    // the retry's fence, for a later retry's lookup or the reconciler.
    const std::optional<idem::record> kept =
        bank.store().find("tenant", "order-1", clock.wall_now());
    REQUIRE(kept);
    CHECK(kept->state == idem::record_state::in_progress);
    CHECK(kept->fence == 2);
  }
  run_until(io, clock, [&] { return stalled.done; });
  CHECK(stalled.take().verdict() != verdict::executed);  // its fence was taken
}
