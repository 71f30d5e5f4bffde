// tiered_store's cases over any durable store: a test file instantiates them with a function
// that makes a fresh, empty durable store (memory, SQLite, PostgreSQL, Redis), and registers
// them with IDEM_TIERED_CASES(name, make). The conformance suite runs separately, through a
// factory of tiered stores.
//
// What they prove: a repeat of a completed key is answered by the tier and never reaches the
// durable store; the tier never serves a record at or past its expiry (nor within the margin);
// sweep drops what expired; two tiers over one durable store agree across expiry and a new
// claim; a release racing the first completion in this process never leaves the tier answering
// a record the durable store no longer holds; and two tiers under a storm of threads run each
// key's effect once.
#pragma once

#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/tiered.hpp>
#include <idem/testing/detail/conformance/guarded_handlers.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/records.hpp"

namespace idem_tiered_test {

using namespace std::chrono_literals;

/// How often the durable store was asked to read (claim, find): a tier hit asks nothing.
struct reads {
  std::atomic<int> claims{0};
  std::atomic<int> finds{0};
};

/// A Store that counts the reads it hands on to `inner`.
template <idem::Store Inner>
class counting_store {
 public:
  counting_store(Inner inner, std::shared_ptr<reads> counts)
      : inner_(std::move(inner)), counts_(std::move(counts)) {}
  idem::claim_result claim(const idem::claim_request& request) {
    counts_->claims.fetch_add(1);
    return inner_.claim(request);
  }
  bool complete(const idem::fenced_key& held, std::string_view response, idem::store_time now) {
    return inner_.complete(held, response, now);
  }
  bool release(const idem::fenced_key& held) { return inner_.release(held); }
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    return inner_.checkpoint(held, recovery, lease_until);
  }
  std::optional<idem::record> find(std::string_view scope, std::string_view key,
                                   idem::store_time now) {
    counts_->finds.fetch_add(1);
    return inner_.find(scope, key, now);
  }
  std::size_t sweep(idem::store_time now) { return inner_.sweep(now); }
  std::vector<idem::record> stuck(idem::store_time now, std::size_t limit) {
    return inner_.stuck(now, limit);
  }

 private:
  Inner inner_;
  std::shared_ptr<reads> counts_;
};

inline idem::claim_request ask(std::string_view key, idem::store_time now, std::uint8_t print = 1,
                               std::chrono::nanoseconds retention = 1h) {
  return idem::claim_request{"tenant", key, idem::testing::print(print), now, 30s, retention};
}

template <class Durable>
using counted_tier = idem::tiered_store<counting_store<Durable>>;

template <class Durable>
counted_tier<Durable> counted(Durable durable, const std::shared_ptr<reads>& counts,
                              typename counted_tier<Durable>::options settings = {}) {
  return counted_tier<Durable>{counting_store<Durable>{std::move(durable), counts}, settings};
}

template <class Make>
void repeats_of_a_completed_key_are_answered_from_the_tier(Make make) {
  const auto counts = std::make_shared<reads>();
  auto store = counted(make(), counts);
  const idem::store_time t = idem::testing::start;
  const idem::claim_result first = store.claim(ask("k", t));
  REQUIRE(first.status == idem::claim_status::claimed);
  REQUIRE(store.complete({"tenant", "k", first.fence}, "the response", t));
  // The first repeat reads the durable store (a completion is not kept) and keeps its answer.
  REQUIRE(store.claim(ask("k", t + 1s)).status == idem::claim_status::existing);
  const int claims = counts->claims.load();
  const int finds = counts->finds.load();
  for (int i = 0; i < 50; ++i) {
    const idem::claim_result again = store.claim(ask("k", t + 2s));
    REQUIRE(again.status == idem::claim_status::existing);
    REQUIRE(again.fence == 0);
    REQUIRE(again.existing.state == idem::record_state::completed);
    REQUIRE(again.existing.response == "the response");
    REQUIRE(again.existing.fingerprint == idem::testing::print(1));
    REQUIRE(again.existing.fence == first.fence);
    REQUIRE(again.existing.expires_at == t + 1h);
  }
  const std::optional<idem::record> found = store.find("tenant", "k", t + 3s);
  REQUIRE(found);
  CHECK(found->scope == "tenant");
  CHECK(found->key == "k");
  CHECK(found->response == "the response");
  // Another request under the key: the tier answers the stored fingerprint, so the engine sees
  // the mismatch as it would from the durable store.
  const idem::claim_result other = store.claim(ask("k", t + 4s, 2));
  CHECK(other.status == idem::claim_status::existing);
  CHECK(other.existing.fingerprint == idem::testing::print(1));
  CHECK(counts->claims.load() == claims);
  CHECK(counts->finds.load() == finds);
  CHECK(store.tier_statistics().hits == 52);
  // Another scope with the same key is not the tier's record.
  CHECK(
      store.claim(idem::claim_request{"other", "k", idem::testing::print(1), t, 30s, 1h}).status ==
      idem::claim_status::claimed);
  // An in-progress record is never kept: each repeat reads the durable store.
  REQUIRE(store.claim(ask("busy", t)).status == idem::claim_status::claimed);
  const int before = counts->claims.load();
  for (int i = 0; i < 3; ++i)
    CHECK(store.claim(ask("busy", t + 1s)).status == idem::claim_status::existing);
  CHECK(counts->claims.load() == before + 3);
}

