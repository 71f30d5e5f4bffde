// postgres_store on a table PARTITION BY HASH (scope) (options::hash_partitions): the store
// conformance suite against it, the option's bounds, the plans that show a claim touching the
// one partition its scope hashes to, and the sweep, partition by partition.
#include <catch2/catch.hpp>

#include <idem/store/postgres.hpp>
#include <idem/testing/inspect_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include <chrono>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "postgres_test_support.hpp"

#include "support/records.hpp"

namespace pg = idem::detail::postgres;
namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;

using idem::testing::print;
using idem::testing::start;

namespace {

constexpr std::size_t partitions = 4;

// A fresh partitioned table per store; dropped (with its partitions) when the test case ends.
struct partitioned_postgres_factory {
  static constexpr bool bounded = false;
  std::vector<std::string> tables;
  idem::postgres_store make(const idem::testing::store_limits& /*limits*/) {
    idem::postgres_store::options config = pgtest::caller_time_options(pgtest::unique_table("h"));
    config.pool_size = 64;  // the suite's storm runs 64 threads
    config.hash_partitions = partitions;
    tables.push_back(config.table);
    return idem::postgres_store{config};
  }
  partitioned_postgres_factory() = default;
  partitioned_postgres_factory(const partitioned_postgres_factory&) = delete;
  partitioned_postgres_factory& operator=(const partitioned_postgres_factory&) = delete;
  ~partitioned_postgres_factory() {
    for (const std::string& table : tables)
      pgtest::drop_table(pgtest::conninfo(), table);
  }
};

// The partitions of `table` a plan's text names (<table>_p<n>).
std::set<std::string> partitions_named(const std::string& plan, const std::string& table) {
  std::set<std::string> named;
  const std::regex partition(table + "_p[0-9]+");
  for (auto it = std::sregex_iterator(plan.begin(), plan.end(), partition);
       it != std::sregex_iterator(); ++it) {
    named.insert(it->str());
  }
  return named;
}

std::string plan_of(pgtest::connection& on, const std::string& sql) {
  const idem::postgres_result result = on.exec("EXPLAIN (COSTS OFF) " + sql);
  std::string plan;
  for (int row = 0; row < result.rows(); ++row) {
    plan += std::string(result.value(row, 0)) + "\n";
  }
  return plan;
}

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(partitioned_postgres_factory)
IDEM_INSPECT_CONFORMANCE_TESTS(partitioned_postgres_factory)

TEST_CASE("hash_partitions outside 2 to 1024 is refused with the reason, before connecting",
          "[postgres][partitioned]") {
  idem::postgres_store::options config;
  config.conninfo = "host=127.0.0.1 port=1 dbname=nowhere";  // never reached
  config.connect_at_start = false;
  for (const std::size_t wrong : {std::size_t{1}, std::size_t{1025}, std::size_t{1} << 40}) {
    config.hash_partitions = wrong;
    try {
      idem::postgres_store refused{config};
      FAIL("hash_partitions " << wrong << " was accepted");
    } catch (const std::invalid_argument& error) {
      CHECK_THAT(error.what(), Catch::Contains("hash_partitions must be 0 (a plain table) or 2 to "
                                               "1024, not " +
                                               std::to_string(wrong)));
    }
  }
  for (const std::size_t right : {std::size_t{0}, std::size_t{2}, std::size_t{1024}}) {
    config.hash_partitions = right;
    CHECK_NOTHROW(idem::postgres_store{config});
  }
}

TEST_CASE("a partitioned table's claim touches only the partition its scope hashes to",
          "[postgres][partitioned]") {
  pgtest::table_guard table{pgtest::unique_table("pruned")};
  idem::postgres_store::options config = pgtest::caller_time_options(table.name);
  config.hash_partitions = 8;
  idem::postgres_store store{config};
  pgtest::connection check;

  // The layout: a partitioned parent, 8 partitions, each with its own primary key on
  // (scope, key), which is what makes a claim's uniqueness check local to one partition.
  CHECK(check.scalar("SELECT count(*) FROM pg_class WHERE relname = '" + table.name +
                     "' AND relkind = 'p'") == 1);
  CHECK(check.scalar("SELECT count(*) FROM pg_inherits WHERE inhparent = '\"" + table.name +
                     "\"'::regclass") == 8);
  CHECK(check.scalar(
            "SELECT count(*) FROM pg_inherits i JOIN pg_constraint c ON c.conrelid = "
            "i.inhrelid AND c.contype = 'p' WHERE i.inhparent = '\"" +
            table.name +
            "\"'::regclass AND pg_get_constraintdef(c.oid) = 'PRIMARY KEY (scope, key)'") == 8);

  // The claim statement the store prepares, planned for one scope and key. A custom plan
  // prunes when planning: one partition named. A generic plan (what a prepared statement may
  // settle on) prunes when it starts: the other seven subplans removed.
  const auto names = pg::quote_names("public", table.name);
  check.exec("PREPARE claim_plan (bytea, bytea, bytea, int8, int8, int8, bytea) AS " +
             pg::claim_sql(names.table));
  const std::string execute =
      "EXECUTE claim_plan('\\x74656e616e74'::bytea, '\\x6f726465722d31'::bytea, "
      "'\\x00'::bytea, 1000, 1000, 0, NULL)";
  check.exec("SET plan_cache_mode = force_custom_plan");
  const std::string custom = plan_of(check, execute);
  INFO("custom plan:\n" << custom);
  CHECK(partitions_named(custom, table.name).size() == 1);
  check.exec("SET plan_cache_mode = force_generic_plan");
  const std::string generic = plan_of(check, execute);
  INFO("generic plan:\n" << generic);
  CHECK(generic.find("Subplans Removed: 7") != std::string::npos);

  // What the warning is about: a lookup without the partition key visits every partition.
  const std::string by_key_alone =
      plan_of(check, "SELECT 1 FROM " + names.table + " WHERE key = '\\x6f726465722d31'::bytea");
  CHECK(partitions_named(by_key_alone, table.name).size() == 8);

  // And the claim itself, run: the record lands in one partition, found through the parent.
  const auto claimed = store.claim({"tenant", "order-1", print(1), start, 30s, 24h});
  CHECK(claimed.status == idem::claim_status::claimed);
  CHECK(check.scalar("SELECT count(DISTINCT tableoid) FROM \"" + table.name + "\"") == 1);
}

TEST_CASE("sweep on a partitioned table removes the expired records of every partition only",
          "[postgres][partitioned]") {
  pgtest::table_guard table{pgtest::unique_table("swept")};
  idem::postgres_store::options config = pgtest::caller_time_options(table.name);
  config.hash_partitions = partitions;
  idem::postgres_store store{config};
  pgtest::connection check;

  // 40 scopes of 5 keys: the even keys kept for an hour, the odd for a minute.
  for (int scope = 0; scope < 40; ++scope) {
    for (int key = 0; key < 5; ++key) {
      const auto retention = key % 2 == 0 ? std::chrono::nanoseconds{1h} : 1min;
      const std::string scope_name = "scope-" + std::to_string(scope);
      const std::string key_name = "key-" + std::to_string(key);
      const auto claimed = store.claim(
          {scope_name, key_name, print(1), start, std::chrono::nanoseconds{30s}, retention});
      REQUIRE(claimed.status == idem::claim_status::claimed);
      REQUIRE(store.complete({scope_name, key_name, claimed.fence}, "done", start));
    }
  }
  // The scopes spread over every partition.
  CHECK(check.scalar("SELECT count(DISTINCT tableoid) FROM \"" + table.name + "\"") ==
        static_cast<long long>(partitions));

  CHECK(store.sweep(start + 30s) == 0);
  CHECK(store.sweep(start + 2min) == 40 * 2);
  CHECK(check.scalar("SELECT count(*) FROM \"" + table.name + "\"") == 40 * 3);
  CHECK(store.sweep(start + 2min) == 0);
  CHECK(store.find("scope-7", "key-2", start + 2min));
  CHECK_FALSE(store.find("scope-7", "key-1", start + 2min));
  CHECK(store.sweep(start + 2h) == 40 * 3);
  CHECK(check.scalar("SELECT count(*) FROM \"" + table.name + "\"") == 0);
}

TEST_CASE("a store asking for partitions refuses a table made with another layout",
          "[postgres][partitioned]") {
  pgtest::table_guard table{pgtest::unique_table("layout")};
  idem::postgres_store::options config = pgtest::caller_time_options(table.name);
  { idem::postgres_store plain{config}; }
  config.hash_partitions = 4;
  try {
    idem::postgres_store partitioned{config};
    FAIL("a plain table was taken for a partitioned one");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Catch::Contains("exists with another layout: hash_partitions asks "
                                             "for 4 hash partitions, it has 0"));
  }
}
