// async_postgres_store::async_complete_within: a handler's own SQL, awaited on the transaction's
// connection, commits together with the record or not at all; postgres_store's semantics. And
// async_complete_with (commit_with's writes, the response known first): the whole transaction in
// one round trip where the writes send without awaiting (transaction::send, publish).
#include <catch2/catch.hpp>

#include <idem/store/postgres/async.hpp>

#include <chrono>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "async_postgres_support.hpp"

#include "support/records.hpp"

namespace async_postgres_within_test {

namespace pgtest = idem::testing::postgres;
namespace pgasync = idem::testing::postgres_async;
namespace asio = idem::asio;
using namespace std::chrono_literals;

using idem::testing::print;
using idem::testing::start;

namespace {

// A store on a fresh table, with an effects table beside it (dropped with it).
struct fixture {
  pgtest::table_guard table{pgtest::unique_table("within")};
  pgtest::connection admin;
  asio::io_context loop;
  idem::async_postgres_store store;
  fixture() {
    idem::async_postgres_store::options config = pgasync::caller_time_options(table.name);
    config.conninfo = pgasync::with_application(table.name);
    config.pool_size = 2;
    store = idem::async_postgres_store{loop.get_executor(), config};
    admin.exec("CREATE TABLE \"" + table.name + "_effects\" (key text NOT NULL)");
  }
  std::string effects() const { return "\"" + table.name + "_effects\""; }
  std::string insert_sql() const { return "INSERT INTO " + effects() + " VALUES ($1)"; }
  std::string count_sql() const { return "SELECT count(*) FROM " + effects(); }
  static idem::async_postgres_store::parameters key_k() { return {std::string("k")}; }
  static idem::fenced_key held_k(std::uint64_t fence) { return {"tenant", "k", fence}; }
  long long effect_count() { return admin.scalar("SELECT count(*) FROM " + effects()); }
  long long outbox_count() {
    return admin.scalar("SELECT count(*) FROM \"" + table.name + "_outbox\"");
  }
  // The store's sessions inside a transaction, as the server sees them now.
  long long open_transactions() {
    return admin.scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE xact_start IS NOT NULL AND "
        "application_name = '" +
        table.name + "'");
  }

  // Runs `body` on the loop until it is done; rethrows what it threw.
  template <class Body>
  void run(Body body) {
    std::exception_ptr thrown;
    asio::co_spawn(loop, std::move(body), [&](std::exception_ptr error) { thrown = error; });
    loop.restart();
    loop.run();
    if (thrown) std::rethrow_exception(thrown);
  }
};

}  // namespace

TEST_CASE("async_complete_within commits the handler's writes together with the record",
          "[postgres_async][transactional]") {
  fixture f;
  std::optional<bool> applied;
  std::optional<idem::record> found;
  std::string counted;
  bool checkpointed = false;
  f.run([&]() -> asio::awaitable<void> {
    const idem::claim_result held = co_await f.store.async_claim(
        {"tenant", "k", print(1), start, 30s, 24h}, asio::use_awaitable);
    applied = co_await f.store.async_complete_within(
        {"tenant", "k", held.fence}, start,
        [&](idem::async_postgres_store::transaction& txn) -> asio::awaitable<std::string> {
          // Named, not temporaries in the co_await expression: GCC 12 rejects a string
          // literal there ("array used as initializer").
          const std::string insert = f.insert_sql();
          (void)co_await txn.exec(insert, f.key_k());
          const std::string count = f.count_sql();
          const idem::postgres_result rows = co_await txn.exec(count);
          counted = std::string(rows.value(0, 0));
          const idem::fenced_key mine = f.held_k(held.fence);
          const std::string point = "step one";
          checkpointed = co_await txn.checkpoint(mine, point, start + 1min);
          co_return std::string("the response");
        },
        asio::use_awaitable);
    found = co_await f.store.async_find("tenant", "k", start, asio::use_awaitable);
  });
  REQUIRE(applied.has_value());
  CHECK(*applied);
  CHECK(counted == "1");  // the handler saw its own write
  CHECK(checkpointed);
  CHECK(f.effect_count() == 1);
  REQUIRE(found.has_value());
  CHECK(found->state == idem::record_state::completed);
  CHECK(found->response == "the response");
}

