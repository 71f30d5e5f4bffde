// async_postgres_store under real faults: a row lock held past the operation's timeout (the
// cancel must reach the server), the server's own statement_timeout, pg_terminate_backend of
// the store's connection in the middle of an operation and of a transaction, and cancellation
// through the handler's slot, alone and interleaved with 1,000 operations on the pool. Every
// case checks that nothing is matched to the wrong operation afterwards.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/postgres/async.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <optional>
#include <random>
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

namespace {

using blocking = idem::blocking_store<idem::async_postgres_store>;

// The store's failure, or nothing when the call answered.
template <class Call>
std::optional<idem::store_error> failure_of(Call call) {
  try {
    (void)call();
  } catch (const idem::store_error& error) {
    return error;
  }
  return std::nullopt;
}

// Another session holds the record's row lock, in an open transaction, until it ends.
struct row_lock {
  pgtest::connection holder;
  row_lock(const std::string& table, const std::string& key) {
    holder.exec("BEGIN");
    holder.exec("SELECT 1 FROM \"" + table + "\" WHERE scope = 'tenant'::bytea AND key = '" + key +
                "'::bytea FOR UPDATE");
  }
  void end() { holder.exec("ROLLBACK"); }
};

idem::async_postgres_store::options named_options(const std::string& table) {
  idem::async_postgres_store::options config = pgasync::caller_time_options(table);
  config.conninfo = pgasync::with_application(table);
  return config;
}

}  // namespace

TEST_CASE(
    "a lock held past operation_timeout fails the operation promptly, and the cancel reaches the "
    "server",
    "[postgres_async][fault]") {
  pgtest::table_guard table(pgtest::unique_table("locked"));
  pgasync::running_loop loop;
  idem::async_postgres_store::options config = named_options(table.name);
  config.pool_size = 1;
  config.operation_timeout = 300ms;
  config.statement_timeout = 0ms;  // only the operation's own timeout ends the wait
  blocking store{idem::async_postgres_store{loop.executor(), config}};
  const idem::claim_result held = store.claim({"tenant", "k", print(1), start, 30s, 24h});
  REQUIRE(held.status == idem::claim_status::claimed);

  row_lock lock(table.name, "k");
  const auto began = std::chrono::steady_clock::now();
  const std::optional<idem::store_error> failed = failure_of([&] {
    return store.complete({"tenant", "k", held.fence}, "late", start);
  });
  const auto took = std::chrono::steady_clock::now() - began;
  REQUIRE(failed.has_value());
  CHECK(failed->failure() == idem::store_failure::unavailable);
  CHECK_THAT(failed->what(), Catch::Matchers::Contains("timed out after 300 ms"));
  CHECK_THAT(failed->what(), Catch::Matchers::Contains("may or may not have taken effect"));
  CHECK(took >= 250ms);
  CHECK(took < 2s);

  // The server no longer waits for the lock: the cancel request stopped the statement.
  pgtest::connection admin;
  CHECK(pgasync::eventually([&] { return pgasync::waiting_on_lock(admin, table.name) == 0; }));
  // The one connection serves the next operation with its own answer, the lock still held.
  const std::optional<idem::record> found = store.find("tenant", "k", start);
  REQUIRE(found.has_value());
  CHECK(found->state == idem::record_state::in_progress);
  lock.end();
  CHECK(store.complete({"tenant", "k", held.fence}, "on time", start));
  CHECK(store.find("tenant", "k", start)->response == "on time");
}

TEST_CASE(
    "the server's statement_timeout ends a lock wait as unavailable, and the connection goes on",
    "[postgres_async][fault]") {
  pgtest::table_guard table(pgtest::unique_table("stmt_timeout"));
  pgasync::running_loop loop;
  idem::async_postgres_store::options config = named_options(table.name);
  config.pool_size = 1;
  config.statement_timeout = 200ms;
  blocking store{idem::async_postgres_store{loop.executor(), config}};
  const idem::claim_result held = store.claim({"tenant", "k", print(1), start, 30s, 24h});
  row_lock lock(table.name, "k");
  const std::optional<idem::store_error> failed = failure_of([&] {
    return store.release({"tenant", "k", held.fence});
  });
  REQUIRE(failed.has_value());
  CHECK(failed->failure() == idem::store_failure::unavailable);
  CHECK_THAT(failed->what(), Catch::Matchers::Contains("57014"));
  CHECK(store.find("tenant", "k", start).has_value());
  lock.end();
  CHECK(store.release({"tenant", "k", held.fence}));
}

