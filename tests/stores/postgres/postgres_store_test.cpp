// postgres_store against a real PostgreSQL server: the store conformance suite (caller time, so
// the suite's manual clock rules), then what is particular to it: replicas creating its schema
// at once, the server's clock, transactional completion, and a storm under two isolation
// levels. The migration itself, and the statements' SQL, are tested alone in
// postgres_sql_test.cpp.
#include <catch2/catch.hpp>

#include <idem/outbox/message.hpp>
#include <idem/store/postgres.hpp>
#include <idem/testing/inspect_conformance.hpp>
#include <idem/testing/reconciler_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "postgres_test_support.hpp"

#include "support/records.hpp"
#include "support/thread_errors.hpp"

namespace postgres_store_test {

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;

using idem::testing::print;
using idem::testing::start;

namespace {

// A fresh table per store; dropped when the test case ends.
struct postgres_factory {
  static constexpr bool bounded = false;
  std::vector<std::string> tables;
  idem::postgres_store make(const idem::testing::store_limits& /*limits*/) {
    idem::postgres_store::options config = pgtest::caller_time_options(pgtest::unique_table("c"));
    config.pool_size = 64;  // the suite's storm runs 64 threads
    tables.push_back(config.table);
    return idem::postgres_store{config};
  }
  postgres_factory() = default;
  postgres_factory(const postgres_factory&) = delete;
  postgres_factory& operator=(const postgres_factory&) = delete;
  ~postgres_factory() {
    for (const std::string& table : tables)
      pgtest::drop_table(pgtest::conninfo(), table);
  }
};

idem::claim_request ask(std::string_view key, idem::store_time now,
                        std::chrono::nanoseconds lease = 30s) {
  return idem::claim_request{"tenant", key, print(1), now, lease, 24h};
}

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(postgres_factory)
IDEM_INSPECT_CONFORMANCE_TESTS(postgres_factory)
IDEM_RECONCILER_CONFORMANCE_TESTS(postgres_factory)

// ---- schema ------------------------------------------------------------------------------

TEST_CASE("replicas starting at once migrate the table exactly once", "[postgres][concurrency]") {
  pgtest::table_guard table(pgtest::unique_table("migrate"));
  const idem::postgres_store::options config = pgtest::caller_time_options(table.name);
  std::atomic<int> failures{0};
  std::vector<std::thread> replicas;
  replicas.reserve(8);
  for (int i = 0; i < 8; ++i) {
    replicas.emplace_back([&] {
      try {
        idem::postgres_store store{config};
        (void)store.find("tenant", "key", start);
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (std::thread& replica : replicas)
    replica.join();
  CHECK(failures == 0);
  pgtest::connection check;
  CHECK(check.scalar("SELECT count(*) FROM \"" + table.name + "_meta\"") == 1);
  // Version 4, the current schema: the records, the outbox, what its relay needs, then the
  // lease index of the records in progress.
  CHECK(check.scalar("SELECT version FROM \"" + table.name + "_meta\"") == 4);
}

TEST_CASE("a configured schema is created, and names that are not identifiers are refused",
          "[postgres]") {
  const std::string schema = pgtest::unique_table("schema");
  idem::postgres_store::options config = pgtest::caller_time_options("records");
  config.schema = schema;
  {
    idem::postgres_store store{config};
    const auto claimed = store.claim(ask("key", start));
    CHECK(claimed.status == idem::claim_status::claimed);
    pgtest::connection check;
    CHECK(check.scalar("SELECT count(*) FROM \"" + schema + "\".records") == 1);
    check.exec("DROP SCHEMA \"" + schema + "\" CASCADE");
  }
  for (const char* bad : {"", "has space", "quote\"d", "1starts_with_digit", "semi;colon",
                          "a_name_that_is_far_too_long_for_postgres_identifiers_x"}) {
    INFO("name '" << bad << "'");
    idem::postgres_store::options named = pgtest::caller_time_options(bad);
    CHECK_THROWS_AS(idem::postgres_store{named}, std::invalid_argument);
    named = pgtest::caller_time_options("fine");
    named.schema = bad;
    CHECK_THROWS_AS(idem::postgres_store{named}, std::invalid_argument);
  }
}

// ---- the server's clock ------------------------------------------------------------------

TEST_CASE("with server time, replicas whose clocks disagree wildly agree on leases and expiry",
          "[postgres]") {
  pgtest::table_guard table(pgtest::unique_table("clock"));
  idem::postgres_store::options config;
  config.conninfo = pgtest::conninfo();
  config.table = table.name;
  idem::postgres_store replica_a{config};
  idem::postgres_store replica_b{config};
  // Replica A's clock says 1990, replica B's says 2100: in caller time B would find every lease
  // of A long gone and every record expired.
  const idem::store_time in_1990{std::chrono::seconds{631152000}};
  const idem::store_time in_2100{std::chrono::seconds{4102444800}};

  const auto claimed = replica_a.claim(ask("held", in_1990, 30s));
  REQUIRE(claimed.status == idem::claim_status::claimed);
  const auto blocked = replica_b.claim(ask("held", in_2100, 30s));
  CHECK(blocked.status == idem::claim_status::existing);
  CHECK(blocked.existing.lease_until - blocked.existing.created_at == 30s);
  // The times are the server's (now-ish), not either caller's.
  const auto server_now = std::chrono::system_clock::now();
  CHECK(blocked.existing.created_at > server_now - 1h);
  CHECK(blocked.existing.created_at < server_now + 1h);
  CHECK(replica_b.find("tenant", "held", in_2100));
  CHECK(replica_a.stuck(in_2100, 10).empty());
  CHECK(replica_b.sweep(in_2100) == 0);

  // A short real lease: once it has passed on the server's clock, B takes over, whatever the
  // clock B was given says.
  const auto short_claim = replica_a.claim(ask("short", in_2100, 200ms));
  REQUIRE(short_claim.status == idem::claim_status::claimed);
  std::this_thread::sleep_for(400ms);
  CHECK(replica_b.stuck(in_1990, 10).size() == 1);
  const auto taken = replica_b.claim(ask("short", in_1990, 30s));
  CHECK(taken.status == idem::claim_status::taken_over);
  CHECK(taken.fence == 2);
  CHECK_FALSE(replica_a.complete({"tenant", "short", short_claim.fence}, "stale", in_2100));
  CHECK(replica_b.complete({"tenant", "short", taken.fence}, "done", in_1990));

  // A checkpoint's lease, given on the caller's clock, lands as the same distance ahead on the
  // server's.
  const auto renewed = replica_a.claim(ask("renewed", in_1990, 30s));
  REQUIRE(replica_a.checkpoint({"tenant", "renewed", renewed.fence}, "step",
                               std::chrono::system_clock::now() + 1h));
  const auto found = replica_b.find("tenant", "renewed", in_2100);
  REQUIRE(found);
  CHECK(found->lease_until > found->created_at + 50min);
  CHECK(found->lease_until < found->created_at + 70min);
}

// ---- transactional completion ------------------------------------------------------------

namespace {

struct transactional_fixture {
  pgtest::table_guard table{pgtest::unique_table("txn")};
  std::string effects = "\"" + table.name + "_effects\"";
  idem::postgres_store store;
  pgtest::connection check;

  explicit transactional_fixture(
      idem::postgres_store::isolation level = idem::postgres_store::isolation::read_committed,
      std::size_t pool = 8, unsigned retries = 10) {
    idem::postgres_store::options config = pgtest::caller_time_options(table.name);
    config.transaction_isolation = level;
    config.pool_size = pool;
    config.max_serialization_retries = retries;
    store = idem::postgres_store{config};
    check.exec("CREATE TABLE " + effects + " (key text NOT NULL, fence int8 NOT NULL)");
  }
  long long effects_of(const std::string& key) {
    return check.scalar("SELECT count(*) FROM " + effects + " WHERE key = '" + key + "'");
  }
  std::string insert_effect(const std::string& key, std::uint64_t fence) const {
    return "INSERT INTO " + effects + " VALUES ('" + key + "', " + std::to_string(fence) + ")";
  }
};

struct declined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

TEST_CASE("complete_within commits the handler's writes together with the record",
          "[postgres][transactional]") {
  transactional_fixture f;
  const auto claimed = f.store.claim(ask("k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  const bool applied =
      f.store.complete_within(held, start, [&](idem::postgres_store::transaction& txn) {
        txn.exec(f.insert_effect("k", claimed.fence));
        // The handler sees its own write, inside the transaction.
        const idem::postgres_result seen =
            txn.exec("SELECT count(*) FROM " + f.effects + " WHERE key = $1", {"k"});
        CHECK(seen.value(0, 0) == "1");
        CHECK(PQtransactionStatus(txn.connection()) == PQTRANS_INTRANS);
        return std::string("response bytes");
      });
  CHECK(applied);
  CHECK(f.effects_of("k") == 1);
  const auto found = f.store.find("tenant", "k", start);
  REQUIRE(found);
  CHECK(found->state == idem::record_state::completed);
  CHECK(found->response == "response bytes");
}

TEST_CASE("a handler that throws inside complete_within rolls back its writes and the record",
          "[postgres][transactional]") {
  transactional_fixture f;
  const auto claimed = f.store.claim(ask("k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  try {
    (void)f.store.complete_within(held, start, [&](idem::postgres_store::transaction& txn) {
      txn.exec(f.insert_effect("k", claimed.fence));
      REQUIRE(txn.checkpoint(held, "step", start + 1h));
      throw declined("card declined");
      return std::string{};
    });
    FAIL("the handler's exception did not pass through");
  } catch (const declined& error) {
    CHECK(std::string(error.what()) == "card declined");
  }
  CHECK(f.effects_of("k") == 0);
  const auto found = f.store.find("tenant", "k", start);
  REQUIRE(found);
  CHECK(found->state == idem::record_state::in_progress);
  CHECK(found->recovery.empty());
  CHECK(found->lease_until == start + 30s);
  // An SQL error of the handler's own passes through as postgres_error, with its SQLSTATE.
  try {
    (void)f.store.complete_within(held, start, [&](idem::postgres_store::transaction& txn) {
      txn.exec("SELECT * FROM no_such_table_here");
      return std::string{};
    });
    FAIL("the SQL error did not pass through");
  } catch (const idem::postgres_error& error) {
    CHECK(error.sqlstate() == "42P01");
    CHECK_FALSE(error.retryable());
  }
  // The connection went back clean: the holder still completes.
  CHECK(f.store.complete_within(
      held, start, [](idem::postgres_store::transaction&) { return std::string("ok"); }));
}

TEST_CASE("complete_within does not run the handler once the fence is gone",
          "[postgres][transactional]") {
  transactional_fixture f;
  const auto first = f.store.claim(ask("k", start));
  const auto second = f.store.claim(ask("k", start + 31s));
  REQUIRE(second.status == idem::claim_status::taken_over);
  int runs = 0;
  const auto handler = [&](idem::postgres_store::transaction&) {
    ++runs;
    return std::string("stale");
  };
  CHECK_FALSE(f.store.complete_within({"tenant", "k", first.fence}, start, handler));
  CHECK(runs == 0);
  REQUIRE(f.store.release({"tenant", "k", second.fence}));
  CHECK_FALSE(f.store.complete_within({"tenant", "k", second.fence}, start, handler));
  CHECK_FALSE(f.store.complete_within({"tenant", "nobody", 1}, start, handler));
  CHECK(runs == 0);
}

TEST_CASE("a handler whose own SQL ends its record commits nothing: complete_within answers false",
          "[postgres][transactional]") {
  // The completion goes out with COMMIT behind it, in one round trip: it must keep that COMMIT
  // from running when it finds the record no longer in progress under the fence.
  transactional_fixture f;
  const auto claimed = f.store.claim(ask("k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  const bool applied =
      f.store.complete_within(held, start, [&](idem::postgres_store::transaction& txn) {
        txn.exec(f.insert_effect("k", claimed.fence));
        txn.exec("UPDATE \"" + f.table.name +
                 "\" SET state = 2 WHERE key = convert_to('k', 'UTF8')");
        return std::string("never stored");
      });
  CHECK_FALSE(applied);
  CHECK(f.effects_of("k") == 0);
  const auto found = f.store.find("tenant", "k", start);
  REQUIRE(found);
  CHECK(found->state == idem::record_state::in_progress);
  // Rolled back, the connection clean: the holder still completes.
  CHECK(f.store.complete_within(
      held, start, [](idem::postgres_store::transaction&) { return std::string("ok"); }));
  CHECK(f.store.find("tenant", "k", start)->response == "ok");
}

TEST_CASE("a checkpoint inside complete_within commits with it", "[postgres][transactional]") {
  transactional_fixture f;
  const auto claimed = f.store.claim(ask("k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  std::string recovery_seen;
  REQUIRE(f.store.complete_within(held, start, [&](idem::postgres_store::transaction& txn) {
    CHECK(txn.checkpoint(held, "charged", start + 1h));
    CHECK_FALSE(txn.checkpoint({"tenant", "k", claimed.fence + 1}, "other fence", start + 1h));
    return std::string("done");
  }));
  const auto found = f.store.find("tenant", "k", start);
  REQUIRE(found);
  CHECK(found->state == idem::record_state::completed);
  // Completing clears the recovery points; the checkpoint took the lease with it.
  CHECK(found->recovery.empty());
  CHECK(found->lease_until == start + 1h);
}

TEST_CASE("serialization failures roll back and run the handler again, a bounded number of times",
          "[postgres][transactional]") {
  transactional_fixture f(idem::postgres_store::isolation::serializable, 4, 3);
  const auto claimed = f.store.claim(ask("k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  int runs = 0;
  // Fails twice as a real conflict would (the effect written first is rolled back), then goes.
  REQUIRE(f.store.complete_within(held, start, [&](idem::postgres_store::transaction& txn) {
    ++runs;
    txn.exec(f.insert_effect("k", claimed.fence));
    if (runs == 1) throw idem::postgres_error("40001", "could not serialize access");
    if (runs == 2) throw idem::postgres_error("40P01", "deadlock detected");
    return std::string("third time");
  }));
  CHECK(runs == 3);
  CHECK(f.effects_of("k") == 1);

  const auto other = f.store.claim(ask("other", start));
  runs = 0;
  try {
    (void)f.store.complete_within({"tenant", "other", other.fence}, start,
                                  [&](idem::postgres_store::transaction& txn) -> std::string {
                                    ++runs;
                                    txn.exec(f.insert_effect("other", other.fence));
                                    throw idem::postgres_error("40001", "always conflicting");
                                  });
    FAIL("complete_within retried without bound");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Catch::Matchers::Contains("gave up after 4"));
  }
  CHECK(runs == 4);
  CHECK(f.effects_of("other") == 0);
  CHECK(f.store.find("tenant", "other", start)->state == idem::record_state::in_progress);
}

TEST_CASE("a real serialization failure met through exec is retried",
          "[postgres][transactional][concurrency]") {
  transactional_fixture f(idem::postgres_store::isolation::serializable, 4, 10);
  f.check.exec("CREATE TABLE \"" + f.table.name + "_effects_counter\" (n int8)");
  f.check.exec("INSERT INTO \"" + f.table.name + "_effects_counter\" VALUES (0)");
  const std::string counter = "\"" + f.table.name + "_effects_counter\"";
  const auto claimed = f.store.claim(ask("k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  int runs = 0;
  bool swallowed = false;
  REQUIRE(f.store.complete_within(held, start, [&](idem::postgres_store::transaction& txn) {
    ++runs;
    const idem::postgres_result before = txn.exec("SELECT n FROM " + counter);
    if (runs == 1) {
      // Another session changes the row this transaction has read, and commits first.
      f.check.exec("UPDATE " + counter + " SET n = n + 100");
      try {
        txn.exec("UPDATE " + counter + " SET n = n + 1");
      } catch (const idem::postgres_error& error) {
        CHECK(error.retryable());
        swallowed = true;  // even swallowed, the failure is remembered and retried
      }
      return std::string("first");
    }
    txn.exec("UPDATE " + counter + " SET n = n + 1");
    return std::string("second, after ") + std::string(before.value(0, 0));
  }));
  CHECK(swallowed);
  CHECK(runs == 2);
  CHECK(f.check.scalar("SELECT n FROM " + counter) == 101);
  CHECK(f.store.find("tenant", "k", start)->response == "second, after 100");
  f.check.exec("DROP TABLE " + counter);
}

// ---- the storm ---------------------------------------------------------------------------

namespace {

// 64 threads, each on its own connection, race over the same 1,000 keys in their own orders.
// Whoever claims a key writes its effect (a row) and bumps a shared counter inside
// complete_within; every key must end with exactly one effect row and a completed record.
// Under SERIALIZABLE the completions collide (on the 16 counters and, since schema version 4,
// on the in-progress index's pages): ~5,000 retries in all, up to ~60 for one key under TSan
// alone on 2 cores, more beside other tests. The cap is set far above that: what is tested is
// one effect per key, not how long the slowest key takes; giving up is tested on its own above.
void storm(idem::postgres_store::isolation level) {
  constexpr int threads = 64;
  constexpr int keys = 1000;
  transactional_fixture f(level, threads, 1000);
  const std::string buckets = "\"" + f.table.name + "_buckets\"";
  f.check.exec("CREATE TABLE " + buckets + " (id int4 PRIMARY KEY, n int8 NOT NULL)");
  f.check.exec("INSERT INTO " + buckets + " SELECT g, 0 FROM generate_series(0, 15) g");

  std::atomic<int> claimed{0}, existing{0}, runs{0}, lost{0};
  idem::testing::thread_errors errors;
  std::vector<std::atomic<int>> runs_of(keys);  // how many times each key's handler ran
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<int> order(keys);
      for (int i = 0; i < keys; ++i)
        order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(t)));
      try {
        for (const int index : order) {
          const std::string key = "key-" + std::to_string(index);
          const auto claim = f.store.claim({"storm", key, print(2), start, 1h, 24h});
          if (claim.status != idem::claim_status::claimed) {
            ++existing;
            continue;
          }
          ++claimed;
          const bool applied = f.store.complete_within(
              {"storm", key, claim.fence}, start, [&](idem::postgres_store::transaction& txn) {
                ++runs;
                ++runs_of[static_cast<std::size_t>(index)];
                txn.exec(f.insert_effect(key, claim.fence));
                txn.exec("UPDATE " + buckets + " SET n = n + 1 WHERE id = $1",
                         {std::to_string(index % 16)});
                return "response " + key;
              });
          if (!applied) ++lost;
        }
      } catch (const std::exception& error) {
        errors.add("thread " + std::to_string(t) + ": " + error.what());
      }
    });
  }
  for (std::thread& thread : pool)
    thread.join();

  errors.report();
  CHECK(errors.count() == 0);
  CHECK(lost == 0);
  CHECK(claimed == keys);
  CHECK(claimed + existing == threads * keys);
  CHECK(f.check.scalar("SELECT count(*) FROM " + f.effects) == keys);
  CHECK(f.check.scalar("SELECT count(DISTINCT key) FROM " + f.effects) == keys);
  CHECK(f.check.scalar("SELECT sum(n) FROM " + buckets) == keys);
  CHECK(f.check.scalar("SELECT count(*) FROM \"" + f.table.name + "\" WHERE state = 1") == keys);
  int most = 0;
  for (const std::atomic<int>& n : runs_of)
    most = std::max(most, n.load());
  WARN("storm: " << keys << " keys, " << threads << " threads, handler runs " << runs.load()
                 << " (serialization retries " << runs.load() - keys << ", at most " << most - 1
                 << " for one key)");
  f.check.exec("DROP TABLE " + buckets);
}

}  // namespace

TEST_CASE("64 connections storm 1000 keys: one effect per key under READ COMMITTED",
          "[postgres][transactional][concurrency]") {
  storm(idem::postgres_store::isolation::read_committed);
}

TEST_CASE("64 connections storm 1000 keys: one effect per key under SERIALIZABLE",
          "[postgres][transactional][concurrency]") {
  storm(idem::postgres_store::isolation::serializable);
}

// ---- through idempotent and inbox ----------------------------------------------------------

static_assert(idem::TransactionalStore<idem::postgres_store>);

namespace {

struct postgres_policies : idem::default_policies {
  using store = idem::postgres_store;
  using clock = idem::manual_clock;
};

}  // namespace

TEST_CASE("idempotent runs a handler taking the transaction inside the one that completes it",
          "[postgres][transactional]") {
  transactional_fixture f;
  int runs = 0;
  int charges = 0;
  auto handler = [&](idem::handler_context& ctx, const idem::http_request& request,
                     idem::postgres_store::transaction& txn) {
    ++runs;
    const int charge = ctx.step("charge", [&] { return ++charges; });
    txn.exec(f.insert_effect(std::string(ctx.key()), ctx.fence()));
    if (request.body == "decline") throw declined("card declined");
    return idem::http_response{201, {}, "charge " + std::to_string(charge)};
  };
  idem::idempotent<decltype(handler), postgres_policies> payments{
      handler, {.store = f.store, .clock = idem::manual_clock{start}}};
  const idem::http_request order{"POST", "/pay", {}, "100"};

  auto first = payments("tenant", "order-1", order);
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first.recorded());
  CHECK(first->body == "charge 1");
  auto again = payments("tenant", "order-1", order);
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again->body == "charge 1");
  CHECK(runs == 1);
  CHECK(f.effects_of("order-1") == 1);

  // A throw rolls back the handler's insert and releases the key.
  const idem::http_request decline{"POST", "/pay", {}, "decline"};
  CHECK_THROWS_AS(payments("tenant", "order-2", decline), declined);
  CHECK(f.effects_of("order-2") == 0);
  CHECK_FALSE(f.store.find("tenant", "order-2", start));

  // The inbox, on the same store: the consumer's insert commits with the event's record.
  idem::inbox<postgres_policies> consumed{{.store = f.store, .clock = idem::manual_clock{start}}};
  auto consume = [&](idem::handler_context& ctx, idem::postgres_store::transaction& txn) {
    txn.exec(f.insert_effect(std::string(ctx.key()), ctx.fence()));
  };
  CHECK(consumed.deduplicate("events", "e-1", consume).verdict() == idem::verdict::executed);
  CHECK(consumed.deduplicate("events", "e-1", consume).verdict() == idem::verdict::replayed);
  CHECK(f.effects_of("e-1") == 1);
}

TEST_CASE(
    "idempotent runs a handler answering commit_with outside any transaction, holding no "
    "connection, and makes its writes and message in the one that completes the record",
    "[postgres][transactional][commit_with]") {
  // One connection. The first call's handler, while it runs, has a second call of another key
  // answered on the same thread: with no connection held by the first, the second gets it.
  transactional_fixture f{idem::postgres_store::isolation::read_committed, 1};
  using committed = idem::commit_with<idem::http_response, idem::postgres_store::transaction>;
  int charges = 0;
  auto writes = [&f](std::string key, std::uint64_t fence) {
    return [&f, key = std::move(key), fence](idem::postgres_store::transaction& txn) {
      txn.exec(f.insert_effect(key, fence));
      (void)txn.publish("charged", idem::outbox_message{"charges", key, "payload", {}});
    };
  };
  auto quick = [&](idem::handler_context& ctx, const idem::http_request&) -> committed {
    return {idem::http_response{201, {}, "quick"}, writes(std::string(ctx.key()), ctx.fence())};
  };
  idem::idempotent<decltype(quick), postgres_policies> other{
      quick, {.store = f.store, .clock = idem::manual_clock{start}}};
  auto handler = [&](idem::handler_context& ctx, const idem::http_request& request) -> committed {
    const int charge = ctx.step("charge", [&] { return ++charges; });
    if (request.body == "nested") {
      CHECK(other("tenant", "inner", request).verdict() == idem::verdict::executed);
    }
    return {idem::http_response{201, {}, "charge " + std::to_string(charge)},
            writes(std::string(ctx.key()), ctx.fence())};
  };
  idem::idempotent<decltype(handler), postgres_policies> payments{
      handler, {.store = f.store, .clock = idem::manual_clock{start}}};
  const idem::http_request nested{"POST", "/pay", {}, "nested"};

  const auto first = payments("tenant", "order-1", nested);
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first.recorded());
  CHECK(first->body == "charge 1");
  const auto again = payments("tenant", "order-1", nested);
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again->body == "charge 1");
  CHECK(charges == 1);
  CHECK(f.effects_of("order-1") == 1);
  CHECK(f.effects_of("inner") == 1);
  CHECK(f.check.scalar("SELECT count(*) FROM \"" + f.table.name + "_outbox\"") == 2);
}

}  // namespace postgres_store_test