TEST_CASE("a handler that throws inside async_complete_within rolls back its writes and the record",
          "[postgres_async][transactional]") {
  fixture f;
  std::string passed_through;
  std::optional<idem::record> found;
  f.run([&]() -> asio::awaitable<void> {
    const idem::claim_result held = co_await f.store.async_claim(
        {"tenant", "k", print(1), start, 30s, 24h}, asio::use_awaitable);
    try {
      (void)co_await f.store.async_complete_within(
          {"tenant", "k", held.fence}, start,
          [&](idem::async_postgres_store::transaction& txn) -> asio::awaitable<std::string> {
            const std::string insert = f.insert_sql();
            (void)co_await txn.exec(insert, f.key_k());
            throw std::runtime_error("the handler's own failure");
          },
          asio::use_awaitable);
    } catch (const std::runtime_error& error) {
      passed_through = error.what();
    }
    found = co_await f.store.async_find("tenant", "k", start, asio::use_awaitable);
  });
  CHECK(passed_through == "the handler's own failure");
  CHECK(f.effect_count() == 0);
  REQUIRE(found.has_value());
  CHECK(found->state == idem::record_state::in_progress);
  // Its connection went back clean: no session of the store sits in a transaction.
  CHECK(f.admin.scalar("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in "
                       "transaction%' AND application_name = '" +
                       f.table.name + "'") == 0);
}

TEST_CASE(
    "a handler whose own SQL ends its record commits nothing: async_complete_within answers "
    "false",
    "[postgres_async][transactional]") {
  // The completion goes out with COMMIT behind it, in one round trip: it must keep that COMMIT
  // from running when it finds the record no longer in progress under the fence.
  fixture f;
  std::optional<bool> applied;
  std::optional<bool> again;
  std::optional<idem::record> found;
  f.run([&]() -> asio::awaitable<void> {
    const idem::claim_result held = co_await f.store.async_claim(
        {"tenant", "k", print(1), start, 30s, 24h}, asio::use_awaitable);
    applied = co_await f.store.async_complete_within(
        {"tenant", "k", held.fence}, start,
        [&](idem::async_postgres_store::transaction& txn) -> asio::awaitable<std::string> {
          const std::string insert = f.insert_sql();
          (void)co_await txn.exec(insert, f.key_k());
          const std::string release =
              "UPDATE \"" + f.table.name + "\" SET state = 2 WHERE key = convert_to('k', 'UTF8')";
          (void)co_await txn.exec(release);
          co_return std::string("never stored");
        },
        asio::use_awaitable);
    found = co_await f.store.async_find("tenant", "k", start, asio::use_awaitable);
    // Rolled back, the connection clean: the holder still completes.
    again = co_await f.store.async_complete_within(
        {"tenant", "k", held.fence}, start,
        [](idem::async_postgres_store::transaction&) -> asio::awaitable<std::string> {
          co_return std::string("ok");
        },
        asio::use_awaitable);
  });
  REQUIRE(applied.has_value());
  CHECK_FALSE(*applied);
  CHECK(f.effect_count() == 0);
  REQUIRE(found.has_value());
  CHECK(found->state == idem::record_state::in_progress);
  REQUIRE(again.has_value());
  CHECK(*again);
}

TEST_CASE("async_complete_within does not run the handler once the fence is gone",
          "[postgres_async][transactional]") {
  fixture f;
  int runs = 0;
  bool taken_over = false;
  std::optional<bool> applied;
  f.run([&]() -> asio::awaitable<void> {
    const idem::claim_result held = co_await f.store.async_claim(
        {"tenant", "k", print(1), start, 30s, 24h}, asio::use_awaitable);
    // Taken over after the lease: the old holder's fence is gone.
    const idem::claim_result taken = co_await f.store.async_claim(
        {"tenant", "k", print(1), start + 1min, 30s, 24h}, asio::use_awaitable);
    taken_over = taken.status == idem::claim_status::taken_over;
    applied = co_await f.store.async_complete_within(
        {"tenant", "k", held.fence}, start,
        [&](idem::async_postgres_store::transaction&) -> asio::awaitable<std::string> {
          ++runs;
          co_return std::string("stale");
        },
        asio::use_awaitable);
  });
  REQUIRE(applied.has_value());
  CHECK_FALSE(*applied);
  CHECK(taken_over);
  CHECK(runs == 0);
}

TEST_CASE(
    "a statement the handler sent without awaiting, refused by the server, fails "
    "async_complete_within as the handler's own exception and rolls everything back",
    "[postgres_async][transactional]") {
  // Met at the end, with COMMIT: the refusal is produce's failure, not the store's.
  fixture f;
  std::string sqlstate;
  std::optional<idem::record> found;
  f.run([&]() -> asio::awaitable<void> {
    const idem::claim_result held = co_await f.store.async_claim(
        {"tenant", "k", print(1), start, 30s, 24h}, asio::use_awaitable);
    try {
      (void)co_await f.store.async_complete_within(
          {"tenant", "k", held.fence}, start,
          [&](idem::async_postgres_store::transaction& txn) -> asio::awaitable<std::string> {
            txn.send(f.insert_sql(), f.key_k());
            txn.send("INSERT INTO idem_no_such_table VALUES (1)");
            co_return std::string("never stored");
          },
          asio::use_awaitable);
    } catch (const idem::postgres_error& error) {
      sqlstate = error.sqlstate();
    }
    found = co_await f.store.async_find("tenant", "k", start, asio::use_awaitable);
  });
  CHECK(sqlstate == "42P01");
  CHECK(f.effect_count() == 0);
  REQUIRE(found.has_value());
  CHECK(found->state == idem::record_state::in_progress);
  CHECK(f.open_transactions() == 0);
}

