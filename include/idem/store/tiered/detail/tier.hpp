// The local tier of tiered_store (idem/store/tiered.hpp): completed records kept in process
// memory, bounded in bytes, evicted by CLOCK (second chance), sharded for concurrency.
//
// Shards: a power of two of them (64 by default), each a mutex, a hash index from the record's
// bucket hash to a slot, a vector of slots and a clock hand. Records are placed by the memory
// store's keyed hash (SipHash-1-3 under the process's key, memory/bucket_hash.hpp), so clients
// cannot aim keys at one shard; the hash's top bits pick the shard, its low bits one of 64
// write stripes in it. One slot per hash: two keys whose 64-bit hashes meet evict each other,
// and every hit compares scope and key in full, so a meeting costs a miss, never a wrong answer.
//
// Budget: each shard holds at most max_bytes / shards, counted per record as scope + key +
// response + recovery bytes + entry_overhead_bytes (the slot and its index node). Inserting
// past it evicts by CLOCK: a hit sets the slot's reference bit, the hand clears set bits and
// evicts the first clear one. A record larger than a shard's budget is not kept.
//
// Local writes: tiered_store brackets every complete, release, checkpoint and complete_within
// with begin_write / end_write on the key's stripe. While a write is in flight on a stripe,
// lookups of its keys miss (they go to the durable store) and nothing is inserted for them;
// both brackets drop the key's slot and bump the stripe's epoch. An insert offers the epoch it
// read before its durable read (`ticket`), and is refused if the epoch moved since. So a record
// the durable store answered before a local write applied is never kept, or served, after it.
#ifndef IDEM_STORE_TIERED_DETAIL_TIER_HPP
#define IDEM_STORE_TIERED_DETAIL_TIER_HPP

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/memory/detail/bucket_hash.hpp>
#include <idem/store/memory/detail/siphash.hpp>

namespace idem::detail::tiered {

/// What the tier holds and did, summed over its shards (tiered_store::tier_statistics).
struct tier_stats {
  std::size_t entries = 0;
  std::size_t bytes = 0;        // as the budget counts them
  std::uint64_t hits = 0;       // lookups answered from the tier
  std::uint64_t misses = 0;     // lookups that went to the durable store
  std::uint64_t inserts = 0;    // records kept
  std::uint64_t evictions = 0;  // records dropped to make room
  std::uint64_t refused = 0;    // records not kept: a local write in flight, or too large
};

/// What a lookup answers: a hit (the record was written), or the ticket an insert of what the
/// durable store answers must present.
struct lookup_result {
  bool hit = false;
  std::uint64_t ticket = 0;
};

// Lazy: instantiated only where a tiered_store is (idem/core/detail/lazy.hpp explains why).
template <class Lazy>
class tier {
 public:
  /// The memory one kept record takes beyond its scope, key, response and recovery bytes.
  static constexpr std::size_t entry_overhead_bytes = sizeof(record) + 64;

  tier(std::size_t max_bytes, std::size_t shards, std::chrono::nanoseconds expiry_margin)
      : hash_key_(process_hash_key()),
        shift_(shards <= 1 ? 64 : 64 - log2(shards)),
        margin_(expiry_margin),
        shards_(shards) {
    for (shard& each : shards_)
      each.budget = max_bytes / shards;
  }

  std::uint64_t hash(std::string_view scope, std::string_view key) const noexcept {
    return memory::bucket_hash(hash_key_, scope, key);
  }

  /// A live completed record for (scope, key) at `now` into `out` (scope and key too, when
  /// `with_id`), or a miss and the ticket for an insert.
  lookup_result lookup(std::uint64_t h, std::string_view scope, std::string_view key,
                       store_time now, record& out, bool with_id) {
    shard& s = shard_for(h);
    const std::lock_guard<std::mutex> lock(s.mutex);
    stripe& w = s.writes[h & (stripes - 1)];
    const lookup_result miss{false, w.epoch};
    if (w.writers != 0) {
      ++s.misses;
      return miss;
    }
    const auto at = s.index.find(h);
    if (at == s.index.end()) {
      ++s.misses;
      return miss;
    }
    slot& found = s.slots[at->second];
    if (found.kept.scope != scope || found.kept.key != key) {
      ++s.misses;
      return miss;
    }
    if (!servable(found.kept, now)) {  // never served again: drop it now
      drop(s, at->second);
      ++s.misses;
      return miss;
    }
    found.referenced = true;
    ++s.hits;
    copy_into(out, found.kept, with_id);
    return {true, 0};
  }

  /// Keeps `found` (a completed record the durable store answered for (scope, key) at `now`),
  /// unless a local write on its stripe began since `ticket` was read, or is in flight.
  void offer(std::uint64_t h, std::uint64_t ticket, std::string_view scope, std::string_view key,
             const record& found, store_time now) {
    if (found.state != record_state::completed || !servable(found, now)) return;
    const std::size_t bytes = scope.size() + key.size() + found.response.size() +
                              found.recovery.size() + entry_overhead_bytes;
    shard& s = shard_for(h);
    const std::lock_guard<std::mutex> lock(s.mutex);
    const stripe& w = s.writes[h & (stripes - 1)];
    if (w.writers != 0 || w.epoch != ticket || bytes > s.budget) {
      ++s.refused;
      return;
    }
    if (const auto at = s.index.find(h); at != s.index.end()) drop(s, at->second);
    make_room(s, bytes);
    // Out of memory while keeping it: the record is simply not kept (the slot, if one was
    // taken, stays unused and unindexed, so it is never served).
    try {
      std::uint32_t index = 0;
      if (!s.free.empty()) {
        index = s.free.back();
        s.free.pop_back();
      } else {
        index = static_cast<std::uint32_t>(s.slots.size());
        s.slots.emplace_back();
      }
      slot& fresh = s.slots[index];
      fresh.kept = found;
      fresh.kept.scope = scope;
      fresh.kept.key = key;
      s.index.emplace(h, index);
      fresh.hash = h;
      fresh.bytes = bytes;
      fresh.used = true;
      fresh.referenced = false;
    } catch (const std::bad_alloc&) {
      ++s.refused;
      return;
    }
    s.bytes += bytes;
    ++s.inserts;
  }

