// async_postgres_store against a real PostgreSQL server: what is particular to it beside the
// conformance suites. Many operations pipelined on a small pool, one table shared with
// postgres_store, the server's clock, options refused, and a server that cannot be reached.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/async.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "async_postgres_support.hpp"

#include "support/records.hpp"

namespace pgtest = idem::testing::postgres;
namespace pgasync = idem::testing::postgres_async;
namespace asio = idem::asio;
using namespace std::chrono_literals;

using idem::testing::print;
using idem::testing::start;

TEST_CASE(
    "64 claims started at once from one thread complete on a pool of 8, each with its own answer",
    "[postgres_async][concurrency]") {
  pgtest::table_guard table(pgtest::unique_table("inflight"));
  const std::string application = table.name;
  idem::async_postgres_store::options config = pgasync::caller_time_options(table.name);
  config.conninfo = pgasync::with_application(application);
  config.pool_size = 8;
  config.pipeline_depth = 8;
  asio::io_context loop;
  idem::async_postgres_store store{loop.get_executor(), config};

  constexpr int count = 64;
  std::vector<std::string> keys;
  for (int i = 0; i < count; ++i)
    keys.push_back("key-" + std::to_string(i));
  std::vector<std::optional<idem::claim_result>> claimed(count);
  std::vector<std::optional<idem::record>> found(count);
  int in_flight = 0;
  int most_in_flight = 0;
  for (int i = 0; i < count; ++i) {
    asio::co_spawn(
        loop,
        [&, i]() -> asio::awaitable<void> {
          ++in_flight;
          most_in_flight = std::max(most_in_flight, in_flight);
          const std::string recovery = "recovery of " + keys[i];
          claimed[i] = co_await store.async_claim(
              {"tenant", keys[i], print(static_cast<std::uint8_t>(i)), start, 30s, 24h, recovery},
              asio::use_awaitable);
          --in_flight;
          found[i] = co_await store.async_find("tenant", keys[i], start, asio::use_awaitable);
        },
        [](const std::exception_ptr& error) {
          if (error) std::rethrow_exception(error);
        });
  }
  loop.run();

  CHECK(most_in_flight == count);
  for (int i = 0; i < count; ++i) {
    INFO(keys[i]);
    REQUIRE(claimed[i].has_value());
    CHECK(claimed[i]->status == idem::claim_status::claimed);
    CHECK(claimed[i]->fence == 1);
    REQUIRE(found[i].has_value());
    CHECK(found[i]->key == keys[i]);
    CHECK(found[i]->fingerprint == print(static_cast<std::uint8_t>(i)));
    CHECK(found[i]->recovery == "recovery of " + keys[i]);
  }
  // The pool's bound held: never more than 8 connections.
  pgtest::connection admin;
  CHECK(pgasync::backends_of(admin, application) <= 8);
  CHECK(pgasync::backends_of(admin, application) >= 1);
}

TEST_CASE(
    "postgres_store and async_postgres_store share one table, each seeing the other's records",
    "[postgres_async]") {
  pgtest::table_guard table(pgtest::unique_table("shared"));
  pgasync::running_loop loop;
  // The server's clock for both: what either claims, the other sees on the same timeline.
  idem::async_postgres_store::options async_config;
  async_config.conninfo = pgtest::conninfo();
  async_config.table = table.name;
  idem::async_postgres_store async_store{loop.executor(), async_config};
  idem::postgres_store::options blocking_config;
  blocking_config.conninfo = pgtest::conninfo();
  blocking_config.table = table.name;
  idem::postgres_store blocking{blocking_config};
  idem::blocking_store<idem::async_postgres_store> awaited{async_store};

  const idem::store_time now = std::chrono::system_clock::now();
  const idem::claim_result by_blocking = blocking.claim({"tenant", "one", print(1), now, 30s, 24h});
  REQUIRE(by_blocking.status == idem::claim_status::claimed);
  const idem::claim_result seen = awaited.claim({"tenant", "one", print(1), now, 30s, 24h});
  CHECK(seen.status == idem::claim_status::existing);
  CHECK(seen.existing.fence == by_blocking.fence);
  CHECK(awaited.complete({"tenant", "one", by_blocking.fence}, "done by the other", now));
  const std::optional<idem::record> completed = blocking.find("tenant", "one", now);
  REQUIRE(completed.has_value());
  CHECK(completed->state == idem::record_state::completed);
  CHECK(completed->response == "done by the other");

  const idem::claim_result by_async = awaited.claim({"tenant", "two", print(2), now, 30s, 24h});
  REQUIRE(by_async.status == idem::claim_status::claimed);
  CHECK(blocking.claim({"tenant", "two", print(2), now, 30s, 24h}).status ==
        idem::claim_status::existing);
  CHECK_FALSE(blocking.release({"tenant", "two", by_async.fence + 1}));
  CHECK(blocking.release({"tenant", "two", by_async.fence}));
  CHECK_FALSE(awaited.find("tenant", "two", now).has_value());
}

