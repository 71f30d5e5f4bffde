// memory_store: the embedded default store. Lock-free, sharded, bounded; not durable.
//
// Concurrency semantics a user must know:
//   * claim, find, complete, release and checkpoint take no lock. Each is a search of one
//     bucket's chain and at most one compare-and-swap; a thread paused anywhere inside one
//     never stops another from finishing its own.
//   * Every operation on one (scope, key) is atomic and linearizable: a record's state is an
//     immutable version, replaced as a whole by compare-and-swap, so a reader sees a whole
//     version or the one after it, never a mix; and fenced writes check the fence of the very
//     version they replace.
//   * sweep and stuck walk the store under per-shard sweep locks that the hot paths never take.
//   * Unlinked memory is freed by epoch-based reclamation (detail/epoch.hpp): never while a
//     thread may still read it, and never leaked.
//
// Layout: 64 shards, each a fixed array of buckets, each bucket a lock-free ordered chain
// (Harris and Michael's list) of nodes. A node holds one (scope, key) for as long as it is
// linked, and points to the record's current version. Buckets are chosen by SipHash-1-3 under a
// key drawn once per process, so clients cannot aim their keys at one bucket; that hash is
// never stored. The bucket count is fixed from limits::expected_records: beyond it chains grow.
// Each link carries a hint of 16 bits of the next node's hash (see link_to), so a search for an
// absent key stops at the first larger hint without reading that node.
//
// Bounds: max_records_per_scope counts a scope's records that have not expired (released ones
// included), so one tenant cannot fill the store.
// max_records counts nodes held (expired ones until they are swept), max_bytes counts
// scope + key + response + recovery bytes. A claim past either answers `full` after first
// sweeping what has expired; a live record is never evicted.
//
// Expiry: each claim that starts a retention period leaves a ticket (its expiry time and node)
// on its shard's lock-free stack; sweep moves tickets into a per-shard heap and pops only the
// due ones, so it costs what it removes (plus the tickets that arrived since the last sweep),
// not what the store holds.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <idem/detail/epoch.hpp>
#include <idem/detail/le64.hpp>
#include <idem/detail/siphash.hpp>
#include <idem/store.hpp>

namespace idem {

namespace detail {

/// The memory store's bucket hash of (scope, key): SipHash-1-3 under the process's key over a
/// first word holding both lengths, then the scope's bytes and the key's, each zero-padded to a
/// whole word. The lengths make the padding unambiguous, so distinct (scope, key) pairs are
/// distinct messages; the words are read where the bytes lie, with no copy into a buffer. Never
/// stored, so free to differ from any other hash here.
inline std::uint64_t bucket_hash(const siphash_key& key, std::string_view scope,
                                 std::string_view id) noexcept {
  siphash13 h(key);
  // Both lengths in one word (each below 4 GiB keeps it exact; two pairs that met beyond that
  // would only share a bucket: every search compares scope and key in full).
  h.absorb(static_cast<std::uint64_t>(scope.size()) ^
           (static_cast<std::uint64_t>(id.size()) << 32));
  for (const std::string_view part : {scope, id}) {
    const std::size_t whole = part.size() / 8;
    for (std::size_t i = 0; i < whole; ++i)
      h.absorb(read_le64(part.data() + 8 * i));
    const std::size_t rest = part.size() % 8;
    if (rest == 0) continue;
    std::uint64_t last = 0;
    if (part.size() >= 8) {
      // The word that ends the part, its first bytes (already absorbed) shifted out.
      last = read_le64(part.data() + part.size() - 8) >> (8 * (8 - rest));
    } else {
      for (std::size_t i = 0; i < rest; ++i)
        last |= static_cast<std::uint64_t>(static_cast<unsigned char>(part[i])) << (8 * i);
    }
    h.absorb(last);
  }
  return h.finish();
}

}  // namespace detail

class memory_store {
 public:
  /// Records keep no completion time: complete leaves expires_at as the claim set it, so the
  /// guard need not read the clock again for a completion (idem::reads_completion_time).
  static constexpr bool reads_completion_time = false;

  struct limits {
    std::size_t max_records = std::numeric_limits<std::size_t>::max();
    /// Counted as scope + key + response + recovery bytes of every record held.
    std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
    /// The most records one scope may hold that have not expired (released ones included: they
    /// keep their fence until then). A claim that would add one more answers `full`, so one
    /// tenant cannot fill a store others share. Unlimited by default; when set, a claim that
    /// makes or renews a record also takes one of 64 striped mutexes to count it.
    std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
    /// Sizes the bucket arrays (one bucket per expected record, at least 16 per shard).
    std::size_t expected_records = 65536;
  };

  /// What the store holds now: records not yet swept (expired ones included), and their bytes
  /// as max_bytes counts them.
  struct stats {
    std::size_t records;
    std::size_t bytes;
  };

