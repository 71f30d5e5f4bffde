// memory_store, the lock-free default store, against the store conformance suite, plus what is
// particular to it: statistics, sweeps, the record overhead, and its behaviour under threads.
// Its parts are tested alone in tests/unit/store/memory/.
#include <catch2/catch.hpp>

#include <idem/store/locked.hpp>
#include <idem/store/memory.hpp>
#include <idem/testing/inspect_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include <atomic>
#include <latch>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memory_store_test {

namespace {

struct memory_store_factory {
  static constexpr bool bounded = true;
  idem::memory_store make(const idem::testing::store_limits& limits) {
    idem::memory_store::options bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1024;
    return idem::memory_store{bounds};
  }
};

/// The fewest buckets a store makes: chains of several records, so that a page of the
/// inspection suite resumes inside a chain.
struct crowded_memory_store_factory {
  idem::memory_store make(const idem::testing::store_limits& limits) {
    idem::memory_store::options bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1;
    return idem::memory_store{bounds};
  }
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(memory_store_factory)
IDEM_INSPECT_CONFORMANCE_TESTS(memory_store_factory)
IDEM_INSPECT_CONFORMANCE_TESTS(crowded_memory_store_factory)

using namespace std::chrono_literals;

namespace {

const idem::store_time start{std::chrono::seconds{1767225600}};

idem::digest print(std::uint8_t seed) {
  std::uint8_t bytes[16] = {seed};
  return idem::digest{bytes};
}

}  // namespace

TEST_CASE("memory_store statistics follow records and bytes", "[memory_store]") {
  idem::memory_store store;
  CHECK(store.statistics().records == 0);
  const auto claimed = store.claim({"scope", "key", print(1), start, 30s, 24h});
  CHECK(store.statistics().records == 1);
  CHECK(store.statistics().bytes == 8);
  REQUIRE(store.checkpoint({"scope", "key", claimed.fence}, "step", start + 30s));
  CHECK(store.statistics().bytes == 12);
  REQUIRE(store.complete({"scope", "key", claimed.fence}, std::string(100, 'x'), start));
  CHECK(store.statistics().bytes == 108);
  CHECK(store.sweep(start + 24h) == 1);
  CHECK(store.statistics().records == 0);
  CHECK(store.statistics().bytes == 0);
}

TEST_CASE("an unbounded store's statistics add up what every thread counted",
          "[memory_store][concurrency]") {
  // Each thread counts in a stripe of its own; a sweep on this thread forgets records the others
  // counted, so its stripe goes below zero, and only the sum is exact.
  idem::memory_store store;
  constexpr int threads = 4;
  constexpr int per_thread = 500;
  std::vector<std::thread> claimers;
  for (int t = 0; t < threads; ++t) {
    claimers.emplace_back([&store, t] {
      for (int i = 0; i < per_thread; ++i) {
        const std::string key = "k" + std::to_string(t) + "-" + std::to_string(i);
        store.claim({"scope", key, print(1), start, 30s, 1h});
      }
    });
  }
  for (std::thread& claimer : claimers)
    claimer.join();
  // "k0-0" .. "k3-499": 5 to 7 bytes each, and the scope's 5.
  std::size_t bytes = 0;
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < per_thread; ++i)
      bytes += 5 + ("k" + std::to_string(t) + "-" + std::to_string(i)).size();
  }
  CHECK(store.statistics().records == threads * per_thread);
  CHECK(store.statistics().bytes == bytes);
  CHECK(store.sweep(start + 2h) == threads * per_thread);
  CHECK(store.statistics().records == 0);
  CHECK(store.statistics().bytes == 0);

  // One record counted on another thread and swept on this one leaves this thread's stripe at
  // minus one record, the largest count there is: a claim here must still count, not be full.
  idem::memory_store edge;
  std::thread([&edge] { edge.claim({"scope", "other", print(1), start, 30s, 1h}); }).join();
  CHECK(edge.sweep(start + 2h) == 1);
  const auto claimed = edge.claim({"scope", "mine", print(2), start + 2h, 30s, 1h});
  CHECK(claimed.status == idem::claim_status::claimed);
  CHECK(edge.statistics().records == 1);
  CHECK(edge.statistics().bytes == 9);
}