TEST_CASE("a serialization failure in async_complete_within rolls back and runs the handler again",
          "[postgres_async][transactional]") {
  fixture f;
  int runs = 0;
  std::optional<bool> applied;
  f.run([&]() -> asio::awaitable<void> {
    const idem::claim_result held = co_await f.store.async_claim(
        {"tenant", "k", print(1), start, 30s, 24h}, asio::use_awaitable);
    applied = co_await f.store.async_complete_within(
        {"tenant", "k", held.fence}, start,
        [&](idem::async_postgres_store::transaction& txn) -> asio::awaitable<std::string> {
          ++runs;
          const std::string insert = f.insert_sql();
          idem::async_postgres_store::parameters values{"run " + std::to_string(runs)};
          (void)co_await txn.exec(insert, values);
          if (runs == 1) throw idem::postgres_error("40001", "could not serialize access");
          co_return std::string("second time");
        },
        asio::use_awaitable);
  });
  REQUIRE(applied.has_value());
  CHECK(*applied);
  CHECK(runs == 2);
  // Only the second run's write committed.
  CHECK(f.effect_count() == 1);
  CHECK(f.admin.scalar("SELECT count(*) FROM " + f.effects() + " WHERE key = 'run 2'") == 1);
}

// --- async_complete_with ---------------------------------------------------------------------

namespace {

using transaction = idem::async_postgres_store::transaction;
using writes_type = transaction::writes_type;

// What one async_complete_with answered: its bool or what it threw, and its writes_failed.
struct completed_with {
  std::optional<bool> applied;
  std::exception_ptr thrown;
  std::exception_ptr writes_failed;
  std::optional<idem::record> found;
};

// Claims "k", runs `between` (a takeover, or nothing), completes the first claim with `writes`.
template <class Between>
completed_with complete_with(fixture& f, const writes_type& writes, Between between) {
  completed_with seen;
  f.run([&]() -> asio::awaitable<void> {
    const idem::claim_result held = co_await f.store.async_claim(
        {"tenant", "k", print(1), start, 30s, 24h}, asio::use_awaitable);
    co_await between();
    try {
      seen.applied =
          co_await f.store.async_complete_with(f.held_k(held.fence), start, "the response", writes,
                                               seen.writes_failed, asio::use_awaitable);
    } catch (...) {
      seen.thrown = std::current_exception();
    }
    seen.found = co_await f.store.async_find("tenant", "k", start, asio::use_awaitable);
  });
  return seen;
}
completed_with complete_with(fixture& f, const writes_type& writes) {
  return complete_with(f, writes, []() -> asio::awaitable<void> { co_return; });
}

std::string sqlstate_of(const std::exception_ptr& thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const idem::postgres_error& error) {
    return error.sqlstate();
  } catch (...) {
    return "not a postgres_error";
  }
}

}  // namespace

TEST_CASE(
    "async_complete_with sends BEGIN, the completion, the writes and COMMIT together, and they "
    "commit with the record",
    "[postgres_async][transactional][complete_with]") {
  fixture f;
  long long open_while_writing = -1;
  std::string id;
  const writes_type writes = [&](transaction& tx) -> asio::awaitable<void> {
    tx.send(f.insert_sql(), f.key_k());
    const idem::outbox_message message{"payments", "k", "{}", {}};
    id = co_await tx.publish("done", message);
    // Nothing has reached the server yet: no session of the store has a transaction open (the
    // completion awaited before the writes, as async_complete_within awaits the lock, would
    // have one open here).
    open_while_writing = f.open_transactions();
  };
  const completed_with seen = complete_with(f, writes);
  CHECK(open_while_writing == 0);
  if (seen.thrown) std::rethrow_exception(seen.thrown);
  REQUIRE(seen.applied.has_value());
  CHECK(*seen.applied);
  CHECK_FALSE(seen.writes_failed);
  CHECK(id == idem::outbox_message_id("tenant", "k", "done"));
  CHECK(f.effect_count() == 1);
  CHECK(f.outbox_count() == 1);
  REQUIRE(seen.found.has_value());
  CHECK(seen.found->state == idem::record_state::completed);
  CHECK(seen.found->response == "the response");
}

