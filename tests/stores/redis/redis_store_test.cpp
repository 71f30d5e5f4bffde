// What is particular to redis_store, on the shared test server: the key layout and its hash
// tags, the server's clock, Redis TTLs, sweep's scope registry under concurrent claims, the
// connection pool, and a storm through idempotent with clients that do not share a pool.
#include <catch2/catch.hpp>

#include <idem/policies.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/store/redis.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "redis_test_support.hpp"

#include "support/records.hpp"

using namespace std::chrono_literals;
using idem::claim_status;
using idem::record_state;
using idem::time_source;

using idem::testing::print;
using idem::testing::start;

namespace {

idem::claim_request ask(std::string_view scope, std::string_view key, idem::store_time now,
                        std::chrono::nanoseconds lease = 30s,
                        std::chrono::nanoseconds retention = 24h) {
  return idem::claim_request{scope, key, print(1), now, lease, retention};
}

std::string hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out.push_back(digits[static_cast<unsigned char>(c) >> 4]);
    out.push_back(digits[static_cast<unsigned char>(c) & 0xf]);
  }
  return out;
}

idem_redis_test::context_ptr raw_connection() {
  const auto [host, port] = idem_redis_test::shared_server();
  return idem_redis_test::connect_raw(host, port);
}

}  // namespace

TEST_CASE("a record's keys share its scope's hash tag, whatever bytes the scope holds", "[redis]") {
  idem_redis_test::shared_stores stores;
  const auto options = idem_redis_test::shared_options(time_source::caller);
  idem::redis_store store = stores.make(options);
  const std::vector<std::string> scopes = {
      "", "tenant", "a:b", "a", "}", "{", "{x}", "}{", std::string("t\0x", 3), "#expiry"};
  for (const std::string& scope : scopes) {
    REQUIRE(store.claim(ask(scope, "key", start)).status == claim_status::claimed);
    REQUIRE(store.claim(ask(scope, "b:c", start)).status == claim_status::claimed);
  }
  const auto raw = raw_connection();
  const std::vector<std::string> written = idem_redis_test::keys_under(raw.get(), options.prefix);
  std::map<std::string, std::vector<std::string>> by_tag;
  for (const std::string& name : written)
    by_tag[idem_redis_test::hash_tag(name)].push_back(name);

  for (const std::string& scope : scopes) {
    INFO("scope of " << scope.size() << " bytes: " << hex(scope));
    const std::string tag = "s" + hex(scope);
    // Two records and the scope's two indexes, all in one slot.
    REQUIRE(by_tag.count(tag) == 1);
    const std::set<std::string> names(by_tag[tag].begin(), by_tag[tag].end());
    const std::string base = options.prefix + "{" + tag + "}";
    CHECK(names ==
          std::set<std::string>{base + ":key", base + ":b:c", base + "#expiry", base + "#lease"});
  }
  // Plus the registry of scopes; nothing else.
  CHECK(written.size() == 4 * scopes.size() + 1);
  CHECK(std::count(written.begin(), written.end(), options.prefix + "#scopes") == 1);
  // ("a:b", "b:c") and ("a", "b:c") are different records.
  REQUIRE(store.complete({"a:b", "b:c", 1}, "left", start));
  const auto other = store.find("a", "b:c", start);
  REQUIRE(other);
  CHECK(other->state == record_state::in_progress);
}

TEST_CASE("a prefix that would move the hash tag, or an empty pool, is refused", "[redis]") {
  auto options = idem_redis_test::shared_options(time_source::server);
  options.prefix = "app{1}:";
  CHECK_THROWS_AS(idem::redis_store(options), std::invalid_argument);
  options.prefix = "app:";
  options.pool_size = 0;
  CHECK_THROWS_AS(idem::redis_store(options), std::invalid_argument);
  options.pool_size = 1;
  options.port = 70000;
  CHECK_THROWS_AS(idem::redis_store(options), std::invalid_argument);
}

TEST_CASE("a default-constructed store says it has no server", "[redis]") {
  idem::redis_store unset;
  CHECK_THROWS_AS(unset.claim(ask("s", "k", start)), std::logic_error);
  CHECK_THROWS_AS(unset.find("s", "k", start), std::logic_error);
  // Assigning a real one makes it usable.
  idem_redis_test::shared_stores stores;
  unset = stores.make(time_source::caller);
  CHECK(unset.claim(ask("s", "k", start)).status == claim_status::claimed);
}

