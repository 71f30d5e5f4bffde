// sqlite_store against the locked_store model. One database file for the test case, emptied
// through a connection of the test's own before each sequence (a new file per sequence would
// spend the time creating files, not running operations).
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <memory>
#include <string>

#include <idem/store/sqlite.hpp>

#include "store_model.hpp"
#include "support/temporary_directory.hpp"

TEST_CASE("sqlite_store answers every operation sequence as the locked_store model does",
          "[model]") {
  const idem::testing::temporary_directory directory{"idem-model-sqlite"};
  idem::sqlite_store::options options;
  options.path = directory.file("model.sqlite3");
  // Semantics, not durability, are under test: no fsync at each commit.
  options.synchronous = idem::sqlite_store::synchronous_mode::normal;
  idem::sqlite_store store{options};

  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(options.path.c_str(), &raw) == SQLITE_OK);
  const std::unique_ptr<sqlite3, decltype(&sqlite3_close)> admin(raw, &sqlite3_close);
  sqlite3_busy_timeout(admin.get(), 5000);

  idem::testing::model::require_model_agreement(
      [&] {
        char* error = nullptr;
        if (sqlite3_exec(admin.get(), "DELETE FROM idem_records", nullptr, nullptr, &error) !=
            SQLITE_OK) {
          const std::string message = error != nullptr ? error : "unknown error";
          sqlite3_free(error);
          FAIL("cannot empty the store: " << message);
        }
        return store;
      },
      idem::testing::model::budget{300, 100});
}

TEST_CASE("sqlite_store caps each scope's records as the model does", "[model]") {
  const idem::testing::temporary_directory directory{"idem-model-sqlite"};
  idem::sqlite_store::options options;
  options.path = directory.file("capped.sqlite3");
  options.synchronous = idem::sqlite_store::synchronous_mode::normal;
  options.max_records_per_scope = 2;
  idem::sqlite_store store{options};
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(options.path.c_str(), &raw) == SQLITE_OK);
  const std::unique_ptr<sqlite3, decltype(&sqlite3_close)> admin(raw, &sqlite3_close);
  sqlite3_busy_timeout(admin.get(), 5000);
  idem::testing::model::budget capped{300, 100};
  capped.scope_cap = 2;
  idem::testing::model::require_model_agreement(
      [&] {
        REQUIRE(sqlite3_exec(admin.get(), "DELETE FROM idem_records", nullptr, nullptr, nullptr) ==
                SQLITE_OK);
        return store;
      },
      capped);
}