template <class Make>
void the_tier_never_serves_an_expired_record(Make make) {
  const auto counts = std::make_shared<reads>();
  auto store = counted(make(), counts);
  const idem::store_time t = idem::testing::start;
  const idem::store_time expiry = t + 1h;
  const idem::claim_result first = store.claim(ask("k", t));
  REQUIRE(store.complete({"tenant", "k", first.fence}, "old", t));
  REQUIRE(store.find("tenant", "k", t));  // kept
  const int finds = counts->finds.load();
  REQUIRE(store.find("tenant", "k", expiry - 1ns));
  REQUIRE(counts->finds.load() == finds);  // served by the tier, a nanosecond before expiry
  // At expiry the record is absent: the tier must not answer it.
  CHECK_FALSE(store.find("tenant", "k", expiry));
  CHECK(counts->finds.load() == finds + 1);
  const idem::claim_result again = store.claim(ask("k", expiry));
  REQUIRE(again.status == idem::claim_status::claimed);
  CHECK(again.fence == first.fence + 1);
  REQUIRE(store.complete({"tenant", "k", again.fence}, "new", expiry));
  const idem::claim_result repeat = store.claim(ask("k", expiry + 1s));
  REQUIRE(repeat.status == idem::claim_status::existing);
  CHECK(repeat.existing.response == "new");

  // With a margin, the tier stops serving that long before expiry; the durable store answers.
  const auto margined_counts = std::make_shared<reads>();
  typename counted_tier<decltype(make())>::options settings;
  settings.expiry_margin = 10s;
  auto margined = counted(make(), margined_counts, settings);
  const idem::claim_result m = margined.claim(ask("m", t));
  REQUIRE(margined.complete({"tenant", "m", m.fence}, "r", t));
  REQUIRE(margined.find("tenant", "m", t));
  REQUIRE(margined.find("tenant", "m", expiry - 11s));
  const int margined_finds = margined_counts->finds.load();
  REQUIRE(margined.find("tenant", "m", expiry - 10s));  // live, but within the margin
  CHECK(margined_counts->finds.load() == margined_finds + 1);
}

template <class Make>
void sweep_drops_expired_records_from_the_tier(Make make) {
  idem::tiered_store<decltype(make())> store{make()};
  const idem::store_time t = idem::testing::start;
  for (const char* key : {"a", "b", "c"}) {
    const idem::claim_result claimed = store.claim(ask(key, t));
    REQUIRE(store.complete({"tenant", key, claimed.fence}, "r", t));
    REQUIRE(store.find("tenant", key, t));
  }
  const idem::claim_result longer = store.claim(ask("long", t, 1, 3h));
  REQUIRE(store.complete({"tenant", "long", longer.fence}, "r", t));
  REQUIRE(store.find("tenant", "long", t));
  REQUIRE(store.tier_statistics().entries == 4);
  CHECK(store.sweep(t + 1h) == 3);
  CHECK(store.tier_statistics().entries == 1);
  CHECK_FALSE(store.find("tenant", "a", t + 1h));
  CHECK(store.find("tenant", "long", t + 1h));
}

