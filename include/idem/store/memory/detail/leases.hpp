// Leases for the memory store: each shard's lease tickets, so that stuck() costs what is stuck
// (and the leases set since it last looked), not what the store holds.
//
// Nothing is kept until stuck() first looks at a shard: a store nobody asks for stuck records
// pays one load a write for this. That first look walks the shard once, taking a ticket (its
// lease_until, rounded up to 2^30 ns, and its bucket) for every record in progress. From then
// on every write that sets a lease to another 2^30 ns unit (a claim, a takeover, a checkpoint
// that moves the lease) appends one to the shard's lock-free log (memory/ticket_log.hpp), and a
// look moves the log into a min-heap and pops only the due tickets. Each due ticket's bucket is
// read for the records in progress whose lease ended in that ticket's unit: while there are
// some, they are stuck and the ticket stays; when there are none (the record was completed,
// released, renewed or taken over, and its new lease has a ticket of its own), it is dropped.
// So a look costs the stuck records it finds, plus the tickets that arrived since the last look
// and fell due. sweep() drops the tickets nobody needs too, so the
// log does not grow between looks.
#ifndef IDEM_STORE_MEMORY_DETAIL_LEASES_HPP
#define IDEM_STORE_MEMORY_DETAIL_LEASES_HPP

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/store/memory/detail/ticket_log.hpp>

namespace idem::detail::memory {

/// One shard's lease tickets: appended by writers, lock-free, once a look has started them;
/// looked at under a mutex of its own that the writers never take. A template whose parameter
/// means nothing, so that it compiles only where the memory store is used
/// (idem/core/detail/lazy.hpp).
template <class Lazy = void>
class lease_schedule {
 public:
  lease_schedule() = default;
  lease_schedule(const lease_schedule&) = delete;
  lease_schedule& operator=(const lease_schedule&) = delete;

  /// Whether writers append tickets: from the shard's first look on.
  bool tracking() const noexcept {
    return looked_to_.load(std::memory_order_relaxed) != not_looked;
  }

  /// For a write that sets a lease, before its record is visible: appends its ticket when
  /// tracking; answers whether it did. The caller is pinned (an epoch_guard).
  bool push_if_tracking(std::int64_t lease_until, std::size_t bucket) {
    if (!tracking()) return false;
    log_.push(ticket_of(lease_until, bucket));
    return true;
  }

  /// Whether a look has started the tickets, read as push_again_if_looked reads it: what a write
  /// asks first, so that without a look it pays one load and no call.
  bool looked() const noexcept { return looked_to_.load(std::memory_order_seq_cst) != not_looked; }

  /// The same write, after its record is visible. A look may have started between the two (the
  /// write appended nothing), or popped the ticket the write appended, found no such record in
  /// its bucket yet, and dropped it (a write paused past its lease, or given a `now` that old):
  /// either way the ticket is appended now. The record's link (a seq_cst compare-and-swap) and a
  /// look's store of looked_to (seq_cst, then a fence, before it reads any bucket) order each
  /// other: either that look's reading sees the record, or this load sees the look.
  void push_again_if_looked(std::int64_t lease_until, std::size_t bucket, bool pushed) {
    const std::int64_t looked = looked_to_.load(std::memory_order_seq_cst);
    if (looked == not_looked) return;
    if (!pushed || ticket_time(lease_until) <= ticket_time(looked)) {
      log_.push(ticket_of(lease_until, bucket));
    }
  }

  /// Visits the buckets of the tickets due by `now`, in due order, until enough() says so.
  /// visit(bucket, unit) reads `bucket` for the records in progress whose lease is in ticket
  /// unit `unit` (those past their lease by `now` are stuck: it takes them), and answers whether
  /// there are any: the ticket then stays. The first look walks the shard instead of the log:
  /// `each_in_progress(take)` calls take(lease_until, bucket) for every record in progress.
  template <class EachInProgress, class Enough, class Visit>
  void look(std::int64_t now, EachInProgress&& each_in_progress, Enough&& enough, Visit&& visit) {
    const std::lock_guard lock(mutex_);
    const std::size_t held = due_.size();
    if (looked_to_.load(std::memory_order_relaxed) == not_looked) {
      // Said before the walk reads any bucket (see push_again_if_looked).
      looked_to_.store(now, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      each_in_progress([this](std::int64_t lease_until, std::size_t bucket) {
        due_.push_back(ticket_of(lease_until, bucket));
      });
    }
    look_locked(now, held, enough, visit);
  }

  /// Visits every due ticket's bucket, so that those whose buckets hold nothing in their unit
  /// are dropped: what sweep() does, so that the log and heap hold only what a look may still
  /// need. Nothing when no look has started the shard.
  template <class Visit>
  void prune(std::int64_t now, Visit&& visit) {
    if (!tracking()) return;
    const std::lock_guard lock(mutex_);
    const auto never = [] { return false; };
    look_locked(now, due_.size(), never, visit);
  }

  /// Tickets held in the heap (for tests: what a look has not dropped).
  std::size_t held() {
    const std::lock_guard lock(mutex_);
    return due_.size();
  }

 private:
  static constexpr std::int64_t not_looked = std::numeric_limits<std::int64_t>::min();

  template <class Enough, class Visit>
  void look_locked(std::int64_t now, std::size_t held, Enough& enough, Visit& visit) {
    const ticket_order later;
    log_.drain_into(due_);
    heap_in_new_tickets(due_, held);
    looked_to_.store(std::max(looked_to_.load(std::memory_order_relaxed), now),
                     std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // A ticket stays while its bucket holds a record in progress whose lease is in its unit, due
    // or not (one of the current 2^30 ns unit may end after `now`); one whose record is not
    // visible yet is appended again by its writer (push_again_if_looked).
    const std::uint64_t current_unit = ticket_time(now);
    lazy_t<Lazy, std::vector<std::uint64_t>> kept;
    std::uint64_t previous = 0;
    while (!enough() && !due_.empty() && ticket_unit(due_.front()) <= current_unit) {
      std::pop_heap(due_.begin(), due_.end(), later);
      const std::uint64_t ticket = due_.back();
      due_.pop_back();
      if (ticket == previous) continue;  // equal tickets pop together: one stays
      previous = ticket;
      const bool held_some = visit(ticket_bucket(ticket), ticket_unit(ticket));
      if (held_some) kept.push_back(ticket);
    }
    for (const std::uint64_t ticket : kept) {
      due_.push_back(ticket);
      std::push_heap(due_.begin(), due_.end(), later);
    }
  }

  ticket_log<Lazy> log_;  // appended to by writers once tracking, drained by a look
  // The latest `now` a look has popped tickets at; not_looked until the first look.
  std::atomic<std::int64_t> looked_to_{not_looked};
  std::mutex mutex_;
  lazy_t<Lazy, std::vector<std::uint64_t>> due_;  // a min-heap of tickets, under mutex_
};

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_LEASES_HPP