TEST_CASE("a thread counts alone in its stripe, and threads past the 64th or later stay exact",
          "[memory_store][concurrency]") {
  // A thread with a stripe of its own counts there with a plain load and store. 96 threads live
  // at once, so at least 32 count in the shared line with atomic adds: were a stripe shared
  // between two threads that count with plain stores, counts would be lost and the totals wrong.
  idem::memory_store store;
  constexpr int threads = 96;
  constexpr int per_thread = 400;
  std::latch all_counting(threads);
  std::vector<std::size_t> numbers(threads);
  std::vector<std::thread> claimers;
  for (int t = 0; t < threads; ++t) {
    claimers.emplace_back([&, t] {
      const auto key = [t](int i) { return std::to_string(t) + "/" + std::to_string(i); };
      store.claim({"s", key(0), print(1), start, 30s, 1h});
      numbers[static_cast<std::size_t>(t)] = idem::detail::memory::stripe_lease<>::mine();
      all_counting.arrive_and_wait();  // every thread holds what it drew until all have drawn
      for (int i = 1; i < per_thread; ++i)
        store.claim({"s", key(i), print(1), start, 30s, 1h});
    });
  }
  for (std::thread& claimer : claimers)
    claimer.join();
  std::set<std::size_t> own;
  int shared = 0;
  for (const std::size_t number : numbers) {
    if (number == idem::detail::memory::shared_stripe) {
      ++shared;
    } else {
      CHECK(number < idem::detail::memory::shared_stripe);
      CHECK(own.insert(number).second);  // no two live threads hold the same stripe
    }
  }
  CHECK(shared >= threads - 64);
  std::size_t bytes = 0;
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < per_thread; ++i)
      bytes += 1 + (std::to_string(t) + "/" + std::to_string(i)).size();
  }
  CHECK(store.statistics().records == std::size_t{threads} * per_thread);
  CHECK(store.statistics().bytes == bytes);

  // Those threads have ended and given their stripes back: threads started now draw their own,
  // start from the counts the last holder left, and the totals stay exact.
  for (int wave = 0; wave < 8; ++wave) {
    std::vector<std::thread> later;
    std::vector<std::size_t> drawn(8);
    for (int t = 0; t < 8; ++t) {
      later.emplace_back([&, wave, t] {
        for (int i = 0; i < 50; ++i)
          store.claim({"s", "w" + std::to_string(wave * 8 + t) + "/" + std::to_string(i), print(1),
                       start, 30s, 1h});
        drawn[static_cast<std::size_t>(t)] = idem::detail::memory::stripe_lease<>::mine();
      });
    }
    for (std::thread& thread : later)
      thread.join();
    for (const std::size_t number : drawn)
      CHECK(number < idem::detail::memory::shared_stripe);
  }
  CHECK(store.statistics().records == std::size_t{threads} * per_thread + 64 * 50);
  CHECK(store.sweep(start + 2h) == std::size_t{threads} * per_thread + 64 * 50);
  CHECK(store.statistics().records == 0);
  CHECK(store.statistics().bytes == 0);
}

TEST_CASE("sweep removes only what has expired, however much is live", "[memory_store]") {
  idem::memory_store store;
  for (int i = 0; i < 5000; ++i) {
    const auto retention = i % 10 == 0 ? 1h : 24h;
    (void)store.claim({"s", "k" + std::to_string(i), print(1), start, 30s, retention});
  }
  CHECK(store.sweep(start + 1h) == 500);
  CHECK(store.sweep(start + 1h) == 0);
  CHECK(store.statistics().records == 4500);
  // A record claimed again after it expired is kept for its new retention.
  (void)store.claim({"s", "k1", print(1), start + 24h, 30s, 24h});
  CHECK(store.sweep(start + 24h) == 4499);
  CHECK(store.find("s", "k1", start + 24h));
}

