// redis_store with its writes waiting for replicas (options::replicas, WAIT) and finding its
// primary through Sentinel (options::sentinels): the options' checks, on no server; then, on a
// primary, replicas and Sentinels the tests start, pause (SIGSTOP), demote and kill -9 themselves.
// What the checker finds under a nemesis is in tests/failover.
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/store/redis.hpp>

#include "redis_replication_support.hpp"
#include "redis_test_support.hpp"

using Catch::Matchers::Contains;
using idem::claim_status;
using idem::store_failure;
using idem_redis_test::claim_now;
using idem_redis_test::replicated_redis;
using namespace std::chrono_literals;

namespace {

// Options that would connect to nothing: the checks come before any connection.
idem::redis_store::options unconnected() {
  idem::redis_store::options options;
  options.port = idem_redis_test::free_port();
  return options;
}

std::string refusal(const idem::redis_store::options& options) {
  try {
    idem::redis_store store(options);
  } catch (const std::invalid_argument& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("not std::invalid_argument: ") + error.what();
  }
  return "accepted";
}

// Whether the server on `port` holds the record of (scope, key) of a store with `prefix`.
bool holds(int port, const std::string& prefix) {
  const auto context = idem_redis_test::connect_raw("127.0.0.1", port);
  return !idem_redis_test::keys_under(context.get(), prefix).empty();
}

}  // namespace

TEST_CASE("replicas beyond 1000 are refused with std::invalid_argument", "[redis][replicas]") {
  auto options = unconnected();
  options.replicas = 1001;
  CHECK_THAT(refusal(options), Contains("at most 1000 replicas"));
}

TEST_CASE("replicas with a replica_timeout of zero are refused: WAIT 0 would wait forever",
          "[redis][replicas]") {
  auto options = unconnected();
  options.replicas = 1;
  options.replica_timeout = 0ms;
  CHECK_THAT(refusal(options), Contains("replica_timeout must be positive"));
}

TEST_CASE("a replica_timeout not shorter than command_timeout is refused", "[redis][replicas]") {
  auto options = unconnected();
  options.replicas = 1;
  options.replica_timeout = 2000ms;
  options.command_timeout = 2000ms;
  CHECK_THAT(refusal(options), Contains("must be shorter than command_timeout"));
}

TEST_CASE("sentinels without sentinel_master are refused", "[redis][sentinel]") {
  auto options = unconnected();
  options.sentinels = {"127.0.0.1:26379"};
  CHECK_THAT(refusal(options), Contains("sentinel_master is empty"));
}

TEST_CASE("a sentinel_master without sentinels is refused", "[redis][sentinel]") {
  auto options = unconnected();
  options.sentinel_master = "mymaster";
  CHECK_THAT(refusal(options), Contains("no sentinels are"));
}

TEST_CASE("a sentinel address that is not host and port is refused", "[redis][sentinel]") {
  auto options = unconnected();
  options.sentinel_master = "mymaster";
  for (const char* wrong :
       {"127.0.0.1", "127.0.0.1:", ":26379", "host:0", "host:70000", "host:26379x"}) {
    options.sentinels = {wrong};
    CHECK_THAT(refusal(options), Contains(std::string("sentinel '") + wrong + "'"));
  }
}

TEST_CASE("sentinels and a unix socket together are refused", "[redis][sentinel]") {
  auto options = unconnected();
  options.sentinel_master = "mymaster";
  options.sentinels = {"127.0.0.1:26379"};
  options.unix_socket = "/tmp/redis.sock";
  CHECK_THAT(refusal(options), Contains("unix_socket and sentinels"));
}

TEST_CASE("sentinel addresses read host and port, with the host in brackets or not",
          "[redis][sentinel]") {
  const auto v4 = idem::detail::redis_address_of("127.0.0.1:26379");
  REQUIRE(v4);
  CHECK(v4->host == "127.0.0.1");
  CHECK(v4->port == 26379);
  const auto v6 = idem::detail::redis_address_of("[::1]:26380");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 26380);
}