  /// The memory one completed record takes beyond its scope, key, fingerprint, response and
  /// recovery bytes: the node's header, its first claim's version header (kept with the node,
  /// see node::make) and the current version's header. Not included: the first claim's copy of
  /// the fingerprint, up to 7 bytes aligning that claim, and the allocator's own overhead.
  static constexpr std::size_t record_overhead_bytes();

  memory_store() : memory_store(limits{}) {}
  explicit memory_store(limits bounds) : state_(std::make_shared<state>(bounds)) {}

  claim_result claim(const claim_request& request) {
    state& s = *state_;
    const std::uint64_t hash = s.hash_of(request.scope, request.key);
    shard& home = s.shard_for(hash);
    std::atomic<std::uintptr_t>& head = home.bucket_for(hash);
    const std::int64_t now = to_ns(request.now);
    bool swept = false;
    const std::size_t id_bytes = request.scope.size() + request.key.size();
    // A claim's expiry ticket goes on the shard's stack before the claim becomes visible, so a
    // sweep that starts after a record is visible always has its ticket. Both are made once per
    // call and kept across retries; one left unused stays harmless on the stack until it is due
    // (the record it names is only removed if it has expired by then).
    node* fresh = nullptr;            // reserved, ticket pushed, not yet linked
    extra_ticket* renewal = nullptr;  // pushed, for a claim on an expired or released node
    node* renewal_target = nullptr;

    detail::epoch_guard guard;
    for (;;) {
      const position at = search(head, hash, request.scope, request.key, guard);
      if (at.found) {
        node* const found = at.current;
        version* seen = found->current.load(std::memory_order_acquire);
        if (seen->state == dead) {
          help_remove(found);
          continue;
        }
        if (fresh != nullptr) {  // another claim linked this key first
          abandon(home, fresh, guard);
          fresh = nullptr;
        }
        if (seen->state != released && now < seen->expires_at) {
          if (seen->state == in_progress && seen->lease_until <= now &&
              seen->matches(request.fingerprint)) {
            version* next = version::make(*seen, seen->payload_recovery());
            next->fence = seen->fence + 1;
            next->lease_until = now + request.lease.count();
            if (!found->current.compare_exchange_strong(seen, next, std::memory_order_acq_rel)) {
              version::destroy(next);
              continue;
            }
            retire(guard, seen);
            return {claim_status::taken_over, next->fence, snapshot(*next)};
          }
          return {claim_status::existing, 0, snapshot(*seen)};
        }
        // Expired or released: a new claim on the same node, under a higher fence.
        const std::int64_t expires_at = now + request.retention.count();
        if (renewal_target != found) {
          renewal = new extra_ticket{{0, expires_at}, found};
          renewal_target = found;
          found->references.fetch_add(1, std::memory_order_relaxed);
          home.push_ticket(&renewal->base, true);
        }
        // The scope's cap counts the records other than this one that have not expired.
        if (!s.reserve_scope(request.scope, now, seen->expires_at > now ? 1 : 0, expires_at)) {
          return {claim_status::full, 0, {}};
        }
        version* next = version::make_claim(request, seen->fence + 1);
        if (!found->current.compare_exchange_strong(seen, next, std::memory_order_acq_rel)) {
          version::destroy(next);
          s.give_back_scope(request.scope, expires_at);
          continue;
        }
        s.give_back_scope(request.scope, seen->expires_at);
        s.give_back_bytes(home, seen->payload_size());
        retire(guard, seen);
        return {claim_status::claimed, next->fence, {}};
      }

      if (fresh == nullptr) {
        if (!s.reserve_scope(request.scope, now, 0, now + request.retention.count())) {
          return {claim_status::full, 0, {}};
        }
        if (!s.reserve(home, id_bytes)) {
          s.give_back_scope(request.scope, now + request.retention.count());
          if (swept) return {claim_status::full, 0, {}};
          // Expired records are not live: make room from them, once, before saying full.
          // Shards another thread is sweeping are skipped rather than waited for, so a full
          // store still never blocks a claim.
          swept = true;
          for (shard& each : s.shards) {
            std::unique_lock lock(each.sweep_mutex, std::try_to_lock);
            if (lock.owns_lock()) sweep_locked(each, now);
          }
          continue;
        }
        fresh = node::make(hash, request, at.link);
        home.push_ticket(&fresh->first_ticket, false);
      } else {
        // Aim the kept node at the new successor, unless a sweep found its ticket due (a claim
        // whose `now` is already a retention old) and killed it meanwhile: it then marked the
        // link, and did the accounting. Start again with a new node.
        std::uintptr_t link = fresh->next.load(std::memory_order_acquire);
        if (marked(link) || fresh->current.load(std::memory_order_acquire)->state == dead ||
            !fresh->next.compare_exchange_strong(link, at.link, std::memory_order_acq_rel)) {
          node::drop_reference(fresh);  // the link it never got; the ticket holds the rest
          fresh = nullptr;
          continue;
        }
      }
      std::uintptr_t expected = at.link;
      if (at.previous->compare_exchange_strong(expected, link_to(fresh),
                                               std::memory_order_acq_rel)) {
        return {claim_status::claimed, 1, {}};
      }
    }
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    return replace(held, [&](const version& seen) {
      version* next = version::make(seen, response, {});
      next->state = completed;
      return next;
    });
  }

