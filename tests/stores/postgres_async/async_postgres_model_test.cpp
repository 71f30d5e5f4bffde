// async_postgres_store against the locked_store model (tests/model/store_model.hpp): random
// operation sequences, answer for answer, through blocking_store, the caller's (manual) clock,
// one table emptied before each sequence, and commits that do not wait for the WAL flush
// (synchronous_commit = off): semantics, not durability, are under test. As
// tests/model/postgres_model_test.cpp does for postgres_store, plus a small pipeline so that
// consecutive operations of a sequence share connections.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/postgres/async.hpp>

#include <string>

#include "async_postgres_support.hpp"
#include "model/store_model.hpp"

namespace pgtest = idem::testing::postgres;
namespace pgasync = idem::testing::postgres_async;

namespace {

void require_agreement(std::size_t cap) {
  const std::string table = pgtest::unique_table(cap == 0 ? "amodel" : "amodel_capped");
  pgtest::table_guard guard(table);
  pgtest::connection admin;
  pgasync::running_loop loop;
  idem::async_postgres_store::options config = pgasync::caller_time_options(table);
  config.conninfo += " options='-c synchronous_commit=off'";
  config.pool_size = 2;
  config.pipeline_depth = 2;
  idem::testing::model::budget limits{300, 100};
  if (cap > 0) {
    config.max_records_per_scope = cap;
    limits.scope_cap = cap;
  }
  idem::blocking_store<idem::async_postgres_store> store{
      idem::async_postgres_store{loop.executor(), config}};
  idem::testing::model::require_model_agreement(
      [&] {
        admin.exec("DELETE FROM \"" + table + "\"");
        return store;
      },
      limits);
}

}  // namespace

TEST_CASE("async_postgres_store answers every operation sequence as the locked_store model does",
          "[model]") {
  require_agreement(0);
}

TEST_CASE("async_postgres_store caps each scope's records as the model does", "[model]") {
  require_agreement(2);
}
