// The lease schedule alone: writers' lease tickets go in once a look has started them, and a
// look visits only the buckets whose tickets are due, so it finds exactly the stuck records
// however many are in progress or done, and costs what it finds.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/leases.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

using idem::detail::memory::lease_schedule;

namespace {

constexpr std::int64_t unit = std::int64_t{1} << 30;  // a ticket's time resolution, in ns

struct entry {
  std::int64_t lease_until;
  bool in_progress;
};

// Buckets of entries standing in for the store's chains; a write sets an entry's lease the way
// the store does: ticket before the entry is visible, then again after when a look may have
// dropped it.
struct buckets {
  lease_schedule<> schedule;
  std::map<std::size_t, std::vector<entry>> entries;
  std::size_t visits = 0;  // buckets the last look read

  // Returns the entry's index in its bucket.
  std::size_t claim(std::size_t bucket, std::int64_t lease_until) {
    const idem::detail::epoch_guard<> pinned;  // push's precondition
    const bool pushed = schedule.push_if_tracking(lease_until, bucket);
    entries[bucket].push_back({lease_until, true});
    schedule.push_again_if_looked(lease_until, bucket, pushed);
    return entries[bucket].size() - 1;
  }
  void renew(std::size_t bucket, std::size_t index, std::int64_t lease_until) {
    const idem::detail::epoch_guard<> pinned;
    const bool pushed = schedule.push_if_tracking(lease_until, bucket);
    entries[bucket][index].lease_until = lease_until;
    schedule.push_again_if_looked(lease_until, bucket, pushed);
  }
  void complete(std::size_t bucket, std::size_t index) {
    entries[bucket][index].in_progress = false;
  }

  bool stuck_in(std::size_t bucket, std::uint64_t ticket_unit, std::int64_t now,
                std::set<std::pair<std::size_t, std::size_t>>& out, std::size_t limit) {
    ++visits;
    bool held = false;
    const auto& held_here = entries[bucket];
    for (std::size_t i = 0; i < held_here.size(); ++i) {
      const entry& e = held_here[i];
      if (!e.in_progress || idem::detail::memory::ticket_time(e.lease_until) != ticket_unit) {
        continue;
      }
      held = true;
      if (e.lease_until <= now && out.size() < limit) out.insert({bucket, i});
    }
    return held;
  }

  std::set<std::pair<std::size_t, std::size_t>> look(std::int64_t now,
                                                     std::size_t limit = SIZE_MAX) {
    std::set<std::pair<std::size_t, std::size_t>> out;
    visits = 0;
    schedule.look(
        now,
        [&](const auto& take) {
          for (const auto& [bucket, held] : entries)
            for (const entry& e : held)
              if (e.in_progress) take(e.lease_until, bucket);
        },
        [&] { return out.size() >= limit; },
        [&](std::size_t bucket, std::uint64_t u) { return stuck_in(bucket, u, now, out, limit); });
    return out;
  }

  std::set<std::pair<std::size_t, std::size_t>> truth(std::int64_t now) const {
    std::set<std::pair<std::size_t, std::size_t>> out;
    for (const auto& [bucket, held] : entries)
      for (std::size_t i = 0; i < held.size(); ++i)
        if (held[i].in_progress && held[i].lease_until <= now) out.insert({bucket, i});
    return out;
  }
};

}  // namespace

TEST_CASE("leases: nothing is kept until the first look, which walks what is in progress",
          "[memory_store][leases]") {
  buckets store;
  CHECK_FALSE(store.schedule.tracking());
  for (std::size_t b = 0; b < 100; ++b)
    store.claim(b, 10 * unit);
  CHECK(store.schedule.held() == 0);  // no tickets before a look
  store.complete(7, 0);
  // The first look reads every record in progress once: the ones due are stuck.
  const auto stuck = store.look(20 * unit);
  CHECK(stuck.size() == 99);
  CHECK(stuck == store.truth(20 * unit));
  CHECK(store.schedule.tracking());
}

