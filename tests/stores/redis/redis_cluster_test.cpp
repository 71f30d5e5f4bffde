// redis_cluster_store on Redis Clusters this test starts on loopback (redis_cluster_support.hpp:
// three primaries, a replica each, joined by redis-cli --cluster create): the conformance
// suites on one shared cluster, then what is particular to a cluster on clusters of their own:
// each scope's keys and registry on the primary of its slot, MOVED after a slot moved, a
// slot migration under a 64-thread storm (ASK, TRYAGAIN), a primary killed with kill -9 and its
// replica promoted, and the refusals of bad options. The slot arithmetic and the parsing of
// redirects are tested without a server at the end.
#include <catch2/catch.hpp>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/redis/cluster.hpp>
#include <idem/store/redis/detail/cluster.hpp>
#include <idem/testing/reconciler_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include "redis_cluster_support.hpp"
#include "redis_test_support.hpp"

using idem_redis_test::command;
using idem_redis_test::private_cluster;
using namespace std::chrono_literals;

namespace {

// The cluster the conformance suites share: started once, on first use.
private_cluster& shared_cluster() {
  static private_cluster cluster(3, 0);  // no replicas: none of its users needs one
  return cluster;
}

// Each store gets a prefix of its own; its keys are deleted when the test case ends.
struct redis_cluster_factory {
  static constexpr bool bounded = false;
  redis_cluster_factory() = default;
  redis_cluster_factory(const redis_cluster_factory&) = delete;
  redis_cluster_factory& operator=(const redis_cluster_factory&) = delete;
  ~redis_cluster_factory() {
    for (const std::string& prefix : prefixes)
      shared_cluster().remove_keys(prefix);
  }
  idem::redis_cluster_store make(const idem::testing::store_limits& /*limits*/) {
    idem::redis_cluster_store::options options =
        shared_cluster().options(idem::time_source::caller);
    prefixes.push_back(options.prefix);
    return idem::redis_cluster_store(options);
  }
  std::vector<std::string> prefixes;
};

struct policies : idem::default_policies {
  using store = idem::redis_cluster_store;
  using clock = idem::system_clock;
};

std::uint16_t slot_of_scope(std::string_view scope) {
  return idem::detail::redis_tag_slot(idem::detail::redis_tag_of(scope));
}

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(redis_cluster_factory)
IDEM_RECONCILER_CONFORMANCE_TESTS(redis_cluster_factory)

TEST_CASE("cluster: each scope's keys and registry live on the primary that serves its slot",
          "[redis][cluster]") {
  private_cluster& cluster = shared_cluster();
  const auto options = cluster.options();
  idem::redis_cluster_store store(options);
  const std::vector<std::string> scopes = {"alpha", "beta", "gamma", "delta", "", "a:b{c}"};
  std::set<int> owners;
  for (const std::string& scope : scopes) {
    REQUIRE(store.claim(idem_redis_test::claim_now(scope, "k")).status ==
            idem::claim_status::claimed);
    const std::uint16_t slot = slot_of_scope(scope);
    const int owner = cluster.owner_port(slot);
    owners.insert(owner);
    const auto context = idem_redis_test::connect_raw("127.0.0.1", owner);
    // The record, its scope's two indexes, and the slot's registry naming the scope.
    const std::string tag = idem::detail::redis_tag_of(scope);
    const idem::detail::redis_keys names = idem::detail::redis_keys_of(options.prefix, scope, "k");
    CHECK(command(context.get(), {"EXISTS", names.record, names.expiry, names.lease})->integer ==
          3);
    const std::string registry = idem::detail::redis_slot_registry(options.prefix, slot);
    CHECK(command(context.get(), {"CLUSTER", "KEYSLOT", registry})->integer == slot);
    CHECK(command(context.get(), {"SISMEMBER", registry, tag})->integer == 1);
    CHECK(command(context.get(), {"CLUSTER", "KEYSLOT", names.record})->integer == slot);
  }
  CHECK(owners.size() > 1);  // the scopes are spread over the primaries
  CHECK(store.stuck(idem::store_time{}, 100).empty());
  cluster.remove_keys(options.prefix);
}

TEST_CASE("cluster: the slot tags agree with the servers' CLUSTER KEYSLOT", "[redis][cluster]") {
  const auto context = shared_cluster().node(0).connect();
  std::mt19937 random(7);
  for (int i = 0; i < 300; ++i) {
    const auto slot = static_cast<std::uint16_t>(random() % idem::detail::redis_slot_count);
    const std::string name = idem::detail::redis_slot_registry("idem:", slot);
    CHECK(command(context.get(), {"CLUSTER", "KEYSLOT", name})->integer == slot);
    const std::string key = "key-" + std::to_string(random());
    CHECK(command(context.get(), {"CLUSTER", "KEYSLOT", key})->integer ==
          idem::detail::redis_key_slot(key));
  }
}

TEST_CASE("cluster: a store follows MOVED after a slot moved, and reads the slot map again",
          "[redis][cluster]") {
  private_cluster cluster;
  const auto options = cluster.options();
  idem::redis_cluster_store store(options);
  const std::string scope = "moving";
  const std::uint16_t slot = slot_of_scope(scope);
  REQUIRE(store.claim(idem_redis_test::claim_now(scope, "before")).status ==
          idem::claim_status::claimed);
  const std::size_t from = cluster.index_of(cluster.owner_port(slot));
  std::size_t to = 0;
  for (const std::size_t primary : cluster.primaries()) {
    if (primary != from) to = primary;
  }
  CHECK(cluster.migrate_slot(slot, to) == 4);  // the record, two indexes, the registry
  REQUIRE(cluster.settled());
  const std::uint64_t reads = store.slot_map_reads();
  // The map still names the old primary: its MOVED sends the claim on, and the map is read
  // again before the next operation.
  const idem::claim_result again = store.claim(idem_redis_test::claim_now(scope, "before"));
  CHECK(again.status == idem::claim_status::existing);
  CHECK(store.claim(idem_redis_test::claim_now(scope, "after")).status ==
        idem::claim_status::claimed);
  CHECK(store.slot_map_reads() == reads + 1);
  CHECK(cluster.owner_port(slot) == cluster.node(to).port());
  const auto target = cluster.node(to).connect();
  const idem::detail::redis_keys names =
      idem::detail::redis_keys_of(options.prefix, scope, "after");
  CHECK(command(target.get(), {"EXISTS", names.record})->integer == 1);
}

TEST_CASE(
    "cluster: mid-migration, records whose keys all moved are served through ASK, each keyed "
    "command after an ASKING of its own",
    "[redis][cluster]") {
  private_cluster cluster(3, 0);
  auto options = cluster.options();
  idem::redis_cluster_store store(options);
  const std::string scope = "asked";
  const std::uint16_t slot = slot_of_scope(scope);
  for (int i = 0; i < 50; ++i) {
    REQUIRE(store.claim(idem_redis_test::claim_now(scope, "k-" + std::to_string(i))).status ==
            idem::claim_status::claimed);
  }
  const std::size_t from = cluster.index_of(cluster.owner_port(slot));
  std::size_t to = 0;
  for (const std::size_t primary : cluster.primaries()) {
    if (primary != from) to = primary;
  }
  // Every key moved (the records and the slot's registry), the slot still MIGRATING: the
  // source answers ASK to both of a claim's commands, and the target serves each only after an
  // ASKING of its own (one ASKING for the pipeline would leave the enrolment refused with
  // MOVED back to the source, and the claim bouncing until max_redirects).
  cluster.begin_migration(slot, to);
  while (cluster.move_keys(slot, from, to, 10) > 0) {
  }
  const std::uint64_t reads = store.slot_map_reads();
  for (int i = 0; i < 50; ++i) {
    const std::string key = "k-" + std::to_string(i);
    CHECK(store.claim(idem_redis_test::claim_now(scope, key)).status ==
          idem::claim_status::existing);
    CHECK(store.find(scope, key, {}));
  }
  CHECK(store.slot_map_reads() == reads);  // ASK leaves the map as it is
  cluster.finish_migration(slot, from, to);
  REQUIRE(cluster.settled());
  CHECK(store.claim(idem_redis_test::claim_now(scope, "after")).status ==
        idem::claim_status::claimed);
}

TEST_CASE(
    "cluster: a 64-thread storm keeps one effect per key while its scope's slot migrates under "
    "it",
    "[redis][cluster][concurrency]") {
  constexpr int threads = 64;
  constexpr int keys = 200;
  private_cluster cluster;
  auto options = cluster.options();
  options.pool_size = 16;
  idem::redis_cluster_store store(options);
  const std::string scope = "storm";
  const std::uint16_t slot = slot_of_scope(scope);
  // Records already in the slot, so that the migration takes a while.
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(store.claim(idem_redis_test::claim_now(scope, "old-" + std::to_string(i))).status ==
            idem::claim_status::claimed);
  }
  auto effects = std::make_shared<std::vector<std::atomic<int>>>(keys);
  struct effect_handler {
    std::shared_ptr<std::vector<std::atomic<int>>> effects;
    std::string operator()(idem::handler_context& context, const std::string& body) const {
      const int index = std::stoi(std::string(context.key().substr(4)));
      (*effects)[static_cast<std::size_t>(index)].fetch_add(1);
      return "response to " + body + " under " + std::string(context.key());
    }
  };
  using guarded_t = idem::idempotent<effect_handler, policies>;
  guarded_t::options parts;
  parts.store = store;
  guarded_t guarded(effect_handler{effects}, std::move(parts));

