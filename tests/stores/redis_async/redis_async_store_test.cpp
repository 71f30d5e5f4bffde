// What is particular to async_redis_store: one database shared with redis_store, pipelining on
// the pool's connections, cancellation among a thousand pipelined operations, the NOSCRIPT
// fallback, the executor an operation completes on, and the options it refuses.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/redis/async.hpp>

#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "redis_async_test_support.hpp"

using namespace std::chrono_literals;
using idem::claim_status;
using idem::record_state;
using idem::time_source;
namespace asio = idem::asio;
using idem_redis_async_test::claim_of;

static_assert(idem::AsyncStore<idem::async_redis_store>);
static_assert(idem::Store<idem::blocking_store<idem::async_redis_store>>);

namespace {

// The blocking store's options for the same server and prefix as `options`.
idem::redis_store::options blocking_twin(const idem::async_redis_store::options& options) {
  idem::redis_store::options twin;
  twin.host = options.host;
  twin.port = options.port;
  twin.prefix = options.prefix;
  twin.clock = options.clock;
  return twin;
}

// One operation's outcome, as a callback sees it.
template <class T>
struct outcome {
  bool done = false;
  std::exception_ptr error;
  T answer{};
};

}  // namespace

TEST_CASE("a record claimed by the asynchronous store is seen by the blocking one, and back",
          "[redis_async]") {
  idem_redis_async_test::store_maker stores;
  const auto options = idem_redis_async_test::shared_options(time_source::server);
  auto async_store = stores.make_blocking(options);
  idem::redis_store blocking(blocking_twin(options));

  const auto mine = async_store.claim(claim_of("from-async"));
  REQUIRE(mine.status == claim_status::claimed);
  const auto seen = blocking.claim(claim_of("from-async"));
  CHECK(seen.status == claim_status::existing);
  CHECK(seen.existing.fence == mine.fence);
  // The blocking store completes what the asynchronous one holds: one fence, one record.
  REQUIRE(blocking.complete({"s", "from-async", mine.fence}, "done by blocking", {}));
  const auto found = async_store.find("s", "from-async", std::chrono::system_clock::now());
  REQUIRE(found);
  CHECK(found->state == record_state::completed);
  CHECK(found->response == "done by blocking");

  const auto theirs = blocking.claim(claim_of("from-blocking"));
  REQUIRE(theirs.status == claim_status::claimed);
  CHECK(async_store.claim(claim_of("from-blocking")).status == claim_status::existing);
  CHECK_FALSE(async_store.complete({"s", "from-blocking", theirs.fence + 1}, "stale", {}));
  REQUIRE(async_store.release({"s", "from-blocking", theirs.fence}));
  CHECK_FALSE(blocking.find("s", "from-blocking", std::chrono::system_clock::now()));
  // A released key is claimed again under a higher fence, whichever store claims it.
  CHECK(blocking.claim(claim_of("from-blocking")).fence == theirs.fence + 1);
  // A claim past its lease (by the server's clock) is stuck for both.
  REQUIRE(async_store.claim(claim_of("short", 1ms)).status == claim_status::claimed);
  std::this_thread::sleep_for(20ms);
  const auto now = std::chrono::system_clock::now();
  const auto stuck_blocking = blocking.stuck(now, 10);
  const auto stuck_async = async_store.stuck(now, 10);
  REQUIRE(stuck_blocking.size() == 1);
  REQUIRE(stuck_async.size() == 1);
  CHECK(stuck_async[0].key == "short");
  CHECK(stuck_async[0].fence == stuck_blocking[0].fence);
  CHECK(stuck_async[0].lease_until == stuck_blocking[0].lease_until);
}

TEST_CASE("64 claims started from one thread are pipelined on the pool's connections",
          "[redis_async]") {
  const idem_redis_test::private_redis server({"--appendonly", "no"});
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::private_options(server);
  options.pool_size = 2;
  idem::async_redis_store store = stores.make(options);
  const long long connections_before =
      idem_redis_async_test::info_number(server, "stats", "total_connections_received");

  asio::io_context loop;
  std::vector<std::string> keys;
  for (int i = 0; i < 64; ++i)
    keys.push_back("key-" + std::to_string(i));
  std::vector<outcome<idem::claim_result>> outcomes(keys.size());
  std::size_t in_flight = 0;
  std::size_t most_in_flight = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    store.async_claim(claim_of(keys[i]), asio::bind_executor(loop, [&, i](std::exception_ptr error,
                                                                          idem::claim_result r) {
                        outcomes[i] = {true, error, r};
                        --in_flight;
                      }));
    most_in_flight = std::max(most_in_flight, ++in_flight);
  }
  // Nothing completes inside the initiating calls.
  CHECK(most_in_flight == keys.size());
  loop.run();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO("claim of " << keys[i]);
    REQUIRE(outcomes[i].done);
    REQUIRE_FALSE(outcomes[i].error);
    CHECK(outcomes[i].answer.status == claim_status::claimed);
    CHECK(outcomes[i].answer.fence == 1);
  }
  // 64 operations at once, and no more connections than the pool's two (plus the one INFO
  // was asked on).
  CHECK(idem_redis_async_test::info_number(server, "stats", "total_connections_received") -
            connections_before ==
        2 + 1);
  CHECK(asio::co_spawn(stores.executor(), store.async_open_connections(asio::use_awaitable),
                       asio::use_future)
            .get() == 2);
}