TEST_CASE("with the server's time, clients whose clocks disagree agree on the lease", "[redis]") {
  idem_redis_test::shared_stores stores;
  const auto options = idem_redis_test::shared_options(time_source::server);
  idem::redis_store early = stores.make(options);
  idem::redis_store late(options);  // a second client: its own pool, the same records
  const idem::store_time year_2000{std::chrono::seconds{946684800}};
  const idem::store_time year_2100{std::chrono::seconds{4102444800}};

  const auto claimed = early.claim(ask("tenant", "k", year_2000, 30s, 24h));
  REQUIRE(claimed.status == claim_status::claimed);
  // A client whose clock is a century ahead still sees a live claim, not an abandoned one.
  const auto seen = late.claim(ask("tenant", "k", year_2100, 30s, 24h));
  REQUIRE(seen.status == claim_status::existing);
  CHECK(seen.existing.lease_until - seen.existing.created_at == 30s);
  CHECK(seen.existing.expires_at - seen.existing.created_at == 24h);
  // The times are the server's: near this machine's clock (the server runs here), far from
  // either client's.
  const auto here = std::chrono::system_clock::now();
  CHECK(seen.existing.created_at > here - 1h);
  CHECK(seen.existing.created_at < here + 1h);
  // find ignores the caller's now too: a client in 2100 does not see it expired.
  CHECK(late.find("tenant", "k", year_2100));
}

TEST_CASE("with the server's time, a claim past its real lease is taken over", "[redis]") {
  idem_redis_test::shared_stores stores;
  idem::redis_store store = stores.make(time_source::server);
  const auto now = std::chrono::system_clock::now();
  const auto first = store.claim(ask("tenant", "k", now, 50ms, 1h));
  REQUIRE(first.status == claim_status::claimed);
  REQUIRE(store.checkpoint({"tenant", "k", first.fence}, "step", now + 50ms));
  std::this_thread::sleep_for(200ms);  // past the lease on any clock; asserts no speed
  const auto second = store.claim(ask("tenant", "k", now, 50ms, 1h));
  REQUIRE(second.status == claim_status::taken_over);
  CHECK(second.fence == first.fence + 1);
  CHECK(second.existing.recovery == "step");
  CHECK(store.stuck(now, 10).empty());  // the new lease is live
  CHECK_FALSE(store.complete({"tenant", "k", first.fence}, "stale", now));
  CHECK(store.complete({"tenant", "k", second.fence}, "done", now));
}

TEST_CASE("with the server's time, a checkpoint's lease is counted from the server's clock",
          "[redis]") {
  idem_redis_test::shared_stores stores;
  idem::redis_store store = stores.make(time_source::server);
  const auto claimed = store.claim(ask("tenant", "k", start, 30s, 24h));
  REQUIRE(store.checkpoint({"tenant", "k", claimed.fence}, "step",
                           std::chrono::system_clock::now() + 1h));
  const auto found = store.find("tenant", "k", start);
  REQUIRE(found);
  CHECK(found->lease_until - found->created_at > 59min);
  CHECK(found->lease_until - found->created_at < 61min);
  CHECK(found->recovery == "step");
}

TEST_CASE("records carry a Redis TTL that ends at their expiry", "[redis]") {
  idem_redis_test::shared_stores stores;
  const auto raw = raw_connection();
  SECTION("server time: the retention") {
    const auto options = idem_redis_test::shared_options(time_source::server);
    idem::redis_store store = stores.make(options);
    REQUIRE(store.claim(ask("t", "k", start, 30s, 1h)).status == claim_status::claimed);
    const std::string base = options.prefix + "{s" + hex("t") + "}";
    for (const std::string& name : {base + ":k", base + "#expiry", base + "#lease"}) {
      INFO(name);
      const auto ttl = idem_redis_test::command(raw.get(), {"PTTL", name});
      CHECK(ttl->integer > 0);
      CHECK(ttl->integer <= 3600000);
    }
    // Completing and releasing keep it: the tombstone goes when the record would have.
    REQUIRE(store.release({"t", "k", 1}));
    CHECK(idem_redis_test::command(raw.get(), {"PTTL", base + ":k"})->integer > 0);
  }
  SECTION("caller time: the retention plus the margin") {
    auto options = idem_redis_test::shared_options(time_source::caller);
    options.caller_time_margin = 10min;
    idem::redis_store store = stores.make(options);
    REQUIRE(store.claim(ask("t", "k", start, 30s, 1h)).status == claim_status::claimed);
    const auto ttl =
        idem_redis_test::command(raw.get(), {"PTTL", options.prefix + "{s" + hex("t") + "}:k"});
    CHECK(ttl->integer > 3600000);
    CHECK(ttl->integer <= 4200000);
  }
}