TEST_CASE("leases: a look reads the due buckets only, and drops the tickets of what is done",
          "[memory_store][leases]") {
  buckets store;
  (void)store.look(0);  // starts the tickets
  // 10,000 records with leases spread over 100 units, then all but every 100th completed.
  for (std::size_t i = 0; i < 10000; ++i)
    store.claim(i, static_cast<std::int64_t>(1 + i % 100) * unit);
  for (std::size_t i = 0; i < 10000; ++i)
    if (i % 100 != 0) store.complete(i, 0);

  // Half the leases have ended: the look reads each of their buckets once.
  auto stuck = store.look(50 * unit);
  CHECK(stuck == store.truth(50 * unit));
  CHECK(stuck.size() == 100);  // i % 100 == 0: lease unit 1
  CHECK(store.visits == 5000);
  // Done records' tickets are gone; what is stuck stays, and what is not due yet.
  CHECK(store.schedule.held() == 100 + 5000);
  // Looking again reads only what is still stuck.
  stuck = store.look(50 * unit);
  CHECK(stuck.size() == 100);
  CHECK(store.visits == 100);
  // The stuck records are taken over (a new lease each): the next look reads them once more,
  // at their old tickets, and drops those; their new leases are not due.
  for (const auto& [bucket, index] : stuck)
    store.renew(bucket, index, 1000 * unit);
  stuck = store.look(50 * unit);
  CHECK(stuck.empty());
  CHECK(store.visits == 100);
  stuck = store.look(50 * unit);
  CHECK(store.visits == 0);
  // Past every lease: the rest of the done records' tickets are read once and dropped; the
  // taken-over ones are stuck again.
  stuck = store.look(2000 * unit);
  CHECK(stuck == store.truth(2000 * unit));
  CHECK(stuck.size() == 100);
  CHECK(store.visits == 5000 + 100);
  CHECK(store.schedule.held() == 100);
}

TEST_CASE("leases: a look stops at its limit and the next one starts where it stopped",
          "[memory_store][leases]") {
  buckets store;
  (void)store.look(0);
  for (std::size_t i = 0; i < 1000; ++i)
    store.claim(i % 37, static_cast<std::int64_t>(1 + i % 10) * unit);
  std::set<std::pair<std::size_t, std::size_t>> seen;
  for (int pass = 0; pass < 100; ++pass) {
    const auto some = store.look(20 * unit, 64);
    CHECK(some.size() <= 64);
    if (some.empty()) break;
    for (const auto& [bucket, index] : some) {
      seen.insert({bucket, index});
      store.renew(bucket, index, 100 * unit);  // taken over: not stuck at 20 units
    }
  }
  CHECK(seen.size() == 1000);
}

TEST_CASE("leases: a ticket a look dropped before its record was visible is appended again",
          "[memory_store][leases]") {
  // A writer appends its ticket, then is paused past its lease before its record is visible: a
  // look pops the ticket, finds nothing in the bucket and drops it. The writer's second push,
  // after the record is visible, is what makes the next look find it.
  buckets store;
  (void)store.look(0);
  const std::int64_t lease = 5 * unit;
  {
    const idem::detail::epoch_guard<> pinned;
    REQUIRE(store.schedule.push_if_tracking(lease, 3));
  }
  CHECK(store.look(10 * unit).empty());
  CHECK(store.schedule.held() == 0);  // dropped: the bucket held nothing
  store.entries[3].push_back({lease, true});
  {
    const idem::detail::epoch_guard<> pinned;
    store.schedule.push_again_if_looked(lease, 3, true);
  }
  CHECK(store.look(10 * unit).size() == 1);
}

TEST_CASE("leases: prune drops the tickets of done records and keeps the stuck ones",
          "[memory_store][leases]") {
  buckets store;
  const auto read_nothing = [](std::size_t, std::uint64_t) { return false; };
  store.schedule.prune(100 * unit, read_nothing);  // not tracking: nothing to do
  CHECK(store.schedule.held() == 0);
  (void)store.look(0);
  for (std::size_t i = 0; i < 500; ++i)
    store.claim(i, unit);
  for (std::size_t i = 0; i < 500; i += 2)
    store.complete(i, 0);
  std::set<std::pair<std::size_t, std::size_t>> none;
  store.schedule.prune(3 * unit, [&](std::size_t bucket, std::uint64_t u) {
    return store.stuck_in(bucket, u, 3 * unit, none, 0);
  });
  CHECK(none.empty());
  CHECK(store.schedule.held() == 250);
  CHECK(store.look(3 * unit).size() == 250);
}
