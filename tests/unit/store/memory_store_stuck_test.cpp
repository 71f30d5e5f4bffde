// memory_store::stuck from its lease tickets (memory/leases.hpp): through any mix of writes, and
// while writers race a reconciler's looks, it lists exactly the records in progress past their
// lease, as a walk of every key would find them.
#include <catch2/catch.hpp>

#include <idem/store/memory.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace memory_store_stuck_test {

using namespace std::chrono_literals;

namespace {

const idem::store_time start{std::chrono::seconds{1767225600}};

idem::digest print(std::uint8_t seed) {
  std::uint8_t bytes[16] = {seed};
  return idem::digest{bytes};
}

std::string key_of(std::size_t i) {
  return "key-" + std::to_string(i);
}

using listing = std::set<std::pair<std::string, std::uint64_t>>;  // (key, fence)

// What stuck(now) must answer: every key found in progress past its lease.
listing truth(const idem::memory_store& store, std::size_t keys, idem::store_time now) {
  listing out;
  for (std::size_t i = 0; i < keys; ++i) {
    const auto found = store.find("s", key_of(i), now);
    if (found && found->state == idem::record_state::in_progress && found->lease_until <= now) {
      out.insert({found->key, found->fence});
    }
  }
  return out;
}

listing listed(const idem::memory_store& store, idem::store_time now, std::size_t limit) {
  listing out;
  for (const idem::record& r : store.stuck(now, limit)) {
    CHECK(r.scope == "s");
    CHECK(r.state == idem::record_state::in_progress);
    CHECK(r.lease_until <= now);
    const bool fresh = out.insert({r.key, r.fence}).second;
    CHECK(fresh);  // never the same record twice in one answer
  }
  return out;
}

}  // namespace

TEST_CASE("memory_store: stuck lists exactly the claims past their lease, through any writes",
          "[memory_store][stuck]") {
  // Random claims, takeovers, checkpoints that move the lease either way, completions, releases
  // and sweeps over 600 keys, on a clock that mostly moves forward in steps around the tickets'
  // 2^30 ns and sometimes back; stuck is asked at times before and after the writes' own.
  constexpr std::size_t keys = 600;
  idem::memory_store::options bounds;
  bounds.expected_records = 64;  // crowded buckets: several records share a ticket's bucket
  idem::memory_store store{bounds};
  std::mt19937_64 random(20261204);
  const auto pick = [&](std::uint64_t below) { return random() % below; };
  std::vector<std::uint64_t> fence(keys, 0);
  idem::store_time now = start;
  std::size_t compared = 0;
  for (int round = 0; round < 6000; ++round) {
    now += std::chrono::milliseconds(pick(400));
    if (pick(50) == 0) now -= 3s;
    const std::size_t i = pick(keys);
    const std::string key = key_of(i);
    const auto lease = std::chrono::milliseconds(pick(6000));
    switch (pick(6)) {
      case 0:
      case 1: {
        const auto got = store.claim({"s", key, print(1), now, lease, pick(10) == 0 ? 20s : 1h});
        if (got.status == idem::claim_status::claimed ||
            got.status == idem::claim_status::taken_over) {
          fence[i] = got.fence;
        }
        break;
      }
      case 2:
        (void)store.checkpoint({"s", key, fence[i]}, "step", now + lease - 2s);
        break;
      case 3:
        (void)store.complete({"s", key, fence[i]}, "done", now);
        break;
      case 4:
        if (pick(4) == 0) (void)store.release({"s", key, fence[i]});
        break;
      default:
        if (pick(8) == 0) (void)store.sweep(now);
        break;
    }
    if (round % 50 == 0) {
      const idem::store_time at = now + std::chrono::milliseconds(pick(8000)) - 2s;
      CAPTURE(round);
      const listing expected = truth(store, keys, at);
      CHECK(listed(store, at, SIZE_MAX) == expected);
      // A limit takes some of them, each one of the stuck.
      const listing some = listed(store, at, 5);
      CHECK(some.size() == std::min<std::size_t>(5, expected.size()));
      for (const auto& each : some)
        CHECK(expected.count(each) == 1);
      ++compared;
    }
  }
  CHECK(compared == 120);
}

