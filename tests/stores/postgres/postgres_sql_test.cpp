// postgres_store's parts on their own: the statements' SQL and parameter types
// (store/postgres/detail/statements.hpp), checked as text, without a server; and the table's
// migration (store/postgres/detail/schema.hpp), run on a plain libpq connection to the real server,
// with no store around it.
#include <catch2/catch.hpp>

#include <idem/store/postgres/detail/schema.hpp>
#include <idem/store/postgres/detail/statements.hpp>

#include <libpq-fe.h>

#include <cctype>
#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "postgres_test_support.hpp"

namespace pg = idem::detail::postgres;
namespace pgtest = idem::testing::postgres;

namespace {

// The numbers of the $n placeholders a statement's SQL uses.
std::set<int> placeholders(std::string_view sql) {
  std::set<int> found;
  for (std::size_t at = sql.find('$'); at != std::string_view::npos; at = sql.find('$', at + 1)) {
    std::size_t end = at + 1;
    while (end < sql.size() && std::isdigit(static_cast<unsigned char>(sql[end])) != 0)
      ++end;
    if (end > at + 1) found.insert(std::stoi(std::string(sql.substr(at + 1, end - at - 1))));
  }
  return found;
}

// How many times `needle` occurs in `text`.
std::size_t occurrences(std::string_view text, std::string_view needle) {
  std::size_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string_view::npos;
       at = text.find(needle, at + needle.size()))
    ++count;
  return count;
}

// Every statement, by index.
std::vector<pg::statement> every_statement() {
  std::vector<pg::statement> all;
  for (std::size_t i = 0; i < pg::statement::count; ++i)
    all.push_back(static_cast<pg::statement>(i));
  return all;
}

}  // namespace

// ---- the statements, as text -------------------------------------------------------------

TEST_CASE("a statement's placeholders are $1 to its parameter count, each used", "[postgres]") {
  const auto sql = pg::statement_sql(pg::quote_names("public", "idem_records"));
  for (const pg::statement which : every_statement()) {
    INFO(pg::statement_names[which] << ": " << sql[which]);
    std::set<int> expected;
    for (int n = 1; n <= pg::parameter_count(which); ++n)
      expected.insert(n);
    CHECK(placeholders(sql[which]) == expected);
  }
}

TEST_CASE("a statement declares a type for each of its parameters and none past them",
          "[postgres]") {
  for (const pg::statement which : every_statement()) {
    INFO(pg::statement_names[which]);
    const int count = pg::parameter_count(which);
    const auto types = pg::parameter_types(which);
    // pg::parameters holds eight values; PQprepare reads `count` types.
    REQUIRE(count >= 1);
    REQUIRE(static_cast<std::size_t>(count) <= types.size());
    for (std::size_t i = 0; i < types.size(); ++i) {
      INFO("parameter $" << i + 1);
      if (i < static_cast<std::size_t>(count)) {
        CHECK((types[i] == pg::bytea_oid || types[i] == pg::int8_oid || types[i] == pg::text_oid ||
               types[i] == pg::bytea_array_oid || types[i] == pg::int8_array_oid));
      } else {
        CHECK(types[i] == 0);
      }
    }
  }
}

TEST_CASE("every statement names its table quoted and qualified, never bare", "[postgres]") {
  // Mixed case: unquoted, PostgreSQL would fold it to idem_records, another table.
  const pg::quoted_names names = pg::quote_names("app", "Idem_Records");
  const auto sql = pg::statement_sql(names);
  for (const pg::statement which : every_statement()) {
    INFO(pg::statement_names[which] << ": " << sql[which]);
    if (which == pg::scope_turn || which == pg::lock_timeout) {
      // A lock on the scope alone, a setting of the transaction: they read no table.
      CHECK(occurrences(sql[which], "Idem_Records") == 0);
    } else if (which == pg::outbox_insert) {
      // The outbox, beside the records: its name is the table's, suffixed.
      CHECK(occurrences(sql[which], names.outbox) == 1);
      CHECK(occurrences(sql[which], "Idem_Records") == 1);
    } else {
      CHECK(occurrences(sql[which], names.table) >= 1);
      CHECK(occurrences(sql[which], "Idem_Records") == occurrences(sql[which], names.table));
    }
  }
}

TEST_CASE("the quoted names qualify the table and its meta table by the schema", "[postgres]") {
  const pg::quoted_names names = pg::quote_names("app", "Idem_Records");
  CHECK(names.schema == "\"app\"");
  CHECK(names.table == "\"app\".\"Idem_Records\"");
  CHECK(names.meta == "\"app\".\"Idem_Records_meta\"");
}