TEST_CASE("sweep keeps a record whose ticket falls due within the current tick of its clock",
          "[memory_store]") {
  // Tickets round expiry up to 2^30 ns; a sweep in that last stretch must still remove exactly
  // what has expired, and keep looking for the rest.
  idem::memory_store store;
  const auto early = store.claim({"s", "early", print(1), start, 1ns, 10ns});
  const auto late = store.claim({"s", "late", print(1), start, 1ns, 20ns});
  REQUIRE(early.status == idem::claim_status::claimed);
  REQUIRE(late.status == idem::claim_status::claimed);
  CHECK(store.sweep(start + 5ns) == 0);
  CHECK(store.sweep(start + 10ns) == 1);
  CHECK_FALSE(store.find("s", "early", start));
  CHECK(store.find("s", "late", start + 19ns));
  CHECK(store.sweep(start + 19ns) == 0);
  CHECK(store.sweep(start + 20ns) == 1);
  CHECK(store.statistics().records == 0);
}

TEST_CASE("a scope or key longer than a record holds is refused whole", "[memory_store]") {
  idem::memory_store store;
  const std::string long_key(idem::memory_store::max_id_bytes + 1, 'k');
  const std::string longest(idem::memory_store::max_id_bytes, 'k');
  try {
    (void)store.claim({"s", long_key, print(1), start, 30s, 24h});
    FAIL("a key of 65,536 bytes was accepted");
  } catch (const idem::store_error& e) {
    CHECK(e.failure() == idem::store_failure::full);
    CHECK(std::string(e.what()).find("65535") != std::string::npos);
  }
  CHECK_THROWS_AS(store.claim({long_key, "k", print(1), start, 30s, 24h}), idem::store_error);
  CHECK(store.statistics().records == 0);
  CHECK_FALSE(store.find("s", long_key, start));
  CHECK_FALSE(store.complete({"s", long_key, 1}, "r", start));
  // The longest of each is a record like any other.
  const auto claimed = store.claim({longest, longest, print(1), start, 30s, 24h});
  REQUIRE(claimed.status == idem::claim_status::claimed);
  REQUIRE(store.complete({longest, longest, claimed.fence}, "done", start));
  CHECK(store.find(longest, longest, start)->response == "done");
}

TEST_CASE("a store of a million expected records finds every key in every shard",
          "[memory_store]") {
  idem::memory_store::options bounds;
  bounds.expected_records = std::size_t{1} << 20;  // 16 MiB of buckets: huge-page advised
  idem::memory_store store(bounds);
  constexpr int keys = 20000;
  for (int i = 0; i < keys; ++i) {
    const std::string key = "k" + std::to_string(i);
    const auto claimed = store.claim({"s", key, print(1), start, 30s, i % 2 == 0 ? 1h : 24h});
    REQUIRE(claimed.status == idem::claim_status::claimed);
    REQUIRE(store.complete({"s", key, claimed.fence}, key, start));
  }
  for (int i = 0; i < keys; ++i) {
    const std::string key = "k" + std::to_string(i);
    const auto found = store.find("s", key, start);
    REQUIRE(found);
    REQUIRE(found->response == key);
  }
  CHECK(store.sweep(start + 1h) == keys / 2);
  CHECK(store.statistics().records == keys / 2);
  CHECK_FALSE(store.find("s", "k0", start + 1h));
  CHECK(store.find("s", "k1", start + 1h));
}

