// The store failing at each step of the protocol with postgres_store behind the faults, and real
// faults on the server scripts/test.sh started (IDEM_TEST_PG_CONNINFO): a lock held by another
// session past the statement timeout, at the claim (the table) and at the completion (the
// record's row), and the store's connections terminated (pg_terminate_backend) mid-request.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <idem/store/postgres.hpp>

#include "fault_matrix.hpp"
#include "stores/postgres/postgres_test_support.hpp"

namespace faults = idem::testing::faults;
namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;

namespace {

// One table for the test case, emptied for each store the matrix asks for.
struct postgres_factory {
  std::string table = pgtest::unique_table("faults");
  pgtest::connection admin;
  idem::postgres_store store{pgtest::caller_time_options(table)};

  postgres_factory() = default;
  postgres_factory(const postgres_factory&) = delete;
  postgres_factory& operator=(const postgres_factory&) = delete;
  ~postgres_factory() { pgtest::drop_table(pgtest::conninfo(), table); }

  idem::postgres_store operator()() {
    admin.exec("DELETE FROM \"" + table + "\"");
    return store;
  }
};

// A store on its own table whose sessions carry their own application_name, with a short
// statement timeout.
struct real_store {
  std::string table = pgtest::unique_table("real_faults");
  std::string application = table;
  idem::postgres_store store = [this] {
    idem::postgres_store::options config = pgtest::caller_time_options(table);
    config.conninfo += " application_name=" + application;
    config.statement_timeout = 300ms;
    return idem::postgres_store{config};
  }();

  real_store() = default;
  real_store(const real_store&) = delete;
  real_store& operator=(const real_store&) = delete;
  ~real_store() { pgtest::drop_table(pgtest::conninfo(), table); }
};

}  // namespace

IDEM_FAULT_MATRIX_TESTS("postgres", postgres_factory)

TEST_CASE("a table locked past the statement timeout at the claim: 503, nothing runs",
          "[faults][postgres]") {
  real_store made;
  idem::manual_clock clock;
  faults::charging handler;
  auto payments = faults::guard_real(made.store, clock, handler);

  {
    pgtest::connection other;
    other.exec("BEGIN; LOCK TABLE \"" + made.table + "\" IN ACCESS EXCLUSIVE MODE");
    const auto refused = (*payments)("tenant", "order-1", std::string("10 EUR"));
    CHECK(refused.verdict() == idem::verdict::store_unavailable);
    CHECK_THAT(std::string(refused.message()), Catch::Matchers::Contains("idem::postgres_store") &&
                                                   Catch::Matchers::Contains("statement timeout"));
    CHECK(handler.downstream.calls() == 0);
    other.exec("ROLLBACK");
  }
  faults::observed seen;
  const std::string on_record = faults::call_until_recorded(*payments, clock, std::string("10 EUR"),
                                                            seen, "idem::postgres_store");
  faults::require_replays(*payments, clock, std::string("10 EUR"), seen, on_record);
  CHECK(handler.downstream.calls() == 1);
}

TEST_CASE(
    "the record's row locked past the statement timeout at the completion: told not "
    "stored, then one effect and the same response",
    "[faults][postgres]") {
  real_store made;
  idem::manual_clock clock;
  faults::charging handler;
  auto payments = faults::guard_real(made.store, clock, handler);

  pgtest::connection other;
  *handler.after_step = [&] {
    other.exec("BEGIN; SELECT 1 FROM \"" + made.table +
               "\" WHERE key = convert_to('order-1', 'UTF8') FOR UPDATE");
  };
  const auto first = (*payments)("tenant", "order-1", std::string("10 EUR"));
  CHECK(first.verdict() == idem::verdict::executed);
  CHECK_FALSE(first.recorded());
  CHECK_THAT(std::string(first.message()), Catch::Matchers::Contains("not stored") &&
                                               Catch::Matchers::Contains("statement timeout"));
  other.exec("ROLLBACK");

  faults::observed seen;
  seen.responses.push_back(first.value());
  const std::string on_record = faults::call_until_recorded(*payments, clock, std::string("10 EUR"),
                                                            seen, "idem::postgres_store");
  faults::require_replays(*payments, clock, std::string("10 EUR"), seen, on_record);
  CHECK(handler.downstream.calls() == 1);
}

