// The guarded conformance cases (idem/testing/conformance/guarded_cases.hpp) through the
// asynchronous driver: every server verdict, takeover, fencing, coalescing and the inbox, the
// same case bodies the blocking wrappers pass, over the memory store and, where the adapter is
// built, over SQLite with its calls on a thread pool.
#include <catch2/catch.hpp>

#include <idem/store/memory.hpp>
#include <idem/testing/store_conformance.hpp>

#include "asio/async_conformance_driver.hpp"

#if defined(IDEM_TEST_SQLITE)
#include <idem/store/sqlite.hpp>

#include <memory>
#include <string>

#include "support/temporary_directory.hpp"
#endif

namespace {

struct async_memory_factory {
  static constexpr bool bounded = true;
  idem::memory_store make(const idem::testing::store_limits& limits) {
    idem::memory_store::limits bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1024;
    return idem::memory_store{bounds};
  }
};

#if defined(IDEM_TEST_SQLITE)
struct async_sqlite_factory {
  static constexpr bool bounded = true;
  std::unique_ptr<idem::testing::temporary_directory> directory =
      std::make_unique<idem::testing::temporary_directory>();
  int made = 0;

  idem::sqlite_store make(const idem::testing::store_limits& limits) {
    idem::sqlite_store::options options;
    options.path = directory->file("store-" + std::to_string(made++) + ".sqlite3");
    options.synchronous = idem::sqlite_store::synchronous_mode::normal;
    options.max_records = limits.max_records;
    options.max_bytes = limits.max_bytes;
    return idem::sqlite_store{options};
  }
};
#endif

}  // namespace

IDEM_GUARDED_CONFORMANCE_TESTS(async_memory_factory, test_async::async_driver,
                               "async store conformance: ")
#if defined(IDEM_TEST_SQLITE)
IDEM_GUARDED_CONFORMANCE_TESTS(async_sqlite_factory, test_async::async_driver,
                               "async store conformance: ")
#endif