  const std::size_t from = cluster.index_of(cluster.owner_port(slot));
  std::size_t to = 0;
  for (const std::size_t primary : cluster.primaries()) {
    if (primary != from) to = primary;
  }
  std::atomic<int> calls{0}, executed{0}, replayed{0}, conflicts{0}, wrong{0}, errors{0};
  std::atomic<bool> migration_started{false}, migration_done{false};
  std::atomic<int> calls_at_start{0}, calls_at_end{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<int> order(keys);
      for (int i = 0; i < keys; ++i)
        order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(t)));
      for (const int index : order) {
        const std::string key = "key-" + std::to_string(index);
        const std::string body = "body-" + std::to_string(index);
        const std::string expected = "response to " + body + " under " + key;
        // A 409 (the first call still running) is asked again until the replay comes.
        for (int attempt = 0; attempt < 1000; ++attempt) {
          try {
            const auto outcome = guarded(scope, key, body);
            ++calls;
            if (outcome.verdict() == idem::verdict::executed) {
              ++executed;
              if (outcome.value() != expected) ++wrong;
            } else if (outcome.verdict() == idem::verdict::replayed) {
              ++replayed;
              if (outcome.value() != expected) ++wrong;
            } else if (outcome.verdict() == idem::verdict::in_progress) {
              ++conflicts;
              std::this_thread::sleep_for(1ms);
              continue;
            } else {
              ++wrong;
            }
          } catch (const std::exception&) {
            ++errors;
          }
          break;
        }
      }
    });
  }
  std::size_t moved = 0;
  std::thread migrator([&] {
    while (calls.load() < 500)
      std::this_thread::sleep_for(1ms);
    calls_at_start = calls.load();
    migration_started = true;
    moved = cluster.migrate_slot(slot, to, 5, 2ms);
    calls_at_end = calls.load();
    migration_done = true;
  });
  for (std::thread& thread : pool)
    thread.join();
  migrator.join();

  std::cout << "redis cluster, storm during a slot migration: " << calls << " answers (" << executed
            << " executed, " << replayed << " replayed), " << conflicts << " 409s asked again, "
            << errors << " errors, " << wrong << " wrong; " << moved
            << " keys migrated between answers " << calls_at_start << " and " << calls_at_end
            << "; slot map read " << store.slot_map_reads() << " times" << std::endl;
  INFO("calls " << calls << ": executed " << executed << ", replayed " << replayed << ", 409 "
                << conflicts << ", wrong " << wrong << ", errors " << errors << "; migration of "
                << moved << " keys between calls " << calls_at_start << " and " << calls_at_end);
  CHECK(wrong == 0);
  CHECK(errors == 0);
  CHECK(executed == keys);
  CHECK(executed + replayed == threads * keys);
  for (int i = 0; i < keys; ++i)
    CHECK((*effects)[static_cast<std::size_t>(i)] == 1);
  // The migration ran while calls did: it began after 500 and ended before the last one.
  CHECK(migration_done);
  CHECK(moved >= 1000);
  CHECK(calls_at_end < threads * keys);
  CHECK(cluster.owner_port(slot) == cluster.node(to).port());
  // Every record is there, on the new primary, and answers its replay.
  for (int i = 0; i < keys; ++i) {
    const auto found = store.find(scope, "key-" + std::to_string(i), idem::store_time{});
    REQUIRE(found);
    CHECK(found->state == idem::record_state::completed);
  }
}