TEST_CASE(
    "pg_terminate_backend in the middle of operations fails those in flight, and the pool "
    "reconnects",
    "[postgres_async][fault]") {
  pgtest::table_guard table(pgtest::unique_table("terminated"));
  pgasync::running_loop loop;
  idem::async_postgres_store::options config = named_options(table.name);
  config.pool_size = 1;
  config.pipeline_depth = 4;
  config.statement_timeout = 0ms;
  idem::async_postgres_store async_store{loop.executor(), config};
  blocking store{async_store};
  const idem::claim_result held = store.claim({"tenant", "k", print(1), start, 30s, 24h});
  REQUIRE(store.claim({"tenant", "other", print(2), start, 30s, 24h, "other's recovery"}).status ==
          idem::claim_status::claimed);

  row_lock lock(table.name, "k");
  // A completion that waits for the lock, and a find pipelined behind it on the one connection.
  std::future<bool> completing =
      async_store.async_complete({"tenant", "k", held.fence}, "never", start, asio::use_future);
  std::future<std::optional<idem::record>> finding =
      async_store.async_find("tenant", "other", start, asio::use_future);
  pgtest::connection admin;
  REQUIRE(pgasync::eventually([&] { return pgasync::waiting_on_lock(admin, table.name) == 1; }));
  CHECK(admin.scalar("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                     "application_name = '" +
                     table.name + "'") == 1);

  const std::optional<idem::store_error> completion = failure_of([&] { return completing.get(); });
  const std::optional<idem::store_error> lookup = failure_of([&] { return finding.get(); });
  REQUIRE(completion.has_value());
  CHECK(completion->failure() == idem::store_failure::unavailable);
  CHECK_THAT(completion->what(), Catch::Matchers::Contains("connection was lost"));
  REQUIRE(lookup.has_value());
  CHECK(lookup->failure() == idem::store_failure::unavailable);
  lock.end();

  // A fresh connection; each answer is its own operation's.
  const std::optional<idem::record> other = store.find("tenant", "other", start);
  REQUIRE(other.has_value());
  CHECK(other->recovery == "other's recovery");
  const std::optional<idem::record> record = store.find("tenant", "k", start);
  REQUIRE(record.has_value());
  CHECK(record->state == idem::record_state::in_progress);  // the killed completion never committed
  CHECK(store.complete({"tenant", "k", held.fence}, "after", start));
}

TEST_CASE("pg_terminate_backend in the middle of a capped claim's transaction leaves nothing open",
          "[postgres_async][fault]") {
  pgtest::table_guard table(pgtest::unique_table("terminated_txn"));
  pgasync::running_loop loop;
  idem::async_postgres_store::options config = named_options(table.name);
  config.pool_size = 1;
  config.statement_timeout = 0ms;
  config.max_records_per_scope = 10;
  idem::async_postgres_store async_store{loop.executor(), config};
  blocking store{async_store};
  REQUIRE(store.claim({"tenant", "first", print(1), start, 30s, 24h}).status ==
          idem::claim_status::claimed);

  // Another session takes the scope's turn (the claim's advisory lock) and keeps it.
  pgtest::connection turn;
  turn.exec("BEGIN");
  turn.exec("SELECT pg_advisory_xact_lock(hashtextextended(encode('tenant'::bytea, 'hex'), 7238))");
  std::future<idem::claim_result> claiming =
      async_store.async_claim({"tenant", "second", print(1), start, 30s, 24h}, asio::use_future);
  pgtest::connection admin;
  REQUIRE(pgasync::eventually([&] { return pgasync::waiting_on_lock(admin, table.name) == 1; }));
  // Inside the transaction: BEGIN ran, the claim waits for the scope's turn.
  CHECK(admin.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" +
                     table.name + "' AND backend_xid IS NULL AND xact_start IS NOT NULL") == 1);
  CHECK(admin.scalar("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                     "application_name = '" +
                     table.name + "'") == 1);
  const std::optional<idem::store_error> failed = failure_of([&] { return claiming.get(); });
  REQUIRE(failed.has_value());
  CHECK(failed->failure() == idem::store_failure::unavailable);
  turn.exec("ROLLBACK");

  CHECK_FALSE(store.find("tenant", "second", start).has_value());
  CHECK(store.claim({"tenant", "second", print(1), start, 30s, 24h}).status ==
        idem::claim_status::claimed);
  CHECK(store.claim({"tenant", "second", print(1), start, 30s, 24h}).status ==
        idem::claim_status::existing);
  CHECK(admin.scalar("SELECT count(*) FROM \"" + table.name + "\"") == 2);
  // No session of the store sits in a transaction.
  CHECK(admin.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" +
                     table.name + "' AND state LIKE 'idle in transaction%'") == 0);
}

