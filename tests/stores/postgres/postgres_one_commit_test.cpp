// postgres_store in commit_mode::one_commit: the one-commit conformance suite (claim, effect and
// record in one transaction; a duplicate blocks on the key's index) against the real server, a
// table of its own per case with its effect table beside it; the crash matrix is
// tests/crash/one_commit_crash_test.cpp.
#include <catch2/catch.hpp>

#include <idem/store/postgres.hpp>
#include <idem/testing/one_commit_conformance.hpp>

#include <chrono>
#include <string>

#include "postgres_test_support.hpp"

namespace {

namespace pgt = idem::testing::postgres;

struct postgres_one_commit_fixture {
  using store_type = idem::postgres_store;
  std::string table = pgt::unique_table("one_commit");
  pgt::table_guard guard{table};

  // Caller time (the suite's manual clock); one_commit_lock_timeout bounds a duplicate's wait,
  // below the statement timeout.
  idem::postgres_store make(std::chrono::milliseconds lock_wait) {
    idem::postgres_store::options options = pgt::caller_time_options(table);
    options.one_commit_lock_timeout = lock_wait;
    options.statement_timeout = lock_wait + std::chrono::seconds{30};
    options.pool_size = 16;
    idem::postgres_store store(options);
    pgt::connection admin;
    admin.exec("CREATE TABLE IF NOT EXISTS \"" + table + "_effects\" (id text NOT NULL)");
    return store;
  }
  void write_effect(idem::postgres_store::transaction& txn, const std::string& id) const {
    txn.exec("INSERT INTO \"" + table + "_effects\" (id) VALUES ($1)", {id});
  }
  long long effects(const std::string& id) const {
    pgt::connection reader;
    return reader.scalar("SELECT count(*) FROM \"" + table + "_effects\" WHERE id = '" + id + "'");
  }
};

}  // namespace

IDEM_ONE_COMMIT_CONFORMANCE_TESTS(postgres_one_commit_fixture)