template <class Make>
void two_tiers_over_one_durable_store_agree(Make make) {
  auto durable = make();
  const auto counts_one = std::make_shared<reads>();
  const auto counts_two = std::make_shared<reads>();
  auto one = counted(durable, counts_one);
  auto two = counted(durable, counts_two);
  const idem::store_time t = idem::testing::start;
  const idem::claim_result first = one.claim(ask("k", t));
  REQUIRE(first.status == idem::claim_status::claimed);
  // Tier two sees the claim in progress (from the durable store) and keeps nothing.
  CHECK(two.claim(ask("k", t)).status == idem::claim_status::existing);
  REQUIRE(one.complete({"tenant", "k", first.fence}, "first", t));
  REQUIRE(two.find("tenant", "k", t + 1s)->response == "first");
  REQUIRE(one.find("tenant", "k", t + 1s)->response == "first");
  const int finds_two = counts_two->finds.load();
  CHECK(two.find("tenant", "k", t + 2s)->response == "first");
  CHECK(counts_two->finds.load() == finds_two);
  // Expiry: tier two claims the key anew; tier one, which still holds the old record, must not
  // answer it once it expired.
  const idem::claim_result renewed = two.claim(ask("k", t + 1h, 2));
  REQUIRE(renewed.status == idem::claim_status::claimed);
  const std::optional<idem::record> seen = one.find("tenant", "k", t + 1h);
  REQUIRE(seen);
  CHECK(seen->state == idem::record_state::in_progress);
  CHECK(one.claim(ask("k", t + 1h, 2)).existing.state == idem::record_state::in_progress);
  REQUIRE(two.complete({"tenant", "k", renewed.fence}, "second", t + 1h));
  CHECK(one.claim(ask("k", t + 1h + 1s, 2)).existing.response == "second");
  CHECK(one.claim(ask("k", t + 1h + 2s, 1)).existing.fingerprint == idem::testing::print(2));
}

// In this process, a release of a completed record (which the contract allows and idempotent
// never does) racing its first completion and readers that fill the tier: once both writes have
// returned, the tier answers what the durable store holds.
template <class Make>
void a_release_racing_the_first_completion_leaves_no_stale_record(Make make, int rounds) {
  auto durable = make();
  idem::tiered_store<decltype(make())> store{durable};
  const idem::store_time t = idem::testing::start;
  int stale = 0, released_after = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string key = "race-" + std::to_string(round);
    const idem::claim_result claimed = store.claim(ask(key, t));
    REQUIRE(claimed.status == idem::claim_status::claimed);
    const idem::fenced_key held{"tenant", key, claimed.fence};
    std::latch go(3);
    std::atomic<int> writes_done{0};
    bool completed = false, released = false;
    std::thread completer([&] {
      go.arrive_and_wait();
      completed = store.complete(held, "done", t);
      writes_done.fetch_add(1);
    });
    std::thread releaser([&] {
      go.arrive_and_wait();
      std::this_thread::yield();
      released = store.release(held);
      writes_done.fetch_add(1);
    });
    std::thread reader([&] {
      go.arrive_and_wait();
      while (writes_done.load() < 2) {
        (void)store.find("tenant", key, t + 1s);
      }
    });
    completer.join();
    releaser.join();
    reader.join();
    if (completed && released) ++released_after;
    const std::optional<idem::record> truth = durable.find("tenant", key, t + 2s);
    const std::optional<idem::record> tiered = store.find("tenant", key, t + 2s);
    if (truth.has_value() != tiered.has_value() || (truth && truth->state != tiered->state)) {
      ++stale;
    }
  }
  CHECK(stale == 0);
  INFO(released_after << " of " << rounds << " rounds released the completed record");
  SUCCEED();
}