TEST_CASE("the migration's lock key is fixed for a table name and differs between tables",
          "[postgres]") {
  // A known answer (FNV-1a, 64 bits, of the qualified name): replicas running another idem
  // version must take the same lock for the same table, or both would migrate it.
  CHECK(pg::migration_lock_key("\"public\".\"idem_records\"") == -7235386318751869068LL);
  CHECK(pg::migration_lock_key(pg::quote_names("public", "idem_records").table) ==
        -7235386318751869068LL);
  CHECK(pg::migration_lock_key("\"public\".\"a\"") != pg::migration_lock_key("\"public\".\"b\""));
  CHECK(pg::migration_lock_key("\"one\".\"records\"") !=
        pg::migration_lock_key("\"two\".\"records\""));
}

// ---- the migration, on the server --------------------------------------------------------

TEST_CASE(
    "migrating a fresh table makes version 4 (records, outbox, dead letters, the lease index of "
    "the records in progress), keyed by (scope, key), scope leading every index",
    "[postgres]") {
  pgtest::table_guard table(pgtest::unique_table("schema"));
  const pg::quoted_names names = pg::quote_names("public", table.name);
  pgtest::connection check;
  pg::migrate(check.get(), names, table.name);
  CHECK(PQtransactionStatus(check.get()) == PQTRANS_IDLE);
  const idem::postgres_result indexes =
      check.exec("SELECT indexdef FROM pg_indexes WHERE tablename = '" + table.name + "'");
  REQUIRE(indexes.rows() == 3);
  for (int row = 0; row < indexes.rows(); ++row) {
    const std::string definition(indexes.value(row, 0));
    INFO(definition);
    CHECK(definition.find("(scope,") != std::string::npos);
  }
  CHECK(check.scalar("SELECT count(*) FROM pg_indexes WHERE tablename = '" + table.name +
                     "' AND indexname = '" + table.name +
                     "_in_progress' AND indexdef LIKE '%(scope, lease_until) WHERE (state = 0)'") ==
        1);
  CHECK(check.scalar("SELECT count(*) FROM pg_constraint WHERE contype = 'p' AND conrelid = '\"" +
                     table.name + "\"'::regclass") == 1);
  CHECK(check.scalar("SELECT version FROM \"" + table.name + "_meta\"") == 4);
}

namespace {

// Puts a table migrated to the newest version back as version 3 left it: version 1's lease index
// of every record instead of the index of the records in progress.
void as_version_3(pgtest::connection& check, const std::string& table) {
  check.exec("DROP INDEX \"" + table + "_in_progress\"; CREATE INDEX \"" + table +
             "_by_lease\" ON \"" + table + "\" (scope, lease_until); UPDATE \"" + table +
             "_meta\" SET version = 3");
}

// How many of the table's indexes are named <table><suffix>.
long long indexes_named(pgtest::connection& check, const std::string& table,
                        const std::string& suffix) {
  return check.scalar("SELECT count(*) FROM pg_indexes WHERE tablename = '" + table +
                      "' AND indexname = '" + table + suffix + "'");
}

}  // namespace

TEST_CASE(
    "migrating a version 3 table replaces the lease index of every record by one of the records "
    "in progress, keeping the records",
    "[postgres]") {
  pgtest::table_guard table(pgtest::unique_table("v3"));
  const pg::quoted_names names = pg::quote_names("public", table.name);
  pgtest::connection check;
  pg::migrate(check.get(), names, table.name);
  as_version_3(check, table.name);
  check.exec("INSERT INTO \"" + table.name +
             "\" VALUES ('\\x01', '\\x02', '\\x03', 0, 7, false, 1, 2, 3, NULL, NULL)");
  pgtest::connection other;
  pg::migrate(other.get(), names, table.name);
  CHECK(PQtransactionStatus(other.get()) == PQTRANS_IDLE);
  CHECK(check.scalar("SELECT version FROM \"" + table.name + "_meta\"") == 4);
  CHECK(check.scalar("SELECT count(*) FROM \"" + table.name + "\" WHERE fence = 7") == 1);
  CHECK(indexes_named(check, table.name, "_by_lease") == 0);
  CHECK(indexes_named(check, table.name, "_in_progress") == 1);
}

