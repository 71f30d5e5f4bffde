// async_idempotent under threads: many coroutines on an io_context run by two threads, racing
// for one key. Tagged [concurrency], so the ThreadSanitizer build runs them.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>
#include <idem/testing/posted_store.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "asio/net.hpp"
#include "asio/server_support.hpp"
#include "support/forwarding_store.hpp"

namespace {

namespace asio = idem::asio;
using outcome = idem::idempotent_outcome<idem::http_response>;
using idem::verdict;
using namespace std::chrono_literals;

// A memory store that counts the fenced renewals (checkpoints) it was asked for.
class renewal_tally_store : public idem_test::forwarding_store<idem::memory_store> {
 public:
  static constexpr bool never_blocks = true;
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    renewals_->fetch_add(1);
    return inner_.checkpoint(held, recovery, lease_until);
  }
  std::size_t renewals() const { return renewals_->load(); }

 private:
  std::shared_ptr<std::atomic<std::size_t>> renewals_ =
      std::make_shared<std::atomic<std::size_t>>(0);
};

struct tally_policies : idem::default_policies {
  using store = renewal_tally_store;
};

// The same, made asynchronous (every operation posted), with renewals sent in batches: counts
// the batches.
class batch_tally_store : public idem::testing::posted_store<renewal_tally_store> {
 public:
  using posted_store::posted_store;
  template <class Token>
  auto async_checkpoint_batch(std::span<const idem::batch_checkpoint> entries,
                              idem::store_time lease_until, Token&& token) {
    batches_->fetch_add(1);
    return posted_store::async_checkpoint_batch(entries, lease_until, std::forward<Token>(token));
  }
  std::size_t batches() const { return batches_->load(); }

 private:
  std::shared_ptr<std::atomic<std::size_t>> batches_ =
      std::make_shared<std::atomic<std::size_t>>(0);
};

struct batch_tally_policies : idem::default_policies {
  using store = batch_tally_store;
};

// Waits 30 to 70 ms of real time (by the body's length), then answers the body.
struct waiting_handler {
  asio::awaitable<idem::http_response> operator()(const idem::http_request& request) const {
    asio::steady_timer wait{co_await asio::this_coro::executor,
                            std::chrono::milliseconds(30 + 10 * (request.body.size() % 5))};
    co_await wait.async_wait(asio::use_awaitable);
    co_return idem::http_response{201, {}, request.body};
  }
};

// Runs one call a request, each on a strand of `io`, which two threads run until no call is
// left; checks that each executed under its first claim (renewed, never taken over).
template <class Guard>
void run_each_on_two_threads(asio::io_context& io, Guard& payments,
                             const std::vector<idem::http_request>& requests) {
  const std::size_t calls = requests.size();
  std::vector<std::optional<outcome>> answers(calls);
  std::vector<std::exception_ptr> errors(calls);
  for (std::size_t i = 0; i < calls; ++i) {
    asio::co_spawn(
        asio::make_strand(io),
        [&, i]() -> asio::awaitable<void> {
          answers[i] = co_await payments.async_call("tenant", requests[i], asio::use_awaitable);
        },
        [&, i](std::exception_ptr error) { errors[i] = error; });
  }
  io.restart();
  std::thread second([&] { io.run(); });
  io.run();  // returns once no call is left: the heartbeat holds no work of its own
  second.join();
  for (std::size_t i = 0; i < calls; ++i) {
    INFO("call " << i);
    REQUIRE_FALSE(errors[i]);
    REQUIRE(answers[i]);
    CHECK(answers[i]->verdict() == verdict::executed);
    CHECK(answers[i]->fence() == 1);
  }
}

}  // namespace

TEST_CASE(
    "handlers on strands of two threads share the wrapper's one heartbeat, which renews each of "
    "them until it ends and stops when the last has",
    "[concurrency]") {
  constexpr int calls = 48;
  asio::io_context io{2};
  // Each handler waits 30 to 70 ms of real time, on a lease of 30 ms: renewed every 10 ms.
  using guard = idem::async_idempotent<waiting_handler, tally_policies>;
  renewal_tally_store store;
  guard::options parts;
  parts.store = store;
  parts.lease = 30ms;
  guard payments{io.get_executor(), waiting_handler{}, parts};

  // Three rounds: the heartbeat's timer starts and stops with each, on either thread.
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    std::vector<idem::http_request> requests;
    for (int i = 0; i < calls; ++i) {
      requests.push_back(test_async::charge("r" + std::to_string(round) + "-" + std::to_string(i),
                                            std::string(static_cast<std::size_t>(i), 'x')));
    }
    run_each_on_two_threads(io, payments, requests);
  }
  // At least one renewal a call: each outlived a third of its lease.
  CHECK(store.renewals() >= 3 * static_cast<std::size_t>(calls));
}

TEST_CASE(
    "renewals asked for on two threads go to the store in shared batches, each answered on its "
    "own call's strand",
    "[concurrency]") {
  constexpr int calls = 48;
  asio::io_context io{2};
  using guard = idem::async_idempotent<waiting_handler, batch_tally_policies>;
  batch_tally_store store{renewal_tally_store{}, io.get_executor()};
  guard::options parts;
  parts.store = store;
  parts.lease = 30ms;  // renewed every 10 ms
  guard payments{io.get_executor(), waiting_handler{}, parts};

  std::vector<idem::http_request> requests;
  for (int i = 0; i < calls; ++i) {
    requests.push_back(test_async::charge("b-" + std::to_string(i),
                                          std::string(static_cast<std::size_t>(i), 'x')));
  }
  run_each_on_two_threads(io, payments, requests);
  const std::size_t renewals = store.blocking().renewals();
  CHECK(renewals >= static_cast<std::size_t>(calls));
  // Every renewal went in a batch, and batches held several.
  CHECK(store.batches() >= 1);
  CHECK(store.batches() < renewals);
}

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