TEST_CASE("sweep leaves nothing behind, and counts records Redis had already dropped", "[redis]") {
  idem_redis_test::shared_stores stores;
  const auto options = idem_redis_test::shared_options(time_source::caller);
  idem::redis_store store = stores.make(options);
  for (int i = 0; i < 700; ++i) {
    const std::string scope = "scope-" + std::to_string(i % 7);
    REQUIRE(store.claim(ask(scope, "k" + std::to_string(i), start, 30s, 1h)).status ==
            claim_status::claimed);
  }
  REQUIRE(store.claim(ask("young", "k", start + 1h, 30s, 1h)).status == claim_status::claimed);
  // What Redis's own TTL does to a record: the record goes, its index entries stay.
  const auto raw = raw_connection();
  const std::string dropped = options.prefix + "{s" + hex("scope-0") + "}:k0";
  REQUIRE(idem_redis_test::command(raw.get(), {"DEL", dropped})->integer == 1);

  CHECK(store.sweep(start + 1h) == 700);
  CHECK(store.sweep(start + 1h) == 0);
  // Only the young record, its scope's indexes and the registry (now naming one scope) remain.
  const std::string young = options.prefix + "{s" + hex("young") + "}";
  const auto left = idem_redis_test::keys_under(raw.get(), options.prefix);
  CHECK(std::set<std::string>(left.begin(), left.end()) ==
        std::set<std::string>{young + ":k", young + "#expiry", young + "#lease",
                              options.prefix + "#scopes"});
  CHECK(store.sweep(start + 2h) == 1);
  CHECK(idem_redis_test::keys_under(raw.get(), options.prefix).empty());
}

TEST_CASE("stuck pages through scopes and past expired claims", "[redis]") {
  idem_redis_test::shared_stores stores;
  idem::redis_store store = stores.make(time_source::caller);
  // 600 claims that expire first (in the lease index ahead of the others), then 300 stuck ones.
  for (int i = 0; i < 600; ++i)
    (void)store.claim(ask("s", "old-" + std::to_string(i), start, 1s, 2s));
  for (int i = 0; i < 300; ++i)
    (void)store.claim(
        ask("s" + std::to_string(i % 3), "k" + std::to_string(i), start + 5s, 1s, 1h));
  CHECK(store.stuck(start + 10s, 1000).size() == 300);
  CHECK(store.stuck(start + 10s, 17).size() == 17);
  CHECK(store.stuck(start + 5s, 1000).empty());
}

// The registry protocol: a scope emptied by sweep while a claim writes into it must stay
// enrolled. Each round writes an expired record and then a live one into a fresh scope, while
// sweep runs over and over; every live record must still be found by stuck at the end.
TEST_CASE("a scope that holds records stays enrolled while sweep prunes empty ones",
          "[redis][concurrency]") {
  idem_redis_test::shared_stores stores;
  idem::redis_store store = stores.make(time_source::caller);
  constexpr int rounds = 300;
  std::atomic<bool> done{false};
  std::atomic<int> sweeps{0};
  std::thread sweeper([&] {
    while (!done.load()) {
      (void)store.sweep(start + 1h);
      sweeps.fetch_add(1);
    }
  });
  for (int round = 0; round < rounds; ++round) {
    const std::string scope = "round-" + std::to_string(round);
    REQUIRE(store.claim(ask(scope, "expired", start, 1s, 2s)).status == claim_status::claimed);
    REQUIRE(store.claim(ask(scope, "live", start + 1h, 1s, 24h)).status == claim_status::claimed);
  }
  done = true;
  sweeper.join();
  INFO(sweeps.load() << " sweeps ran alongside");
  CHECK(store.stuck(start + 2h, std::size_t{10} * rounds).size() ==
        static_cast<std::size_t>(rounds));
  CHECK(store.sweep(start + 1h) <= static_cast<std::size_t>(rounds));
  CHECK(store.sweep(start + 48h) == static_cast<std::size_t>(rounds));
}