// Two tiers over one durable store, each behind its own idempotent, threads calling either on
// the same keys: one effect per key, every other answer the identical replay or a 409.
template <class Make>
void two_tiers_under_a_storm_run_each_effect_once(Make make, int threads, int keys) {
  auto durable = make();
  using tier = idem::tiered_store<decltype(make())>;
  tier one{durable};
  tier two{durable};
  idem::manual_clock clock;
  auto effects = std::make_shared<std::vector<std::atomic<int>>>(static_cast<std::size_t>(keys));
  struct effect {
    std::shared_ptr<std::vector<std::atomic<int>>> effects;
    std::string operator()(idem::handler_context& context, const std::string& body) const {
      const int index = std::stoi(std::string(context.key().substr(4)));
      (*effects)[static_cast<std::size_t>(index)].fetch_add(1);
      return "response to " + body;
    }
  };
  using policies = idem::testing::conformance::wrapped_policies<tier>;
  using guarded = idem::idempotent<effect, policies>;
  std::vector<std::unique_ptr<guarded>> guards;
  for (tier* each : {&one, &two}) {
    typename guarded::options parts;
    parts.store = *each;
    parts.clock = clock;
    guards.push_back(std::make_unique<guarded>(effect{effects}, std::move(parts)));
  }
  std::atomic<int> executed{0}, replayed{0}, conflicts{0}, wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t));
      for (int pass = 0; pass < 3; ++pass) {
        std::vector<int> order(static_cast<std::size_t>(keys));
        for (int i = 0; i < keys; ++i)
          order[static_cast<std::size_t>(i)] = i;
        std::shuffle(order.begin(), order.end(), random);
        for (const int index : order) {
          const std::string key = "key-" + std::to_string(index);
          const std::string body = "body-" + std::to_string(index);
          const auto outcome = (*guards[random() % 2])("storm", key, body);
          switch (outcome.verdict()) {
            case idem::verdict::executed:
              ++executed;
              if (outcome.value() != "response to " + body) ++wrong;
              break;
            case idem::verdict::replayed:
              ++replayed;
              if (outcome.value() != "response to " + body) ++wrong;
              break;
            case idem::verdict::in_progress:
              ++conflicts;
              break;
            default:
              ++wrong;
          }
        }
      }
    });
  }
  for (std::thread& thread : pool)
    thread.join();
  CHECK(wrong == 0);
  CHECK(executed == keys);
  CHECK(executed + replayed + conflicts == threads * keys * 3);
  int not_once = 0;
  for (int i = 0; i < keys; ++i)
    if ((*effects)[static_cast<std::size_t>(i)] != 1) ++not_once;
  CHECK(not_once == 0);
  CHECK(one.tier_statistics().hits + two.tier_statistics().hits > 0);
}

}  // namespace idem_tiered_test

// The cases above as Catch2 test cases named "<name>: ...", for durable stores made by `make`
// (an expression callable with no arguments).
#define IDEM_TIERED_CASES(name, make, race_rounds, storm_threads)                                  \
  TEST_CASE(name ": repeats of a completed key are answered from the tier", "[tiered]") {          \
    ::idem_tiered_test::repeats_of_a_completed_key_are_answered_from_the_tier(make);               \
  }                                                                                                \
  TEST_CASE(name ": the tier never serves an expired record", "[tiered]") {                        \
    ::idem_tiered_test::the_tier_never_serves_an_expired_record(make);                             \
  }                                                                                                \
  TEST_CASE(name ": sweep drops expired records from the tier", "[tiered]") {                      \
    ::idem_tiered_test::sweep_drops_expired_records_from_the_tier(make);                           \
  }                                                                                                \
  TEST_CASE(name ": two tiers over one durable store agree across expiry", "[tiered]") {           \
    ::idem_tiered_test::two_tiers_over_one_durable_store_agree(make);                              \
  }                                                                                                \
  TEST_CASE(name ": a release racing the first completion leaves no stale record",                 \
            "[tiered][concurrency]") {                                                             \
    ::idem_tiered_test::a_release_racing_the_first_completion_leaves_no_stale_record(make,         \
                                                                                     race_rounds); \
  }                                                                                                \
  TEST_CASE(name ": two tiers under a storm of threads run each effect once",                      \
            "[tiered][concurrency]") {                                                             \
    ::idem_tiered_test::two_tiers_under_a_storm_run_each_effect_once(make, storm_threads, 200);    \
  }