TEST_CASE(
    "cluster: after kill -9 of a primary its replica takes over, and every write acknowledged "
    "with WAIT is still there",
    "[redis][cluster]") {
  private_cluster cluster;
  auto options = cluster.options();
  options.replicas = 1;
  options.replica_timeout = 1000ms;
  options.command_timeout = 3000ms;
  options.connect_timeout = 500ms;
  idem::redis_cluster_store store(options);
  // Scopes on every primary; one record completed in each.
  std::vector<std::string> scopes;
  for (int i = 0; i < 12; ++i)
    scopes.push_back("scope-" + std::to_string(i));
  std::vector<std::uint64_t> fences;
  for (const std::string& scope : scopes) {
    const idem::claim_result claimed = store.claim(idem_redis_test::claim_now(scope, "k"));
    REQUIRE(claimed.status == idem::claim_status::claimed);
    REQUIRE(
        store.complete({scope, "k", claimed.fence}, "response of " + scope, idem::store_time{}));
  }
  const std::size_t victim = cluster.index_of(cluster.owner_port(slot_of_scope(scopes[0])));
  const int victim_port = cluster.node(victim).port();
  cluster.node(victim).kill9();
  // The cluster sees the primary fail (node timeout 2 s) and promotes its replica. Until the
  // old primary is back as the new one's replica, that slot's writes cannot be acknowledged by
  // a replica (WAIT 1 answers 0): the store says unavailable rather than promise them.
  const std::size_t witness = (victim + 1) % cluster.size();
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (cluster.owner_port(slot_of_scope(scopes[0]), witness) == victim_port) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE(cluster.settled(60s, false));
  // Back, empty (no append-only file), as the new primary's replica.
  cluster.node(victim).start();
  REQUIRE(cluster.settled(60s));
  // The store finds the new primary: the first operation there fails (its node is gone) and
  // the map is read again.
  int failures = 0;
  std::string failed_with;
  for (const std::string& scope : scopes) {
    for (int attempt = 0;; ++attempt) {
      try {
        const idem::claim_result again = store.claim(idem_redis_test::claim_now(scope, "k"));
        INFO("scope " << scope << " on port " << cluster.owner_port(slot_of_scope(scope))
                      << "; the killed primary was on " << victim_port << "; attempt " << attempt);
        REQUIRE(again.status == idem::claim_status::existing);
        CHECK(again.existing.state == idem::record_state::completed);
        CHECK(again.existing.response == "response of " + scope);
        break;
      } catch (const idem::store_error& failed) {
        CHECK(failed.failure() == idem::store_failure::unavailable);
        ++failures;
        failed_with = failed.what();
        INFO("the last failure: " << failed_with);
        REQUIRE(attempt < 20);
        std::this_thread::sleep_for(200ms);
      }
    }
  }
  std::cout << "redis cluster, kill -9 of a primary: " << scopes.size()
            << " completed records read back after the failover, " << failures
            << " operations unavailable meanwhile" << std::endl;
  INFO("operations that failed while the store found the new primary: "
       << failures << "; the last: " << failed_with);
  CHECK(failures <= 2);
  CHECK(cluster.owner_port(slot_of_scope(scopes[0])) != victim_port);
}