TEST_CASE("with replicas 1, a claim and a completion answer only once a replica holds them",
          "[redis][replicas]") {
  replicated_redis servers(1);
  auto options = servers.options();
  options.replicas = 1;
  idem::redis_store store(options);
  const auto claimed = store.claim(claim_now("s", "k"));
  REQUIRE(claimed.status == claim_status::claimed);
  // No waiting here: WAIT already did.
  CHECK(holds(servers.node(1).port(), options.prefix));
  REQUIRE(store.complete({"s", "k", claimed.fence}, "done", {}));
  const auto replica = servers.node(1).connect();
  bool completed = false;
  for (const std::string& key : idem_redis_test::keys_under(replica.get(), options.prefix)) {
    const auto type = idem_redis_test::command(replica.get(), {"TYPE", key});
    if (std::string(type->str) != "hash") continue;
    const auto all = idem_redis_test::command(replica.get(), {"HGETALL", key});
    for (std::size_t i = 0; i < all->elements; ++i) {
      if (std::string(all->element[i]->str, all->element[i]->len) == "done") completed = true;
    }
  }
  CHECK(completed);
}

TEST_CASE(
    "with replicas 1 and the replica paused, every write is store_error(unavailable) after "
    "replica_timeout, and works again once it is back",
    "[redis][replicas]") {
  replicated_redis servers(1);
  auto options = servers.options();
  options.replicas = 1;
  options.replica_timeout = 200ms;
  idem::redis_store store(options);
  const auto claimed = store.claim(claim_now("s", "before"));
  REQUIRE(claimed.status == claim_status::claimed);
  const idem::fenced_key held{"s", "before", claimed.fence};

  servers.node(1).pause();
  // find only reads: it does not wait.
  CHECK(store.find("s", "before", {}));
  const auto expect_unavailable = [&](auto&& write, const char* name) {
    const auto started = std::chrono::steady_clock::now();
    try {
      write();
      FAIL(name << " answered with its replica paused");
    } catch (const idem::store_error& error) {
      CHECK(error.failure() == store_failure::unavailable);
      CHECK_THAT(error.what(), Contains("0 of the 1 replicas"));
      CHECK_THAT(error.what(), Contains(name));
    }
    const auto took = std::chrono::steady_clock::now() - started;
    CHECK(took >= 190ms);
    CHECK(took < 1500ms);
  };
  expect_unavailable([&] { (void)store.claim(claim_now("s", "during")); }, "claim");
  expect_unavailable(
      [&] { (void)store.checkpoint(held, "step", std::chrono::system_clock::now() + 1h); },
      "checkpoint");
  expect_unavailable([&] { (void)store.complete(held, "r", {}); }, "complete");
  expect_unavailable([&] { (void)store.release(held); }, "release");
  servers.node(1).resume();

  // The writes applied at the primary (WAIT is not a rollback): the claim made during the pause
  // answers existing, and new claims are acknowledged again once the replica has caught up.
  std::optional<claim_status> during;
  int attempt = 0;
  REQUIRE(idem_redis_test::eventually([&] {
    try {
      if (!during) during = store.claim(claim_now("s", "during")).status;
      return store.claim(claim_now("s", "after-" + std::to_string(attempt++))).status ==
             claim_status::claimed;
    } catch (const idem::store_error&) {
      return false;  // the replica is still catching up
    }
  }));
  CHECK(during == claim_status::existing);
}

TEST_CASE("replicas 2 with one replica connected: every write is unavailable",
          "[redis][replicas]") {
  replicated_redis servers(1);
  auto options = servers.options();
  options.replicas = 2;
  options.replica_timeout = 300ms;
  idem::redis_store store(options);
  try {
    (void)store.claim(claim_now("s", "k"));
    FAIL("a claim answered with one replica of two");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("1 of the 2 replicas"));
  }
}

