// async_redis_cluster_store on Redis Clusters this test starts on loopback
// (tests/stores/redis/redis_cluster_support.hpp): the store and reconciler conformance suites
// through blocking_store on one shared cluster, then on clusters of their own: one cluster
// shared with the blocking redis_cluster_store, MOVED after a slot moved (the map read again),
// a slot migrating under many concurrent claims (ASK, TRYAGAIN) with one record per key, sweep
// and stuck over every slot, the heartbeat's batch of renewals across every primary (one slot
// moved: MOVED), and the refusals of bad options.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/redis/async_cluster.hpp>
#include <idem/store/redis/cluster.hpp>
#include <idem/testing/reconciler_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "redis_async_test_support.hpp"
#include "redis_cluster_support.hpp"
#include "support/checkpoint_batch_cases.hpp"

using idem_redis_test::private_cluster;
using namespace std::chrono_literals;

namespace {

namespace asio = idem::asio;
using blocking_cluster = idem::blocking_store<idem::async_redis_cluster_store>;

static_assert(idem::AsyncStore<idem::async_redis_cluster_store>);
static_assert(idem::Store<blocking_cluster>);

private_cluster& shared_cluster() {
  static private_cluster cluster(3, 0);
  return cluster;
}

// The blocking cluster store's options as the asynchronous store's.
idem::async_redis_cluster_store::options async_options(
    const idem::redis_cluster_store::options& given) {
  idem::async_redis_cluster_store::options made;
  made.nodes = given.nodes;
  made.prefix = given.prefix;
  made.clock = given.clock;
  return made;
}

// Stores on a pool of two threads the object owns; their keys are deleted when it goes.
class cluster_maker {
 public:
  explicit cluster_maker(private_cluster& cluster) : cluster_(cluster) {}
  cluster_maker(const cluster_maker&) = delete;
  cluster_maker& operator=(const cluster_maker&) = delete;
  ~cluster_maker() {
    pool_.join();
    for (const std::string& prefix : prefixes_)
      cluster_.remove_keys(prefix);
  }
  idem::async_redis_cluster_store make(const idem::async_redis_cluster_store::options& options) {
    prefixes_.push_back(options.prefix);
    return idem::async_redis_cluster_store(pool_.get_executor(), options);
  }
  blocking_cluster make_blocking(const idem::async_redis_cluster_store::options& options) {
    return blocking_cluster(make(options));
  }