TEST_CASE("an operation cancelled through its slot completes at once, and the server stops it",
          "[postgres_async][cancel]") {
  pgtest::table_guard table(pgtest::unique_table("cancelled"));
  idem::async_postgres_store::options config = named_options(table.name);
  config.pool_size = 1;
  config.statement_timeout = 0ms;
  asio::io_context loop;
  idem::async_postgres_store store{loop.get_executor(), config};
  idem::claim_result held;
  asio::co_spawn(
      loop,
      [&]() -> asio::awaitable<void> {
        held = co_await store.async_claim({"tenant", "k", print(1), start, 30s, 24h},
                                          asio::use_awaitable);
      },
      asio::detached);
  loop.run();
  REQUIRE(held.status == idem::claim_status::claimed);

  row_lock lock(table.name, "k");
  pgtest::connection admin;
  asio::cancellation_signal signal;
  std::optional<std::exception_ptr> outcome;
  std::chrono::steady_clock::time_point cancelled_at{}, completed_at{};
  store.async_complete(
      {"tenant", "k", held.fence}, "late", start,
      asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr error, bool) {
        completed_at = std::chrono::steady_clock::now();
        outcome = error;
      }));
  asio::steady_timer poll(loop);
  std::function<void()> wait_for_lock = [&] {
    if (pgasync::waiting_on_lock(admin, table.name) == 1) {
      cancelled_at = std::chrono::steady_clock::now();
      signal.emit(asio::cancellation_type::terminal);
      return;
    }
    poll.expires_after(10ms);
    poll.async_wait([&](const auto&) { wait_for_lock(); });
  };
  wait_for_lock();
  loop.restart();
  loop.run();
  REQUIRE(outcome.has_value());
  REQUIRE(*outcome != nullptr);
  try {
    std::rethrow_exception(*outcome);
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Catch::Matchers::Contains("cancelled"));
  }
  CHECK(completed_at - cancelled_at < 500ms);
  CHECK(pgasync::eventually([&] { return pgasync::waiting_on_lock(admin, table.name) == 0; }));
  lock.end();

  // The connection's next operation gets its own answer.
  std::optional<idem::record> found;
  asio::co_spawn(
      loop,
      [&]() -> asio::awaitable<void> {
        found = co_await store.async_find("tenant", "k", start, asio::use_awaitable);
      },
      asio::detached);
  loop.restart();
  loop.run();
  REQUIRE(found.has_value());
  CHECK(found->state == idem::record_state::in_progress);
  CHECK(found->fence == held.fence);
}

