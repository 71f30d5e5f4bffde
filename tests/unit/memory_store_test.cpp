// memory_store, the lock-free default store, against the store conformance suite, plus what is
// particular to it: statistics, the record overhead, and that the bucketing hash is keyed.
#include <catch2/catch.hpp>

#include <idem/store/memory.hpp>
#include <idem/testing/store_conformance.hpp>

namespace {

struct memory_store_factory {
  static constexpr bool bounded = true;
  idem::memory_store make(const idem::testing::store_limits& limits) {
    idem::memory_store::limits bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1024;
    return idem::memory_store{bounds};
  }
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(memory_store_factory)
