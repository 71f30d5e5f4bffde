// tiered_store over sqlite_store: the store conformance suite (bounded, so the durable store's
// own limits still answer full through the tier) and the tier's cases
// (tests/support/tiered_cases.hpp), each store on a database file of its own.
#include <catch2/catch.hpp>

#include <idem/store/sqlite.hpp>
#include <idem/store/tiered.hpp>
#include <idem/testing/store_conformance.hpp>

#include <memory>
#include <string>

#include "support/temporary_directory.hpp"
#include "support/tiered_cases.hpp"

namespace {

using tiered_sqlite = idem::tiered_store<idem::sqlite_store>;

idem::sqlite_store::options options_in(idem::testing::temporary_directory& directory, int n) {
  idem::sqlite_store::options options;
  options.path = directory.file("tiered-" + std::to_string(n) + ".sqlite3");
  // Semantics, not durability: no fsync at each commit.
  options.synchronous = idem::sqlite_store::synchronous_mode::normal;
  return options;
}

struct tiered_sqlite_factory {
  static constexpr bool bounded = true;
  std::unique_ptr<idem::testing::temporary_directory> directory =
      std::make_unique<idem::testing::temporary_directory>();
  int made = 0;
  tiered_sqlite make(const idem::testing::store_limits& limits) {
    idem::sqlite_store::options options = options_in(*directory, made++);
    options.max_records = limits.max_records;
    options.max_bytes = limits.max_bytes;
    return tiered_sqlite{idem::sqlite_store{options}};
  }
};

idem::sqlite_store make_sqlite() {
  static idem::testing::temporary_directory directory;
  static int made = 0;
  return idem::sqlite_store{options_in(directory, made++)};
}

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(tiered_sqlite_factory)
IDEM_TIERED_CASES("tiered_store over sqlite_store", make_sqlite, 100, 8)

TEST_CASE("tiered_store over sqlite_store forwards its transaction", "[tiered]") {
  STATIC_REQUIRE(idem::TransactionalStore<tiered_sqlite>);
  STATIC_REQUIRE(std::is_same_v<tiered_sqlite::transaction, idem::sqlite_store::transaction>);
  STATIC_REQUIRE(idem::reads_completion_time<tiered_sqlite> ==
                 idem::reads_completion_time<idem::sqlite_store>);
}
