// memory_store: the embedded default store. Lock-free, sharded, bounded; not durable.
//
// Concurrency semantics a user must know:
//   * claim, find, complete, release and checkpoint take no lock. Each is a search of one
//     bucket's chain and at most one compare-and-swap to decide; a thread paused anywhere inside
//     one never stops another from finishing its own.
//   * Every operation on one (scope, key) is atomic and linearizable: a record is one immutable
//     node, replaced as a whole by a compare-and-swap on its own link, so a reader sees a whole
//     record or the one after it, never a mix; and fenced writes check the fence of the very
//     node they replace.
//   * sweep and stuck walk the store under per-shard sweep locks that the hot paths never take.
//   * Unlinked memory is freed by epoch-based reclamation (detail/epoch.hpp): never while a
//     thread may still read it, and never leaked.
//
// Layout: 64 shards, each a fixed array of buckets, each bucket a lock-free ordered chain
// (Harris and Michael's list) of nodes, one node per record: its times, fence and state, then
// its scope, key, fingerprint, response and recovery bytes in the same allocation. A write
// (complete, release, checkpoint, a takeover, a new claim of an expired key) makes the record's
// next node and swaps it in with one compare-and-swap on the old node's link, which at once
// marks the old node removed and points past it to the new one; the writer then unlinks the
// old node, or else the next search to pass does. Buckets are chosen by SipHash-1-3 under a key
// drawn once per process, so clients cannot aim their keys at one bucket; that hash is never
// stored. Each link carries a hint of 16 bits of the next node's hash (see link_to), so a search
// for an absent key stops at the first larger hint without reading that node. The bucket count is
// fixed from limits::expected_records (two a record), in one array that takes huge pages where
// the platform gives them (detail::link_array): beyond it chains grow. Reclaimed node blocks go to
// a small cache on the thread that frees them (detail::block_cache), for the next node of the same
// size.
//
// Bounds: max_records_per_scope counts a scope's records that have not expired (released ones
// included), so one tenant cannot fill the store.
// max_records counts records held (expired ones until they are swept), max_bytes counts
// scope + key + response + recovery bytes. A claim past either answers `full` after first
// sweeping what has expired; a live record is never evicted. Scopes and keys are at most
// 65,535 bytes each (a longer one is a store_error, `full`).
//
// Expiry: each claim that starts a retention period appends an 8-byte ticket (its expiry,
// rounded up to 2^30 ns, and its bucket) to its shard's lock-free ticket log; sweep moves
// tickets into a per-shard heap and pops only the due ones, removing the expired records of
// each due ticket's bucket, so it costs what it removes (plus the tickets that arrived since
// the last sweep, and those due within the current 2^30 ns), not what the store holds.
#ifndef IDEM_STORE_MEMORY_HPP
#define IDEM_STORE_MEMORY_HPP

#include <array>
#include <atomic>
#include <bit>
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
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

// Where the platform has madvise (Linux), large bucket arrays ask for transparent huge pages.
#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
#endif

#include <idem/detail/algorithm.hpp>
#include <idem/store/memory/epoch.hpp>
#include <idem/detail/lazy.hpp>
#include <idem/detail/le64.hpp>
#include <idem/store/memory/siphash.hpp>
#include <idem/store/contract.hpp>

namespace idem {

namespace detail {

/// The memory store's bucket hash of (scope, key): SipHash-1-3 under the process's key over the
/// scope's bytes and the key's, each zero-padded to a whole word, then both lengths as two
/// 16-bit little-endian numbers, which SipHash's final block carries. The lengths make the
/// padding unambiguous, so distinct (scope, key) pairs are distinct messages; the words are read
/// where the bytes lie, with no copy into a buffer. Never stored, so free to differ from any
/// other hash here.
inline std::uint64_t bucket_hash(const siphash_key& key, std::string_view scope,
                                 std::string_view id) noexcept {
  siphash13 h(key);
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
  // The store refuses a scope or key of more than 65,535 bytes before it hashes; two pairs that
  // met beyond that would only share a bucket: every search compares scope and key in full.
  // In the final block rather than a word of their own: one SipHash round fewer.
  return h.finish((static_cast<std::uint64_t>(scope.size()) & 0xffff) |
                      ((static_cast<std::uint64_t>(id.size()) & 0xffff) << 16),
                  4);
}

// Keeps a few of the memory_store's freed node blocks on the thread that freed them, for the
// next node of the same size class. A new key's claim is replaced by its completion moments
// later, so without it every first call would free one block through epoch reclamation, in
// batches, and glibc's malloc would then search its bins for the next (measured: 855 against
// 358 ns a first call). Classes are the sizes 16k + 8, which glibc serves from chunks of
// 16(k + 1) bytes, so rounding a request up to its class takes no more memory than malloc
// would; at most 64 KiB a thread is kept. (This and the two classes below are templates so that
// they compile only where they are used; see basic_memory_store.)
template <class Lazy = void>
class block_cache {
 public:
  static constexpr std::size_t largest = 1024 - 8;
  static constexpr std::size_t limit_bytes = std::size_t{64} * 1024;

  block_cache() = default;
  block_cache(const block_cache&) = delete;
  block_cache& operator=(const block_cache&) = delete;
  ~block_cache() {
    alive() = false;
    for (auto& bin : bins_) {
      for (void* block : bin)
        ::operator delete(block);
    }
  }

  static block_cache& local() {
    thread_local block_cache cache;
    return cache;
  }

  // At least `bytes`; freed by give(block, bytes).
  void* take(std::size_t bytes) {
    const std::size_t at = bin_of(bytes);
    if (at < bins && !bins_[at].empty()) {
      void* block = bins_[at].back();
      bins_[at].pop_back();
      held_ -= class_size(at);
      return block;
    }
    return ::operator new(at < bins ? class_size(at) : bytes);
  }