TEST_CASE("copies share one pool, and more threads than connections are all served",
          "[redis][concurrency]") {
  idem_redis_test::shared_stores stores;
  auto options = idem_redis_test::shared_options(time_source::caller);
  options.pool_size = 2;
  const idem::redis_store store = stores.make(options);
  std::atomic<int> claimed{0};
  std::vector<std::thread> threads;
  threads.reserve(16);
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&claimed, copy = store, t]() mutable {
      for (int i = 0; i < 50; ++i) {
        const std::string key = std::to_string(t) + "-" + std::to_string(i);
        if (copy.claim(ask("pool", key, start)).status == claim_status::claimed &&
            copy.complete({"pool", key, 1}, key, start)) {
          claimed.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  CHECK(claimed == 16 * 50);
  // A copy made afterwards sees what the others wrote, and what it writes is seen through them.
  idem::redis_store later = store;
  REQUIRE(later.claim(ask("pool", "later", start)).status == claim_status::claimed);
  CHECK(store.find("pool", "later", start));
  const auto found = later.find("pool", "7-7", start);
  REQUIRE(found);
  CHECK(found->response == "7-7");
}

namespace {

struct server_time_policies : idem::default_policies {
  using store = idem::redis_store;
  using clock = idem::system_clock;
};

}  // namespace

// Two clients with a pool each (as two service replicas would be), 64 threads between them,
// every thread through all 1,000 keys in its own order, on the server's clock.
TEST_CASE("64 threads on two clients storm 1000 keys with one effect per key",
          "[redis][concurrency]") {
  constexpr int threads = 64;
  constexpr int keys = 1000;
  idem_redis_test::shared_stores stores;
  auto options = idem_redis_test::shared_options(time_source::server);
  options.pool_size = 16;
  idem::redis_store first = stores.make(options);
  idem::redis_store second(options);
  auto effects = std::make_shared<std::vector<std::atomic<int>>>(keys);
  struct effect {
    std::shared_ptr<std::vector<std::atomic<int>>> effects;
    std::string operator()(idem::handler_context& context, const std::string& body) const {
      (*effects)[std::stoul(std::string(context.key().substr(4)))].fetch_add(1);
      return "done " + body;
    }
  };
  using guarded = idem::idempotent<effect, server_time_policies>;
  std::vector<std::unique_ptr<guarded>> clients;
  for (idem::redis_store* store : {&first, &second}) {
    guarded::options parts;
    parts.store = *store;
    clients.push_back(std::make_unique<guarded>(effect{effects}, std::move(parts)));
  }
  std::atomic<int> executed{0}, replayed{0}, conflicts{0}, wrong{0};
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      guarded& client = *clients[static_cast<std::size_t>(t % 2)];
      std::vector<int> order(keys);
      for (int i = 0; i < keys; ++i)
        order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(t)));
      for (const int index : order) {
        const std::string key = "key-" + std::to_string(index);
        const auto outcome = client("storm", key, "body-" + std::to_string(index));
        switch (outcome.verdict()) {
          case idem::verdict::executed:
            ++executed;
            break;
          case idem::verdict::replayed:
            ++replayed;
            if (outcome.value() != "done body-" + std::to_string(index)) ++wrong;
            break;
          case idem::verdict::in_progress:
            ++conflicts;
            break;
          default:
            ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : pool)
    thread.join();
  INFO("replayed " << replayed << ", in progress " << conflicts);
  CHECK(wrong == 0);
  CHECK(executed == keys);
  CHECK(executed + replayed + conflicts == threads * keys);
  int not_once = 0;
  for (int i = 0; i < keys; ++i) {
    if ((*effects)[static_cast<std::size_t>(i)] != 1) ++not_once;
  }
  CHECK(not_once == 0);
}
