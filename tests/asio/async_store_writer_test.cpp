// async_idempotent over an AsyncStore: its calls are in flight together on one thread, and a
// held claim's writes (a step's recovery point, the heartbeat's renewal) reach the store one at
// a time, so a heartbeat never puts back an older recovery than a step wrote.
//
// The store here holds every checkpoint until the test lets it through, and the test lets the
// newest through first: two writes in flight at once would land in the wrong order, which the
// store's log of applied recoveries shows (each must extend the one before).
#include <catch2/catch.hpp>

#include <idem/asio.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/memory.hpp>
#include <idem/testing/posted_store.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "asio/event_loop.hpp"
#include "asio/net.hpp"
#include "asio/server_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace asio = idem::asio;
using test_async::completion;
using test_async::downstream;
using outcome = idem::idempotent_outcome<idem::http_response>;

// Checkpoints wait in `held` until release_newest(); every other operation is answered at once
// (after a post). Copies share everything.
class holding_store {
 public:
  struct waiting {
    idem::fenced_key held;
    std::string scope, key, recovery;
    idem::store_time lease_until;
    asio::any_completion_handler<void(std::exception_ptr, bool)> handler;
  };
  struct shared {
    idem::memory_store records;
    std::vector<waiting> held;
    std::vector<std::string> applied;  // the recoveries checkpoints wrote, in order
    std::size_t most_in_flight = 0;
    std::size_t claims_in_flight = 0;
    std::size_t most_claims_in_flight = 0;
  };

  holding_store() = default;
  explicit holding_store(asio::any_io_executor executor)
      : state_(std::make_shared<shared>()), posted_(state_->records, executor) {}

  asio::any_io_executor get_executor() const { return posted_.get_executor(); }
  shared& state() { return *state_; }

  template <class Token>
  auto async_claim(const idem::claim_request& request, Token&& token) {
    return asio::async_initiate<Token, idem::async_store_signature<idem::claim_result>>(
        [this, request](auto handler) {
          const std::size_t now_in_flight = ++state_->claims_in_flight;
          state_->most_claims_in_flight = std::max(state_->most_claims_in_flight, now_in_flight);
          posted_.async_claim(request,
                              [state = state_, handler = std::move(handler)](
                                  std::exception_ptr error, idem::claim_result result) mutable {
                                --state->claims_in_flight;
                                std::move(handler)(error, std::move(result));
                              });
        },
        token);
  }
  template <class Token>
  auto async_complete(const idem::fenced_key& held, std::string_view bytes, idem::store_time now,
                      Token&& token) {
    return posted_.async_complete(held, bytes, now, std::forward<Token>(token));
  }
  template <class Token>
  auto async_release(const idem::fenced_key& held, Token&& token) {
    return posted_.async_release(held, std::forward<Token>(token));
  }
  template <class Token>
  auto async_find(std::string_view scope, std::string_view key, idem::store_time now,
                  Token&& token) {
    return posted_.async_find(scope, key, now, std::forward<Token>(token));
  }
  template <class Token>
  auto async_sweep(idem::store_time now, Token&& token) {
    return posted_.async_sweep(now, std::forward<Token>(token));
  }
  template <class Token>
  auto async_stuck(idem::store_time now, std::size_t limit, Token&& token) {
    return posted_.async_stuck(now, limit, std::forward<Token>(token));
  }
  template <class Token>
  auto async_checkpoint(const idem::fenced_key& held, std::string_view bytes,
                        idem::store_time lease_until, Token&& token) {
    return asio::async_initiate<Token, idem::async_store_signature<bool>>(
        [this, held, bytes, lease_until](auto handler) {
          waiting entry{
              held,        std::string(held.scope), std::string(held.key), std::string(bytes),
              lease_until, std::move(handler)};
          state_->held.push_back(std::move(entry));
          state_->most_in_flight = std::max(state_->most_in_flight, state_->held.size());
        },
        token);
  }

  /// Lets the newest held checkpoint through: applies it and completes it.
  void release_newest() {
    waiting entry = std::move(state_->held.back());
    state_->held.pop_back();
    const bool applied =
        state_->records.checkpoint(idem::fenced_key{entry.scope, entry.key, entry.held.fence},
                                   entry.recovery, entry.lease_until);
    if (applied) state_->applied.push_back(entry.recovery);
    auto handler = std::move(entry.handler);
    asio::post(get_executor(), [handler = std::move(handler), applied]() mutable {
      std::move(handler)(nullptr, applied);
    });
  }