  bool release(const fenced_key& held) {
    return replace(held, [&](const version& seen) {
      version* next = version::make(seen, {}, {});
      next->state = released;
      return next;
    });
  }

  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    return replace(held, [&](const version& seen) {
      version* next = version::make(seen, seen.payload_response(), recovery);
      next->lease_until = to_ns(lease_until);
      return next;
    });
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    state& s = *state_;
    const std::uint64_t hash = s.hash_of(scope, key);
    detail::epoch_guard guard;
    const position at = search(s.shard_for(hash).bucket_for(hash), hash, scope, key, guard);
    if (!at.found) return std::nullopt;
    const version* seen = at.current->current.load(std::memory_order_acquire);
    if (seen->state == dead || seen->state == released || seen->expires_at <= to_ns(now)) {
      return std::nullopt;
    }
    return snapshot(*at.current, *seen);
  }

  std::size_t sweep(store_time now) {
    std::size_t removed = 0;
    for (shard& each : state_->shards) {
      const std::lock_guard lock(each.sweep_mutex);
      removed += sweep_locked(each, to_ns(now));
    }
    return removed;
  }

  std::vector<record> stuck(store_time now, std::size_t limit) const {
    std::vector<record> out;
    const std::int64_t at = to_ns(now);
    detail::epoch_guard guard;
    for (const shard& each : state_->shards) {
      for (std::size_t b = 0; b <= each.mask; ++b) {
        for (node* n = pointer(each.buckets[b].load(std::memory_order_acquire)); n != nullptr;
             n = pointer(n->next.load(std::memory_order_acquire))) {
          if (out.size() >= limit) return out;
          const version* seen = n->current.load(std::memory_order_acquire);
          if (seen->state == in_progress && seen->lease_until <= at && at < seen->expires_at) {
            out.push_back(snapshot(*n, *seen));
          }
        }
      }
    }
    return out;
  }

  stats statistics() const noexcept {
    const state& s = *state_;
    if (s.bounded) {
      return {s.global.records.load(std::memory_order_relaxed),
              s.global.bytes.load(std::memory_order_relaxed)};
    }
    stats total{0, 0};
    for (const shard& each : s.shards) {
      total.records += each.own.records.load(std::memory_order_relaxed);
      total.bytes += each.own.bytes.load(std::memory_order_relaxed);
    }
    return total;
  }

 private:
  static constexpr std::uint8_t in_progress = 0;
  static constexpr std::uint8_t completed = 1;
  static constexpr std::uint8_t released = 2;
  static constexpr std::uint8_t dead = 3;  // being removed by sweep; never replaced again

