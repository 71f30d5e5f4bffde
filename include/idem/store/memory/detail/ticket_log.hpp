// Tickets for the memory store's schedules: 8-byte due dates for the records of one bucket, and
// the lock-free log a shard's writers append them to, which one reader at a time (under the
// schedule's mutex) drains into a heap of its own. The expiry schedule (memory/sweep.hpp) and the
// lease schedule (memory/leases.hpp) each keep one log a shard.
#ifndef IDEM_STORE_MEMORY_DETAIL_TICKET_LOG_HPP
#define IDEM_STORE_MEMORY_DETAIL_TICKET_LOG_HPP

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/store/memory/detail/epoch.hpp>

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

/// A due date for the records of one bucket: (a time rounded up to 2^30 ns) << 32 | bucket.
/// Never 0, which marks a slot of the log not written yet.
inline std::uint64_t ticket_of(std::int64_t due_at, std::size_t bucket) noexcept {
  return ticket_time(due_at) << 32 | static_cast<std::uint32_t>(bucket);
}

/// A ticket's time unit and bucket.
inline std::uint64_t ticket_unit(std::uint64_t ticket) noexcept {
  return ticket >> 32;
}
inline std::size_t ticket_bucket(std::uint64_t ticket) noexcept {
  return static_cast<std::size_t>(ticket & 0xffffffffU);
}

/// Tickets order by due time, so a min-heap of them has the next due on top.
using ticket_order = std::greater<std::uint64_t>;

/// The log: blocks of slots, newest first. A writer takes a slot with one fetch-and-add and
/// writes it; one that finds the block full links a new one. Only the drain reads the slots, and
/// only the drain changes `older` or `consumed` after a block is linked; a full block it has read
/// whole is unlinked and retired, since a writer that loaded it just before may still be adding
/// to `taken`. A template whose parameter means nothing, so that it compiles only where the
/// memory store is used (idem/core/detail/lazy.hpp).
template <class Lazy = void>
class ticket_log {
 public:
  ticket_log() = default;
  ticket_log(const ticket_log&) = delete;
  ticket_log& operator=(const ticket_log&) = delete;
  // No thread uses the log any more: blocks already unlinked were retired to epoch reclamation,
  // the rest are freed here.
  ~ticket_log() {
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

  /// Moves what writers appended since the last drain to the end of `into`, and unlinks the
  /// full blocks read whole. One drain at a time (the caller holds its schedule's mutex). A slot
  /// taken by a writer that has not written it yet is passed over, not waited for: the tickets
  /// after it belong to records that may already be visible. A slot read is overwritten with
  /// `read_slot`; `consumed` counts the leading slots read.
  template <class Tickets>
  void drain_into(Tickets& into) {
    epoch_guard<Lazy> guard;
    ticket_block* const newest = log_.load(std::memory_order_acquire);
    ticket_block* newer = nullptr;
    for (ticket_block* b = newest; b != nullptr;) {
      const std::uint32_t taken =
          std::min(b->taken.load(std::memory_order_acquire), ticket_block::capacity);
      bool hole = false;
      for (std::uint32_t i = b->consumed; i < taken; ++i) {
        const std::uint64_t ticket = b->slots[i].load(std::memory_order_acquire);
        if (ticket == 0) {  // taken by a writer that has not written it yet
          hole = true;
          continue;
        }
        if (ticket != read_slot) {
          into.push_back(ticket);
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

 private:
  // What the drain leaves in a log slot it has read; no ticket has every bit set (a bucket
  // index is below 2^30).
  static constexpr std::uint64_t read_slot = ~std::uint64_t{0};

  struct ticket_block {
    static constexpr std::uint32_t capacity = 126;  // 1 KiB a block

    ticket_block(ticket_block* next_older, std::uint64_t first) noexcept : older(next_older) {
      slots[0].store(first, std::memory_order_relaxed);  // the others start at 0: unwritten
    }

    std::atomic<std::uint32_t> taken{1};
    std::uint32_t consumed = 0;  // slots the drain has moved out
    ticket_block* older;
    std::array<std::atomic<std::uint64_t>, capacity> slots;

    static void destroy_erased(void* b) noexcept { delete static_cast<ticket_block*>(b); }
  };

  std::atomic<ticket_block*> log_{nullptr};  // appended to by writers, read by the drain
};

/// Adds the tickets at `due[held..]` to the heap `due[0..held)`: one by one when few arrived, by
/// one O(n) rebuild when many did.
template <class Tickets>
void heap_in_new_tickets(Tickets& due, std::size_t held) {
  const ticket_order later;
  if (due.size() - held > held / 4) {
    std::make_heap(due.begin(), due.end(), later);
  } else {
    for (auto it = due.begin() + static_cast<std::ptrdiff_t>(held); it != due.end();) {
      std::push_heap(due.begin(), ++it, later);
    }
  }
}

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_TICKET_LOG_HPP