TEST_CASE("memory_store: a reconciler taking over what stuck lists empties it batch by batch",
          "[memory_store][stuck]") {
  idem::memory_store store;
  for (std::size_t i = 0; i < 20000; ++i) {
    const auto got = store.claim({"s", key_of(i), print(1), start, 30s, 24h});
    REQUIRE(got.status == idem::claim_status::claimed);
    if (i % 20 != 0) REQUIRE(store.complete({"s", key_of(i), got.fence}, "done", start));
  }
  const idem::store_time later = start + 31s;
  std::size_t taken = 0;
  for (int batch = 0; batch < 10; ++batch) {
    const std::vector<idem::record> some = store.stuck(later, 256);
    if (some.empty()) break;
    for (const idem::record& r : some) {
      const auto got = store.claim({r.scope, r.key, r.fingerprint, later, 30s, 24h});
      CHECK(got.status == idem::claim_status::taken_over);
      ++taken;
    }
  }
  CHECK(taken == 1000);
  CHECK(store.stuck(later, 256).empty());
  // Their new leases end too: all 1,000 again, and the completed ones never.
  CHECK(store.stuck(later + 31s, SIZE_MAX).size() == 1000);
}

TEST_CASE("memory_store: writers racing looks leave stuck exact, stale clocks included",
          "[memory_store][stuck][concurrency]") {
  // Writers claim, checkpoint and complete with clocks that lag the looker's by up to three
  // tickets' time (so some records are already past their lease when they become visible, the
  // race push_again_if_looked closes) while a looker asks stuck and sweeps. Once all are done,
  // stuck must list exactly what a walk of every key finds.
  constexpr std::size_t keys = 4000;
  constexpr int writers = 3;
  const std::int64_t tick = std::int64_t{1} << 30;
  for (int iteration = 0; iteration < 8; ++iteration) {
    idem::memory_store::options bounds;
    bounds.expected_records = 256;
    idem::memory_store store{bounds};
    std::atomic<std::int64_t> clock{0};
    std::atomic<bool> done{false};
    const auto at = [](std::int64_t offset) { return start + std::chrono::nanoseconds(offset); };
    std::thread looker([&] {
      while (!done.load()) {
        const std::int64_t now = clock.fetch_add(tick / 4) + tick / 4;
        (void)store.stuck(at(now), 64);
        if (now % (8 * tick) < tick / 4) (void)store.sweep(at(now - 100 * tick));
      }
    });
    std::vector<std::thread> pool;
    pool.reserve(writers);
    for (int w = 0; w < writers; ++w) {
      pool.emplace_back([&, w] {
        std::mt19937_64 random(static_cast<std::uint64_t>(iteration * writers + w));
        for (std::size_t n = 0; n < keys; ++n) {
          const auto stride = 2 * static_cast<std::size_t>(w) + 1;
          const std::size_t i = (n * stride + 7 * static_cast<std::size_t>(w)) % keys;
          const std::int64_t now =
              clock.load() -
              static_cast<std::int64_t>(random() % static_cast<std::uint64_t>(3 * tick));
          const auto lease =
              std::chrono::nanoseconds(random() % static_cast<std::uint64_t>(2 * tick));
          const auto got = store.claim({"s", key_of(i), print(1), at(now), lease, 24h});
          if (got.status != idem::claim_status::claimed &&
              got.status != idem::claim_status::taken_over) {
            continue;
          }
          switch (random() % 3) {
            case 0:
              (void)store.complete({"s", key_of(i), got.fence}, "done", at(now));
              break;
            case 1:
              (void)store.checkpoint({"s", key_of(i), got.fence}, "step",
                                     at(now + static_cast<std::int64_t>(random() % 4) * tick));
              break;
            default:
              break;
          }
        }
      });
    }
    for (auto& thread : pool)
      thread.join();
    done = true;
    looker.join();
    CAPTURE(iteration);
    const idem::store_time final_time = at(clock.load() + 10 * tick);
    const listing expected = truth(store, keys, final_time);
    CHECK(!expected.empty());
    CHECK(listed(store, final_time, SIZE_MAX) == expected);
  }
}

}  // namespace memory_store_stuck_test