  static std::int64_t to_ns(store_time t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  static store_time from_ns(std::int64_t ns) noexcept {
    return store_time{
        std::chrono::duration_cast<store_time::duration>(std::chrono::nanoseconds{ns})};
  }

  // One immutable state of a record. Its variable parts follow it in the same allocation:
  // fingerprint, then response, then recovery bytes.
  struct version {
    std::int64_t created_at;
    std::int64_t lease_until;
    std::int64_t expires_at;
    std::uint64_t fence;
    std::uint32_t response_size;
    std::uint32_t recovery_size;
    std::uint8_t state;
    std::uint8_t fingerprint_size;
    // 1 for a node's first claim, made in the node's own allocation (node::make): it is freed
    // with the node, never on its own, and never retired.
    std::uint8_t embedded;

    const char* tail() const noexcept { return reinterpret_cast<const char*>(this + 1); }
    char* tail() noexcept { return reinterpret_cast<char*>(this + 1); }
    std::string_view payload_response() const noexcept {
      return {tail() + fingerprint_size, response_size};
    }
    std::string_view payload_recovery() const noexcept {
      return {tail() + fingerprint_size + response_size, recovery_size};
    }
    std::size_t payload_size() const noexcept { return std::size_t{response_size} + recovery_size; }
    bool matches(const digest& fingerprint) const noexcept {
      return fingerprint.size() == fingerprint_size &&
             std::memcmp(tail(), fingerprint.data(), fingerprint_size) == 0;
    }
    digest fingerprint() const noexcept {
      return digest{std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(tail()),
                                                  fingerprint_size)};
    }

    static version* allocate(std::size_t fingerprint_size, std::string_view response,
                             std::string_view recovery) {
      void* memory =
          ::operator new(sizeof(version) + fingerprint_size + response.size() + recovery.size());
      auto* v = new (memory) version{};
      v->fingerprint_size = static_cast<std::uint8_t>(fingerprint_size);
      v->response_size = static_cast<std::uint32_t>(response.size());
      v->recovery_size = static_cast<std::uint32_t>(recovery.size());
      if (!response.empty())
        std::memcpy(v->tail() + fingerprint_size, response.data(), response.size());
      if (!recovery.empty()) {
        std::memcpy(v->tail() + fingerprint_size + response.size(), recovery.data(),
                    recovery.size());
      }
      return v;
    }
    // A copy of `from` with other response and recovery bytes.
    static version* make(const version& from, std::string_view response,
                         std::string_view recovery) {
      version* v = allocate(from.fingerprint_size, response, recovery);
      v->created_at = from.created_at;
      v->lease_until = from.lease_until;
      v->expires_at = from.expires_at;
      v->fence = from.fence;
      v->state = from.state;
      std::memcpy(v->tail(), from.tail(), from.fingerprint_size);
      return v;
    }
    static version* make(const version& from, std::string_view recovery) {
      return make(from, {}, recovery);
    }
    // A claim's state, written into `v` (room for the fingerprint after it).
    static void fill_claim(version* v, const claim_request& request, std::uint64_t fence) {
      const std::int64_t now = to_ns(request.now);
      v->created_at = now;
      v->lease_until = now + request.lease.count();
      v->expires_at = now + request.retention.count();
      v->fence = fence;
      v->state = in_progress;
      v->fingerprint_size = static_cast<std::uint8_t>(request.fingerprint.size());
      std::memcpy(v->tail(), request.fingerprint.data(), request.fingerprint.size());
    }
    static version* make_claim(const claim_request& request, std::uint64_t fence) {
      version* v = allocate(request.fingerprint.size(), {}, {});
      fill_claim(v, request, fence);
      return v;
    }
    static void destroy(version* v) noexcept {
      if (v == &dead_version() || v->embedded != 0) return;
      v->~version();
      ::operator delete(v);
    }
    static void destroy_erased(void* v) noexcept { destroy(static_cast<version*>(v)); }
  };

  // What sweep removes a record by: the kill is a CAS to this, so that no claim can revive a
  // record sweep has decided to remove.
  static version& dead_version() noexcept {
    static version sentinel{0, 0, 0, 0, 0, 0, dead, 0, 0};
    return sentinel;
  }

  struct node;
  // A due date for one record. A node's first ticket is its own first member (so the node is
  // found from it); a later claim of the same node brings an extra_ticket. The low bit of
  // `link` says which, the rest points to the next ticket on the shard's stack.
  struct ticket {
    std::uintptr_t link;
    std::int64_t expires_at;

    ticket* next() const noexcept {
      // A tagged pointer: the tag bit must come off before it is a pointer again.
      // NOLINTNEXTLINE(performance-no-int-to-ptr)
      return reinterpret_cast<ticket*>(link & ~std::uintptr_t{1});
    }
    bool extra() const noexcept { return (link & 1) != 0; }
  };
  struct extra_ticket {
    ticket base;  // first: a ticket* of an extra ticket points here
    node* target;
  };

  // One (scope, key), linked in its bucket's chain while the record exists. Freed when it is
  // both unlinked (after an epoch grace period) and no longer referenced by a ticket:
  // `references` counts the link plus each pending ticket.
  struct node {
    ticket first_ticket;               // first: a ticket* of a first ticket is the node
    std::atomic<std::uintptr_t> next;  // the next node; the low bit marks this one removed
    std::atomic<version*> current;
    std::atomic<std::uint32_t> references;
    std::uint32_t scope_size;
    std::uint32_t key_size;
    std::uint64_t hash;

    const char* tail() const noexcept { return reinterpret_cast<const char*>(this + 1); }
    std::string_view scope() const noexcept { return {tail(), scope_size}; }
    std::string_view key() const noexcept { return {tail() + scope_size, key_size}; }

    // Where a node's first claim lies in its allocation: after scope and key, aligned.
    static std::size_t first_claim_offset(std::size_t id_bytes) noexcept {
      constexpr std::size_t align = alignof(version);
      return (sizeof(node) + id_bytes + align - 1) / align * align;
    }

