// The expiry schedule alone: claims' tickets go in, and a sweep visits exactly the buckets
// whose tickets are due, so it removes exactly the expired entries however many are live.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/sweep.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <thread>
#include <vector>

namespace sweep_test {

using idem::detail::memory::expiry_schedule;
using idem::detail::memory::ticket_of;
using idem::detail::memory::ticket_time;

namespace {

constexpr std::int64_t unit = std::int64_t{1} << 30;  // a ticket's time resolution, in ns

// Buckets of entries, each entry an expiry, standing in for the store's chains: a claim adds
// an entry and pushes its ticket, as the store does.
struct buckets {
  expiry_schedule<> schedule;
  std::map<std::size_t, std::vector<std::int64_t>> entries;

  void claim(std::size_t bucket, std::int64_t expires_at) {
    const idem::detail::epoch_guard<> pinned;  // push's precondition
    schedule.push(ticket_of(expires_at, bucket));
    entries[bucket].push_back(expires_at);
  }
  std::size_t sweep(std::int64_t now) {
    return schedule.sweep(now, [&](std::size_t bucket) {
      auto& held = entries[bucket];
      const auto expired = std::remove_if(held.begin(), held.end(),
                                          [now](std::int64_t expiry) { return expiry <= now; });
      const auto removed = static_cast<std::size_t>(held.end() - expired);
      held.erase(expired, held.end());
      return removed;
    });
  }
  std::size_t expired_by(std::int64_t now) const {
    std::size_t count = 0;
    for (const auto& [bucket, held] : entries)
      count += static_cast<std::size_t>(std::count_if(
          held.begin(), held.end(), [now](std::int64_t expiry) { return expiry <= now; }));
    return count;
  }
  std::size_t held() const {
    std::size_t count = 0;
    for (const auto& [bucket, held] : entries)
      count += held.size();
    return count;
  }
};

}  // namespace

TEST_CASE("sweep: a ticket's time is its expiry rounded up to 2^30 ns, within 32 bits",
          "[memory_store][sweep]") {
  CHECK(ticket_time(std::numeric_limits<std::int64_t>::min()) == 1);
  CHECK(ticket_time(0) == 1);
  CHECK(ticket_time(1) == 1);
  CHECK(ticket_time(unit) == 1);
  CHECK(ticket_time(unit + 1) == 2);
  CHECK(ticket_time(5 * unit) == 5);
  CHECK(ticket_time(std::numeric_limits<std::int64_t>::max()) ==
        std::numeric_limits<std::uint32_t>::max());
  CHECK(ticket_of(unit + 1, 77) == (std::uint64_t{2} << 32 | 77));
  CHECK(ticket_of(0, 0) != 0);  // 0 marks a log slot not written yet
}

TEST_CASE("sweep: removes exactly the expired entries, visiting only the due buckets",
          "[memory_store][sweep]") {
  buckets store;
  std::uint64_t seed = 0x2545f4914f6cdd1dULL;
  const auto next = [&seed](std::uint64_t below) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed % below;
  };
  // 3,000 entries over 64 buckets and 40 ticket units, some in the same unit as a sweep's `now`:
  // more than one block of the log (126 tickets a block).
  const std::int64_t base = 1000 * unit;
  for (int i = 0; i < 3000; ++i) {
    store.claim(next(64), base + static_cast<std::int64_t>(next(40 * unit)));
  }
  std::size_t claimed = 3000;
  std::size_t removed = 0;
  for (std::int64_t now = base - unit; now < base + 42 * unit; now += unit / 3 + 12345) {
    const std::size_t due = store.expired_by(now);
    CAPTURE(now - base);
    REQUIRE(store.sweep(now) == due);
    REQUIRE(store.expired_by(now) == 0);
    removed += due;
    if (now > base + 10 * unit && now < base + 11 * unit) {
      // Claims keep arriving between sweeps, some already due.
      claimed += 200;
      for (int i = 0; i < 200; ++i)
        store.claim(next(64), now - unit + static_cast<std::int64_t>(next(4 * unit)));
    }
  }
  CHECK(removed == claimed);
  CHECK(store.held() == 0);
}

TEST_CASE("sweep: a ticket due within the current unit is kept until its entry expires",
          "[memory_store][sweep]") {
  buckets store;
  const std::int64_t base = 7 * unit;
  store.claim(3, base + 10);
  store.claim(3, base + 20);
  std::vector<std::size_t> visited;
  const auto sweep_at = [&](std::int64_t now) {
    return store.schedule.sweep(now, [&](std::size_t bucket) {
      visited.push_back(bucket);
      auto& held = store.entries[bucket];
      const auto expired = std::remove_if(held.begin(), held.end(),
                                          [now](std::int64_t expiry) { return expiry <= now; });
      const auto count = static_cast<std::size_t>(held.end() - expired);
      held.erase(expired, held.end());
      return count;
    });
  };
  CHECK(sweep_at(base - unit) == 0);  // not yet due: the bucket is not looked at
  CHECK(visited.empty());
  CHECK(sweep_at(base + 5) == 0);
  CHECK(sweep_at(base + 10) == 1);
  CHECK(sweep_at(base + 20) == 1);
  CHECK(store.held() == 0);
  CHECK(visited.size() >= 3);
  // Once a sweep is past their unit, the tickets are dropped: a later sweep visits nothing.
  CHECK(sweep_at(base + 3 * unit) == 0);
  const std::size_t looks = visited.size();
  CHECK(sweep_at(base + 4 * unit) == 0);
  CHECK(visited.size() == looks);
}

TEST_CASE("sweep: a claim linked after a sweep popped its ticket is ticketed again",
          "[memory_store][sweep]") {
  buckets store;
  const std::int64_t expiry = 5 * unit;
  // No sweep yet: nothing to do again.
  {
    const idem::detail::epoch_guard<> pinned;
    store.schedule.push_again_if_swept(expiry, 9);
  }
  std::size_t visits = 0;
  const auto count_visits = [&](std::size_t) {
    ++visits;
    return std::size_t{0};
  };
  CHECK(store.schedule.sweep(expiry, count_visits) == 0);
  CHECK(visits == 0);
  // A sweep at `expiry` passed: a ticket for it pushed before that sweep may have been popped
  // and dropped, so the claim pushes it again, and the next sweep looks at its bucket.
  {
    const idem::detail::epoch_guard<> pinned;
    store.schedule.push_again_if_swept(expiry, 9);
    store.schedule.push_again_if_swept(expiry + 2 * unit, 10);  // not reached yet: not again
  }
  CHECK(store.schedule.sweep(expiry + 3 * unit, count_visits) == 0);
  CHECK(visits == 1);
}

TEST_CASE("sweep: try_sweep does not wait for a sweep in progress", "[memory_store][sweep]") {
  buckets store;
  store.claim(1, unit);
  std::size_t tried = 1;
  CHECK(store.schedule.sweep(2 * unit, [&](std::size_t) {
    std::thread([&] {
      tried = store.schedule.try_sweep(2 * unit, [](std::size_t) { return std::size_t{1}; });
    }).join();
    return std::size_t{1};
  }) == 1);
  CHECK(tried == 0);
}

}  // namespace sweep_test