TEST_CASE("cancels interleaved with 1000 operations on the pool: every answer is its own key's",
          "[postgres_async][cancel][concurrency]") {
  pgtest::table_guard table(pgtest::unique_table("cancel_storm"));
  idem::async_postgres_store::options config = pgasync::caller_time_options(table.name);
  config.pool_size = 4;
  config.pipeline_depth = 8;
  asio::io_context loop;
  idem::async_postgres_store store{loop.get_executor(), config};
  constexpr int keys = 250;
  constexpr int operations = 1000;
  std::vector<std::string> names;
  std::vector<std::string> recoveries;  // the views an operation is given outlive it
  for (int i = 0; i < keys; ++i) {
    names.push_back("key-" + std::to_string(i));
    recoveries.push_back("of " + names.back());
  }
  // Every key's record carries its name in its recovery bytes: an answer says whose it is.
  int ready = 0;
  for (int i = 0; i < keys; ++i) {
    store.async_claim({"tenant", names[i], print(1), start, 1h, 24h, recoveries[i]},
                      [&](std::exception_ptr error, idem::claim_result claimed) {
                        if (!error && claimed.status == idem::claim_status::claimed) ++ready;
                      });
  }
  loop.run();
  REQUIRE(ready == keys);

  std::mt19937 random(20261204);
  std::vector<std::unique_ptr<asio::cancellation_signal>> signals;
  std::vector<std::unique_ptr<asio::steady_timer>> timers;
  int completed = 0, answered = 0, cancelled = 0, other_failures = 0;
  std::vector<std::string> wrong;
  // Outside the loop: the completions run after it, and call it by reference.
  const auto failed = [&](const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const idem::store_error& failure) {
      if (std::string(failure.what()).find("cancelled") != std::string::npos) {
        ++cancelled;
      } else {
        ++other_failures;
      }
    }
  };
  for (int i = 0; i < operations; ++i) {
    const std::string& name = names[static_cast<std::size_t>(i % keys)];
    auto& signal = *signals.emplace_back(std::make_unique<asio::cancellation_signal>());
    if (i % 2 == 0) {
      store.async_find(
          "tenant", name, start,
          asio::bind_cancellation_slot(signal.slot(), [&, name](std::exception_ptr error,
                                                                std::optional<idem::record> found) {
            ++completed;
            if (error) return failed(error);
            ++answered;
            if (!found || found->recovery != "of " + name) wrong.push_back(name);
          }));
    } else {
      // Another fingerprint: the claim answers the record's snapshot, never takes it.
      store.async_claim(
          {"tenant", name, print(2), start, 1h, 24h},
          asio::bind_cancellation_slot(signal.slot(), [&, name](std::exception_ptr error,
                                                                idem::claim_result claim) {
            ++completed;
            if (error) return failed(error);
            ++answered;
            if (claim.status != idem::claim_status::existing ||
                claim.existing.recovery != "of " + name || claim.existing.fingerprint != print(1)) {
              wrong.push_back(name);
            }
          }));
    }
    // A third of them are cancelled: at once, after a post, or after up to 200 ms (some of those
    // after they completed, which changes nothing).
    switch (random() % 9) {
      case 0:
        signal.emit(asio::cancellation_type::terminal);
        break;
      case 1:
        asio::post(loop, [&signal] { signal.emit(asio::cancellation_type::terminal); });
        break;
      case 2: {
        auto& timer = *timers.emplace_back(std::make_unique<asio::steady_timer>(loop));
        timer.expires_after(std::chrono::microseconds(random() % 200000));
        timer.async_wait(
            [&signal](const auto&) { signal.emit(asio::cancellation_type::terminal); });
        break;
      }
      default:
        break;
    }
  }
  loop.restart();
  loop.run();
  INFO("answered " << answered << ", cancelled " << cancelled << ", other failures "
                   << other_failures);
  CHECK(completed == operations);
  CHECK(wrong.empty());
  CHECK(cancelled > 0);
  CHECK(answered > operations / 2);
  // Failures beside the cancelled: only operations a cancel request met on the server.
  CHECK(other_failures <= cancelled);

  // The pool is whole: every key still answers with its own record.
  int right = 0;
  for (int i = 0; i < keys; ++i) {
    store.async_find("tenant", names[i], start,
                     [&, i](std::exception_ptr error, std::optional<idem::record> found) {
                       if (!error && found && found->recovery == "of " + names[i]) ++right;
                     });
  }
  loop.restart();
  loop.run();
  CHECK(right == keys);
}

TEST_CASE(
    "a server restarted under operations: clear errors, then the pool reconnects, and nothing "
    "acknowledged is lost",
    "[postgres_async][fault]") {
  pgtest::private_server server;
  server.start();
  pgasync::running_loop loop;
  idem::async_postgres_store::options config;
  config.conninfo = server.conninfo();
  config.table = "records";
  config.pool_size = 4;
  config.reconnect_delay = 20ms;
  config.max_reconnect_delay = 200ms;
  idem::async_postgres_store async_store{loop.executor(), config};
  blocking store{async_store};
  const auto now = [] { return std::chrono::system_clock::now(); };
  const idem::claim_result first = store.claim({"tenant", "before", print(1), now(), 30s, 24h});
  REQUIRE(store.complete({"tenant", "before", first.fence}, "kept", now()));

  // Operations in flight when the server goes down (immediately, as in a crash).
  std::vector<std::string> names;
  for (int i = 0; i < 32; ++i)
    names.push_back("during-" + std::to_string(i));
  std::vector<std::future<idem::claim_result>> claims;
  for (const std::string& name : names) {
    claims.push_back(
        async_store.async_claim({"tenant", name, print(1), now(), 30s, 24h}, asio::use_future));
  }
  server.stop();
  std::vector<std::string> acknowledged;
  for (std::size_t i = 0; i < claims.size(); ++i) {
    REQUIRE(claims[i].wait_for(30s) == std::future_status::ready);
    try {
      if (claims[i].get().status == idem::claim_status::claimed) acknowledged.push_back(names[i]);
    } catch (const idem::store_error& error) {
      CHECK(error.failure() == idem::store_failure::unavailable);
    }
  }
  // Down: a clear error, not a hang.
  const std::optional<idem::store_error> down =
      failure_of([&] { return store.find("tenant", "before", now()); });
  REQUIRE(down.has_value());
  CHECK(down->failure() == idem::store_failure::unavailable);

  server.start();
  std::optional<idem::record> kept;
  CHECK(pgasync::eventually(
      [&] {
        try {
          kept = store.find("tenant", "before", now());
          return true;
        } catch (const idem::store_error&) {
          return false;
        }
      },
      20s));
  REQUIRE(kept.has_value());
  CHECK(kept->response == "kept");
  for (const std::string& name : acknowledged) {
    INFO(name);
    CHECK(store.find("tenant", name, now()).has_value());
  }
}
