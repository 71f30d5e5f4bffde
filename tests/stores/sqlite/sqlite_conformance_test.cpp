// sqlite_store against the store, reconciler and inspection conformance suites, bounded and
// unbounded, each case on a new database file in a directory of its own.
#include <catch2/catch.hpp>

#include <idem/store/sqlite.hpp>
#include <idem/testing/inspect_conformance.hpp>
#include <idem/testing/reconciler_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include <memory>
#include <string>

#include "support/temporary_directory.hpp"

namespace {

// Bounded: the usage row and its triggers are in the file, and every claim, complete and
// checkpoint checks them.
struct sqlite_store_factory {
  static constexpr bool bounded = true;
  std::unique_ptr<idem::testing::temporary_directory> directory =
      std::make_unique<idem::testing::temporary_directory>();
  int made = 0;

  idem::sqlite_store make(const idem::testing::store_limits& limits) {
    idem::sqlite_store::options options;
    options.path = directory->file("store-" + std::to_string(made++) + ".sqlite3");
    // The suite proves semantics, not durability: skip the fsync at each commit.
    options.synchronous = idem::sqlite_store::synchronous_mode::normal;
    options.max_records = limits.max_records;
    options.max_bytes = limits.max_bytes;
    return idem::sqlite_store{options};
  }
};

// Unbounded, with the default durability (synchronous = full): no usage row, the fast paths.
struct unbounded_sqlite_store_factory {
  static constexpr bool bounded = false;
  std::unique_ptr<idem::testing::temporary_directory> directory =
      std::make_unique<idem::testing::temporary_directory>();
  int made = 0;

  idem::sqlite_store make(const idem::testing::store_limits& /*limits*/) {
    return idem::sqlite_store{directory->file("store-" + std::to_string(made++) + ".sqlite3")};
  }
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(sqlite_store_factory)
IDEM_RECONCILER_CONFORMANCE_TESTS(sqlite_store_factory)
IDEM_STORE_CONFORMANCE_TESTS(unbounded_sqlite_store_factory)
IDEM_INSPECT_CONFORMANCE_TESTS(sqlite_store_factory)
IDEM_INSPECT_CONFORMANCE_TESTS(unbounded_sqlite_store_factory)
