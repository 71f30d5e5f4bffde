// tiered_store over redis_store (caller time): the store conformance suite and the tier's cases
// (tests/support/tiered_cases.hpp), on the real server scripts/test.sh started.
#include <catch2/catch.hpp>

#include <idem/store/redis.hpp>
#include <idem/store/tiered.hpp>
#include <idem/testing/store_conformance.hpp>

#include "redis_test_support.hpp"

#include "support/tiered_cases.hpp"

namespace {

using tiered_redis = idem::tiered_store<idem::redis_store>;

struct tiered_redis_factory {
  static constexpr bool bounded = false;
  tiered_redis make(const idem::testing::store_limits& /*limits*/) {
    return tiered_redis{stores.make(idem::time_source::caller)};
  }
  idem_redis_test::shared_stores stores;
};

// The keys of the stores the tiered cases made, deleted when the executable exits.
idem::redis_store make_redis() {
  static idem_redis_test::shared_stores stores;
  return stores.make(idem::time_source::caller);
}

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(tiered_redis_factory)
IDEM_TIERED_CASES("tiered_store over redis_store", make_redis, 100, 8)