TEST_CASE(
    "async_complete_with after a takeover answers false: the writes commit nothing, and what "
    "they met is not theirs",
    "[postgres_async][transactional][complete_with]") {
  fixture f;
  std::string exec_met;
  const writes_type writes = [&](transaction& tx) -> asio::awaitable<void> {
    tx.send(f.insert_sql(), f.key_k());
    try {
      // Awaited: the completion's refusal (the record is not in progress under this fence)
      // comes first, and is what exec throws.
      (void)co_await tx.exec(f.count_sql());
    } catch (const idem::postgres_error& error) {
      exec_met = error.sqlstate();
      throw;
    }
  };
  bool taken_over = false;
  const completed_with seen = complete_with(f, writes, [&]() -> asio::awaitable<void> {
    const idem::claim_result taken = co_await f.store.async_claim(
        {"tenant", "k", print(1), start + 1min, 30s, 24h}, asio::use_awaitable);
    taken_over = taken.status == idem::claim_status::taken_over;
  });
  CHECK(taken_over);
  CHECK(exec_met == "22012");
  CHECK_FALSE(seen.thrown);
  REQUIRE(seen.applied.has_value());
  CHECK_FALSE(*seen.applied);
  CHECK_FALSE(seen.writes_failed);
  CHECK(f.effect_count() == 0);
  REQUIRE(seen.found.has_value());
  CHECK(seen.found->state == idem::record_state::in_progress);
  CHECK(f.open_transactions() == 0);
}

TEST_CASE(
    "a statement the writes sent that the server refuses rolls back, and is the writes' "
    "failure",
    "[postgres_async][transactional][complete_with]") {
  fixture f;
  const std::string missing = "INSERT INTO \"" + f.table.name + "_nowhere\" VALUES (1)";
  std::string exec_met;
  bool awaits = false;
  const writes_type writes = [&](transaction& tx) -> asio::awaitable<void> {
    tx.send(missing);
    const idem::outbox_message message{"payments", "k", "{}", {}};
    (void)co_await tx.publish("done", message);
    if (awaits) {
      try {
        (void)co_await tx.exec(f.count_sql());
      } catch (const idem::postgres_error& error) {
        // The sent statement's own refusal, not "aborted".
        exec_met = error.sqlstate();
        throw;
      }
    }
  };
  SECTION("met at the end") {}
  SECTION("met by the next exec") {
    awaits = true;
  }
  const completed_with seen = complete_with(f, writes);
  REQUIRE(seen.thrown);
  CHECK(sqlstate_of(seen.thrown) == "42P01");  // undefined_table
  REQUIRE(seen.writes_failed);
  CHECK(sqlstate_of(seen.writes_failed) == "42P01");
  if (awaits) CHECK(exec_met == "42P01");
  CHECK(f.effect_count() == 0);
  CHECK(f.outbox_count() == 0);
  REQUIRE(seen.found.has_value());
  CHECK(seen.found->state == idem::record_state::in_progress);
  CHECK(f.open_transactions() == 0);
}

TEST_CASE("writes that throw inside async_complete_with roll back, and their exception is kept",
          "[postgres_async][transactional][complete_with]") {
  fixture f;
  const writes_type writes = [&](transaction& tx) -> asio::awaitable<void> {
    tx.send(f.insert_sql(), f.key_k());
    co_await asio::post(asio::use_awaitable);
    throw std::runtime_error("the writes' own failure");
  };
  const completed_with seen = complete_with(f, writes);
  REQUIRE(seen.thrown);
  REQUIRE(seen.writes_failed);
  CHECK(seen.writes_failed == seen.thrown);
  CHECK_THROWS_WITH(std::rethrow_exception(seen.thrown), "the writes' own failure");
  CHECK(f.effect_count() == 0);
  REQUIRE(seen.found.has_value());
  CHECK(seen.found->state == idem::record_state::in_progress);
  CHECK(f.open_transactions() == 0);
}

TEST_CASE("a serialization failure a sent statement meets runs the writes again",
          "[postgres_async][transactional][complete_with]") {
  fixture f;
  int runs = 0;
  const writes_type writes = [&](transaction& tx) -> asio::awaitable<void> {
    ++runs;
    if (runs == 1) {
      tx.send("DO $$ BEGIN RAISE EXCEPTION 'could not serialize' USING ERRCODE = '40001'; END $$");
    }
    tx.send(f.insert_sql(), {"run " + std::to_string(runs)});
    co_return;
  };
  const completed_with seen = complete_with(f, writes);
  if (seen.thrown) std::rethrow_exception(seen.thrown);
  REQUIRE(seen.applied.has_value());
  CHECK(*seen.applied);
  CHECK_FALSE(seen.writes_failed);
  CHECK(runs == 2);
  CHECK(f.effect_count() == 1);
  CHECK(f.admin.scalar("SELECT count(*) FROM " + f.effects() + " WHERE key = 'run 2'") == 1);
}

}  // namespace async_postgres_within_test