TEST_CASE(
    "migrating a version 3 table keeps an index of the records in progress an operator built "
    "beforehand",
    "[postgres]") {
  // docs/stores/postgres.md: on a big table the index is built CONCURRENTLY first (outside any
  // transaction, so writes go on), and the migration then only drops the old one.
  pgtest::table_guard table(pgtest::unique_table("v3pre"));
  const pg::quoted_names names = pg::quote_names("public", table.name);
  pgtest::connection check;
  pg::migrate(check.get(), names, table.name);
  as_version_3(check, table.name);
  check.exec("CREATE INDEX CONCURRENTLY \"" + table.name + "_in_progress\" ON \"" + table.name +
             "\" (scope, lease_until) WHERE state = 0");
  const std::string oid = "SELECT '\"" + table.name + "_in_progress\"'::regclass::oid::int8";
  const auto built = check.scalar(oid);
  pgtest::connection other;
  pg::migrate(other.get(), names, table.name);
  CHECK(check.scalar("SELECT version FROM \"" + table.name + "_meta\"") == 4);
  CHECK(check.scalar(oid) == built);  // the operator's index, not a new one
  CHECK(indexes_named(check, table.name, "_by_lease") == 0);
}

TEST_CASE(
    "stuck() reads the index of the records in progress, not the completed records past their "
    "lease",
    "[postgres]") {
  pgtest::table_guard table(pgtest::unique_table("stuckplan"));
  const pg::quoted_names names = pg::quote_names("public", table.name);
  pgtest::connection check;
  pg::migrate(check.get(), names, table.name);
  // 20,000 completed records and 20 stuck ones, every lease long past: with the lease index of
  // every record (version 1 to 3), the scan read all 20,020 and dropped the completed ones.
  check.exec("INSERT INTO \"" + table.name +
             "\" SELECT '\\x73', convert_to('key-' || i, 'UTF8'), '\\x00', CASE WHEN i % 1000 "
             "= 0 THEN 0 ELSE 1 END, 1, false, 1, 2, 1000000, NULL, NULL FROM "
             "generate_series(0, 19999) AS i");
  check.exec("ANALYZE \"" + table.name + "\"");
  const auto sql = pg::statement_sql(names);
  check.exec("PREPARE stuck_plan (int8, int8) AS " + sql[pg::stuck]);
  const idem::postgres_result plan = check.exec(
      "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE stuck_plan(10, 256)");
  std::string text;
  for (int row = 0; row < plan.rows(); ++row)
    text += std::string(plan.value(row, 0)) + "\n";
  INFO(text);
  CHECK(text.find(table.name + "_in_progress") != std::string::npos);
  // No node drops the completed records (the scopes' walk drops its one closing NULL).
  const std::string removed = "Rows Removed by Filter: ";
  for (std::size_t at = text.find(removed); at != std::string::npos;
       at = text.find(removed, at + 1))
    CHECK(std::stoll(text.substr(at + removed.size())) < 100);
}

TEST_CASE("migrating a table already at the newest version changes nothing", "[postgres]") {
  pgtest::table_guard table(pgtest::unique_table("again"));
  const pg::quoted_names names = pg::quote_names("public", table.name);
  pgtest::connection check;
  pg::migrate(check.get(), names, table.name);
  check.exec("INSERT INTO \"" + table.name +
             "\" VALUES ('\\x01', '\\x02', '\\x03', 1, 7, false, 1, 2, 3, '\\x04', NULL)");
  pgtest::connection other;
  pg::migrate(other.get(), names, table.name);
  CHECK(PQtransactionStatus(other.get()) == PQTRANS_IDLE);
  CHECK(check.scalar("SELECT count(*) FROM \"" + table.name + "\" WHERE fence = 7") == 1);
  CHECK(check.scalar("SELECT count(*) FROM \"" + table.name + "_meta\"") == 1);
  CHECK(check.scalar("SELECT version FROM \"" + table.name + "_meta\"") == 4);
  CHECK(check.scalar("SELECT count(*) FROM pg_indexes WHERE tablename = '" + table.name + "'") ==
        3);
}

TEST_CASE("a table at a newer schema version than this idem is refused, naming the table",
          "[postgres]") {
  pgtest::table_guard table(pgtest::unique_table("newer"));
  const pg::quoted_names names = pg::quote_names("public", table.name);
  pgtest::connection admin;
  pg::migrate(admin.get(), names, table.name);
  admin.exec("UPDATE \"" + table.name + "_meta\" SET version = 99");
  try {
    pg::migrate(admin.get(), names, table.name);
    FAIL("a table from a newer version was accepted");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Catch::Matchers::Contains("schema version 99"));
    CHECK_THAT(error.what(), Catch::Matchers::Contains(names.table));
  }
  // Rolled back, and left as it was: an older idem never downgrades the table.
  CHECK(PQtransactionStatus(admin.get()) == PQTRANS_IDLE);
  CHECK(admin.scalar("SELECT version FROM \"" + table.name + "_meta\"") == 99);
}
