// sqlite_store in commit_mode::one_commit: the one-commit conformance suite (claim, effect and
// record in one write transaction) on a database file of its own per case, with the effect
// table in the same file; the crash matrix is tests/crash/one_commit_crash_test.cpp.
#include <catch2/catch.hpp>

#include <idem/store/sqlite.hpp>
#include <idem/testing/one_commit_conformance.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "stores/sqlite/file_connection.hpp"
#include "support/temporary_directory.hpp"

namespace {

struct sqlite_one_commit_fixture {
  using store_type = idem::sqlite_store;
  std::unique_ptr<idem::testing::temporary_directory> directory =
      std::make_unique<idem::testing::temporary_directory>();
  std::string path = directory->file("one-commit.sqlite3");

  // The busy timeout is the bound on a duplicate's wait; synchronous = normal: the suite proves
  // semantics, not durability (the crash matrix runs with full).
  idem::sqlite_store make(std::chrono::milliseconds lock_wait) {
    idem::sqlite_store::options options;
    options.path = path;
    options.synchronous = idem::sqlite_store::synchronous_mode::normal;
    options.busy_timeout = lock_wait;
    idem::sqlite_store store(options);
    idem_sqlite_test::file_connection db(path);
    db.exec("CREATE TABLE IF NOT EXISTS effects (id TEXT NOT NULL)");
    return store;
  }
  void write_effect(idem::sqlite_store::transaction& txn, const std::string& id) const {
    txn.exec("INSERT INTO effects (id) VALUES (?1)", id);
  }
  long long effects(const std::string& id) const {
    idem_sqlite_test::file_connection db(path, 30000);
    return std::stoll(db.text("SELECT count(*) FROM effects WHERE id = '" + id + "'"));
  }
};

}  // namespace

IDEM_ONE_COMMIT_CONFORMANCE_TESTS(sqlite_one_commit_fixture)

// The bounded store claims through the slow path (the usage row is checked under the lock): a new
// key past max_records answers store_full, and its handler never runs.
TEST_CASE("one commit on a bounded SQLite store answers store_full past max_records") {
  sqlite_one_commit_fixture fixture;
  idem::sqlite_store::options options;
  options.path = fixture.path;
  options.synchronous = idem::sqlite_store::synchronous_mode::normal;
  options.max_records = 1;
  idem::sqlite_store store(options);
  (void)fixture.make(std::chrono::seconds{5});  // the effect table
  idem::manual_clock clock;
  std::atomic<int> runs{0};
  idem::testing::one_commit::effect_handler<sqlite_one_commit_fixture> handler;
  handler.runs = &runs;
  auto guard = idem::testing::one_commit::make_guarded(fixture, store, clock, handler);
  CHECK(guard("tenant", std::string_view{"k1"}, std::string("1")).verdict() ==
        idem::verdict::executed);
  const auto refused = guard("tenant", std::string_view{"k2"}, std::string("2"));
  CHECK(refused.verdict() == idem::verdict::store_full);
  CHECK(runs.load() == 1);
  CHECK(fixture.effects("k2") == 0);
  CHECK(guard("tenant", std::string_view{"k1"}, std::string("1")).verdict() ==
        idem::verdict::replayed);
}