TEST_CASE("a thread paused inside an operation does not stop the others",
          "[memory_store]"
          "[concurrency]") {
  idem::memory_store store;
  std::atomic<bool> paused{false};
  std::atomic<bool> go_on{false};
  // Holding an epoch pin is what a thread preempted in the middle of claim or find looks like.
  std::thread sleeper([&] {
    idem::detail::epoch_guard<> pinned;
    (void)store.find("s", "k0", start);
    paused = true;
    while (!go_on)
      std::this_thread::yield();
  });
  while (!paused)
    std::this_thread::yield();
  for (int i = 0; i < 20'000; ++i) {
    const std::string key = "k" + std::to_string(i);
    const auto claimed = store.claim({"s", key, print(1), start, 30s, 24h});
    REQUIRE(claimed.status == idem::claim_status::claimed);
    REQUIRE(store.complete({"s", key, claimed.fence}, "done", start));
  }
  CHECK(store.statistics().records == 20'000);
  go_on = true;
  sleeper.join();
}

// Chains hold many nodes here: 16,384 keys in the smallest bucket arrays (1,024 buckets), so a
// search passes nodes and stops at links whose hash hint orders them after its key. Threads race
// to insert the same keys in the same chains, and a sweep unlinks a whole generation while the
// next one is inserted around it. A search that stopped before a node it should have read would
// let a key be claimed twice, or miss a completed one.
TEST_CASE("crowded chains: racing claims, finds and a concurrent sweep keep one record per key",
          "[memory_store][concurrency]") {
  constexpr int threads = 4;
  constexpr int keys = 16384;
  idem::memory_store::options bounds;
  bounds.expected_records = 16;
  idem::memory_store store{bounds};
  const auto key_of = [](int generation, int i) {
    return "g" + std::to_string(generation) + "-order-" + std::to_string(i);
  };

  // Each generation: every thread claims every key, in its own order; the one that wins a key
  // completes it with the key as response. A generation's records last 1 h; the next one starts
  // 2 h later, while a sweeper removes the last one.
  std::vector<std::atomic<int>> wins(keys);
  std::atomic<int> wrong_answers{0};
  for (int generation = 0; generation < 3; ++generation) {
    for (auto& w : wins)
      w = 0;
    const idem::store_time now = start + generation * 2h;
    std::atomic<std::size_t> swept{0};
    std::vector<std::thread> pool;
    if (generation > 0) pool.emplace_back([&] { swept = store.sweep(now); });
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int n = 0; n < keys; ++n) {
          // Thread t walks the keys with stride 2t + 1 (odd, so every key once).
          const int i = static_cast<int>((static_cast<long>(n) * (2 * t + 1)) % keys);
          const std::string key = key_of(generation, i);
          const auto got = store.claim({"crowd", key, print(1), now, 30s, 1h});
          if (got.status == idem::claim_status::claimed) {
            wins[static_cast<std::size_t>(i)].fetch_add(1);
            if (!store.complete({"crowd", key, got.fence}, key, now)) ++wrong_answers;
          } else if (got.status != idem::claim_status::existing) {
            ++wrong_answers;
          }
          // A key this thread claimed 64 steps ago is found.
          if (n >= 64) {
            const int j = static_cast<int>((static_cast<long>(n - 64) * (2 * t + 1)) % keys);
            // It is in progress at worst (another thread won it and is completing it), never
            // absent, and once completed it holds its own key.
            const auto found = store.find("crowd", key_of(generation, j), now);
            if (!found || (found->state == idem::record_state::completed &&
                           found->response != key_of(generation, j))) {
              ++wrong_answers;
            }
          }
        }
      });
    }
    for (auto& thread : pool)
      thread.join();
    CAPTURE(generation);
    CHECK(wrong_answers == 0);
    int twice = 0;
    int never = 0;
    for (const auto& w : wins) {
      twice += w > 1 ? 1 : 0;
      never += w == 0 ? 1 : 0;
    }
    CHECK(twice == 0);
    CHECK(never == 0);
    // The sweep ran at `now`, when the last generation had expired an hour before: it removed
    // what was there when it reached each shard, and a second sweep the rest; none of this one.
    if (generation > 0) CHECK(swept + store.sweep(now) == static_cast<std::size_t>(keys));
    CHECK(store.statistics().records == static_cast<std::size_t>(keys));
    for (int i = 0; i < keys; i += 97) {
      CHECK(store.find("crowd", key_of(generation, i), now)->response == key_of(generation, i));
      if (generation > 0) CHECK_FALSE(store.find("crowd", key_of(generation - 1, i), now));
    }
  }
}