TEST_CASE("cluster: sweep and stuck walk every slot that holds scopes", "[redis][cluster]") {
  private_cluster& cluster = shared_cluster();
  auto options = cluster.options(idem::time_source::caller);
  idem::redis_cluster_store store(options);
  const idem::store_time now{std::chrono::hours{24 * 365 * 50}};
  for (int i = 0; i < 30; ++i) {
    const std::string scope = "sweep-" + std::to_string(i);  // the request views it
    idem::claim_request request = idem_redis_test::claim_now(scope, "k", std::chrono::seconds{1});
    request.now = now;
    request.retention = std::chrono::seconds{10};
    REQUIRE(store.claim(request).status == idem::claim_status::claimed);
  }
  CHECK(store.stuck(now + std::chrono::seconds{2}, 1000).size() == 30);
  CHECK(store.stuck(now + std::chrono::seconds{2}, 7).size() == 7);
  CHECK(store.sweep(now + std::chrono::seconds{11}) == 30);
  CHECK(store.stuck(now + std::chrono::seconds{2}, 1000).empty());
  // Every registry emptied and removed: nothing is left under the prefix.
  CHECK(cluster.keys(options.prefix).empty());
}

TEST_CASE("cluster: sweep and stuck in the middle of a slot migration, and after it",
          "[redis][cluster]") {
  private_cluster cluster;
  auto options = cluster.options(idem::time_source::caller);
  idem::redis_cluster_store store(options);
  const std::string scope = "migrating";
  const std::uint16_t slot = slot_of_scope(scope);
  const idem::store_time now{std::chrono::hours{24 * 365 * 50}};
  for (int i = 0; i < 40; ++i) {
    const std::string key = "k" + std::to_string(i);  // the request views it
    idem::claim_request request = idem_redis_test::claim_now(scope, key, std::chrono::seconds{1});
    request.now = now;
    request.retention = std::chrono::seconds{10};
    REQUIRE(store.claim(request).status == idem::claim_status::claimed);
  }
  const std::size_t from = cluster.index_of(cluster.owner_port(slot));
  std::size_t to = 0;
  for (const std::size_t primary : cluster.primaries()) {
    if (primary != from) to = primary;
  }
  REQUIRE(cluster.begin_migration(slot, to) == from);
  REQUIRE(cluster.move_keys(slot, from, to, 20) == 20);  // about half of the slot's 43 keys
  // Each either answers or throws store_error(unavailable); neither loses a record.
  std::string during;
  try {
    during =
        "stuck found " + std::to_string(store.stuck(now + std::chrono::seconds{2}, 100).size());
  } catch (const idem::store_error& failed) {
    CHECK(failed.failure() == idem::store_failure::unavailable);
    during = std::string("stuck threw: ") + failed.what();
  }
  try {
    during += "; sweep removed " + std::to_string(store.sweep(now));
  } catch (const idem::store_error& failed) {
    CHECK(failed.failure() == idem::store_failure::unavailable);
    during += std::string("; sweep threw: ") + failed.what();
  }
  std::cout << "redis cluster, sweep and stuck mid-migration: " << during << std::endl;
  while (cluster.move_keys(slot, from, to, 20) > 0) {
  }
  cluster.finish_migration(slot, from, to);
  REQUIRE(cluster.settled());
  for (int i = 0; i < 40; ++i) {
    const auto found = store.find(scope, "k" + std::to_string(i), now);
    REQUIRE(found);
  }
  CHECK(store.stuck(now + std::chrono::seconds{2}, 100).size() == 40);
  CHECK(store.sweep(now + std::chrono::seconds{11}) == 40);
  CHECK(cluster.keys(options.prefix).empty());
}

