// async_redis_store with its writes waiting for replicas (options::replicas): WAIT pipelined
// after each write's script, on a primary and a replica the test starts and pauses (SIGSTOP).
#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

#include <idem/store/async_redis.hpp>

#include "redis_async_test_support.hpp"
#include "redis_replication_support.hpp"

using Catch::Matchers::Contains;
using idem::claim_status;
using idem::store_failure;
using idem_redis_async_test::claim_of;
using namespace std::chrono_literals;

TEST_CASE("an async store with a replica_timeout not shorter than command_timeout is refused",
          "[redis_async][replicas]") {
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::options_at("127.0.0.1", 1, idem::redis_time::server);
  options.replicas = 1;
  options.replica_timeout = options.command_timeout;
  CHECK_THROWS_WITH(stores.make(options), Contains("must be shorter than command_timeout"));
  options.replica_timeout = 0ms;
  CHECK_THROWS_WITH(stores.make(options), Contains("replica_timeout must be positive"));
}

TEST_CASE(
    "an async store with replicas 1 answers once the replica holds the write, and fails "
    "unavailable while the replica is paused",
    "[redis_async][replicas]") {
  idem_redis_test::replicated_redis servers(1);
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::options_at("127.0.0.1", servers.node(0).port(),
                                                   idem::redis_time::server);
  options.replicas = 1;
  options.replica_timeout = 200ms;
  auto store = stores.make_blocking(options);
  const auto claimed = store.claim(claim_of("k"));
  REQUIRE(claimed.status == claim_status::claimed);
  {
    const auto replica = servers.node(1).connect();
    CHECK(!idem_redis_test::keys_under(replica.get(), options.prefix).empty());
  }
  servers.node(1).pause();
  try {
    (void)store.complete({"s", "k", claimed.fence}, "done", {});
    FAIL("complete answered with its replica paused");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("0 of the 1 replicas"));
  }
  servers.node(1).resume();
  // It applied at the primary all the same; a repeat is fenced and applies again.
  CHECK(store.complete({"s", "k", claimed.fence}, "done", {}));
  CHECK(store.claim(claim_of("k")).status == claim_status::existing);
}