TEST_CASE(
    "the store's sessions terminated mid-request: one effect, the same response, and "
    "the store reconnects",
    "[faults][postgres]") {
  real_store made;
  idem::manual_clock clock;
  faults::charging handler;
  auto payments = faults::guard_real(made.store, clock, handler);

  pgtest::connection admin;
  long long terminated = 0;
  *handler.after_step = [&] {
    terminated = admin.scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '" +
        made.application + "'");
  };
  faults::observed seen;
  const std::string on_record = faults::call_until_recorded(*payments, clock, std::string("10 EUR"),
                                                            seen, "idem::postgres_store");
  CHECK(terminated >= 1);
  faults::require_replays(*payments, clock, std::string("10 EUR"), seen, on_record);
  CHECK(handler.downstream.calls() == 1);
  // Whether the completion failed with the connection or went through on a new one, the caller
  // was told which: a response on record, or "not stored" with libpq's reason.
  INFO(seen.errors.size() << " calls failed with the terminated sessions");
  CHECK(seen.errors.size() <= 1);
}

TEST_CASE("a store error never quotes the key, even where PostgreSQL's detail does",
          "[faults][postgres][security]") {
  real_store made;
  // An operator's constraint that refuses a row: PostgreSQL's DETAIL then quotes the whole row,
  // scope and key included ("Failing row contains (...)").
  pgtest::connection admin;
  admin.exec("ALTER TABLE \"" + made.table +
             "\" ADD CONSTRAINT no_secret_keys CHECK (position('\\x736563726574'::bytea in key) "
             "= 0)");
  const std::string key = "secret-key-0123456789";
  const idem::store_time now{std::chrono::seconds{1767225600}};
  const std::uint8_t bytes[16] = {1};
  try {
    (void)made.store.claim({"tenant", key, idem::digest{bytes}, now, 30s, 24h});
    FAIL("the constraint did not refuse the claim");
  } catch (const idem::store_error& error) {
    const std::string what = error.what();
    INFO(what);
    CHECK_THAT(what, Catch::Matchers::Contains("no_secret_keys"));
    CHECK(what.find(key) == std::string::npos);
    // Nor as bytea hex (what the row quote shows).
    CHECK(what.find("7365637265742d6b6579") == std::string::npos);
    CHECK(what.find("Failing row") == std::string::npos);
  }
}

TEST_CASE("a scope's record cap holds against claims racing from many connections",
          "[faults][postgres][security]") {
  const std::string table = pgtest::unique_table("capped_race");
  idem::postgres_store::options config = pgtest::caller_time_options(table);
  config.max_records_per_scope = 5;
  config.pool_size = 8;
  idem::postgres_store store{config};
  const idem::store_time now{std::chrono::seconds{1767225600}};
  const std::uint8_t bytes[16] = {3};
  // Twenty scopes, each raced by eight threads claiming four keys each: every scope's cap is
  // crossed under contention, and each must end with exactly five records.
  for (int round = 0; round < 20; ++round) {
    const std::string scope = "tenant-" + std::to_string(round);
    std::atomic<int> claimed{0};
    std::vector<std::thread> racers;
    for (int t = 0; t < 8; ++t) {
      racers.emplace_back([&, t] {
        for (int k = 0; k < 4; ++k) {
          const std::string key = "k" + std::to_string(t) + "-" + std::to_string(k);
          if (store.claim({scope, key, idem::digest{bytes}, now, 30s, 24h}).status ==
              idem::claim_status::claimed) {
            ++claimed;
          }
        }
      });
    }
    for (std::thread& racer : racers)
      racer.join();
    INFO("scope " << scope);
    CHECK(claimed == 5);
  }
  // Another scope still has its own room.
  CHECK(store.claim({"other", "k", idem::digest{bytes}, now, 30s, 24h}).status ==
        idem::claim_status::claimed);
  pgtest::drop_table(pgtest::conninfo(), table);
}
