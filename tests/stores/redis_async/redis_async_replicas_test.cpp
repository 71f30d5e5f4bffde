// async_redis_store with its writes waiting for replicas (options::replicas): WAIT pipelined
// after each write's script, on a primary and a replica the test starts and pauses (SIGSTOP);
// and finding its primary through Sentinel: after kill -9 of the primary, and when a primary is
// demoted under it.
#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

#include <idem/store/redis/async.hpp>

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
  auto options = idem_redis_async_test::options_at("127.0.0.1", 1, idem::time_source::server);
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
                                                   idem::time_source::server);
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

namespace {

// The async store's options for `servers`, through its Sentinels.
idem::async_redis_store::options through_sentinels(
    const idem_redis_test::replicated_redis& servers) {
  const idem::redis_store::options blocking = servers.options();
  auto options = idem_redis_async_test::options_at("127.0.0.1", 1, idem::time_source::server);
  options.prefix = blocking.prefix;
  options.sentinels = blocking.sentinels;
  options.sentinel_master = blocking.sentinel_master;
  options.connect_timeout = blocking.connect_timeout;
  options.command_timeout = blocking.command_timeout;
  options.reconnect_delay = 50ms;
  options.max_reconnect_delay = 200ms;
  return options;
}

}  // namespace

TEST_CASE("an async store with sentinels but no sentinel_master is refused",
          "[redis_async][sentinel]") {
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::options_at("127.0.0.1", 1, idem::time_source::server);
  options.sentinels = {"127.0.0.1:26379"};
  CHECK_THROWS_WITH(stores.make(options), Contains("sentinel_master is empty"));
  options.sentinel_master = "m";
  options.sentinels = {"nowhere"};
  CHECK_THROWS_WITH(stores.make(options), Contains("is not host:port"));
}

TEST_CASE(
    "through Sentinel, the async store finds the primary, and after kill -9 of it the new one",
    "[redis_async][sentinel]") {
  idem_redis_test::replicated_redis servers(2, 3);
  idem_redis_async_test::store_maker stores;
  auto options = through_sentinels(servers);
  options.replicas = 1;
  auto store = stores.make_blocking(options);
  REQUIRE(store.claim(claim_of("first")).status == claim_status::claimed);
  {
    const auto primary = servers.node(0).connect();
    CHECK(!idem_redis_test::keys_under(primary.get(), options.prefix).empty());
  }
  servers.node(0).kill9();
  // The Sentinels agree it is down (down-after 1 s) and promote a replica; the store fails as
  // unavailable meanwhile, then its new connections ask the Sentinels again.
  int unavailable = 0;
  const bool recovered = idem_redis_test::eventually(
      [&] {
        try {
          return store.claim(claim_of("second")).status == claim_status::claimed;
        } catch (const idem::store_error& error) {
          CHECK(error.failure() == store_failure::unavailable);
          ++unavailable;
          return false;
        }
      },
      30s);
  REQUIRE(recovered);
  CHECK(unavailable > 0);
  const auto promoted = servers.primary();
  REQUIRE(promoted);
  CHECK(*promoted != 0);
  // The claim a replica acknowledged before the failover survived it.
  CHECK(store.claim(claim_of("first")).status == claim_status::existing);
}

TEST_CASE(
    "a primary demoted under the async store is never written to: READONLY replaces the "
    "connection, and ROLE refuses the Sentinel's stale answer",
    "[redis_async][sentinel]") {
  idem_redis_test::replicated_redis servers(1, 3);
  idem_redis_async_test::store_maker stores;
  auto options = through_sentinels(servers);
  options.pool_size = 1;
  auto store = stores.make_blocking(options);
  REQUIRE(store.claim(claim_of("before")).status == claim_status::claimed);
  // Demoted behind the Sentinels' back: they still name it as the primary for a while.
  {
    const auto old = servers.node(0).connect();
    REQUIRE(idem_redis_test::command(
                old.get(), {"REPLICAOF", "127.0.0.1", std::to_string(servers.node(1).port())})
                ->type == REDIS_REPLY_STATUS);
  }
  REQUIRE(idem_redis_test::role_of(servers.node(0).port()) == "slave");
  REQUIRE(servers.sentinel(0).primary(idem_redis_test::replicated_redis::master) ==
          servers.node(0).port());
  // The open connection's write is answered READONLY: unavailable, nothing written.
  try {
    (void)store.claim(claim_of("after"));
    FAIL("a claim was written to a demoted primary");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("READONLY"));
  }
  // The next connection asks the Sentinels, which name the demoted node: ROLE refuses it.
  try {
    (void)store.claim(claim_of("after"));
    FAIL("a claim was written to a demoted primary");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("not a master (ROLE)"));
  }
  const auto replica = servers.node(0).connect();
  for (const std::string& key : idem_redis_test::keys_under(replica.get(), options.prefix))
    CHECK(key.find("after") == std::string::npos);
}