TEST_CASE("cluster: bad options and servers are refused with a clear error", "[redis][cluster]") {
  idem::redis_cluster_store::options options;
  CHECK_THROWS_WITH(idem::redis_cluster_store(options), Catch::Contains("nodes is empty"));
  options.nodes = {"localhost"};
  CHECK_THROWS_WITH(idem::redis_cluster_store(options),
                    Catch::Contains("'localhost' is not host:port"));
  options.nodes = {"127.0.0.1:1"};
  options.max_redirects = 0;
  CHECK_THROWS_WITH(idem::redis_cluster_store(options), Catch::Contains("max_redirects"));
  options.max_redirects = 16;
  options.replicas = 1;
  options.replica_timeout = options.command_timeout;
  CHECK_THROWS_WITH(idem::redis_cluster_store(options), Catch::Contains("replica_timeout"));
  options.replicas = 0;
  options.prefix = "a{b";
  CHECK_THROWS_AS(idem::redis_cluster_store(options), std::invalid_argument);
  options.prefix = "idem:";
  // Nobody listens there.
  try {
    idem::redis_cluster_store unreachable(options);
    FAIL("a store was made with no node to reach");
  } catch (const idem::store_error& failed) {
    CHECK(failed.failure() == idem::store_failure::unavailable);
    CHECK_THAT(failed.what(), Catch::Contains("no cluster node answered CLUSTER SLOTS"));
  }
  // A server that is not a cluster node.
  const idem_redis_test::private_redis single({"--appendonly", "no"});
  options.nodes = {"127.0.0.1:" + std::to_string(single.port())};
  CHECK_THROWS_WITH(idem::redis_cluster_store(options),
                    Catch::Contains("is it a cluster node") && Catch::Contains("redis_store"));
  // A default-constructed handle.
  idem::redis_cluster_store empty;
  CHECK_THROWS_AS(empty.find("s", "k", idem::store_time{}), std::logic_error);
}

