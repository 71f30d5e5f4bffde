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
#ifndef IDEM_STORE_MEMORY_SWEEP_HPP
#define IDEM_STORE_MEMORY_SWEEP_HPP

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <vector>

#include <idem/detail/lazy.hpp>
#include <idem/store/memory/epoch.hpp>

namespace idem::detail::memory {

inline constexpr int ticket_time_shift = 30;

/// `ns` in whole 2^30 ns units, rounded up, within [1, 2^32 - 1].
inline std::uint64_t ticket_time(std::int64_t ns) noexcept {
  constexpr std::int64_t unit = std::int64_t{1} << ticket_time_shift;
  constexpr std::int64_t last = std::numeric_limits<std::uint32_t>::max();
  if (ns <= 0) return 1;
  const std::int64_t units = ns / unit + (ns % unit != 0 ? 1 : 0);
  return static_cast<std::uint64_t>(std::clamp<std::int64_t>(units, 1, last));
}

/// A due date for the records of one bucket: (expiry rounded up to 2^30 ns) << 32 | bucket.
/// Never 0, which marks a slot of the log not written yet.
inline std::uint64_t ticket_of(std::int64_t expires_at, std::size_t bucket) noexcept {
  return ticket_time(expires_at) << 32 | static_cast<std::uint32_t>(bucket);
}

/// One shard's tickets: appended by claims, lock-free; swept under a mutex of its own that the
/// claims never wait for. A template whose parameter means nothing, so that it compiles only
/// where the memory store is used (idem/detail/lazy.hpp): expiry_schedule<> is the schedule.
template <class Lazy = void>
class expiry_schedule {
 public:
  expiry_schedule() = default;
  expiry_schedule(const expiry_schedule&) = delete;
  expiry_schedule& operator=(const expiry_schedule&) = delete;
  // No thread uses the schedule any more: blocks already unlinked were retired to epoch
  // reclamation, the rest are freed here.
  ~expiry_schedule() {
    for (ticket_block* b = log_.load(std::memory_order_acquire); b != nullptr;) {
      ticket_block* older = b->older;
      delete b;
      b = older;
    }
  }

  /// Appends a ticket. The caller is pinned (an epoch_guard): a block it loads is not freed
  /// under it.
  void push(std::uint64_t ticket) {
    ticket_block* newest = log_.load(std::memory_order_acquire);
    for (;;) {
      if (newest != nullptr) {
        const std::uint32_t slot = newest->taken.fetch_add(1, std::memory_order_relaxed);
        if (slot < ticket_block::capacity) {
          newest->slots[slot].store(ticket, std::memory_order_release);
          return;
        }
      }
      auto* block = new ticket_block(newest, ticket);
      if (log_.compare_exchange_strong(newest, block, std::memory_order_acq_rel)) return;
      delete block;
    }
  }

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
  // What sweep leaves in a log slot it has read; no ticket has every bit set (a bucket index is
  // below 2^30).
  static constexpr std::uint64_t read_slot = ~std::uint64_t{0};

  // The log: blocks of slots, newest first. A claim takes a slot with one fetch-and-add and
  // writes it; a claim that finds the block full links a new one. Only sweep reads the slots,
  // and only sweep changes `older` or `consumed` after a block is linked; a full block it has
  // read whole is unlinked and retired, since a claim that loaded it just before may still be
  // adding to `taken`.
  struct ticket_block {
    static constexpr std::uint32_t capacity = 126;  // 1 KiB a block

    ticket_block(ticket_block* next_older, std::uint64_t first) noexcept : older(next_older) {
      slots[0].store(first, std::memory_order_relaxed);  // the others start at 0: unwritten
    }

    std::atomic<std::uint32_t> taken{1};
    std::uint32_t consumed = 0;  // slots sweep has moved into the heap
    ticket_block* older;
    std::array<std::atomic<std::uint64_t>, capacity> slots;

    static void destroy_erased(void* b) noexcept { delete static_cast<ticket_block*>(b); }
  };

  // Under sweep_mutex_: moves what claims appended to the log into the heap, and unlinks the
  // full blocks read whole. A slot taken by a claim that has not written it yet is passed over,
  // not waited for: the tickets after it belong to records that may already be visible. A slot
  // read is overwritten with `read_slot`; `consumed` counts the leading slots read.
  void collect_tickets() {
    epoch_guard<Lazy> guard;
    ticket_block* const newest = log_.load(std::memory_order_acquire);
    ticket_block* newer = nullptr;
    for (ticket_block* b = newest; b != nullptr;) {
      const std::uint32_t taken =
          std::min(b->taken.load(std::memory_order_acquire), ticket_block::capacity);
      bool hole = false;
      for (std::uint32_t i = b->consumed; i < taken; ++i) {
        const std::uint64_t ticket = b->slots[i].load(std::memory_order_acquire);
        if (ticket == 0) {  // taken by a claim that has not written it yet
          hole = true;
          continue;
        }
        if (ticket != read_slot) {
          due_.push_back(ticket);
          b->slots[i].store(read_slot, std::memory_order_relaxed);
        }
        if (!hole) b->consumed = i + 1;
      }
      ticket_block* const older = b->older;
      if (b != newest && b->consumed == ticket_block::capacity) {
        newer->older = older;
        guard.retire(b, &ticket_block::destroy_erased);
      } else {
        newer = b;
      }
      b = older;
    }
  }

  template <class RemoveExpired>
  std::size_t sweep_locked(std::int64_t now, RemoveExpired& remove_expired) {
    // Tickets order by due time, so a min-heap of them has the next due on top.
    const std::greater<std::uint64_t> later;
    // New tickets join the heap: one by one when few arrived, by one O(n) rebuild when many did.
    const std::size_t held = due_.size();
    collect_tickets();
    if (due_.size() - held > held / 4) {
      std::make_heap(due_.begin(), due_.end(), later);
    } else {
      for (auto it = due_.begin() + static_cast<std::ptrdiff_t>(held); it != due_.end();) {
        std::push_heap(due_.begin(), ++it, later);
      }
    }
    // A ticket due within the current 2^30 ns may name a record that expires after `now`: its
    // bucket is looked at, and the ticket kept for the next sweep.
    const std::uint64_t current_unit = ticket_time(now);
    // Said before any bucket is read (see push_again_if_swept).
    swept_to_.store(std::max(swept_to_.load(std::memory_order_relaxed), now),
                    std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    lazy_t<Lazy, std::vector<std::uint64_t>> kept;
    std::size_t removed = 0;
    while (!due_.empty() && (due_.front() >> 32) <= current_unit) {
      std::pop_heap(due_.begin(), due_.end(), later);
      const std::uint64_t ticket = due_.back();
      due_.pop_back();
      removed += remove_expired(static_cast<std::size_t>(ticket & 0xffffffffU));
      if ((ticket >> 32) == current_unit) kept.push_back(ticket);
    }
    for (const std::uint64_t ticket : kept) {
      due_.push_back(ticket);
      std::push_heap(due_.begin(), due_.end(), later);
    }
    return removed;
  }

  std::atomic<ticket_block*> log_{nullptr};  // appended to by claims, read by sweep
  // The latest `now` a sweep has popped tickets at (none yet: the minimum).
  std::atomic<std::int64_t> swept_to_{std::numeric_limits<std::int64_t>::min()};
  std::mutex sweep_mutex_;
  lazy_t<Lazy, std::vector<std::uint64_t>> due_;  // a min-heap of tickets, under sweep_mutex_
};

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_SWEEP_HPP
