// tiered_store over memory_store: the store conformance suite (with a tier large enough to keep
// everything, and with one so small that it evicts all the time), the tier's cases
// (tests/support/tiered_cases.hpp), and what belongs to the tier alone: its byte bound, CLOCK
// eviction, records too large to keep, and options it refuses.
#include <catch2/catch.hpp>

#include <idem/store/memory.hpp>
#include <idem/store/tiered.hpp>
#include <idem/testing/inspect_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include <stdexcept>
#include <string>

#include "support/tiered_cases.hpp"

namespace tiered_store_test {

namespace {

using tiered_memory = idem::tiered_store<idem::memory_store>;

idem::memory_store make_memory() {
  idem::memory_store::options bounds;
  bounds.expected_records = 1024;
  return idem::memory_store{bounds};
}

struct tiered_memory_factory {
  static constexpr bool bounded = true;
  tiered_memory make(const idem::testing::store_limits& limits) {
    idem::memory_store::options bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1024;
    return tiered_memory{idem::memory_store{bounds}};
  }
};

// A tier of 4 KiB in 4 shards: a few records each, so the suite runs through constant eviction.
struct small_tier_memory_factory {
  static constexpr bool bounded = true;
  tiered_memory make(const idem::testing::store_limits& limits) {
    idem::memory_store::options bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1024;
    tiered_memory::options settings;
    settings.max_bytes = 4096;
    settings.shards = 4;
    return tiered_memory{idem::memory_store{bounds}, settings};
  }
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(tiered_memory_factory)
IDEM_STORE_CONFORMANCE_TESTS(small_tier_memory_factory)
IDEM_INSPECT_CONFORMANCE_TESTS(tiered_memory_factory)

TEST_CASE("tiered_store: a forgotten record is no longer served from the tier",
          "[tiered][inspect]") {
  using idem::testing::inspect::claim_at;
  using idem::testing::inspect::t0;
  using namespace std::chrono_literals;
  tiered_memory store{make_memory()};
  const idem::claim_result held = claim_at(store, "s", "k", t0);
  REQUIRE(store.complete(idem::fenced_key{"s", "k", held.fence}, "answer", t0));
  // Read twice: the second answer comes from the tier.
  REQUIRE(store.find("s", "k", t0).has_value());
  const auto hits_before = store.tier_statistics().hits;
  REQUIRE(store.find("s", "k", t0).has_value());
  REQUIRE(store.tier_statistics().hits == hits_before + 1);
  CHECK(store.forget(idem::forget_request{"s", "k", t0 + 1s, held.fence, false}).status ==
        idem::forget_status::forgotten);
  CHECK_FALSE(store.find("s", "k", t0 + 1s).has_value());
  CHECK(claim_at(store, "s", "k", t0 + 2s).status == idem::claim_status::claimed);
}
IDEM_TIERED_CASES("tiered_store over memory_store", make_memory, 500, 8)

namespace {

using namespace std::chrono_literals;
using idem_tiered_test::ask;

// Claims, completes and reads back (so that the tier keeps it) one key.
void keep(tiered_memory& store, const std::string& key, const std::string& response) {
  const idem::claim_result claimed = store.claim(ask(key, idem::testing::start));
  REQUIRE(claimed.status == idem::claim_status::claimed);
  REQUIRE(store.complete({"tenant", key, claimed.fence}, response, idem::testing::start));
  REQUIRE(store.find("tenant", key, idem::testing::start));
}

}  // namespace

TEST_CASE("the tier holds no more bytes than max_bytes and evicts to stay under it", "[tiered]") {
  tiered_memory::options settings;
  settings.max_bytes = 8 * (tiered_memory::tier_overhead_bytes + 200);
  settings.shards = 1;
  tiered_memory store{make_memory(), settings};
  for (int i = 0; i < 100; ++i) {
    keep(store, "key-" + std::to_string(i), std::string(190, 'r'));
    REQUIRE(store.tier_statistics().bytes <= settings.max_bytes);
  }
  const auto stats = store.tier_statistics();
  CHECK(stats.entries <= 8);
  CHECK(stats.entries >= 7);
  CHECK(stats.evictions >= 92);
  // Evicted records are still the durable store's: a repeat is answered, from there.
  CHECK(store.claim(ask("key-0", idem::testing::start + 1s)).existing.response ==
        std::string(190, 'r'));
}

TEST_CASE("eviction gives a record that was hit a second chance", "[tiered]") {
  tiered_memory::options settings;
  settings.max_bytes = 4 * (tiered_memory::tier_overhead_bytes + 10);
  settings.shards = 1;
  const auto counts = std::make_shared<idem_tiered_test::reads>();
  auto store = idem_tiered_test::counted(make_memory(), counts, settings);
  const auto keep_counted = [&](const std::string& key) {
    const idem::claim_result claimed = store.claim(ask(key, idem::testing::start));
    REQUIRE(store.complete({"tenant", key, claimed.fence}, "r", idem::testing::start));
    REQUIRE(store.find("tenant", key, idem::testing::start));
  };
  keep_counted("hot");
  for (int i = 0; i < 40; ++i) {
    REQUIRE(store.find("tenant", "hot", idem::testing::start));  // sets its reference bit
    keep_counted("cold-" + std::to_string(i));
  }
  const int finds = counts->finds.load();
  CHECK(store.find("tenant", "hot", idem::testing::start));
  CHECK(counts->finds.load() == finds);  // still in the tier
  CHECK(store.tier_statistics().evictions > 30);
}

TEST_CASE("a record larger than a shard's share of the tier is not kept", "[tiered]") {
  tiered_memory::options settings;
  settings.max_bytes = 4096;
  settings.shards = 4;
  tiered_memory store{make_memory(), settings};
  keep(store, "big", std::string(2000, 'x'));  // more than 1024 bytes a shard
  CHECK(store.tier_statistics().entries == 0);
  CHECK(store.tier_statistics().refused == 1);
  CHECK(store.find("tenant", "big", idem::testing::start)->response.size() == 2000);
  keep(store, "small", "x");
  CHECK(store.tier_statistics().entries == 1);
}

TEST_CASE("tiered_store refuses options it cannot honour, saying which", "[tiered]") {
  const auto refused = [](const tiered_memory::options& settings) -> std::string {
    try {
      tiered_memory store{make_memory(), settings};
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
    return "accepted";
  };
  tiered_memory::options zero;
  zero.max_bytes = 0;
  CHECK_THAT(refused(zero), Catch::Contains("max_bytes is 0"));
  for (const std::size_t shards : {std::size_t{0}, std::size_t{3}, std::size_t{8192}}) {
    tiered_memory::options bad;
    bad.shards = shards;
    CHECK_THAT(refused(bad), Catch::Contains("shards must be a power of two"));
  }
  tiered_memory::options thin;
  thin.max_bytes = 10;
  thin.shards = 16;
  CHECK_THAT(refused(thin), Catch::Contains("less than one byte per shard"));
  tiered_memory::options negative;
  negative.expiry_margin = -1ns;
  CHECK_THAT(refused(negative), Catch::Contains("expiry_margin is negative"));
  tiered_memory::options fine;
  fine.max_bytes = 1;
  fine.shards = 1;
  CHECK(refused(fine) == "accepted");
}

TEST_CASE("tiered_store forwards what the durable store declares", "[tiered]") {
  STATIC_REQUIRE(idem::Store<tiered_memory>);
  STATIC_REQUIRE(!idem::reads_completion_time<tiered_memory>);
  STATIC_REQUIRE(!idem::never_blocks<tiered_memory>);
  STATIC_REQUIRE(!idem::TransactionalStore<tiered_memory>);
  STATIC_REQUIRE(idem::reads_completion_time<
                 idem::tiered_store<idem_tiered_test::counting_store<idem::memory_store>>>);
}

}  // namespace tiered_store_test