 private:
  private_cluster& cluster_;
  asio::thread_pool pool_{2};
  std::vector<std::string> prefixes_;
};

struct async_cluster_factory {
  static constexpr bool bounded = false;
  blocking_cluster make(const idem::testing::store_limits& /*limits*/) {
    return stores.make_blocking(async_options(shared_cluster().options(idem::time_source::caller)));
  }
  cluster_maker stores{shared_cluster()};
};

std::uint16_t slot_of_scope(std::string_view scope) {
  return idem::detail::redis_tag_slot(idem::detail::redis_tag_of(scope));
}

// Whether `key` is on `node`, asked after ASKING (a node importing the slot answers for it
// then, and only then).
bool exists_at(idem_redis_test::private_redis& node, const std::string& key) {
  const auto context = node.connect();
  (void)idem_redis_test::command(context.get(), {"ASKING"});
  return idem_redis_test::command(context.get(), {"EXISTS", key})->integer == 1;
}

std::uint64_t map_reads(idem::async_redis_cluster_store& store) {
  return store.async_slot_map_reads(asio::use_future).get();
}

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(async_cluster_factory)
IDEM_RECONCILER_CONFORMANCE_TESTS(async_cluster_factory)

TEST_CASE("async cluster: records are shared with the blocking cluster store, both ways",
          "[redis_async][cluster]") {
  cluster_maker stores(shared_cluster());
  const idem::redis_cluster_store::options blocking_options = shared_cluster().options();
  blocking_cluster async_store = stores.make_blocking(async_options(blocking_options));
  idem::redis_cluster_store blocking(blocking_options);
  for (const std::string scope : {"tenant-a", "tenant-b", "tenant-c", "tenant-d"}) {
    const auto mine = async_store.claim(idem_redis_test::claim_now(scope, "from-async"));
    REQUIRE(mine.status == idem::claim_status::claimed);
    CHECK(async_store.complete({scope, "from-async", mine.fence}, "async answer", {}));
    CHECK(blocking.find(scope, "from-async", {})->response == "async answer");
    const auto theirs = blocking.claim(idem_redis_test::claim_now(scope, "from-blocking"));
    REQUIRE(theirs.status == idem::claim_status::claimed);
    CHECK(blocking.complete({scope, "from-blocking", theirs.fence}, "blocking answer", {}));
    CHECK(async_store.find(scope, "from-blocking", {})->response == "blocking answer");
    CHECK(async_store.claim(idem_redis_test::claim_now(scope, "from-blocking")).status ==
          idem::claim_status::existing);
  }
}

TEST_CASE("async cluster: a store follows MOVED after a slot moved, and reads the slot map again",
          "[redis_async][cluster]") {
  private_cluster cluster;
  cluster_maker stores(cluster);
  const auto options = async_options(cluster.options());
  idem::async_redis_cluster_store store = stores.make(options);
  blocking_cluster blocking(store);
  const std::string scope = "moving";
  const std::uint16_t slot = slot_of_scope(scope);
  REQUIRE(blocking.claim(idem_redis_test::claim_now(scope, "before")).status ==
          idem::claim_status::claimed);
  CHECK(map_reads(store) == 1);
  const std::size_t from = cluster.index_of(cluster.owner_port(slot));
  std::size_t to = 0;
  for (const std::size_t primary : cluster.primaries()) {
    if (primary != from) to = primary;
  }
  CHECK(cluster.migrate_slot(slot, to) == 4);  // the record, two indexes, the registry
  REQUIRE(cluster.settled());
  // The map still names the old primary: its MOVED sends the claim on, and the map is read
  // again before the next operation.
  CHECK(blocking.claim(idem_redis_test::claim_now(scope, "before")).status ==
        idem::claim_status::existing);
  CHECK(blocking.claim(idem_redis_test::claim_now(scope, "after")).status ==
        idem::claim_status::claimed);
  CHECK(map_reads(store) == 2);
  const auto target = cluster.node(to).connect();
  const idem::detail::redis_keys names =
      idem::detail::redis_keys_of(options.prefix, scope, "after");
  CHECK(idem_redis_test::command(target.get(), {"EXISTS", names.record})->integer == 1);
}

TEST_CASE(
    "async cluster: concurrent claims while a slot migrates: ASK to the keys that moved, TRYAGAIN "
    "until the migration ends, MOVED after it, one record per key",
    "[redis_async][cluster]") {
  constexpr int keys = 200;
  private_cluster cluster;
  cluster_maker stores(cluster);
  auto options = async_options(cluster.options());
  options.pool_size = 4;
  idem::async_redis_cluster_store store = stores.make(options);
  blocking_cluster blocking(store);
  const std::string scope = "storm";
  const std::uint16_t slot = slot_of_scope(scope);
  for (int i = 0; i < keys; ++i) {
    REQUIRE(blocking.claim(idem_redis_test::claim_now(scope, "old-" + std::to_string(i))).status ==
            idem::claim_status::claimed);
  }
  const std::size_t from = cluster.index_of(cluster.owner_port(slot));
  std::size_t to = 0;
  for (const std::size_t primary : cluster.primaries()) {
    if (primary != from) to = primary;
  }
  // Every key of `prefix` claimed `copies` times at once, all started before any is awaited;
  // `meanwhile` runs between; answers (claimed, existing, failed).
  const auto wave = [&](const std::string& prefix, int copies, const auto& meanwhile) {
    std::vector<std::future<idem::claim_result>> claims;
    for (int copy = 0; copy < copies; ++copy) {
      for (int i = 0; i < keys; ++i) {
        claims.push_back(store.async_claim(
            idem_redis_test::claim_now(scope, prefix + std::to_string(i)), asio::use_future));
      }
    }
    meanwhile();
    std::array<int, 3> counts{};
    for (auto& each : claims) {
      try {
        const idem::claim_result answer = each.get();
        if (answer.status == idem::claim_status::claimed) {
          ++counts[0];
        } else {
          CHECK(answer.status == idem::claim_status::existing);
          ++counts[1];
        }
      } catch (const idem::store_error& error) {
        UNSCOPED_INFO(error.what());
        ++counts[2];
      }
    }
    return counts;
  };

  // Every key moved, the slot still MIGRATING at the source and IMPORTING at the target: the
  // source answers ASK for the records, which the target serves after ASKING; the map stays.
  cluster.begin_migration(slot, to);
  while (cluster.move_keys(slot, from, to, 10) > 0) {
  }
  const std::uint64_t reads = map_reads(store);
  const std::array<int, 3> asked = wave("old-", 2, [] {});
  CHECK(asked == std::array<int, 3>{0, 2 * keys, 0});
  CHECK(map_reads(store) == reads);
  const idem::detail::redis_keys old_one =
      idem::detail::redis_keys_of(options.prefix, scope, "old-0");
  CHECK(exists_at(cluster.node(to), old_one.record));

  // New keys: the target cannot make a record of several keys mid-migration (TRYAGAIN), so the
  // claims pause and try again until the migration ends, then follow MOVED, and the map is read
  // again. Each key is claimed once; its second claim answers `existing`.
  const std::array<int, 3> fresh = wave("key-", 2, [&] {
    std::this_thread::sleep_for(100ms);
    cluster.finish_migration(slot, from, to);
  });
  CHECK(fresh == std::array<int, 3>{keys, keys, 0});
  for (int i = 0; i < keys; ++i) {
    const auto found = blocking.find(scope, "key-" + std::to_string(i), {});
    REQUIRE(found);
    CHECK(found->fence == 1);
  }
  // A MOVED said the map is stale: the operations after it read it again first.
  CHECK(map_reads(store) > reads);
  const idem::detail::redis_keys new_one =
      idem::detail::redis_keys_of(options.prefix, scope, "key-0");
  CHECK(exists_at(cluster.node(to), new_one.record));
}

TEST_CASE("async cluster: a batch of renewals applies each entry on its own fence",
          "[redis_async][cluster]") {
  cluster_maker stores(shared_cluster());
  blocking_cluster store =
      stores.make_blocking(async_options(shared_cluster().options(idem::time_source::caller)));
  idem_test::checkpoint_batch_renews_each_held_record(
      store, idem::store_time{std::chrono::seconds{1'700'000'000}}, std::chrono::nanoseconds{0});
}

// The heartbeat's batch across scopes whose slots three primaries serve, one of those slots
// moved to another primary first (its part of the batch follows MOVED): every entry answered in
// its own place, the held ones renewed, a stale fence refused, nothing else touched.
TEST_CASE("async cluster: a batch of renewals across every primary's slots, one slot moved",
          "[redis_async][cluster]") {
  using namespace std::chrono_literals;
  private_cluster cluster;
  cluster_maker stores(cluster);
  const auto options = async_options(cluster.options(idem::time_source::caller));
  idem::async_redis_cluster_store store = stores.make(options);
  blocking_cluster blocking(store);
  // A scope on each primary, found by trying names.
  std::vector<std::string> scopes;
  std::set<std::size_t> served;
  for (int i = 0; scopes.size() < cluster.primaries().size() && i < 1000; ++i) {
    const std::string scope = "renewing-" + std::to_string(i);
    if (served.insert(cluster.index_of(cluster.owner_port(slot_of_scope(scope)))).second)
      scopes.push_back(scope);
  }
  REQUIRE(scopes.size() == cluster.primaries().size());
  const idem::store_time now{std::chrono::seconds{1'700'000'000}};
  const auto claim = [&](const std::string& scope, const std::string& key) {
    const idem::claim_result claimed =
        blocking.claim(idem::claim_request{scope, key, idem::digest{}, now, 30s, 24h, "start"});
    REQUIRE(claimed.status == idem::claim_status::claimed);
    return claimed.fence;
  };
  // The entries view what they name: the recovery points live here.
  std::vector<std::string> recoveries;
  for (const std::string& scope : scopes)
    recoveries.push_back("r-" + scope);
  std::vector<idem::batch_checkpoint> entries;
  std::vector<bool> expected;
  for (std::size_t i = 0; i < scopes.size(); ++i) {
    const std::string& scope = scopes[i];
    entries.push_back({{scope, "held", claim(scope, "held")}, recoveries[i]});
    expected.push_back(true);
    const std::uint64_t stale = claim(scope, "moved");
    REQUIRE(blocking.release({scope, "moved", stale}));
    (void)claim(scope, "moved");
    entries.push_back({{scope, "moved", stale}, "r-stale"});
    expected.push_back(false);
  }
  // The first scope's slot moved to another primary: the store's map still names the old one.
  const std::uint16_t slot = slot_of_scope(scopes[0]);
  const std::size_t from = cluster.index_of(cluster.owner_port(slot));
  std::size_t to = from;
  for (const std::size_t primary : cluster.primaries()) {
    if (primary != from) to = primary;
  }
  REQUIRE(cluster.migrate_slot(slot, to) > 0);
  REQUIRE(cluster.settled());

  const idem::store_time lease_until = now + 90s;
  CHECK(blocking.checkpoint_batch(entries, lease_until) == expected);
  for (const std::string& scope : scopes) {
    const std::optional<idem::record> renewed = blocking.find(scope, "held", now);
    REQUIRE(renewed);
    CHECK(renewed->recovery == "r-" + scope);
    CHECK(renewed->lease_until == lease_until);
    const std::optional<idem::record> taken = blocking.find(scope, "moved", now);
    REQUIRE(taken);
    CHECK(taken->recovery == "start");
    CHECK(taken->lease_until == now + 30s);
  }
  CHECK(blocking.checkpoint_batch(std::vector<idem::batch_checkpoint>{}, lease_until).empty());
}

TEST_CASE("async cluster: sweep and stuck walk every slot that holds scopes",
          "[redis_async][cluster]") {
  cluster_maker stores(shared_cluster());
  auto options = async_options(shared_cluster().options(idem::time_source::caller));
  blocking_cluster store = stores.make_blocking(options);
  const idem::store_time now{std::chrono::seconds{1'800'000'000}};
  std::set<std::uint16_t> slots;
  for (int i = 0; i < 12; ++i) {
    const std::string scope = "scope-" + std::to_string(i);
    slots.insert(slot_of_scope(scope));
    idem::claim_request request = idem_redis_test::claim_now(scope, "k");
    request.now = now;
    request.lease = 1s;
    request.retention = 2s;
    REQUIRE(store.claim(request).status == idem::claim_status::claimed);
  }
  CHECK(slots.size() > 3);
  CHECK(store.stuck(now + 1500ms, 100).size() == 12);
  CHECK(store.stuck(now + 1500ms, 5).size() == 5);
  CHECK(store.sweep(now + 3s) == 12);
  CHECK(store.stuck(now + 3s, 100).empty());
}

TEST_CASE("async cluster: bad options are refused with a clear error", "[redis_async][cluster]") {
  asio::thread_pool pool(1);
  const auto refusal = [&](idem::async_redis_cluster_store::options options) -> std::string {
    try {
      idem::async_redis_cluster_store store(pool.get_executor(), std::move(options));
      return "accepted";
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
  };
  idem::async_redis_cluster_store::options none;
  CHECK_THAT(refusal(none), Catch::Matchers::Contains("nodes is empty"));
  idem::async_redis_cluster_store::options bad;
  bad.nodes = {"no port"};
  CHECK_THAT(refusal(bad), Catch::Matchers::Contains("is not host:port"));
  idem::async_redis_cluster_store::options no_redirects;
  no_redirects.nodes = {"127.0.0.1:7000"};
  no_redirects.max_redirects = 0;
  CHECK_THAT(refusal(no_redirects), Catch::Matchers::Contains("max_redirects"));
  CHECK_THROWS_AS(idem::async_redis_cluster_store({}, no_redirects), std::invalid_argument);

  // Nobody listening at the one seed: the first operation fails, unavailable, naming it.
  idem::async_redis_cluster_store::options nowhere;
  nowhere.nodes = {"127.0.0.1:1"};
  nowhere.connect_timeout = 500ms;
  nowhere.command_timeout = 500ms;
  blocking_cluster store{idem::async_redis_cluster_store(pool.get_executor(), nowhere)};
  try {
    (void)store.claim(idem_redis_test::claim_now("s", "k"));
    FAIL("claimed on a cluster nobody runs");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Catch::Matchers::Contains("CLUSTER SLOTS"));
  }
  pool.join();
}
