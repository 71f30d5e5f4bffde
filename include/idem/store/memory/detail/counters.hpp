// What the memory store counts: the records it holds and their bytes, exactly against
// max_records and max_bytes when either is set, or else in per-thread stripes that cost a claim
// no locked instruction.
//
// A bounded store counts in one place (`global`), so its limits are exact. An unbounded one only
// reports its counts (statistics()), so each thread counts in a stripe of its own (4 KiB a store
// in all) that no other thread writes while it lives (stripe_lease), with a plain load and store
// where an atomic add would be a locked instruction: measured with scripts/store_ab.sh on an
// Intel Xeon, that takes 7 to 21 ns off a claim of a new key at one thread. A thread without a
// stripe of its own counts in `global` with atomic adds. Counted per shard, as before, both
// threads of a pair wrote every shard's line, and the claims also read the shard's buckets from
// it.
#ifndef IDEM_STORE_MEMORY_DETAIL_COUNTERS_HPP
#define IDEM_STORE_MEMORY_DETAIL_COUNTERS_HPP

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace idem::detail::memory {

/// The stripe of a thread that has none of its own. A thread holds one of 64 stripe numbers for
/// as long as it lives and is its stripe's only writer, so it counts with a plain load and store
/// (two a claim of a new key). A thread that finds all 64 held, or that counts after its lease
/// was given back at its end (from another thread_local destructor), gets `shared_stripe` and
/// counts with atomic read-modify-writes in a line of its own.
inline constexpr std::size_t shared_stripe = 64;

/// A template whose parameter means nothing, so that it compiles only where the memory store is
/// used (idem/core/detail/lazy.hpp): stripe_lease<> is the lease.
template <class Lazy = void>
class stripe_lease {
 public:
  /// The calling thread's stripe number: below shared_stripe if it holds one of its own.
  static std::size_t mine() noexcept {
    std::size_t& held = number();
    if (held == unassigned) [[unlikely]]
      held = take();
    return held;
  }

 private:
  static constexpr std::size_t unassigned = ~std::size_t{0};

  // Trivially destructible, so it stays readable while the thread's other thread_local objects
  // are destroyed (one of them may still use a store).
  static std::size_t& number() noexcept {
    thread_local std::size_t held = unassigned;
    return held;
  }
  static std::atomic<std::uint64_t>& taken() noexcept {
    static std::atomic<std::uint64_t> bits{0};
    return bits;
  }
  // Gives the number back when the thread ends. Acquire and release order a stripe's last
  // writer before its next one, which starts from what the last one left.
  struct holder {
    std::size_t stripe = shared_stripe;
    holder() = default;
    holder(const holder&) = delete;
    holder& operator=(const holder&) = delete;
    ~holder() {
      number() = shared_stripe;  // from here on, this thread counts with atomic adds
      if (stripe != shared_stripe)
        taken().fetch_and(~(std::uint64_t{1} << stripe), std::memory_order_release);
    }
  };
  static std::size_t take() noexcept {
    std::uint64_t bits = taken().load(std::memory_order_relaxed);
    for (;;) {
      if (bits == ~std::uint64_t{0}) return shared_stripe;
      const auto free = static_cast<std::size_t>(std::countr_one(bits));
      if (taken().compare_exchange_weak(bits, bits | (std::uint64_t{1} << free),
                                        std::memory_order_acquire, std::memory_order_relaxed)) {
        thread_local holder release_at_exit;
        release_at_exit.stripe = free;
        return free;
      }
    }
  }
};

/// A store's records and bytes (scope + key + response + recovery bytes of every record held).
/// A template for the same reason as stripe_lease: record_counters<> is the counters.
template <class Lazy = void>
class record_counters {
 public:
  struct totals {
    std::size_t records;
    std::size_t bytes;
  };

  record_counters(std::size_t max_records, std::size_t max_bytes) noexcept
      : max_records_(max_records),
        max_bytes_(max_bytes),
        bounded_(max_records != std::numeric_limits<std::size_t>::max() ||
                 max_bytes != std::numeric_limits<std::size_t>::max()) {}
  record_counters(const record_counters&) = delete;
  record_counters& operator=(const record_counters&) = delete;

  std::size_t max_bytes() const noexcept { return max_bytes_; }

  /// Counts one more record of `id_bytes`; false, counting nothing, past either limit.
  bool reserve(std::size_t id_bytes) noexcept {
    if (!bounded_) {
      const counter c = counter_for();
      c.add(c.t.records, 1);
      c.add(c.t.bytes, id_bytes);
      return true;
    }
    if (global_.records.fetch_add(1, std::memory_order_relaxed) >= max_records_) {
      global_.records.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    if (!reserve_bytes(id_bytes)) {
      global_.records.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  /// Counts `count` more bytes; false, counting nothing, past max_bytes.
  bool reserve_bytes(std::size_t count) noexcept {
    if (!bounded_) {
      const counter c = counter_for();
      c.add(c.t.bytes, count);
      return true;
    }
    const std::size_t before = global_.bytes.fetch_add(count, std::memory_order_relaxed);
    if (before > max_bytes_ || count > max_bytes_ - before) {
      global_.bytes.fetch_sub(count, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  void give_back_bytes(std::size_t count) noexcept {
    const counter c = counter_for();
    c.subtract(c.t.bytes, count);
  }
  void forget_record(std::size_t bytes_held) noexcept {
    const counter c = counter_for();
    c.subtract(c.t.records, 1);
    c.subtract(c.t.bytes, bytes_held);
  }

  totals total() const noexcept {
    if (bounded_) {
      return {global_.records.load(std::memory_order_relaxed),
              global_.bytes.load(std::memory_order_relaxed)};
    }
    // A stripe's counts may have wrapped below zero (one thread forgets records that others
    // counted); their sum, modulo 2^64 as well, is exact.
    totals sum{global_.records.load(std::memory_order_relaxed),
               global_.bytes.load(std::memory_order_relaxed)};
    for (const tally& each : stripes_) {
      sum.records += each.records.load(std::memory_order_relaxed);
      sum.bytes += each.bytes.load(std::memory_order_relaxed);
    }
    return sum;
  }

 private:
  struct alignas(64) tally {
    std::atomic<std::size_t> records{0};
    std::atomic<std::size_t> bytes{0};
  };

  struct counter {
    tally& t;
    bool sole;  // the calling thread is t's only writer
    void add(std::atomic<std::size_t>& c, std::size_t n) const noexcept {
      if (sole)
        c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
      else
        c.fetch_add(n, std::memory_order_relaxed);
    }
    // Counts wrap modulo 2^64 (total() sums them so), so taking n back adds its negation.
    void subtract(std::atomic<std::size_t>& c, std::size_t n) const noexcept { add(c, 0 - n); }
  };
  counter counter_for() noexcept {
    if (bounded_) return {global_, false};
    const std::size_t stripe = stripe_lease<Lazy>::mine();
    if (stripe == shared_stripe) [[unlikely]]
      return {global_, false};
    return {stripes_[stripe], true};
  }

  std::size_t max_records_;
  std::size_t max_bytes_;
  bool bounded_;
  tally global_;  // a bounded store's counts; an unbounded one's from threads without a stripe
  std::array<tally, shared_stripe> stripes_;  // an unbounded store's, a stripe a thread
};

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_COUNTERS_HPP