TEST_CASE(
    "cancelling some of 1,000 pipelined claims desynchronises no reply: each answer is its own "
    "key's",
    "[redis_async][concurrency]") {
  // A private server that does not fsync each write: the test is about order, not durability.
  const idem_redis_test::private_redis server({"--appendonly", "no"});
  idem_redis_async_test::store_maker stores(2);
  auto options = idem_redis_async_test::private_options(server);
  options.pool_size = 2;
  // Half the keys are held already, each with recovery bytes naming it: their claims answer
  // `existing` with those bytes, the others `claimed`, so an answer given to the wrong claim
  // shows.
  constexpr std::size_t count = 1000;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < count; ++i)
    keys.push_back("key-" + std::to_string(i));
  {
    idem::redis_store seeding(blocking_twin(options));
    for (std::size_t i = 0; i < count; i += 2) {
      auto request = claim_of(keys[i]);
      const std::string bytes = "recovery of " + keys[i];
      request.recovery = bytes;
      REQUIRE(seeding.claim(request).status == claim_status::claimed);
    }
  }
  idem::async_redis_store store = stores.make(options);
  const auto check_answer = [&](std::size_t i, const idem::claim_result& answer) {
    if (i % 2 == 0) {
      CHECK(answer.status == claim_status::existing);
      CHECK(answer.existing.recovery == "recovery of " + keys[i]);
    } else {
      CHECK(answer.status == claim_status::claimed);
      CHECK(answer.fence == 1);
    }
  };

  asio::io_context loop;
  std::vector<asio::cancellation_signal> signals(count);
  std::vector<outcome<idem::claim_result>> outcomes(count);
  std::size_t completed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    store.async_claim(
        claim_of(keys[i]),
        asio::bind_cancellation_slot(
            signals[i].slot(),
            asio::bind_executor(loop, [&, i](std::exception_ptr error, idem::claim_result answer) {
              outcomes[i] = {true, error, answer};
              ++completed;
              // Each completion cancels a claim further on, likely on the wire by now.
              const std::size_t victim = i + 7;
              if (victim < count && victim % 3 == 0 && !outcomes[victim].done) {
                signals[victim].emit(asio::cancellation_type::terminal);
              }
            })));
    // And some are cancelled right away, before they reach their connection.
    if (i % 50 == 1) signals[i].emit(asio::cancellation_type::terminal);
  }
  loop.run();
  REQUIRE(completed == count);
  std::size_t cancelled = 0;
  for (std::size_t i = 0; i < count; ++i) {
    INFO("claim of " << keys[i]);
    REQUIRE(outcomes[i].done);
    if (outcomes[i].error) {
      CHECK(idem_redis_async_test::unavailable_saying(outcomes[i].error, "cancelled"));
      ++cancelled;
      continue;
    }
    check_answer(i, outcomes[i].answer);
  }
  CHECK(cancelled > 0);
  // Every reply slot the cancelled claims left was dropped: the connections answer each claim
  // its own answer still.
  loop.restart();
  std::vector<outcome<std::optional<idem::record>>> found(count);
  for (std::size_t i = 0; i < count; ++i) {
    store.async_find("s", keys[i], std::chrono::system_clock::now(),
                     asio::bind_executor(loop, [&, i](std::exception_ptr error,
                                                      std::optional<idem::record> record) {
                       found[i] = {true, error, std::move(record)};
                     }));
  }
  loop.run();
  for (std::size_t i = 0; i < count; ++i) {
    INFO("find of " << keys[i]);
    REQUIRE(found[i].done);
    REQUIRE_FALSE(found[i].error);
    if (i % 2 == 0) {
      REQUIRE(found[i].answer);
      CHECK(found[i].answer->recovery == "recovery of " + keys[i]);
    } else if (!outcomes[i].error) {
      // Claimed by this test: there, with no recovery bytes.
      REQUIRE(found[i].answer);
      CHECK(found[i].answer->recovery.empty());
    }
  }
}