TEST_CASE("a store told to wait for replicas on a replica is refused by WAIT, as unavailable",
          "[redis][replicas]") {
  replicated_redis servers(1);
  auto options = servers.options(1);  // the replica
  options.replicas = 1;
  idem::redis_store store(options);
  try {
    (void)store.claim(claim_now("s", "k"));
    FAIL("a claim answered on a replica");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("READONLY"));
  }
}

TEST_CASE("through Sentinel, the store finds the primary, and after kill -9 of it the new one",
          "[redis][sentinel]") {
  replicated_redis servers(2, 3);
  auto options = servers.options();
  options.replicas = 1;
  idem::redis_store store(options);
  const auto first = store.claim(claim_now("s", "first"));
  REQUIRE(first.status == claim_status::claimed);
  CHECK(holds(servers.node(0).port(), options.prefix));

  servers.node(0).kill9();
  // The Sentinels agree it is down (down-after 1 s), elect a leader and promote a replica; the
  // store fails as unavailable meanwhile, then reconnects.
  int unavailable = 0;
  const bool recovered = idem_redis_test::eventually(
      [&] {
        try {
          return store.claim(claim_now("s", "second")).status == claim_status::claimed;
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
  // The claim acknowledged by a replica before the failover survived it.
  CHECK(store.claim(claim_now("s", "first")).status == claim_status::existing);
}

TEST_CASE(
    "a primary demoted under the store is never written to: READONLY, then the Sentinel's "
    "answer is checked with ROLE and refused",
    "[redis][sentinel]") {
  replicated_redis servers(1, 3);
  idem::redis_store store(servers.options());
  REQUIRE(store.claim(claim_now("s", "before")).status == claim_status::claimed);
  // Demoted behind the Sentinels' back: they still name it as the primary for a while.
  const auto old = servers.node(0).connect();
  REQUIRE(idem_redis_test::command(
              old.get(), {"REPLICAOF", "127.0.0.1", std::to_string(servers.node(1).port())})
              ->type == REDIS_REPLY_STATUS);
  REQUIRE(idem_redis_test::role_of(servers.node(0).port()) == "slave");
  REQUIRE(servers.sentinel(0).primary(replicated_redis::master) == servers.node(0).port());
  try {
    (void)store.claim(claim_now("s", "after"));
    FAIL("a claim was written to a demoted primary");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("not a master (ROLE)"));
  }
  // And a new store is refused the same way.
  try {
    idem::redis_store again(servers.options());
    FAIL("a store was made on a demoted primary");
  } catch (const idem::store_error& error) {
    CHECK_THAT(error.what(), Contains("not a master (ROLE)"));
  }
}

TEST_CASE(
    "with replicas 1, a claim that finds a record no replica has acknowledged yet is "
    "unavailable, not a replay",
    "[redis][replicas]") {
  replicated_redis servers(1);
  // One store writes without waiting; the replica is paused, so the write reaches it later.
  auto unsafe = servers.options();
  idem::redis_store writer(unsafe);
  servers.node(1).pause();
  const auto claimed = writer.claim(claim_now("s", "k"));
  REQUIRE(claimed.status == claim_status::claimed);
  REQUIRE(writer.complete({"s", "k", claimed.fence}, "stored", {}));
  // Another store, waiting for the replica, on a connection of its own that has written
  // nothing. Were WAIT to wait only for this connection's writes, as it is documented to, it
  // would count the replica and the replay would be given while the record is on the primary
  // only: the claim's PUBLISH prevents that. (Redis 7.0 also records the offset of read-only
  // commands, so there this passes without the PUBLISH too: checked by hand.)
  auto safe = unsafe;
  safe.replicas = 1;
  safe.replica_timeout = 200ms;
  idem::redis_store reader(safe);
  try {
    const auto replay = reader.claim(claim_now("s", "k"));
    FAIL("a record on the primary only was answered: " << static_cast<int>(replay.status));
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("0 of the 1 replicas"));
  }
  servers.node(1).resume();
  CHECK(idem_redis_test::eventually([&] {
    try {
      return reader.claim(claim_now("s", "k")).status == claim_status::existing;
    } catch (const idem::store_error&) {
      return false;
    }
  }));
}