TEST_CASE("with server time, the async store ignores the caller's now", "[postgres_async]") {
  pgtest::table_guard table(pgtest::unique_table("server_time"));
  pgasync::running_loop loop;
  idem::async_postgres_store::options config;
  config.conninfo = pgtest::conninfo();
  config.table = table.name;
  REQUIRE(config.clock == idem::time_source::server);
  idem::blocking_store<idem::async_postgres_store> store{
      idem::async_postgres_store{loop.executor(), config}};
  // A caller whose clock is a day behind: the server's clock decides.
  const idem::store_time wrong = std::chrono::system_clock::now() - 24h;
  const idem::claim_result claimed = store.claim({"tenant", "k", print(1), wrong, 30s, 48h});
  REQUIRE(claimed.status == idem::claim_status::claimed);
  const std::optional<idem::record> found = store.find("tenant", "k", wrong);
  REQUIRE(found.has_value());
  const auto drift = found->created_at - std::chrono::system_clock::now();
  CHECK(std::chrono::abs(drift) < 1min);
  CHECK(found->lease_until - found->created_at == 30s);
  // A checkpoint's deadline moves over as how far ahead it lies.
  CHECK(store.checkpoint({"tenant", "k", claimed.fence}, "point",
                         std::chrono::system_clock::now() + 10min));
  const std::optional<idem::record> moved = store.find("tenant", "k", wrong);
  REQUIRE(moved.has_value());
  CHECK(moved->lease_until - moved->created_at > 9min);
  CHECK(moved->recovery == "point");
}

TEST_CASE("a capped scope answers full past its cap, through the pipelined transaction",
          "[postgres_async]") {
  pgtest::table_guard table(pgtest::unique_table("capped"));
  pgasync::running_loop loop;
  idem::async_postgres_store::options config = pgasync::caller_time_options(table.name);
  config.max_records_per_scope = 2;
  idem::blocking_store<idem::async_postgres_store> store{
      idem::async_postgres_store{loop.executor(), config}};
  CHECK(store.claim({"tenant", "a", print(1), start, 30s, 1h}).status ==
        idem::claim_status::claimed);
  CHECK(store.claim({"tenant", "b", print(1), start, 30s, 1h}).status ==
        idem::claim_status::claimed);
  CHECK(store.claim({"tenant", "c", print(1), start, 30s, 1h}).status == idem::claim_status::full);
  // A repeat of a live key needs no room; another scope has its own.
  CHECK(store.claim({"tenant", "a", print(1), start, 30s, 1h}).status ==
        idem::claim_status::existing);
  CHECK(store.claim({"other", "c", print(1), start, 30s, 1h}).status ==
        idem::claim_status::claimed);
  CHECK_FALSE(store.find("tenant", "c", start).has_value());
  // Expired records make room again.
  CHECK(store.claim({"tenant", "c", print(1), start + 2h, 30s, 1h}).status ==
        idem::claim_status::claimed);
}

TEST_CASE("async_postgres_store refuses bad options with a clear error", "[postgres_async]") {
  asio::io_context loop;
  const auto refused = [&](idem::async_postgres_store::options config, const char* what) {
    try {
      idem::async_postgres_store store{loop.get_executor(), std::move(config)};
    } catch (const std::invalid_argument& error) {
      CHECK_THAT(error.what(), Catch::Matchers::Contains(what));
      return;
    }
    FAIL("accepted options that should have been refused: " << what);
  };
  idem::async_postgres_store::options config;
  config.conninfo = pgtest::conninfo();
  config.connect_at_start = false;
  auto zero_pool = config;
  zero_pool.pool_size = 0;
  refused(zero_pool, "pool_size must be at least 1");
  auto zero_depth = config;
  zero_depth.pipeline_depth = 0;
  refused(zero_depth, "pipeline_depth must be at least 1");
  auto negative = config;
  negative.operation_timeout = -1ms;
  refused(negative, "operation_timeout cannot be negative");
  auto malformed = config;
  malformed.conninfo = "host=";
  malformed.conninfo += "'unterminated";
  refused(malformed, "the connection string is invalid");
  auto bad_table = config;
  bad_table.table = "records; DROP TABLE x";
  refused(bad_table, "must be 1 to 50 letters");
  try {
    idem::async_postgres_store store{asio::any_io_executor{}, config};
    FAIL("an empty executor was accepted");
  } catch (const std::invalid_argument& error) {
    CHECK_THAT(error.what(), Catch::Matchers::Contains("the executor is empty"));
  }

  // A default store has no database: its operations throw at their start.
  idem::async_postgres_store none;
  CHECK_THROWS_AS(
      none.async_find("s", "k", start, [](std::exception_ptr, std::optional<idem::record>) {}),
      idem::store_error);
}

TEST_CASE("a server that cannot be reached fails operations clearly, and none hangs",
          "[postgres_async]") {
  pgasync::running_loop loop;
  idem::async_postgres_store::options config;
  // A port nothing listens on (the private server's range is above 50000; 1 is privileged).
  config.conninfo = "host=127.0.0.1 port=1 dbname=idem user=idem";
  config.connect_at_start = false;
  config.connect_timeout = 2s;
  idem::blocking_store<idem::async_postgres_store> store{
      idem::async_postgres_store{loop.executor(), config}};
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      (void)store.find("tenant", "k", start);
      FAIL("an unreachable server answered");
    } catch (const idem::store_error& error) {
      CHECK(error.failure() == idem::store_failure::unavailable);
      CHECK_THAT(error.what(), Catch::Matchers::Contains("cannot connect to PostgreSQL"));
    }
  }
  // With connect_at_start, the constructor says so itself.
  config.connect_at_start = true;
  CHECK_THROWS_AS((idem::async_postgres_store{loop.executor(), config}), idem::store_error);
}