  static void give(void* block, std::size_t bytes) noexcept {
    const std::size_t at = bin_of(bytes);
    // Once this thread's cache is gone (blocks freed by its epoch participant at thread exit),
    // blocks go straight back to the allocator.
    if (at < bins && alive()) {
      block_cache& cache = local();
      if (cache.held_ + class_size(at) <= limit_bytes) {
        try {
          cache.bins_[at].push_back(block);
          cache.held_ += class_size(at);
          return;
        } catch (const std::bad_alloc&) {  // a full heap: free it instead
        }
      }
    }
    ::operator delete(block);
  }

 private:
  static constexpr std::size_t bins = (largest + 8) / 16;
  static std::size_t bin_of(std::size_t bytes) noexcept { return (bytes + 7) / 16; }
  static std::size_t class_size(std::size_t bin) noexcept { return 16 * bin + 8; }
  static bool& alive() noexcept {
    thread_local bool flag = true;
    return flag;
  }

  std::array<lazy_t<Lazy, std::vector<void*>>, bins> bins_;  // see idem/detail/lazy.hpp
  std::size_t held_ = 0;
};

// The memory store counts an unbounded store's records and bytes in the calling thread's stripe.
// A thread holds one of 64 stripe numbers for as long as it lives and is its stripe's only
// writer, so it counts with a plain load and store and no locked instruction (two a claim of a
// new key). A thread that finds all 64 held, or that counts after its lease was given back at
// its end (from another thread_local destructor), gets `shared_stripe` and counts with atomic
// read-modify-writes in a line of its own.
inline constexpr std::size_t shared_stripe = 64;

template <class = void>
class stripe_lease {
 public:
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

// The memory_store's bucket arrays, all shards' in one zeroed allocation. A claim of a new key
// reads one bucket far from the last one read, so a big store would take a TLB miss on nearly
// every claim as well as the cache miss; an array of at least one huge page (2 MiB: 256 Ki
// buckets) is aligned to one and, where madvise has MADV_HUGEPAGE (Linux with transparent huge
// pages in "always" or "madvise" mode), asked to be backed by huge pages. Measured on the
// claim_new workload (750 k keys, 16 MiB of buckets): about 10 ns a claim. Elsewhere, or if the
// kernel declines, the array is ordinary memory and works the same.
template <class = void>
class link_array {
 public:
  static constexpr std::size_t huge_page = std::size_t{2} << 20;

  explicit link_array(std::size_t count)
      : bytes_(count * sizeof(std::atomic<std::uintptr_t>)),
        alignment_(bytes_ >= huge_page ? huge_page : alignof(std::atomic<std::uintptr_t>)),
        links_(static_cast<std::atomic<std::uintptr_t>*>(
            ::operator new (bytes_, std::align_val_t{alignment_}))) {
    if (alignment_ == huge_page) advise_huge_pages(links_, bytes_);
    for (std::size_t i = 0; i < count; ++i)
      new (links_ + i) std::atomic<std::uintptr_t>(0);
  }
  link_array(const link_array&) = delete;
  link_array& operator=(const link_array&) = delete;
  ~link_array() { ::operator delete (links_, std::align_val_t{alignment_}); }

  std::atomic<std::uintptr_t>* data() const noexcept { return links_; }

 private:
  // Advice only: refused (a kernel without transparent huge pages) leaves ordinary pages.
  static void advise_huge_pages([[maybe_unused]] void* start,
                                [[maybe_unused]] std::size_t bytes) noexcept {
#if defined(MADV_HUGEPAGE)
    ::madvise(start, bytes, MADV_HUGEPAGE);
#endif
  }

  std::size_t bytes_;
  std::size_t alignment_;
  std::atomic<std::uintptr_t>* links_;
};

}  // namespace detail

// memory_store is basic_memory_store<void>. The template parameter means nothing: it is there so
// that the store, and the detail classes above (templates for the same reason), are compiled
// only in a translation unit that uses them. A class that is not a template instantiates every
// container and algorithm its member functions call wherever its header is included: for the
// core's classes, a third of the compile time of a unit that included idem/idem.hpp and used
// none of it (docs/performance.md, "Compile cost"). Calls in the store name the detail classes
// with Lazy, so that they depend on it: clang++ instantiates what a call that does not depend
// on the template's parameter needs, even in a template never instantiated.
template <class Lazy>
class basic_memory_store {
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
    /// Sizes the bucket arrays: two buckets (16 bytes) per expected record, rounded up to a
    /// power of two, at least 16 per shard.
    std::size_t expected_records = 65536;
  };

  /// What the store holds now: records not yet swept (expired ones included), and their bytes
  /// as max_bytes counts them.
  struct stats {
    std::size_t records;
    std::size_t bytes;
  };

  /// The memory one record takes beyond its scope, key, fingerprint, response and recovery
  /// bytes: its node's header and its expiry ticket (in its shard's ticket log, then its heap).
  /// Not included: the allocator's own overhead, and while a write is new, the node it replaced,
  /// which waits for epoch reclamation.
  static constexpr std::size_t record_overhead_bytes();

  /// The longest scope, and the longest key, a record holds.
  static constexpr std::size_t max_id_bytes = std::numeric_limits<std::uint16_t>::max();

  basic_memory_store() : basic_memory_store(limits{}) {}
  explicit basic_memory_store(limits bounds) : state_(std::make_shared<state>(bounds)) {}

