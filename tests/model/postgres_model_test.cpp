// postgres_store against the locked_store model, on the server scripts/test.sh started
// (IDEM_TEST_PG_CONNINFO), following the caller's (manual) clock. One table for the test case,
// emptied before each sequence, and commits that do not wait for the WAL flush
// (synchronous_commit = off): semantics, not durability, are under test.
#include <catch2/catch.hpp>

#include <idem/store/postgres.hpp>

#include <string>

#include "store_model.hpp"
#include "stores/postgres/postgres_test_support.hpp"

namespace pgtest = idem::testing::postgres;

TEST_CASE("postgres_store answers every operation sequence as the locked_store model does",
          "[model]") {
  const std::string table = pgtest::unique_table("model");
  pgtest::connection admin;
  idem::postgres_store::options config = pgtest::caller_time_options(table);
  config.conninfo += " options='-c synchronous_commit=off'";
  idem::postgres_store store{config};
  idem::testing::model::require_model_agreement(
      [&] {
        admin.exec("DELETE FROM \"" + table + "\"");
        return store;
      },
      idem::testing::model::budget{300, 100});
  pgtest::drop_table(pgtest::conninfo(), table);
}

TEST_CASE("postgres_store caps each scope's records as the model does", "[model]") {
  const std::string table = pgtest::unique_table("model_capped");
  pgtest::connection admin;
  idem::postgres_store::options config = pgtest::caller_time_options(table);
  config.conninfo += " options='-c synchronous_commit=off'";
  config.max_records_per_scope = 2;
  idem::postgres_store store{config};
  idem::testing::model::budget capped{300, 100};
  capped.scope_cap = 2;
  idem::testing::model::require_model_agreement(
      [&] {
        admin.exec("DELETE FROM \"" + table + "\"");
        return store;
      },
      capped);
  pgtest::drop_table(pgtest::conninfo(), table);
}