TEST_CASE("after SCRIPT FLUSH the store sends its scripts by EVAL and answers", "[redis_async]") {
  const idem_redis_test::private_redis server({"--appendonly", "no"});
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::private_options(server);
  options.pool_size = 1;
  auto store = stores.make_blocking(options);
  REQUIRE(store.claim(claim_of("before")).status == claim_status::claimed);
  {
    const auto raw = server.connect();
    REQUIRE(idem_redis_test::command(raw.get(), {"SCRIPT", "FLUSH"})->type == REDIS_REPLY_STATUS);
  }
  const auto claimed = store.claim(claim_of("after"));
  CHECK(claimed.status == claim_status::claimed);
  CHECK(store.complete({"s", "after", claimed.fence}, "response", {}));
  const auto found = store.find("s", "after", std::chrono::system_clock::now());
  REQUIRE(found);
  CHECK(found->response == "response");
}

TEST_CASE("an operation completes on its handler's executor, never inside the initiating call",
          "[redis_async]") {
  idem_redis_async_test::store_maker stores;
  idem::async_redis_store store =
      stores.make(idem_redis_async_test::shared_options(time_source::server));
  asio::io_context loop;
  std::optional<idem::claim_result> claimed;
  bool on_loop = false;
  bool returned = false;
  store.async_claim(claim_of("k"),
                    asio::bind_executor(loop, [&](std::exception_ptr error, idem::claim_result r) {
                      CHECK_FALSE(error);
                      CHECK(returned);
                      claimed = r;
                      on_loop = loop.get_executor().running_in_this_thread();
                    }));
  returned = true;
  loop.run();
  REQUIRE(claimed);
  CHECK(claimed->status == claim_status::claimed);
  CHECK(on_loop);

  // With use_awaitable, in a coroutine on another loop; errors are thrown there.
  asio::io_context other;
  std::optional<idem::claim_result> again;
  asio::co_spawn(
      other,
      [&]() -> asio::awaitable<void> {
        again = co_await store.async_claim(claim_of("k"), asio::use_awaitable);
      },
      asio::detached);
  other.run();
  REQUIRE(again);
  CHECK(again->status == claim_status::existing);
}

TEST_CASE("bad options, an empty executor and a default store are refused", "[redis_async]") {
  asio::io_context loop;
  const auto refused = [&](auto change) {
    auto options = idem_redis_async_test::options_at("127.0.0.1", 6379, time_source::server);
    change(options);
    CHECK_THROWS_AS(idem::async_redis_store(loop.get_executor(), options), std::invalid_argument);
  };
  refused([](auto& options) { options.prefix = "app{1}:"; });
  refused([](auto& options) { options.pool_size = 0; });
  refused([](auto& options) { options.port = 70000; });
  refused([](auto& options) { options.command_timeout = 0ms; });
  refused([](auto& options) { options.caller_time_margin = -1ms; });
  refused([](auto& options) { options.reconnect_delay = 0ms; });
  refused([](auto& options) {
    options.reconnect_delay = 2s;
    options.max_reconnect_delay = 1s;
  });
  CHECK_THROWS_AS(
      idem::async_redis_store(asio::any_io_executor{}, idem_redis_async_test::options_at(
                                                           "127.0.0.1", 6379, time_source::server)),
      std::invalid_argument);
  idem::async_redis_store unset;
  CHECK_THROWS_AS(unset.async_claim(claim_of("k"), asio::detached), std::logic_error);
  CHECK_THROWS_AS(unset.get_executor(), std::logic_error);
}

TEST_CASE("the asynchronous store reaches a server through its unix socket", "[redis_async]") {
  idem_redis_test::private_redis server;
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::private_options(server);
  options.unix_socket = server.socket_path();
  options.port = 1;  // not used with a socket: nothing listens there
  auto store = stores.make_blocking(options);
  const auto claimed = store.claim(claim_of("over-the-socket"));
  REQUIRE(claimed.status == claim_status::claimed);
  CHECK(store.complete({"s", "over-the-socket", claimed.fence}, "answered", {}));
  CHECK(store.find("s", "over-the-socket", {})->response == "answered");

  // The blocking store on the same socket reads what the asynchronous one wrote.
  idem::redis_store::options twin;
  twin.unix_socket = server.socket_path();
  twin.port = 1;
  twin.prefix = options.prefix;
  idem::redis_store blocking(twin);
  CHECK(blocking.find("s", "over-the-socket", {})->response == "answered");

  // A socket with nothing behind it: unavailable, naming the path.
  auto nowhere = options;
  nowhere.unix_socket = server.socket_path() + ".gone";
  nowhere.connect_timeout = 500ms;
  nowhere.command_timeout = 500ms;
  auto missing = stores.make_blocking(nowhere);
  try {
    (void)missing.claim(claim_of("never"));
    FAIL("claimed through a socket nobody listens on");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Catch::Matchers::Contains(nowhere.unix_socket));
  }
}
