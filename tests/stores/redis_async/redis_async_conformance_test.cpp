// async_redis_store against the store and reconciler conformance suites, through blocking_store,
// on the real server scripts/test.sh started; a pool of two threads the factory owns runs the
// stores' executor. The suites move time with a manual clock, so these stores follow the
// caller's time (time_source::caller).
#include <catch2/catch.hpp>

#include <idem/testing/reconciler_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include "redis_async_test_support.hpp"
#include "support/checkpoint_batch_cases.hpp"

namespace {

struct async_redis_factory {
  static constexpr bool bounded = false;
  idem_redis_async_test::blocking_async make(const idem::testing::store_limits& /*limits*/) {
    return stores.make_blocking(idem_redis_async_test::shared_options(idem::time_source::caller));
  }
  idem_redis_async_test::store_maker stores;
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(async_redis_factory)
IDEM_RECONCILER_CONFORMANCE_TESTS(async_redis_factory)

static_assert(idem::AsyncCheckpointBatchStore<idem::async_redis_store>);

TEST_CASE("async_redis_store renews a batch of leases in one pipelined write, each on its fence",
          "[redis_async]") {
  async_redis_factory make;
  auto store = make.make({});
  idem_test::checkpoint_batch_renews_each_held_record(
      store, idem::store_time{std::chrono::seconds{1'700'000'000}}, std::chrono::nanoseconds{0});
}

TEST_CASE("with the server's clock, async_redis_store's batch of renewals leases from its clock",
          "[redis_async]") {
  idem_redis_async_test::store_maker stores;
  auto store =
      stores.make_blocking(idem_redis_async_test::shared_options(idem::time_source::server));
  idem_test::checkpoint_batch_renews_each_held_record(
      store, idem::store_time{std::chrono::system_clock::now()}, std::chrono::seconds{5});
}