// Two keys meet in a search only when their bucket hashes agree on the shard, the bucket and the
// 16-bit hint: then the search tells them apart by their bytes alone. Such pairs are found here
// under this process's hash key (a birthday search over 65,536 keys of each length), for
// lengths on every path of the byte comparison, and each key of a pair must stay its own record.
TEST_CASE("keys that share a shard, bucket and hint stay distinct records", "[memory_store]") {
  idem::memory_store::options bounds;
  bounds.expected_records = 16;  // the smallest bucket arrays: 16 a shard, the hash's low 4 bits
  idem::memory_store store{bounds};
  const std::string_view scope = "collide";
  std::size_t pairs = 0;
  for (const std::size_t length : {std::size_t{5}, std::size_t{8}, std::size_t{13}, std::size_t{36},
                                   std::size_t{63}, std::size_t{64}, std::size_t{70}}) {
    // The digits that tell keys apart end an even-length key and start an odd-length one, so
    // both the comparison's first words and its last one are the deciding ones somewhere.
    const auto key_of = [length](std::uint32_t i) {
      const std::string digits = std::to_string(i);
      const std::string padding(length - digits.size(), 'k');
      return length % 2 == 0 ? padding + digits : digits + padding;
    };
    std::unordered_map<std::uint64_t, std::uint32_t> seen;
    std::vector<std::pair<std::string, std::string>> found;
    for (std::uint32_t i = 0; i < 65536 && found.size() < 2; ++i) {
      const std::string key = key_of(i);
      const std::uint64_t hash =
          idem::detail::memory::bucket_hash(idem::detail::process_hash_key(), scope, key);
      const std::uint64_t meets = (hash >> 42) << 4 | (hash & 15);
      const auto [at, fresh] = seen.try_emplace(meets, i);
      if (!fresh) found.emplace_back(key_of(at->second), key);
    }
    CAPTURE(length);
    REQUIRE_FALSE(found.empty());
    for (const auto& [first, second] : found) {
      CAPTURE(first, second);
      for (const std::string& key : {first, second}) {
        const auto got = store.claim({scope, key, print(1), start, 30s, 1h});
        REQUIRE(got.status == idem::claim_status::claimed);
        REQUIRE(store.complete({scope, key, got.fence}, "response of " + key, start));
      }
      for (const std::string& key : {first, second}) {
        CHECK(store.claim({scope, key, print(1), start, 30s, 1h}).status ==
              idem::claim_status::existing);
        const auto record = store.find(scope, key, start);
        REQUIRE(record);
        CHECK(record->response == "response of " + key);
      }
      ++pairs;
    }
  }
  CHECK(pairs >= 7);
}

TEST_CASE("a scope's cap counts its live records as the locked_store does, through sweeps",
          "[memory_store]") {
  // The memory store keeps each scope's expiries sorted, and a sweep's erase at the front only
  // moves the start until half the list is gone. A long run of claims with three retentions,
  // re-claims of expired keys (their expiry leaves the middle of the list), sweeps and releases
  // must leave the count of live records exact: every claim answers as the reference store's.
  constexpr std::size_t cap = 20;
  idem::memory_store::options bounds;
  bounds.max_records_per_scope = cap;
  idem::memory_store store{bounds};
  idem::locked_store::options reference_bounds;
  reference_bounds.max_records_per_scope = cap;
  idem::locked_store reference{reference_bounds};

  std::uint64_t seed = 0x9e3779b97f4a7c15ULL;
  const auto next = [&seed](std::uint64_t below) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed % below;
  };
  const std::chrono::seconds retentions[] = {5s, 50s, 500s};
  idem::store_time now = start;
  std::size_t claimed = 0, full = 0, swept = 0;
  for (int step = 0; step < 6000; ++step) {
    const std::string scope = next(4) == 0 ? "other" : "tenant";
    const std::string key = "k" + std::to_string(next(80));
    const std::uint64_t action = next(20);
    if (action == 0) {
      const std::size_t removed = store.sweep(now);
      REQUIRE(removed == reference.sweep(now));
      swept += removed;
    } else if (action == 1) {
      now += std::chrono::seconds{next(30)};
    } else {
      const idem::claim_request request{scope, key, print(1), now, 1s, retentions[next(3)]};
      const idem::claim_result got = store.claim(request);
      const idem::claim_result expected = reference.claim(request);
      CAPTURE(step, scope, key);
      REQUIRE(got.status == expected.status);
      if (got.status == idem::claim_status::claimed) {
        ++claimed;
        // Some are released at once (they keep counting until they expire), some completed.
        const idem::fenced_key held{scope, key, got.fence};
        if (next(3) == 0) {
          REQUIRE(store.release(held) == reference.release(held));
        } else {
          REQUIRE(store.complete(held, "done", now) == reference.complete(held, "done", now));
        }
      }
      if (got.status == idem::claim_status::full) ++full;
    }
    now += 100ms;
  }
  // The run went through every case: new claims, a full scope, and sweeps that removed records.
  CHECK(claimed > 500);
  CHECK(full > 100);
  CHECK(swept > 100);
}

}  // namespace memory_store_test