  /// A local write of (scope, key) begins: its slot goes, and its stripe misses until end_write.
  void begin_write(std::uint64_t h) { bracket(h, 1); }
  /// ...and ends, applied or not, returned or thrown.
  void end_write(std::uint64_t h) { bracket(h, -1); }

  /// Drops every record that can no longer be served at `now`; answers how many.
  std::size_t drop_expired(store_time now) {
    std::size_t dropped = 0;
    for (shard& s : shards_) {
      const std::lock_guard<std::mutex> lock(s.mutex);
      for (std::uint32_t i = 0; i < s.slots.size(); ++i) {
        if (s.slots[i].used && !servable(s.slots[i].kept, now)) {
          drop(s, i);
          ++dropped;
        }
      }
    }
    return dropped;
  }

  tier_stats statistics() {
    tier_stats total;
    for (shard& s : shards_) {
      const std::lock_guard<std::mutex> lock(s.mutex);
      total.entries += s.index.size();
      total.bytes += s.bytes;
      total.hits += s.hits;
      total.misses += s.misses;
      total.inserts += s.inserts;
      total.evictions += s.evictions;
      total.refused += s.refused;
    }
    return total;
  }

 private:
  static constexpr std::size_t stripes = 64;

  struct slot {
    record kept;  // completed; scope and key filled
    std::uint64_t hash = 0;
    std::size_t bytes = 0;
    bool used = false;
    bool referenced = false;
  };
  struct stripe {
    std::uint64_t epoch = 0;
    std::uint32_t writers = 0;
  };
  struct alignas(64) shard {
    std::mutex mutex;
    std::unordered_map<std::uint64_t, std::uint32_t> index;
    std::vector<slot> slots;
    std::vector<std::uint32_t> free;
    std::size_t hand = 0;
    std::size_t bytes = 0;
    std::size_t budget = 0;
    std::array<stripe, stripes> writes{};
    std::uint64_t hits = 0, misses = 0, inserts = 0, evictions = 0, refused = 0;
  };

  static int log2(std::size_t n) noexcept {
    int bits = 0;
    while ((std::size_t{1} << bits) < n)
      ++bits;
    return bits;
  }

  shard& shard_for(std::uint64_t h) noexcept {
    return shards_[shift_ >= 64 ? 0 : static_cast<std::size_t>(h >> shift_)];
  }

  // A record is served strictly before its expiry, less the margin.
  bool servable(const record& r, store_time now) const noexcept {
    return now + margin_ < r.expires_at;
  }

  static void copy_into(record& out, const record& kept, bool with_id) {
    if (with_id) {
      out.scope = kept.scope;
      out.key = kept.key;
    }
    out.fingerprint = kept.fingerprint;
    out.state = kept.state;
    out.fence = kept.fence;
    out.created_at = kept.created_at;
    out.lease_until = kept.lease_until;
    out.expires_at = kept.expires_at;
    out.response = kept.response;
    out.recovery = kept.recovery;
  }

  void bracket(std::uint64_t h, int step) {
    shard& s = shard_for(h);
    const std::lock_guard<std::mutex> lock(s.mutex);
    stripe& w = s.writes[h & (stripes - 1)];
    w.writers = static_cast<std::uint32_t>(static_cast<int>(w.writers) + step);
    ++w.epoch;
    if (const auto at = s.index.find(h); at != s.index.end()) drop(s, at->second);
  }

  static void drop(shard& s, std::uint32_t index) {
    slot& gone = s.slots[index];
    s.index.erase(gone.hash);
    s.bytes -= gone.bytes;
    gone.kept = record{};  // gives its strings back now
    gone.used = false;
    gone.referenced = false;
    s.free.push_back(index);
  }

  // CLOCK: two turns of the hand clear every reference bit, so room is found within them.
  static void make_room(shard& s, std::size_t bytes) {
    std::size_t steps = 2 * s.slots.size() + 1;
    while (s.bytes + bytes > s.budget && !s.index.empty() && steps-- > 0) {
      if (s.hand >= s.slots.size()) s.hand = 0;
      slot& candidate = s.slots[s.hand];
      if (candidate.used) {
        if (candidate.referenced) {
          candidate.referenced = false;
        } else {
          drop(s, static_cast<std::uint32_t>(s.hand));
          ++s.evictions;
        }
      }
      ++s.hand;
    }
  }

  siphash_key hash_key_;
  int shift_;
  std::chrono::nanoseconds margin_;
  std::vector<shard> shards_;
};

}  // namespace idem::detail::tiered

#endif  // IDEM_STORE_TIERED_DETAIL_TIER_HPP
