// Expiry for the memory store: each shard's ticket log, which claims append to without a lock,
// and the heap a sweep moves it into, so that a sweep costs what it removes rather than what the
// store holds.
//
// Each claim that starts a retention period appends an 8-byte ticket (its expiry, rounded up to
// 2^30 ns, and its bucket) to its shard's log; a sweep moves the tickets into a min-heap and pops
// only the due ones, and has the expired records of each due ticket's bucket removed. It costs
// what it removes, plus the tickets that arrived since the last sweep and those due within the
// current 2^30 ns. A ticket whose bucket holds nothing expired (the record was completed,
// replaced or renewed) is simply dropped.
#ifndef IDEM_STORE_MEMORY_DETAIL_SWEEP_HPP
#define IDEM_STORE_MEMORY_DETAIL_SWEEP_HPP

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/store/memory/detail/epoch.hpp>
#include <idem/store/memory/detail/ticket_log.hpp>

namespace idem::detail::memory {

/// One shard's tickets: appended by claims, lock-free; swept under a mutex of its own that the
/// claims never wait for. A template whose parameter means nothing, so that it compiles only
/// where the memory store is used (idem/core/detail/lazy.hpp): expiry_schedule<> is the schedule.
template <class Lazy = void>
class expiry_schedule {
 public:
  expiry_schedule() = default;
  expiry_schedule(const expiry_schedule&) = delete;
  expiry_schedule& operator=(const expiry_schedule&) = delete;
  /// Appends a ticket. The caller is pinned (an epoch_guard).
  void push(std::uint64_t ticket) { log_.push(ticket); }

  /// For a claim, after it linked its record: a claim's ticket goes into the log before its
  /// record is linked, but a claim can be paused in between for as long as its retention (or be
  /// given a `now` that old): a sweep may then pop the ticket, find no record in its bucket, and
  /// drop it, and the record linked afterwards would never be swept. So a claim whose ticket a
  /// sweep may already have popped (one that reached its expiry) appends it again. The link (a
  /// seq_cst compare-and-swap) and the sweep's store of swept_to (seq_cst, then a fence, before
  /// it reads any bucket) order each other: either the sweep's walk sees the record, or this
  /// load sees the sweep.
  void push_again_if_swept(std::int64_t expires_at, std::size_t bucket) {
    const std::int64_t swept = swept_to_.load(std::memory_order_seq_cst);
    if (swept != std::numeric_limits<std::int64_t>::min() &&
        ticket_time(expires_at) <= ticket_time(swept)) {
      push(ticket_of(expires_at, bucket));
    }
  }

  /// Pops the tickets due by `now` and calls remove_expired(bucket) for each, which removes that
  /// bucket's expired records and answers how many; answers their sum.
  template <class RemoveExpired>
  std::size_t sweep(std::int64_t now, RemoveExpired&& remove_expired) {
    const std::lock_guard lock(sweep_mutex_);
    return sweep_locked(now, remove_expired);
  }
  /// The same, or 0 at once when another thread is sweeping: a claim that makes room never
  /// waits.
  template <class RemoveExpired>
  std::size_t try_sweep(std::int64_t now, RemoveExpired&& remove_expired) {
    std::unique_lock lock(sweep_mutex_, std::try_to_lock);
    return lock.owns_lock() ? sweep_locked(now, remove_expired) : 0;
  }

 private:
  template <class RemoveExpired>
  std::size_t sweep_locked(std::int64_t now, RemoveExpired& remove_expired) {
    const ticket_order later;
    const std::size_t held = due_.size();
    log_.drain_into(due_);
    heap_in_new_tickets(due_, held);
    // A ticket due within the current 2^30 ns may name a record that expires after `now`: its
    // bucket is looked at, and the ticket kept for the next sweep.
    const std::uint64_t current_unit = ticket_time(now);
    // Said before any bucket is read (see push_again_if_swept).
    swept_to_.store(std::max(swept_to_.load(std::memory_order_relaxed), now),
                    std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    lazy_t<Lazy, std::vector<std::uint64_t>> kept;
    std::size_t removed = 0;
    while (!due_.empty() && ticket_unit(due_.front()) <= current_unit) {
      std::pop_heap(due_.begin(), due_.end(), later);
      const std::uint64_t ticket = due_.back();
      due_.pop_back();
      removed += remove_expired(ticket_bucket(ticket));
      if (ticket_unit(ticket) == current_unit) kept.push_back(ticket);
    }
    for (const std::uint64_t ticket : kept) {
      due_.push_back(ticket);
      std::push_heap(due_.begin(), due_.end(), later);
    }
    return removed;
  }

  ticket_log<Lazy> log_;  // appended to by claims, drained by sweep
  // The latest `now` a sweep has popped tickets at (none yet: the minimum).
  std::atomic<std::int64_t> swept_to_{std::numeric_limits<std::int64_t>::min()};
  std::mutex sweep_mutex_;
  lazy_t<Lazy, std::vector<std::uint64_t>> due_;  // a min-heap of tickets, under sweep_mutex_
};

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_SWEEP_HPP