  claim_result claim(const claim_request& request) {
    if (request.scope.size() > max_id_bytes || request.key.size() > max_id_bytes) {
      throw store_error(store_failure::full,
                        "idem::memory_store: a scope or key of more than 65535 bytes does not "
                        "fit a record (scope " +
                            std::to_string(request.scope.size()) + " bytes, key " +
                            std::to_string(request.key.size()) + ")");
    }
    state& s = *state_;
    const std::uint64_t hash = s.hash_of(request.scope, request.key);
    shard& home = s.shard_for(hash);
    const std::size_t bucket = hash & home.mask;
    std::atomic<std::uintptr_t>& head = home.buckets[bucket];
    const std::uint16_t hint = hint_of(hash);
    const std::int64_t now = to_ns(request.now);
    const std::int64_t expires_at = now + request.retention.count();
    bool swept = false;
    // A claim's expiry ticket goes into the shard's log before its record becomes visible, so a
    // sweep that starts after a record is visible always has its ticket. Pushed at most once
    // per call; one left unused is harmless (its bucket is looked at when it falls due).
    bool ticket_pushed = false;
    const auto push_ticket = [&] {
      if (!ticket_pushed) home.push_ticket(ticket_of(expires_at, bucket));
      ticket_pushed = true;
    };
    node* fresh = nullptr;  // made and counted for an absent key, not yet linked

    detail::epoch_guard<Lazy> guard;
    for (;;) {
      const position at = search(head, hint, request.scope, request.key, guard);
      if (at.found) {
        node* const found = at.current;
        if (fresh != nullptr) {  // another claim linked this key first
          drop_unlinked(fresh);
          fresh = nullptr;
        }
        if (found->state != released && now < found->expires_at) {
          if (found->state == in_progress && found->lease_until <= now &&
              found->matches(request.fingerprint)) {
            node* next = node::copy(*found, {}, found->payload_recovery());
            next->fence = found->fence + 1;
            next->lease_until = now + request.lease.count();
            if (!replace(at, next, guard)) {
              node::destroy(next);
              continue;
            }
            return answer(claim_status::taken_over, next->fence, *next);
          }
          return answer(claim_status::existing, 0, *found);
        }
        // Expired or released: a new claim of the same key, under a higher fence.
        push_ticket();
        // The scope's cap counts the records other than this one that have not expired.
        if (!s.reserve_scope(request.scope, now, found->expires_at > now ? 1 : 0, expires_at)) {
          return answer(claim_status::full);
        }
        node* next = node::make_claim(request, hint, found->fence + 1);
        if (!replace(at, next, guard)) {
          node::destroy(next);
          s.give_back_scope(request.scope, expires_at);
          continue;
        }
        ticket_again_if_swept(home, expires_at, bucket);
        s.give_back_scope(request.scope, found->expires_at);
        s.give_back_bytes(found->payload_size());
        return answer(claim_status::claimed, next->fence);
      }

      if (fresh == nullptr) {
        if (!s.reserve_scope(request.scope, now, 0, expires_at)) {
          return answer(claim_status::full);
        }
        if (!s.reserve(request.scope.size() + request.key.size())) {
          s.give_back_scope(request.scope, expires_at);
          if (swept) return answer(claim_status::full);
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
        push_ticket();
        fresh = node::make_claim(request, hint, 1);
      }
      fresh->next.store(at.link, std::memory_order_relaxed);
      std::uintptr_t expected = at.link;
      if (at.previous->compare_exchange_strong(expected, link_to(fresh),
                                               std::memory_order_seq_cst)) {
        ticket_again_if_swept(home, expires_at, bucket);
        return answer(claim_status::claimed, 1);
      }
    }
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    return rewrite(held, [&](const node& seen) {
      node* next = node::copy(seen, response, {});
      next->state = completed;
      return next;
    });
  }

  bool release(const fenced_key& held) {
    return rewrite(held, [&](const node& seen) {
      node* next = node::copy(seen, {}, {});
      next->state = released;
      return next;
    });
  }

  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    return rewrite(held, [&](const node& seen) {
      node* next = node::copy(seen, seen.payload_response(), recovery);
      next->lease_until = to_ns(lease_until);
      return next;
    });
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    if (scope.size() > max_id_bytes || key.size() > max_id_bytes) return std::nullopt;
    state& s = *state_;
    const std::uint64_t hash = s.hash_of(scope, key);
    shard& home = s.shard_for(hash);
    detail::epoch_guard<Lazy> guard;
    const position at = search(home.buckets[hash & home.mask], hint_of(hash), scope, key, guard);
    if (!at.found) return std::nullopt;
    const node& seen = *at.current;
    if (seen.state == released || seen.expires_at <= to_ns(now)) return std::nullopt;
    return snapshot(seen, true);
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
    detail::lazy_t<Lazy, std::vector<record>> out;  // see idem/detail/lazy.hpp
    const std::int64_t at = to_ns(now);
    detail::epoch_guard<Lazy> guard;
    for (const shard& each : state_->shards) {
      for (std::size_t b = 0; b <= each.mask; ++b) {
        for (node* n = pointer(each.buckets[b].load(std::memory_order_acquire)); n != nullptr;) {
          if (out.size() >= limit) return out;
          const std::uintptr_t next = n->next.load(std::memory_order_acquire);
          if (!marked(next) && n->state == in_progress && n->lease_until <= at &&
              at < n->expires_at) {
            out.push_back(snapshot(*n, true));
          }
          n = pointer(next);
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
    // A stripe's counts may have wrapped below zero (a sweep on one thread forgets records that
    // others counted); their sum, modulo 2^64 as well, is exact.
    stats total{s.global.records.load(std::memory_order_relaxed),
                s.global.bytes.load(std::memory_order_relaxed)};
    for (const tally& each : s.stripes) {
      total.records += each.records.load(std::memory_order_relaxed);
      total.bytes += each.bytes.load(std::memory_order_relaxed);
    }
    return total;
  }

 private:
  static constexpr std::uint8_t in_progress = 0;
  static constexpr std::uint8_t completed = 1;
  static constexpr std::uint8_t released = 2;

  static std::int64_t to_ns(store_time t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  static store_time from_ns(std::int64_t ns) noexcept {
    return store_time{
        std::chrono::duration_cast<store_time::duration>(std::chrono::nanoseconds{ns})};
  }

  // One record, immutable once linked except for `next`. Its variable parts follow it in the
  // same allocation: scope, key, fingerprint, response, recovery.
  struct node {
    std::atomic<std::uintptr_t> next;  // the next node; see link_to for its bits
    std::int64_t created_at;
    std::int64_t lease_until;
    std::int64_t expires_at;
    std::uint64_t fence;
    std::uint32_t response_size;
    std::uint32_t recovery_size;
    std::uint16_t scope_size;
    std::uint16_t key_size;
    std::uint16_t hint;  // 16 bits of the bucket hash: see hint_of
    std::uint8_t fingerprint_size;
    std::uint8_t state;

    const char* tail() const noexcept { return reinterpret_cast<const char*>(this + 1); }
    char* tail() noexcept { return reinterpret_cast<char*>(this + 1); }
    std::size_t id_size() const noexcept { return std::size_t{scope_size} + key_size; }
    std::string_view scope() const noexcept { return {tail(), scope_size}; }
    std::string_view key() const noexcept { return {tail() + scope_size, key_size}; }
    const char* fingerprint_bytes() const noexcept { return tail() + id_size(); }
    std::string_view payload_response() const noexcept {
      return {fingerprint_bytes() + fingerprint_size, response_size};
    }
    std::string_view payload_recovery() const noexcept {
      return {fingerprint_bytes() + fingerprint_size + response_size, recovery_size};
    }
    std::size_t payload_size() const noexcept { return std::size_t{response_size} + recovery_size; }
    bool matches(const digest& fingerprint) const noexcept {
      return fingerprint.size() == fingerprint_size &&
             std::memcmp(fingerprint_bytes(), fingerprint.data(), fingerprint_size) == 0;
    }
    digest fingerprint() const noexcept {
      return digest{std::span<const std::uint8_t>(
          reinterpret_cast<const std::uint8_t*>(fingerprint_bytes()), fingerprint_size)};
    }

    // A node with room for its variable parts, the scope and key copied in, the rest zero.
    static node* allocate(std::string_view scope, std::string_view key,
                          std::size_t fingerprint_size, std::size_t payload_size) {
      void* memory = detail::block_cache<Lazy>::local().take(
          sizeof(node) + scope.size() + key.size() + fingerprint_size + payload_size);
      auto* n = new (memory) node{};
      n->scope_size = static_cast<std::uint16_t>(scope.size());
      n->key_size = static_cast<std::uint16_t>(key.size());
      n->fingerprint_size = static_cast<std::uint8_t>(fingerprint_size);
      if (!scope.empty()) std::memcpy(n->tail(), scope.data(), scope.size());
      if (!key.empty()) std::memcpy(n->tail() + scope.size(), key.data(), key.size());
      return n;
    }
    // A claim of (scope, key) under `fence`: in progress, times from the request.
    static node* make_claim(const claim_request& request, std::uint16_t hint, std::uint64_t fence) {
      node* n = allocate(request.scope, request.key, request.fingerprint.size(), 0);
      const std::int64_t now = to_ns(request.now);
      n->created_at = now;
      n->lease_until = now + request.lease.count();
      n->expires_at = now + request.retention.count();
      n->fence = fence;
      n->hint = hint;
      n->state = in_progress;
      std::memcpy(n->tail() + n->id_size(), request.fingerprint.data(), request.fingerprint.size());
      return n;
    }
    // A copy of `from` with other response and recovery bytes.
    static node* copy(const node& from, std::string_view response, std::string_view recovery) {
      node* n = allocate(from.scope(), from.key(), from.fingerprint_size,
                         response.size() + recovery.size());
      n->created_at = from.created_at;
      n->lease_until = from.lease_until;
      n->expires_at = from.expires_at;
      n->fence = from.fence;
      n->hint = from.hint;
      n->state = from.state;
      n->response_size = static_cast<std::uint32_t>(response.size());
      n->recovery_size = static_cast<std::uint32_t>(recovery.size());
      char* bytes = n->tail() + n->id_size();
      std::memcpy(bytes, from.fingerprint_bytes(), from.fingerprint_size);
      bytes += from.fingerprint_size;
      if (!response.empty()) std::memcpy(bytes, response.data(), response.size());
      if (!recovery.empty()) std::memcpy(bytes + response.size(), recovery.data(), recovery.size());
      return n;
    }
    std::size_t allocated_size() const noexcept {
      return sizeof(node) + id_size() + fingerprint_size + payload_size();
    }
    static void destroy(node* n) noexcept {
      const std::size_t size = n->allocated_size();
      n->~node();
      detail::block_cache<Lazy>::give(n, size);
    }
    static void destroy_erased(void* n) noexcept { destroy(static_cast<node*>(n)); }
  };

  // A chain link is an integer: the next node's address, Harris's removal mark in bit 0 (set:
  // the node holding this link is removed, or replaced by the node the link points to), and,
  // where the address leaves its top 16 bits clear (64-bit user space without pointer tagging),
  // a hint in them: the next node's `hint`, with bit 1 saying it is there. A node whose address
  // uses the top bits is linked without a hint and read as before.
  static constexpr std::uintptr_t mark_bit = 1;
  static constexpr std::uintptr_t hint_bit = 2;
  static constexpr bool links_carry_hints = sizeof(std::uintptr_t) == 8;
  static constexpr int hint_shift = 48;
  static constexpr std::uint64_t address_bits = (std::uint64_t{1} << hint_shift) - 1;

  // The 16 bits of the bucket hash just below the shard's (hash >> 58): chains are ordered by
  // them first, and the bits that choose a bucket are the lowest ones, so within a bucket they
  // vary as freely as anywhere.
  static std::uint16_t hint_of(std::uint64_t hash) noexcept {
    return static_cast<std::uint16_t>(hash >> 42);
  }
  static std::uintptr_t link_to(const node* n) noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(n);
    if constexpr (links_carry_hints) {
      if ((address & ~address_bits) == 0) {
        return static_cast<std::uintptr_t>(address | hint_bit |
                                           (std::uint64_t{n->hint} << hint_shift));
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
  static bool orders_after(std::uintptr_t link, std::uint16_t hint) noexcept {
    if constexpr (links_carry_hints) {
      return (link & hint_bit) != 0 && static_cast<std::uint64_t>(link) >> hint_shift > hint;
    }
    return false;
  }

  // Chains are ordered by (hint, scope, key), so a search stops at the first node not below.
  static int compare(const node& n, std::uint16_t hint, std::string_view scope,
                     std::string_view key) noexcept {
    if (n.hint != hint) return n.hint < hint ? -1 : 1;
    if (n.scope_size != scope.size()) return n.scope_size < scope.size() ? -1 : 1;
    // A search that reaches a node of the same hint and scope size has almost always found its
    // key: checked for equality first, inline, where two calls to memcmp cost a replay 5 ns.
    if (n.key_size == key.size() && same_bytes(n.scope().data(), scope.data(), scope.size()) &&
        same_bytes(n.key().data(), key.data(), key.size())) {
      return 0;
    }
    if (const int c = n.scope().compare(scope); c != 0) return c;
    return n.key().compare(key);
  }

  // Whether the `size` bytes at `a` and at `b` are the same: words of 8 bytes, the last one
  // ending at the end (overlapping the one before), and memcmp beyond 64 bytes.
  static bool same_bytes(const char* a, const char* b, std::size_t size) noexcept {
    if (size > 64) return std::memcmp(a, b, size) == 0;
    if (size >= 8) {
      for (std::size_t at = 0; at + 8 < size; at += 8) {
        if (detail::read_le64(a + at) != detail::read_le64(b + at)) return false;
      }
      return detail::read_le64(a + size - 8) == detail::read_le64(b + size - 8);
    }
    for (std::size_t at = 0; at < size; ++at) {
      if (a[at] != b[at]) return false;
    }
    return true;
  }

  // A due date for the records of one bucket: (expiry rounded up to 2^30 ns) << 32 | bucket.
  // Never 0, which marks a slot of the log not written yet.
  static constexpr int ticket_time_shift = 30;
  static std::uint64_t ticket_time(std::int64_t ns) noexcept {
    constexpr std::int64_t unit = std::int64_t{1} << ticket_time_shift;
    constexpr std::int64_t last = std::numeric_limits<std::uint32_t>::max();
    if (ns <= 0) return 1;
    const std::int64_t units = ns / unit + (ns % unit != 0 ? 1 : 0);
    return static_cast<std::uint64_t>(detail::clamp<std::int64_t>(units, 1, last));
  }
  static std::uint64_t ticket_of(std::int64_t expires_at, std::size_t bucket) noexcept {
    return ticket_time(expires_at) << 32 | static_cast<std::uint32_t>(bucket);
  }
  // What sweep leaves in a log slot it has read; no ticket has every bit set (a bucket index is
  // below 2^30).
  static constexpr std::uint64_t read_slot = ~std::uint64_t{0};

  // A shard's tickets as claims append them: blocks of slots, newest first. A claim takes a
  // slot with one fetch-and-add and writes it; a claim that finds the block full links a new
  // one. Only sweep reads the slots, and only sweep changes `older` or `consumed` after a block
  // is linked; a full block it has read whole is unlinked and retired, since a claim that loaded
  // it just before may still be adding to `taken`.
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

  struct alignas(64) tally {
    std::atomic<std::size_t> records{0};
    std::atomic<std::size_t> bytes{0};
  };

  // Claims only read a shard's fields until a sweep takes its mutex: a count a claim writes
  // lives elsewhere (state::stripes), or every claim on another thread would fetch this line.
  struct alignas(64) shard {
    std::atomic<std::uintptr_t>* buckets = nullptr;  // this shard's part of state::links
    std::size_t mask = 0;
    std::atomic<ticket_block*> log{nullptr};  // appended to by claims, read by sweep
    // The latest `now` a sweep of this shard has popped tickets at (none yet: the minimum).
    std::atomic<std::int64_t> swept_to{std::numeric_limits<std::int64_t>::min()};
    std::mutex sweep_mutex;
    // A min-heap of tickets (they order by due time), under sweep_mutex.
    detail::lazy_t<Lazy, std::vector<std::uint64_t>> due;  // see idem/detail/lazy.hpp

    std::atomic<std::uintptr_t>& bucket_for(std::uint64_t hash) const noexcept {
      return buckets[hash & mask];
    }
    // The caller is pinned: a block it loads is not freed under it.
    void push_ticket(std::uint64_t ticket) {
      ticket_block* newest = log.load(std::memory_order_acquire);
      for (;;) {
        if (newest != nullptr) {
          const std::uint32_t slot = newest->taken.fetch_add(1, std::memory_order_relaxed);
          if (slot < ticket_block::capacity) {
            newest->slots[slot].store(ticket, std::memory_order_release);
            return;
          }
        }
        auto* block = new ticket_block(newest, ticket);
        if (log.compare_exchange_strong(newest, block, std::memory_order_acq_rel)) return;
        delete block;
      }
    }
  };

  static constexpr std::size_t shard_count = 64;

  struct state {
    explicit state(limits given)
        : bounds(given),
          bounded(given.max_records != std::numeric_limits<std::size_t>::max() ||
                  given.max_bytes != std::numeric_limits<std::size_t>::max()),
          hash_key(detail::process_hash_key()),
          shards(shard_count),
          links(shard_count * buckets_per_shard(given.expected_records)) {
      const std::size_t per_shard = buckets_per_shard(given.expected_records);
      for (std::size_t i = 0; i < shard_count; ++i) {
        shards[i].buckets = links.data() + i * per_shard;
        shards[i].mask = per_shard - 1;
      }
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    // No thread uses the store any more: free everything it holds directly. A chain holds each
    // linked node once (a replaced node still linked points to its replacement, which the
    // chain reaches next); nodes already unlinked were retired to epoch reclamation.
    ~state() {
      for (shard& each : shards) {
        for (ticket_block* b = each.log.load(std::memory_order_acquire); b != nullptr;) {
          ticket_block* older = b->older;
          delete b;
          b = older;
        }
        for (std::size_t b = 0; b <= each.mask; ++b) {
          node* n = pointer(each.buckets[b].load(std::memory_order_acquire));
          while (n != nullptr) {
            node* next = pointer(n->next.load(std::memory_order_relaxed));
            node::destroy(n);
            n = next;
          }
        }
      }
    }

    // Two buckets per expected record, at least 16 a shard, a power of two. At one a record, a
    // claim of a new key read 0.18 chain nodes on average before its place (750 k claims into
    // a store sized for them); at two, 0.09, for 8 bytes more a record: 10 ns a claim.
    static std::size_t buckets_per_shard(std::size_t expected_records) noexcept {
      std::size_t per_shard = 16;
      while (per_shard * shard_count / 2 < expected_records && per_shard < (std::size_t{1} << 30))
        per_shard *= 2;
      return per_shard;
    }

    std::uint64_t hash_of(std::string_view scope, std::string_view key) const noexcept {
      return detail::bucket_hash(hash_key, scope, key);
    }
    // The top bits choose the shard, the low bits the bucket within it.
    shard& shard_for(std::uint64_t hash) noexcept { return shards[hash >> 58]; }

    // A bounded store counts in one place (`global`), so its limits are exact. An unbounded one
    // only reports its counts (statistics()), so each thread counts in a stripe of its own (4 KiB
    // a store in all) that no other thread writes while it lives (detail::stripe_lease), with a
    // plain load and store where an atomic add would be a locked instruction: measured with
    // scripts/store_ab.sh on an Intel Xeon, that takes 7 to 21 ns off a claim of a new key at
    // one thread. A thread without a stripe of its own counts in `global` with atomic adds.
    // Counted per shard, as before, both threads of a pair wrote every shard's line, and the
    // claims also read the shard's buckets from it.
    struct counter {
      tally& t;
      bool sole;  // the calling thread is t's only writer
      void add(std::atomic<std::size_t>& c, std::size_t n) const noexcept {
        if (sole)
          c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
        else
          c.fetch_add(n, std::memory_order_relaxed);
      }
      // Counts wrap modulo 2^64 (statistics() sums them so), so taking n back adds its negation.
      void subtract(std::atomic<std::size_t>& c, std::size_t n) const noexcept { add(c, 0 - n); }
    };
    counter counter_for() noexcept {
      if (bounded) return {global, false};
      const std::size_t stripe = detail::stripe_lease<Lazy>::mine();
      if (stripe == detail::shared_stripe) [[unlikely]]
        return {global, false};
      return {stripes[stripe], true};
    }

    bool reserve(std::size_t id_bytes) noexcept {
      if (!bounded) {
        const counter c = counter_for();
        c.add(c.t.records, 1);
        c.add(c.t.bytes, id_bytes);
        return true;
      }
      if (global.records.fetch_add(1, std::memory_order_relaxed) >= bounds.max_records) {
        global.records.fetch_sub(1, std::memory_order_relaxed);
        return false;
      }
      if (!reserve_bytes(id_bytes)) {
        global.records.fetch_sub(1, std::memory_order_relaxed);
        return false;
      }
      return true;
    }
    bool reserve_bytes(std::size_t count) noexcept {
      if (!bounded) {
        const counter c = counter_for();
        c.add(c.t.bytes, count);
        return true;
      }
      const std::size_t before = global.bytes.fetch_add(count, std::memory_order_relaxed);
      if (before > bounds.max_bytes || count > bounds.max_bytes - before) {
        global.bytes.fetch_sub(count, std::memory_order_relaxed);
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
    // A scope's expiries, sorted: a count of those that have not expired is one binary search
    // (a multiset's count walked every live record). A new expiry is the claim's time plus the
    // retention, so it lands at or near the end; a sweep takes the oldest first, so an erase at
    // the front only moves the start (head_), and the vector is compacted once half is gone.
    class scope_expiries {
     public:
      bool empty() const noexcept { return head_ == times_.size(); }
      std::size_t live_after(std::int64_t now) const noexcept {
        return static_cast<std::size_t>(times_.cend() -
                                        detail::upper_bound(begin(), times_.cend(), now));
      }
      void insert(std::int64_t expires_at) {
        times_.insert(detail::upper_bound(begin(), times_.cend(), expires_at), expires_at);
      }
      void erase_one(std::int64_t expires_at) {
        const auto one = detail::lower_bound(begin(), times_.cend(), expires_at);
        if (one == times_.cend() || *one != expires_at) return;
        if (one != begin()) {
          times_.erase(one);
          return;
        }
        if (++head_ * 2 >= times_.size()) {
          times_.erase(times_.cbegin(), begin());
          head_ = 0;
        }
      }

     private:
      using times = detail::lazy_t<Lazy, std::vector<std::int64_t>>;  // see idem/detail/lazy.hpp
      typename times::const_iterator begin() const noexcept {
        return times_.begin() + static_cast<std::ptrdiff_t>(head_);
      }
      times times_;
      std::size_t head_ = 0;  // times_[0, head_) were erased
    };
    // Per scope, the expiry of every record it holds (expired ones until swept), kept only when
    // max_records_per_scope is set: a scope's records are spread over every shard, so what it
    // holds is kept apart, in one of 64 stripes chosen by the scope's keyed hash. A claim counts
    // the scope's records that have not expired, and adds its own expiry only if that count,
    // less `replacing` (the record it replaces, when that one has not expired), is below the
    // cap. Between the add and the claim's compare-and-swap the scope may count one record too
    // many: a concurrent claim at the edge then answers full, never one past the cap.
    struct scope_stripe {
      std::mutex mutex;
      std::unordered_map<std::string, scope_expiries> expiries;
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
      scope_expiries& held = stripe.expiries[std::string(scope)];
      const std::size_t live = held.live_after(now);
      if (live - detail::min(live, replacing) >= bounds.max_records_per_scope) {
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
      at->second.erase_one(expires_at);
      if (at->second.empty()) stripe.expiries.erase(at);
    }

    limits bounds;
    bool bounded;
    detail::siphash_key hash_key;
    std::vector<shard> shards;
    detail::link_array<Lazy> links;
    tally global;  // a bounded store's counts; an unbounded one's from threads without a stripe
    std::array<tally, detail::shared_stripe> stripes;  // an unbounded store's, a stripe a thread
    std::array<scope_stripe, 64> scope_stripes;
  };

  struct position {
    std::atomic<std::uintptr_t>* previous;
    node* current;
    std::uintptr_t link;  // previous's value when it pointed to current
    bool found;
  };

  // Unlinks a marked node from `previous`, which held `link` to it, pointing `previous` past it
  // to `next` (the node's own link), and retires it. False when `previous` changed meanwhile:
  // the caller walks its chain again.
  static bool unlink(std::atomic<std::uintptr_t>* previous, std::uintptr_t link,
                     std::uintptr_t next, detail::epoch_guard<Lazy>& guard) {
    std::uintptr_t expected = link;
    if (!previous->compare_exchange_strong(expected, next & ~mark_bit, std::memory_order_acq_rel)) {
      return false;
    }
    guard.retire(pointer(link), &node::destroy_erased);
    return true;
  }

  // Harris-Michael search: the first node not below (hint, scope, key), and the link pointing to
  // it. Nodes marked removed or replaced are unlinked on the way; whoever unlinks one retires
  // it. A node found was unmarked when its link was read, so it was the record then. When the
  // key is absent, the node returned may be one only its link's hint was read of (possibly
  // marked): inserting before it is still correct, as the list needs only `previous` unmarked.
  static position search(std::atomic<std::uintptr_t>& head, std::uint16_t hint,
                         std::string_view scope, std::string_view key,
                         detail::epoch_guard<Lazy>& guard) {
  retry:
    std::atomic<std::uintptr_t>* previous = &head;
    std::uintptr_t link = previous->load(std::memory_order_acquire);
    for (node* current = pointer(link); current != nullptr; current = pointer(link)) {
      if (orders_after(link, hint)) return {previous, current, link, false};
      const std::uintptr_t next = current->next.load(std::memory_order_acquire);
      if (marked(next)) {
        if (!unlink(previous, link, next, guard)) goto retry;
        link = next & ~mark_bit;
        continue;
      }
      const int order = compare(*current, hint, scope, key);
      if (order >= 0) return {previous, current, link, order == 0};
      previous = &current->next;
      link = next;
    }
    return {previous, nullptr, 0, false};
  }

  // Swaps `next` in for the record `at` found: one compare-and-swap on the found node's own
  // link, from its successor to `next` marked, with `next` linked to that successor. The mark
  // removes the old node and the link points past it to its replacement, in one step, so no
  // search can see the key absent in between. Fails when the old node was replaced or removed
  // first. The old node is then unlinked here if its predecessor still points to it, or by the
  // next search that passes.
  static bool replace(const position& at, node* next, detail::epoch_guard<Lazy>& guard) {
    node* const old = at.current;
    std::uintptr_t successor = old->next.load(std::memory_order_acquire);
    for (;;) {
      if (marked(successor)) return false;
      next->next.store(successor, std::memory_order_relaxed);
      if (old->next.compare_exchange_weak(successor, link_to(next) | mark_bit,
                                          std::memory_order_seq_cst, std::memory_order_acquire)) {
        break;
      }
    }
    std::uintptr_t expected = at.link;
    if (at.previous->compare_exchange_strong(expected, link_to(next), std::memory_order_acq_rel)) {
      guard.retire(old, &node::destroy_erased);
    }
    return true;
  }

  // A claim's ticket goes into the log before its record is linked, but a claim can be paused
  // in between for as long as its retention (or be given a `now` that old): a sweep may then
  // pop the ticket, find no record in its bucket, and drop it, and the record linked afterwards
  // would never be swept. So after linking, a claim whose ticket a sweep of its shard may
  // already have popped (one that reached its expiry) appends it again. The link (a seq_cst
  // compare-and-swap) and the sweep's store of swept_to (seq_cst, then a fence, before it reads
  // any bucket) order each other: either the sweep's walk sees the record, or this load sees the
  // sweep.
  static void ticket_again_if_swept(shard& home, std::int64_t expires_at, std::size_t bucket) {
    const std::int64_t swept = home.swept_to.load(std::memory_order_seq_cst);
    if (swept != std::numeric_limits<std::int64_t>::min() &&
        ticket_time(expires_at) <= ticket_time(swept)) {
      home.push_ticket(ticket_of(expires_at, bucket));
    }
  }

  // Gives up a node made for a claim that another claim beat: it was never linked, so no
  // thread can have seen it.
  void drop_unlinked(node* fresh) {
    state_->forget_record(fresh->id_size());
    state_->give_back_scope(fresh->scope(), fresh->expires_at);
    node::destroy(fresh);
  }

  // A record as the store answers it; scope and key only when asked for: claim's caller has
  // them, and copying them is an allocation on the replay path whenever they are longer than a
  // short string holds.
  static record snapshot(const node& n, bool with_id = false) {
    record out;
    snapshot_into(out, n, with_id);
    return out;
  }
  static void snapshot_into(record& out, const node& n, bool with_id = false) {
    if (with_id) {
      out.scope = n.scope();
      out.key = n.key();
    }
    out.fingerprint = n.fingerprint();
    out.state = n.state == completed ? record_state::completed : record_state::in_progress;
    out.fence = n.fence;
    out.created_at = from_ns(n.created_at);
    out.lease_until = from_ns(n.lease_until);
    out.expires_at = from_ns(n.expires_at);
    // Constructed in place rather than assigned: a replay's one copy of the response, made
    // without the assignment's capacity checks.
    if (n.response_size != 0) out.response = std::string(n.payload_response());
    if (n.recovery_size != 0) out.recovery = std::string(n.payload_recovery());
  }

  // Claim's answers, each made where the caller receives it and written field by field: an
  // aggregate initialization such as {status, fence, {}} or {status, 0, snapshot(n)} makes GCC
  // clear the whole 216-byte result first (`rep stos`).
  static claim_result answer(claim_status status, std::uint64_t fence = 0) noexcept {
    claim_result out;
    out.status = status;
    out.fence = fence;
    return out;
  }
  static claim_result answer(claim_status status, std::uint64_t fence, const node& n) {
    claim_result out = answer(status, fence);
    snapshot_into(out.existing, n);
    return out;
  }

  // A fenced write: replaces the record by make(record) if the caller's fence is still the
  // record's. The swap is on the very node whose fence was checked.
  template <class Make>
  bool rewrite(const fenced_key& held, Make&& make) {
    if (held.scope.size() > max_id_bytes || held.key.size() > max_id_bytes) return false;
    state& s = *state_;
    const std::uint64_t hash = s.hash_of(held.scope, held.key);
    shard& home = s.shard_for(hash);
    std::atomic<std::uintptr_t>& head = home.bucket_for(hash);
    const std::uint16_t hint = hint_of(hash);
    detail::epoch_guard<Lazy> guard;
    for (;;) {
      const position at = search(head, hint, held.scope, held.key, guard);
      if (!at.found) return false;
      const node& seen = *at.current;
      if (seen.state == released || seen.fence != held.fence) return false;
      node* next = make(seen);
      const std::size_t old_size = seen.payload_size();
      const std::size_t new_size = next->payload_size();
      if (new_size > old_size && !s.reserve_bytes(new_size - old_size)) {
        node::destroy(next);
        throw store_error(store_failure::full,
                          "idem::memory_store: " + std::to_string(new_size) +
                              " bytes do not fit in the store's max_bytes of " +
                              std::to_string(s.bounds.max_bytes));
      }
      if (replace(at, next, guard)) {
        if (new_size < old_size) s.give_back_bytes(old_size - new_size);
        return true;
      }
      if (new_size > old_size) s.give_back_bytes(new_size - old_size);
      node::destroy(next);
    }
  }

  // Under home.sweep_mutex: moves what claims appended to the log into the heap, and unlinks
  // the full blocks read whole. A slot taken by a claim that has not written it yet is passed
  // over, not waited for: the tickets after it belong to records that may already be visible.
  // A slot read is overwritten with `read_slot`; `consumed` counts the leading slots read.
  static void collect_tickets(shard& home) {
    detail::epoch_guard<Lazy> guard;
    ticket_block* const newest = home.log.load(std::memory_order_acquire);
    ticket_block* newer = nullptr;
    for (ticket_block* b = newest; b != nullptr;) {
      const std::uint32_t taken =
          detail::min(b->taken.load(std::memory_order_acquire), ticket_block::capacity);
      bool hole = false;
      for (std::uint32_t i = b->consumed; i < taken; ++i) {
        const std::uint64_t ticket = b->slots[i].load(std::memory_order_acquire);
        if (ticket == 0) {  // taken by a claim that has not written it yet
          hole = true;
          continue;
        }
        if (ticket != read_slot) {
          home.due.push_back(ticket);
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

  // Under the sweep_mutex of the bucket's shard: removes the expired records of one bucket, and
  // counts them.
  std::size_t remove_expired(std::atomic<std::uintptr_t>& head, std::int64_t now) {
    std::size_t removed = 0;
    detail::epoch_guard<Lazy> guard;
  retry:
    std::atomic<std::uintptr_t>* previous = &head;
    std::uintptr_t link = previous->load(std::memory_order_acquire);
    for (node* current = pointer(link); current != nullptr; current = pointer(link)) {
      std::uintptr_t next = current->next.load(std::memory_order_acquire);
      if (marked(next)) {
        if (!unlink(previous, link, next, guard)) goto retry;
        link = next & ~mark_bit;
        continue;
      }
      if (current->expires_at <= now) {
        // Marked without a replacement: removed. A write that replaced it first leaves its
        // replacement (as expired) to the next turn of this loop.
        if (current->next.compare_exchange_strong(next, next | mark_bit,
                                                  std::memory_order_acq_rel)) {
          state_->forget_record(current->id_size() + current->payload_size());
          state_->give_back_scope(current->scope(), current->expires_at);
          ++removed;
        }
        continue;  // the same node again: now marked, it is unlinked
      }
      previous = &current->next;
      link = next;
    }
    return removed;
  }

  // Under home.sweep_mutex.
  std::size_t sweep_locked(shard& home, std::int64_t now) {
    const auto later = [](std::uint64_t a, std::uint64_t b) { return a > b; };
    // New tickets join the heap: one by one when few arrived, by one O(n) rebuild when many did.
    const std::size_t held = home.due.size();
    collect_tickets(home);
    if (home.due.size() - held > held / 4) {
      detail::make_heap(home.due.begin(), home.due.end(), later);
    } else {
      for (auto it = home.due.begin() + static_cast<std::ptrdiff_t>(held); it != home.due.end();) {
        detail::push_heap(home.due.begin(), ++it, later);
      }
    }
    // A ticket due within the current 2^30 ns may name a record that expires after `now`: its
    // bucket is looked at, and the ticket kept for the next sweep.
    const std::uint64_t current_unit = ticket_time(now);
    // Said before any bucket is read (see ticket_again_if_swept).
    home.swept_to.store(detail::max(home.swept_to.load(std::memory_order_relaxed), now),
                        std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    detail::lazy_t<Lazy, std::vector<std::uint64_t>> kept;
    std::size_t removed = 0;
    while (!home.due.empty() && (home.due.front() >> 32) <= current_unit) {
      detail::pop_heap(home.due.begin(), home.due.end(), later);
      const std::uint64_t ticket = home.due.back();
      home.due.pop_back();
      removed += remove_expired(home.buckets[ticket & 0xffffffffU], now);
      if ((ticket >> 32) == current_unit) kept.push_back(ticket);
    }
    for (const std::uint64_t ticket : kept) {
      home.due.push_back(ticket);
      detail::push_heap(home.due.begin(), home.due.end(), later);
    }
    return removed;
  }

  std::shared_ptr<state> state_;
};

template <class Lazy>
constexpr std::size_t basic_memory_store<Lazy>::record_overhead_bytes() {
  static_assert(sizeof(node) == 56, "memory_store's node header is 56 bytes");
  return sizeof(node) + sizeof(std::uint64_t);
}

using memory_store = basic_memory_store<void>;

}  // namespace idem

#endif  // IDEM_STORE_MEMORY_HPP
