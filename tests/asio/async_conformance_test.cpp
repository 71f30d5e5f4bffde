// The guarded conformance cases (idem/testing/detail/conformance/guarded_cases.hpp) through the
// asynchronous driver: every server verdict, takeover, fencing, coalescing and the inbox, the
// same case bodies the blocking wrappers pass, over the memory store and, where the adapter is
// built, over SQLite with its calls on a thread pool.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/memory.hpp>
#include <idem/testing/posted_store.hpp>
#include <idem/testing/store_conformance.hpp>

#include <memory>

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
    idem::memory_store::options bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1024;
    return idem::memory_store{bounds};
  }
};

// An AsyncStore (posted_store: every operation suspends the call), awaited by the driver rather
// than run on a pool; blocking_store lets the cases' own checks call it. Its operations run on a
// pool of the factory's, not on the calls' loops, so the cases' blocking step()s can wait for
// them.
struct async_posted_memory_factory {
  static constexpr bool bounded = true;
  std::unique_ptr<idem::asio::thread_pool> pool = std::make_unique<idem::asio::thread_pool>(1);

  idem::blocking_store<idem::testing::posted_store<idem::memory_store>> make(
      const idem::testing::store_limits& limits) {
    return idem::blocking_store{
        idem::testing::posted_store{async_memory_factory{}.make(limits), pool->get_executor()}};
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
IDEM_GUARDED_CONFORMANCE_TESTS(async_posted_memory_factory, test_async::async_driver,
                               "async store conformance: ")
#if defined(IDEM_TEST_SQLITE)
IDEM_GUARDED_CONFORMANCE_TESTS(async_sqlite_factory, test_async::async_driver,
                               "async store conformance: ")
#endif