    // A node for a new (scope, key) with its first claim (fence 1) in the same allocation: a
    // first call makes one allocation for both, not two, and the claim is never freed alone
    // (version::embedded). A measured trade: the first claim's header and fingerprint stay with
    // the node after the record is completed.
    static node* make(std::uint64_t hash, const claim_request& request, std::uintptr_t successor) {
      const std::string_view scope = request.scope;
      const std::string_view key = request.key;
      const std::size_t at = first_claim_offset(scope.size() + key.size());
      void* memory = ::operator new(at + sizeof(version) + request.fingerprint.size());
      auto* first = new (static_cast<char*>(memory) + at) version{};
      version::fill_claim(first, request, 1);
      first->embedded = 1;
      auto* n = new (memory) node{};
      n->next.store(successor, std::memory_order_relaxed);
      n->current.store(first, std::memory_order_relaxed);
      n->references.store(2, std::memory_order_relaxed);  // the link and the first ticket
      n->scope_size = static_cast<std::uint32_t>(scope.size());
      n->key_size = static_cast<std::uint32_t>(key.size());
      n->hash = hash;
      n->first_ticket = ticket{0, first->expires_at};
      char* bytes = reinterpret_cast<char*>(n + 1);
      if (!scope.empty()) std::memcpy(bytes, scope.data(), scope.size());
      if (!key.empty()) std::memcpy(bytes + scope.size(), key.data(), key.size());
      return n;
    }
    static void free(node* n) noexcept {
      version::destroy(n->current.load(std::memory_order_relaxed));
      n->~node();
      ::operator delete(n);
    }
    static void destroy_unpublished(node* n) noexcept { free(n); }
    static void drop_reference(node* n) noexcept {
      if (n->references.fetch_sub(1, std::memory_order_acq_rel) == 1) free(n);
    }
    static void drop_link_erased(void* n) noexcept { drop_reference(static_cast<node*>(n)); }
  };

  // A chain link is an integer: the next node's address, Harris's removal mark in bit 0 (set:
  // the node holding this link is being removed), and, where the address leaves its top 16 bits
  // clear (64-bit user space without pointer tagging), a hint in them: 16 bits of the next
  // node's hash, with bit 1 saying the hint is there. They are the bits just below the shard's,
  // so within one bucket (same shard, same low bucket bits) they order nodes as the chain orders
  // them: a search for a key the chain lacks stops at the first hint above its own without
  // reading that node, which on a claim of a new key saves a cache miss. A node whose address
  // uses the top bits is linked without a hint and read as before.
  static constexpr std::uintptr_t mark_bit = 1;
  static constexpr std::uintptr_t hint_bit = 2;
  static constexpr bool links_carry_hints = sizeof(std::uintptr_t) == 8;
  static constexpr int hint_shift = 48;
  static constexpr std::uint64_t address_bits = (std::uint64_t{1} << hint_shift) - 1;