 private:
  std::shared_ptr<shared> state_;
  idem::testing::posted_store<idem::memory_store> posted_;
};

static_assert(idem::AsyncStore<holding_store>);

struct holding_policies : test_async::manual_policies {
  using store = holding_store;
};

// Waits a downstream call long enough for heartbeats to beat while it is suspended, then
// records two steps.
struct slow_steps {
  idem::manual_clock clock;
  asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                  const idem::http_request&) const {
    co_await downstream(clock, 25s);
    co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
      co_await downstream(clock, 12s);
      co_return "ch_1";
    });
    co_await ctx.async_step("email", [&]() -> asio::awaitable<void> { co_return; });
    co_return idem::http_response{201, {}, "charged"};
  }
};

}  // namespace

TEST_CASE(
    "a held claim's writes reach an asynchronous store one at a time, and a heartbeat never "
    "erases a step",
    "[async_store]") {
  asio::io_context io;
  idem::manual_clock clock;
  holding_store store{io.get_executor()};
  using guard = idem::async_idempotent<slow_steps, holding_policies>;
  guard::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.lease = 30s;  // a heartbeat every 10 s
  guard payments{io.get_executor(), slow_steps{clock}, parts};
  const idem::http_request request = test_async::charge();

  completion<outcome> done;
  payments.async_call("tenant", request, done.handler());
  // Idle: a checkpoint is held while the clock moves on twice (so the handler's step comes
  // while the heartbeat's write is in flight, and the heartbeat beats again meanwhile); two
  // held are let through newest first. The heartbeat wakes every 10 s for as long as the call
  // lasts, so the clock always has a next wake: a held checkpoint is let through after two.
  std::size_t released = 0;
  int moves_while_held = 0;
  while (!done.done) {
    io.restart();
    if (io.poll() > 0) continue;
    const std::size_t held = store.state().held.size();
    if (held < 2 && (held == 0 || moves_while_held < 2) && clock.advance_to_next_wake()) {
      if (held > 0) ++moves_while_held;
      continue;
    }
    REQUIRE(held > 0);
    store.release_newest();
    moves_while_held = 0;
    ++released;
  }
  const outcome answer = done.take();
  CHECK(answer.verdict() == idem::verdict::executed);
  // Heartbeats at 10 s and 20 s, the charge's started entry at 25 s, a heartbeat at 30 s while
  // the charge waits, its record, and the email's two.
  CHECK(released >= 5);
  CHECK(store.state().most_in_flight == 1);
  // Each applied recovery extends the one before: nothing recorded was ever put back.
  const std::vector<std::string>& applied = store.state().applied;
  for (std::size_t i = 1; i < applied.size(); ++i) {
    INFO("checkpoint " << i);
    CHECK(applied[i].starts_with(applied[i - 1]));
  }
}

TEST_CASE("an awaited store keeps many calls in flight on one thread", "[async_store]") {
  asio::io_context io;
  idem::manual_clock clock;
  holding_store store{io.get_executor()};
  struct quick {
    asio::awaitable<idem::http_response> operator()(const idem::http_request& request) const {
      co_return idem::http_response{200, {}, request.body};
    }
  };
  using guard = idem::async_idempotent<quick, holding_policies>;
  guard::options parts;
  parts.store = store;
  parts.clock = clock;
  guard service{io.get_executor(), quick{}, parts};
  constexpr int calls = 200;
  std::vector<idem::http_request> requests;
  for (int i = 0; i < calls; ++i) {
    requests.push_back(test_async::charge("k-" + std::to_string(i), "body " + std::to_string(i)));
  }
  std::vector<completion<outcome>> done(calls);
  for (int i = 0; i < calls; ++i)
    service.async_call("tenant", requests[static_cast<std::size_t>(i)],
                       done[static_cast<std::size_t>(i)].handler());
  io.run();
  // Every call's claim was in flight at once: none waited for another's.
  CHECK(store.state().most_claims_in_flight == calls);
  for (int i = 0; i < calls; ++i) {
    const outcome answer = done[static_cast<std::size_t>(i)].take();
    CHECK(answer.verdict() == idem::verdict::executed);
    CHECK(answer.value().body == "body " + std::to_string(i));
  }
}