// The parts alone, no server.

namespace {
struct error_reply {
  explicit error_reply(std::string text) : text_(std::move(text)) {
    reply_.type = REDIS_REPLY_ERROR;
    reply_.str = text_.data();
    reply_.len = text_.size();
  }
  const redisReply* get() const { return &reply_; }

 private:
  std::string text_;
  redisReply reply_{};
};
}  // namespace

TEST_CASE("cluster parts: CRC16 and hash slots as Redis Cluster computes them",
          "[redis][cluster][unit]") {
  CHECK(idem::detail::redis_crc16("123456789") == 0x31C3);  // the specification's check value
  CHECK(idem::detail::redis_key_slot("foo") == 12182);
  CHECK(idem::detail::redis_key_slot("{user1000}.following") ==
        idem::detail::redis_key_slot("{user1000}.followers"));
  CHECK(idem::detail::redis_key_slot("foo{}{bar}") ==
        idem::detail::redis_crc16("foo{}{bar}") % 16384);
  CHECK(idem::detail::redis_key_slot("foo{{bar}}zap") == idem::detail::redis_key_slot("{bar"));
  CHECK(idem::detail::redis_key_slot("foo{bar}{zap}") == idem::detail::redis_key_slot("bar"));
  for (std::uint16_t slot = 0; slot < idem::detail::redis_slot_count; ++slot) {
    const std::string_view tag = idem::detail::redis_slot_tag(slot);
    REQUIRE(tag.size() <= 6);
    REQUIRE(idem::detail::redis_key_slot(tag) == slot);
  }
}

TEST_CASE("cluster parts: MOVED and ASK are read, anything else is not a redirect",
          "[redis][cluster][unit]") {
  const auto moved =
      idem::detail::redis_redirect_of(error_reply("MOVED 3999 127.0.0.1:6381").get());
  REQUIRE(moved);
  CHECK(moved->how == idem::detail::redis_redirect::kind::moved);
  CHECK(moved->slot == 3999);
  CHECK(moved->to.host == "127.0.0.1");
  CHECK(moved->to.port == 6381);
  const auto ask = idem::detail::redis_redirect_of(error_reply("ASK 12 ::1:7000").get());
  REQUIRE(ask);
  CHECK(ask->how == idem::detail::redis_redirect::kind::ask);
  CHECK(ask->to.host == "::1");
  for (const char* other : {"MOVED", "MOVED 16384 127.0.0.1:1", "MOVED x 127.0.0.1:1",
                            "ASK 1 nowhere", "ERR wrong", "TRYAGAIN Multiple keys"}) {
    CHECK_FALSE(idem::detail::redis_redirect_of(error_reply(other).get()));
  }
  CHECK(idem::detail::redis_retry_later(error_reply("TRYAGAIN Multiple keys request").get()));
  CHECK(idem::detail::redis_retry_later(error_reply("CLUSTERDOWN The cluster is down").get()));
  CHECK_FALSE(idem::detail::redis_retry_later(error_reply("ERR no").get()));
}