  static std::uint64_t hint_of(std::uint64_t hash) noexcept { return (hash >> 42) & 0xffff; }
  static std::uintptr_t link_to(const node* n) noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(n);
    if constexpr (links_carry_hints) {
      if ((address & ~address_bits) == 0) {
        return static_cast<std::uintptr_t>(address | hint_bit | (hint_of(n->hash) << hint_shift));
      }
    }
    return address;
  }
  static node* pointer(std::uintptr_t link) noexcept {
    std::uintptr_t address = link & ~(mark_bit | hint_bit);
    if constexpr (links_carry_hints) {
      if ((link & hint_bit) != 0) address &= static_cast<std::uintptr_t>(address_bits);
    }
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    return reinterpret_cast<node*>(address);
  }
  static bool marked(std::uintptr_t link) noexcept { return (link & mark_bit) != 0; }
  // Whether the link's node is known, from its hint alone, to order after a key whose hint is
  // `hint`.
  static bool orders_after(std::uintptr_t link, std::uint64_t hint) noexcept {
    if constexpr (links_carry_hints) {
      return (link & hint_bit) != 0 && static_cast<std::uint64_t>(link) >> hint_shift > hint;
    }
    return false;
  }

  // Chains are ordered by (hash, scope, key), so a search stops at the first node not below.
  static int compare(const node& n, std::uint64_t hash, std::string_view scope,
                     std::string_view key) noexcept {
    if (n.hash != hash) return n.hash < hash ? -1 : 1;
    if (n.scope_size != scope.size()) return n.scope_size < scope.size() ? -1 : 1;
    if (const int c = n.scope().compare(scope); c != 0) return c;
    return n.key().compare(key);
  }

  struct tally {
    std::atomic<std::size_t> records{0};
    std::atomic<std::size_t> bytes{0};
  };

  struct alignas(64) shard {
    tally own;  // an unbounded store's counts for this shard
    std::unique_ptr<std::atomic<std::uintptr_t>[]> buckets;
    std::size_t mask = 0;
    std::atomic<ticket*> incoming{nullptr};  // pushed by claims, taken whole by sweep
    std::mutex sweep_mutex;
    // A min-heap by expiry, under sweep_mutex. The time is copied next to the pointer so that
    // ordering the heap never touches the tickets, which lie scattered in the nodes.
    std::vector<std::pair<std::int64_t, ticket*>> due;

    std::atomic<std::uintptr_t>& bucket_for(std::uint64_t hash) const noexcept {
      return buckets[hash & mask];
    }
    void push_ticket(ticket* t, bool extra) noexcept {
      ticket* head = incoming.load(std::memory_order_relaxed);
      do {
        t->link = reinterpret_cast<std::uintptr_t>(head) | (extra ? 1 : 0);
      } while (!incoming.compare_exchange_weak(head, t, std::memory_order_release,
                                               std::memory_order_relaxed));
    }
  };

  static constexpr std::size_t shard_count = 64;

  struct state {
    explicit state(limits given)
        : bounds(given),
          bounded(given.max_records != std::numeric_limits<std::size_t>::max() ||
                  given.max_bytes != std::numeric_limits<std::size_t>::max()),
          hash_key(detail::process_hash_key()),
          shards(shard_count) {
      std::size_t per_shard = 16;
      while (per_shard * shard_count < given.expected_records &&
             per_shard < (std::size_t{1} << 30)) {
        per_shard *= 2;
      }
      for (shard& each : shards) {
        each.buckets = std::make_unique<std::atomic<std::uintptr_t>[]>(per_shard);
        each.mask = per_shard - 1;
      }
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    // No thread uses the store any more: free everything it holds directly.
    ~state() {
      for (shard& each : shards) {
        for (ticket* t = each.incoming.load(std::memory_order_acquire); t != nullptr;) {
          ticket* next = t->next();
          release_ticket(t);
          t = next;
        }
        for (const auto& [expires_at, t] : each.due)
          release_ticket(t);
        for (std::size_t b = 0; b <= each.mask; ++b) {
          node* n = pointer(each.buckets[b].load(std::memory_order_acquire));
          while (n != nullptr) {
            node* next = pointer(n->next.load(std::memory_order_relaxed));
            node::free(n);
            n = next;
          }
        }
      }
    }

    static node* target_of(ticket* t) noexcept {
      return t->extra() ? reinterpret_cast<extra_ticket*>(t)->target : reinterpret_cast<node*>(t);
    }
    // A ticket gives up its node: its reference goes, and the ticket too unless it is the
    // node's own.
    static void release_ticket(ticket* t) noexcept {
      node* target = target_of(t);
      if (t->extra()) delete reinterpret_cast<extra_ticket*>(t);
      node::drop_reference(target);
    }

    std::uint64_t hash_of(std::string_view scope, std::string_view key) const noexcept {
      return detail::bucket_hash(hash_key, scope, key);
    }
    // The top bits choose the shard, the low bits the bucket within it.
    shard& shard_for(std::uint64_t hash) noexcept { return shards[hash >> 58]; }

    // A bounded store counts in one place, so its limits are exact; an unbounded one counts
    // per shard, so that threads claiming in different shards never share a counter's line.
    tally& tally_for(shard& home) noexcept { return bounded ? global : home.own; }

    bool reserve(shard& home, std::size_t id_bytes) noexcept {
      tally& t = tally_for(home);
      if (t.records.fetch_add(1, std::memory_order_relaxed) >= bounds.max_records) {
        t.records.fetch_sub(1, std::memory_order_relaxed);
        return false;
      }
      if (!reserve_bytes(home, id_bytes)) {
        t.records.fetch_sub(1, std::memory_order_relaxed);
        return false;
      }
      return true;
    }
    void release_reservation(shard& home, std::size_t id_bytes) noexcept {
      tally_for(home).records.fetch_sub(1, std::memory_order_relaxed);
      give_back_bytes(home, id_bytes);
    }
    bool reserve_bytes(shard& home, std::size_t count) noexcept {
      tally& t = tally_for(home);
      const std::size_t before = t.bytes.fetch_add(count, std::memory_order_relaxed);
      if (bounded && (before > bounds.max_bytes || count > bounds.max_bytes - before)) {
        t.bytes.fetch_sub(count, std::memory_order_relaxed);
        return false;
      }
      return true;
    }
    void give_back_bytes(shard& home, std::size_t count) noexcept {
      tally_for(home).bytes.fetch_sub(count, std::memory_order_relaxed);
    }
    void forget_record(shard& home, std::size_t bytes_held) noexcept {
      tally_for(home).records.fetch_sub(1, std::memory_order_relaxed);
      give_back_bytes(home, bytes_held);
    }

    // Per scope, the expiry of every record it holds (expired ones until swept), kept only when
    // max_records_per_scope is set: a scope's records are spread over every shard, so what it
    // holds is kept apart, in one of 64 stripes chosen by the scope's keyed hash. A claim counts
    // the scope's records that have not expired, and adds its own expiry only if that count,
    // less `replacing` (the record it replaces, when that one has not expired), is below the
    // cap. Between the add and the claim's compare-and-swap the scope may count one record too
    // many: a concurrent claim at the edge then answers full, never one past the cap.
    struct scope_stripe {
      std::mutex mutex;
      std::unordered_map<std::string, std::multiset<std::int64_t>> expiries;
    };
    scope_stripe& stripe_for(std::string_view scope) noexcept {
      const char* bytes = scope.empty() ? "" : scope.data();
      return scope_stripes[detail::siphash13::hash(hash_key, bytes, scope.size()) & 63];
    }
    bool reserve_scope(std::string_view scope, std::int64_t now, std::size_t replacing,
                       std::int64_t expires_at) {
      if (bounds.max_records_per_scope == std::numeric_limits<std::size_t>::max()) return true;
      scope_stripe& stripe = stripe_for(scope);
      const std::lock_guard lock(stripe.mutex);
      std::multiset<std::int64_t>& held = stripe.expiries[std::string(scope)];
      const auto live = static_cast<std::size_t>(std::distance(held.upper_bound(now), held.end()));
      if (live - std::min(live, replacing) >= bounds.max_records_per_scope) {
        if (held.empty()) stripe.expiries.erase(std::string(scope));
        return false;
      }
      held.insert(expires_at);
      return true;
    }
    void give_back_scope(std::string_view scope, std::int64_t expires_at) {
      if (bounds.max_records_per_scope == std::numeric_limits<std::size_t>::max()) return;
      scope_stripe& stripe = stripe_for(scope);
      const std::lock_guard lock(stripe.mutex);
      const auto at = stripe.expiries.find(std::string(scope));
      if (at == stripe.expiries.end()) return;
      const auto one = at->second.find(expires_at);
      if (one != at->second.end()) at->second.erase(one);
      if (at->second.empty()) stripe.expiries.erase(at);
    }

    limits bounds;
    bool bounded;
    detail::siphash_key hash_key;
    std::vector<shard> shards;
    tally global;
    std::array<scope_stripe, 64> scope_stripes;
  };

  struct position {
    std::atomic<std::uintptr_t>* previous;
    node* current;
    std::uintptr_t link;  // previous's value when it pointed to current
    bool found;
  };

  // Harris-Michael search: the first node not below (hash, scope, key), and the link pointing to
  // it. Nodes marked removed are unlinked on the way; whoever unlinks one retires its link. When
  // the key is absent, the node returned may be one only its link's hint was read of (possibly
  // marked): inserting before it is still correct, as the list needs only `previous` unmarked.
  static position search(std::atomic<std::uintptr_t>& head, std::uint64_t hash,
                         std::string_view scope, std::string_view key, detail::epoch_guard& guard) {
    const std::uint64_t hint = hint_of(hash);
  retry:
    std::atomic<std::uintptr_t>* previous = &head;
    std::uintptr_t link = previous->load(std::memory_order_acquire);
    for (node* current = pointer(link); current != nullptr; current = pointer(link)) {
      if (orders_after(link, hint)) return {previous, current, link, false};
      const std::uintptr_t next = current->next.load(std::memory_order_acquire);
      if (marked(next)) {
        std::uintptr_t expected = link;
        if (!previous->compare_exchange_strong(expected, next & ~mark_bit,
                                               std::memory_order_acq_rel)) {
          goto retry;
        }
        guard.retire(current, &node::drop_link_erased);
        link = next & ~mark_bit;
        continue;
      }
      const int order = compare(*current, hash, scope, key);
      if (order >= 0) return {previous, current, link, order == 0};
      previous = &current->next;
      link = next;
    }
    return {previous, nullptr, 0, false};
  }

  // Gives up a node that was never linked but whose ticket is already on the stack: it dies
  // (unless a sweep killed it first, which then did the accounting), and the ticket frees it
  // when it falls due.
  void abandon(shard& home, node* fresh, detail::epoch_guard& guard) {
    version* seen = fresh->current.load(std::memory_order_acquire);
    while (seen->state != dead) {
      if (fresh->current.compare_exchange_weak(seen, &dead_version(), std::memory_order_acq_rel)) {
        state_->release_reservation(home, fresh->scope_size + fresh->key_size);
        state_->give_back_scope(fresh->scope(), seen->expires_at);
        retire(guard, seen);
        break;
      }
    }
    node::drop_reference(fresh);  // the link it never got
  }

  // A version replaced by compare-and-swap goes to epoch reclamation, unless it is a node's
  // first claim: that one is freed with its node, whose own reclamation already waits for every
  // reader (a deferred free of it could otherwise run after its node's).
  static void retire(detail::epoch_guard& guard, version* replaced) {
    if (replaced->embedded == 0) guard.retire(replaced, &version::destroy_erased);
  }

  // Marks a dead node removed, so the next search unlinks it.
  static void help_remove(node* n) noexcept {
    std::uintptr_t next = n->next.load(std::memory_order_acquire);
    while (!marked(next) &&
           !n->next.compare_exchange_weak(next, next | mark_bit, std::memory_order_acq_rel)) {
    }
  }

  static record snapshot(const node& n, const version& v) {
    record out = snapshot(v);
    out.scope = n.scope();
    out.key = n.key();
    return out;
  }
  // Without scope and key, for claim: its caller has them, and copying them is an allocation
  // on the replay path whenever they are longer than a short string holds.
  static record snapshot(const version& v) {
    record out;
    out.fingerprint = v.fingerprint();
    out.state = v.state == completed ? record_state::completed : record_state::in_progress;
    out.fence = v.fence;
    out.created_at = from_ns(v.created_at);
    out.lease_until = from_ns(v.lease_until);
    out.expires_at = from_ns(v.expires_at);
    // Constructed in place rather than assigned: a replay's one copy of the response, made
    // without the assignment's capacity checks.
    if (v.response_size != 0) out.response = std::string(v.payload_response());
    if (v.recovery_size != 0) out.recovery = std::string(v.payload_recovery());
    return out;
  }

  // A fenced write: replaces the current version by make(seen) if the caller's fence is still
  // the record's. The CAS is on the very version whose fence was checked.
  template <class Make>
  bool replace(const fenced_key& held, Make&& make) {
    state& s = *state_;
    const std::uint64_t hash = s.hash_of(held.scope, held.key);
    shard& home = s.shard_for(hash);
    detail::epoch_guard guard;
    const position at = search(home.bucket_for(hash), hash, held.scope, held.key, guard);
    if (!at.found) return false;
    version* seen = at.current->current.load(std::memory_order_acquire);
    for (;;) {
      if (seen->state == dead || seen->state == released || seen->fence != held.fence) {
        return false;
      }
      version* next = make(*seen);
      const std::size_t old_size = seen->payload_size();
      const std::size_t new_size = next->payload_size();
      if (new_size > old_size && !s.reserve_bytes(home, new_size - old_size)) {
        version::destroy(next);
        throw store_error(store_failure::full,
                          "idem::memory_store: " + std::to_string(new_size) +
                              " bytes do not fit in the store's max_bytes of " +
                              std::to_string(s.bounds.max_bytes));
      }
      if (at.current->current.compare_exchange_strong(seen, next, std::memory_order_acq_rel)) {
        if (new_size < old_size) s.give_back_bytes(home, old_size - new_size);
        retire(guard, seen);
        return true;
      }
      if (new_size > old_size) s.give_back_bytes(home, new_size - old_size);
      version::destroy(next);
    }
  }

  // Under home.sweep_mutex.
  std::size_t sweep_locked(shard& home, std::int64_t now) {
    auto later = [](const auto& a, const auto& b) { return a.first > b.first; };
    // New tickets join the heap: one by one when few arrived, by one O(n) rebuild when many did.
    const std::size_t held = home.due.size();
    for (ticket* t = home.incoming.exchange(nullptr, std::memory_order_acquire); t != nullptr;) {
      ticket* next = t->next();
      home.due.emplace_back(t->expires_at, t);
      t = next;
    }
    if (home.due.size() - held > held / 4) {
      std::make_heap(home.due.begin(), home.due.end(), later);
    } else {
      for (auto it = home.due.begin() + static_cast<std::ptrdiff_t>(held); it != home.due.end();) {
        std::push_heap(home.due.begin(), ++it, later);
      }
    }
    std::size_t removed = 0;
    while (!home.due.empty() && home.due.front().first <= now) {
      // Pinned one record at a time, so that what this sweep unlinks can be freed as it goes.
      detail::epoch_guard guard;
      std::pop_heap(home.due.begin(), home.due.end(), later);
      ticket* t = home.due.back().second;
      home.due.pop_back();
      node* n = state::target_of(t);
      version* seen = n->current.load(std::memory_order_acquire);
      // The record may have been claimed again since this ticket: then its own ticket is due
      // later. Only a record whose current version has expired is removed.
      while (seen->state != dead && seen->expires_at <= now) {
        if (n->current.compare_exchange_weak(seen, &dead_version(), std::memory_order_acq_rel)) {
          state_->forget_record(home, n->scope_size + n->key_size + seen->payload_size());
          state_->give_back_scope(n->scope(), seen->expires_at);
          retire(guard, seen);
          help_remove(n);
          (void)search(home.bucket_for(n->hash), n->hash, n->scope(), n->key(), guard);
          ++removed;
          break;
        }
      }
      state::release_ticket(t);
    }
    return removed;
  }

  std::shared_ptr<state> state_;
};

constexpr std::size_t memory_store::record_overhead_bytes() {
  static_assert(std::is_standard_layout_v<node> && std::is_standard_layout_v<extra_ticket>,
                "memory_store finds a node from its first ticket, and an extra ticket from its "
                "base: both must be standard-layout.");
  return sizeof(node) + 2 * sizeof(version);
}

}  // namespace idem
