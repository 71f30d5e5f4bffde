// redis_store against the store conformance suite, on the real server scripts/test.sh started.
// The suite moves time with a manual clock, so these stores follow the caller's time
// (time_source::caller); redis_store_test.cpp covers the server's time.
#include <catch2/catch.hpp>

#include <idem/store/redis.hpp>
#include <idem/testing/reconciler_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include "redis_test_support.hpp"

namespace {

// Each store gets a prefix of its own, and its keys are deleted when the test case ends.
// No max_records/max_bytes: a full Redis (maxmemory with noeviction) is tested on a private
// server in redis_server_test.cpp instead.
struct redis_store_factory {
  static constexpr bool bounded = false;
  idem::redis_store make(const idem::testing::store_limits& /*limits*/) {
    return stores.make(idem::time_source::caller);
  }
  idem_redis_test::shared_stores stores;
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(redis_store_factory)
IDEM_RECONCILER_CONFORMANCE_TESTS(redis_store_factory)
