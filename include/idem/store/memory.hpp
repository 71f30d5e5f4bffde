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
//   * sweep and stuck read the store under per-shard locks of their own that the hot paths
//     never take.
//   * Unlinked memory is freed by epoch-based reclamation (memory/epoch.hpp): never while a
//     thread may still read it, and never leaked.
//
// Layout: 64 shards, each a fixed array of buckets, each bucket a lock-free ordered chain
// (Harris and Michael's list, memory/list.hpp) of nodes, one node per record: its times, fence
// and state, then its scope, key, fingerprint, response and recovery bytes in the same
// allocation (memory/node.hpp). A write (complete, release, checkpoint, a takeover, a new claim
// of an expired key) makes the record's next node and swaps it in with one compare-and-swap on
// the old node's link, which at once marks the old node removed and points past it to the new
// one; the writer then unlinks the old node, or else the next search to pass does. Buckets are
// chosen by SipHash-1-3 under a key drawn once per process (memory/bucket_hash.hpp), so clients
// cannot aim their keys at one bucket; that hash is never stored. Each link carries a hint of 16
// bits of the next node's hash, so a search for an absent key stops at the first larger hint
// without reading that node. The bucket count is fixed from options::expected_records (two a
// record), in one array that takes huge pages where the platform gives them
// (memory/bucket_array.hpp): beyond it chains grow. Reclaimed node blocks go to a small cache on
// the thread that frees them (memory/block_cache.hpp), for the next node of the same size.
//
// Bounds: max_records_per_scope counts a scope's records that have not expired (released ones
// included), so one tenant cannot fill the store (memory/scope_caps.hpp). max_records counts
// records held (expired ones until they are swept), max_bytes counts scope + key + response +
// recovery bytes (memory/counters.hpp). A claim past either answers `full` after first sweeping
// what has expired; a live record is never evicted. Scopes and keys are at most 65,535 bytes
// each (a longer one is a store_error, `full`).
//
// Expiry: each claim that starts a retention period appends an 8-byte ticket (its expiry,
// rounded up to 2^30 ns, and its bucket) to its shard's lock-free ticket log; sweep moves
// tickets into a per-shard heap and pops only the due ones, removing the expired records of
// each due ticket's bucket, so it costs what it removes (plus the tickets that arrived since
// the last sweep, and those due within the current 2^30 ns), not what the store holds
// (memory/sweep.hpp).
//
// Leases: stuck() finds the records in progress past their lease the same way, from lease
// tickets that each write setting a lease appends to a second log of its shard, once stuck()
// has first looked at that shard (that first look walks the shard once; until then a write
// pays one load for this). A look costs the stuck records it finds plus the leases set since
// the last one, not what the store holds (memory/leases.hpp).
#ifndef IDEM_STORE_MEMORY_HPP
#define IDEM_STORE_MEMORY_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/detail/cursor.hpp>
#include <idem/store/inspect.hpp>
#include <idem/store/memory/detail/bucket_array.hpp>
#include <idem/store/memory/detail/bucket_hash.hpp>
#include <idem/store/memory/detail/counters.hpp>
#include <idem/store/memory/detail/epoch.hpp>
#include <idem/store/memory/detail/leases.hpp>
#include <idem/store/memory/detail/list.hpp>
#include <idem/store/memory/detail/node.hpp>
#include <idem/store/memory/detail/scope_caps.hpp>
#include <idem/store/memory/detail/siphash.hpp>
#include <idem/store/memory/detail/sweep.hpp>

namespace idem {

// memory_store is basic_memory_store<>. The parameter means nothing: it is there so that the
// store compiles only in a translation unit that uses it (idem/core/detail/lazy.hpp), as do its
// parts, templates for the same reason. idem/policies.hpp declares both names too.
template <class Lazy = void>
class basic_memory_store {
  // Through lazy_t, so that calls of node's functions depend on Lazy (idem/core/detail/lazy.hpp).
  using node = detail::lazy_t<Lazy, detail::memory::node>;
  using node_state = detail::memory::node_state;
  using position = detail::memory::position;

 public:
  /// Records keep no completion time: complete leaves expires_at as the claim set it, so the
  /// guard need not read the clock again for a completion (idem::reads_completion_time).
  static constexpr bool reads_completion_time = false;
  /// Every call answers from memory (idem::never_blocks): asynchronous drivers call it inline.
  static constexpr bool never_blocks = true;

  struct options {
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
  /// Once stuck() has been called, each lease a write sets also takes a lease ticket of 8 bytes
  /// until a look (stuck() or sweep()) after the lease ended drops it.
  /// Not included: the allocator's own overhead, and while a write is new, the node it replaced,
  /// which waits for epoch reclamation.
  static constexpr std::size_t record_overhead_bytes() {
    return sizeof(node) + sizeof(std::uint64_t);
  }

  /// The longest scope, and the longest key, a record holds.
  static constexpr std::size_t max_id_bytes = std::numeric_limits<std::uint16_t>::max();

  basic_memory_store() : basic_memory_store(options{}) {}
  explicit basic_memory_store(options bounds) : state_(std::make_shared<state>(bounds)) {}

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
    const std::uint16_t hint = detail::memory::hint_of(hash);
    const std::int64_t now = detail::memory::to_ns(request.now);
    const std::int64_t expires_at = now + request.retention.count();
    const std::int64_t lease_until = now + request.lease.count();
    bool swept = false;
    // A claim's expiry ticket goes into the shard's log before its record becomes visible, so a
    // sweep that starts after a record is visible always has its ticket. Pushed at most once
    // per call; one left unused is harmless (its bucket is looked at when it falls due).
    bool ticket_pushed = false;
    const auto push_ticket = [&] {
      if (!ticket_pushed) home.tickets.push(detail::memory::ticket_of(expires_at, bucket));
      ticket_pushed = true;
    };
    // Likewise its lease ticket, when stuck() has started the shard's lease tickets
    // (memory/leases.hpp): the same lease for every record this call may write.
    bool lease_pushed = false;
    const auto push_lease = [&] {
      if (!lease_pushed) lease_pushed = home.leases.push_if_tracking(lease_until, bucket);
    };
    node* fresh = nullptr;  // made and counted for an absent key, not yet linked

    detail::epoch_guard<Lazy> guard;
    for (;;) {
      const position at = detail::memory::search(head, hint, request.scope, request.key, guard);
      if (at.found) {
        node* const found = at.current;
        if (fresh != nullptr) {  // another claim linked this key first
          drop_unlinked(fresh);
          fresh = nullptr;
        }
        if (found->state != node_state::released && now < found->expires_at) {
          if (found->state == node_state::in_progress && found->lease_until <= now &&
              found->matches(request.fingerprint)) {
            node* next = node::copy(*found, {}, found->payload_recovery());
            next->fence = found->fence + 1;
            next->lease_until = lease_until;
            push_lease();
            if (!detail::memory::replace(at, next, guard)) {
              node::destroy(next);
              continue;
            }
            if (home.leases.looked())
              home.leases.push_again_if_looked(lease_until, bucket, lease_pushed);
            return answer(claim_status::taken_over, next->fence, *next);
          }
          return answer(claim_status::existing, 0, *found);
        }
        // Expired or released: a new claim of the same key, under a higher fence.
        push_ticket();
        push_lease();
        // The scope's cap counts the records other than this one that have not expired.
        if (!s.caps.reserve(request.scope, now, found->expires_at > now ? 1 : 0, expires_at)) {
          return answer(claim_status::full);
        }
        if (!request.recovery.empty() && !s.counts.reserve_bytes(request.recovery.size())) {
          s.caps.give_back(request.scope, expires_at);
          return answer(claim_status::full);
        }
        node* next = node::make_claim(request, hint, found->fence + 1);
        if (!detail::memory::replace(at, next, guard)) {
          node::destroy(next);
          s.caps.give_back(request.scope, expires_at);
          if (!request.recovery.empty()) s.counts.give_back_bytes(request.recovery.size());
          continue;
        }
        home.tickets.push_again_if_swept(expires_at, bucket);
        if (home.leases.looked())
          home.leases.push_again_if_looked(lease_until, bucket, lease_pushed);
        s.caps.give_back(request.scope, found->expires_at);
        s.counts.give_back_bytes(found->payload_size());
        return answer(claim_status::claimed, next->fence);
      }

      if (fresh == nullptr) {
        if (!s.caps.reserve(request.scope, now, 0, expires_at)) {
          return answer(claim_status::full);
        }
        if (!s.counts.reserve(request.scope.size() + request.key.size() +
                              request.recovery.size())) {
          s.caps.give_back(request.scope, expires_at);
          if (swept) return answer(claim_status::full);
          // Expired records are not live: make room from them, once, before saying full.
          // Shards another thread is sweeping are skipped rather than waited for, so a full
          // store still never blocks a claim.
          swept = true;
          for (shard& each : s.shards)
            each.tickets.try_sweep(now,
                                   [&](std::size_t b) { return remove_expired(each, b, now); });
          continue;
        }
        push_ticket();
        push_lease();
        fresh = node::make_claim(request, hint, 1);
      }
      fresh->next.store(at.link, std::memory_order_relaxed);
      std::uintptr_t expected = at.link;
      if (at.previous->compare_exchange_strong(expected, detail::memory::link_to(fresh),
                                               std::memory_order_seq_cst)) {
        home.tickets.push_again_if_swept(expires_at, bucket);
        if (home.leases.looked())
          home.leases.push_again_if_looked(lease_until, bucket, lease_pushed);
        return answer(claim_status::claimed, 1);
      }
    }
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    return rewrite(held, [&](const node& seen) {
      node* next = node::copy(seen, response, {});
      next->state = node_state::completed;
      return next;
    });
  }

  bool release(const fenced_key& held) {
    return rewrite(held, [&](const node& seen) {
      node* next = node::copy(seen, {}, {});
      next->state = node_state::released;
      return next;
    });
  }

  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    const std::int64_t lease = detail::memory::to_ns(lease_until);
    return rewrite<true>(
        held,
        [&](const node& seen) {
          node* next = node::copy(seen, seen.payload_response(), recovery);
          next->lease_until = lease;
          return next;
        },
        lease);
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    if (scope.size() > max_id_bytes || key.size() > max_id_bytes) return std::nullopt;
    state& s = *state_;
    const std::uint64_t hash = s.hash_of(scope, key);
    shard& home = s.shard_for(hash);
    detail::epoch_guard<Lazy> guard;
    const position at = detail::memory::search(home.buckets[hash & home.mask],
                                               detail::memory::hint_of(hash), scope, key, guard);
    if (!at.found) return std::nullopt;
    const node& seen = *at.current;
    if (seen.state == node_state::released || seen.expires_at <= detail::memory::to_ns(now)) {
      return std::nullopt;
    }
    return snapshot(seen, true);
  }

  std::size_t sweep(store_time now) {
    const std::int64_t at = detail::memory::to_ns(now);
    std::size_t removed = 0;
    for (shard& each : state_->shards) {
      removed += each.tickets.sweep(at, [&](std::size_t b) { return remove_expired(each, b, at); });
      each.leases.prune(at, [&](std::size_t b, std::uint64_t unit) {
        return stuck_in(each, b, unit, at, nullptr, 0);
      });
    }
    return removed;
  }

  std::vector<record> stuck(store_time now, std::size_t limit) const {
    detail::lazy_t<Lazy, std::vector<record>> out;
    const std::int64_t at = detail::memory::to_ns(now);
    const auto enough = [&] { return out.size() >= limit; };
    for (shard& each : state_->shards) {
      if (enough()) break;
      each.leases.look(
          at,
          [&](const auto& take) {
            detail::epoch_guard<Lazy> guard;
            for (std::size_t b = 0; b <= each.mask; ++b) {
              for_each_live(each.buckets[b], [&](const node& n) {
                if (n.state == node_state::in_progress) take(n.lease_until, b);
              });
            }
          },
          enough,
          [&](std::size_t b, std::uint64_t unit) {
            return stuck_in(each, b, unit, at, &out, limit);
          });
    }
    return out;
  }

  /// InspectableStore (idem/store/inspect.hpp): a page of the live records that pass `filter`,
  /// shard by shard, bucket by bucket, each chain in its own order; the cursor is the last
  /// record's (scope, key), whose hash names the bucket to resume in.
  record_page list_records(const record_filter& filter, std::string_view cursor, std::size_t limit,
                           store_time now) const {
    constexpr const char* who = "idem::memory_store::list_records";
    if (limit == 0) throw std::invalid_argument(std::string(who) + ": a limit of 0");
    state& s = *state_;
    std::size_t first_shard = 0, first_bucket = 0;
    std::uint16_t hint = 0;
    std::pair<std::string, std::string> after;
    if (!cursor.empty()) {
      after = detail::record_at_cursor(cursor, who);
      const std::uint64_t hash = s.hash_of(after.first, after.second);
      first_shard = hash >> detail::memory::shard_shift;
      first_bucket = hash & s.shards[first_shard].mask;
      hint = detail::memory::hint_of(hash);
    }
    const std::int64_t at = detail::memory::to_ns(now);
    record_page page;
    bool full = false;
    detail::epoch_guard<Lazy> guard;
    for (std::size_t i = first_shard; i < s.shards.size() && !full; ++i) {
      const shard& each = s.shards[i];
      for (std::size_t b = i == first_shard ? first_bucket : 0; b <= each.mask && !full; ++b) {
        const bool resumes = !cursor.empty() && i == first_shard && b == first_bucket;
        for_each_live(each.buckets[b], [&](const node& n) {
          if (full || n.state == node_state::released || n.expires_at <= at) return;
          if (resumes && detail::memory::compare(n, hint, after.first, after.second) <= 0) return;
          record seen = snapshot(n, true);
          if (!passes(seen, filter)) return;
          if (page.records.size() == limit) {
            page.next = detail::record_cursor(page.records.back().scope, page.records.back().key);
            full = true;
            return;
          }
          page.records.push_back(std::move(seen));
        });
      }
    }
    return page;
  }

  /// InspectableStore: the record made free as a release frees it (idem/store/inspect.hpp).
  forget_result forget(const forget_request& request) {
    for (;;) {
      const std::optional<record> seen = find(request.scope, request.key, request.now);
      if (!seen) return {forget_status::absent, 0};
      if (request.fence && *request.fence != seen->fence) {
        return {forget_status::fence_changed, seen->fence};
      }
      if (seen->state == record_state::in_progress && request.now < seen->lease_until &&
          !request.force) {
        return {forget_status::live_claim, seen->fence};
      }
      // The release of the fence just read; a record taken over or claimed again since is read
      // again and decided anew.
      if (release(fenced_key{request.scope, request.key, seen->fence})) {
        return {forget_status::forgotten, seen->fence};
      }
    }
  }

  stats statistics() const noexcept {
    const auto total = state_->counts.total();
    return {total.records, total.bytes};
  }

 private:
  // Claims only read a shard's fields until a sweep takes its lock: a count a claim writes
  // lives elsewhere (state::counts), or every claim on another thread would fetch this line.
  struct alignas(64) shard {
    std::atomic<std::uintptr_t>* buckets = nullptr;  // this shard's part of state::links
    std::size_t mask = 0;
    detail::memory::expiry_schedule<Lazy> tickets;
    detail::memory::lease_schedule<Lazy> leases;
  };

  static constexpr std::size_t shard_count = 64;

  struct state {
    explicit state(options given)
        : counts(given.max_records, given.max_bytes),
          hash_key(detail::process_hash_key()),
          caps(given.max_records_per_scope, hash_key),
          shards(shard_count),
          links(shard_count *
                detail::memory::buckets_per_shard(given.expected_records, shard_count)) {
      const std::size_t per_shard =
          detail::memory::buckets_per_shard(given.expected_records, shard_count);
      for (std::size_t i = 0; i < shard_count; ++i) {
        shards[i].buckets = links.data() + i * per_shard;
        shards[i].mask = per_shard - 1;
      }
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    // No thread uses the store any more: free every node it holds directly. A chain holds each
    // linked node once (a replaced node still linked points to its replacement, which the
    // chain reaches next); nodes already unlinked were retired to epoch reclamation.
    ~state() {
      for (shard& each : shards) {
        for (std::size_t b = 0; b <= each.mask; ++b) {
          node* n = detail::memory::pointer(each.buckets[b].load(std::memory_order_acquire));
          while (n != nullptr) {
            node* next = detail::memory::pointer(n->next.load(std::memory_order_relaxed));
            node::destroy(n);
            n = next;
          }
        }
      }
    }

    std::uint64_t hash_of(std::string_view scope, std::string_view key) const noexcept {
      return detail::memory::bucket_hash(hash_key, scope, key);
    }
    shard& shard_for(std::uint64_t hash) noexcept {
      return shards[hash >> detail::memory::shard_shift];
    }

    detail::memory::record_counters<Lazy> counts;
    detail::siphash_key hash_key;
    detail::memory::scope_caps<Lazy> caps;
    std::vector<shard> shards;
    detail::memory::bucket_array links;
  };

  // Calls visit(node) for each record of a chain, skipping those a write has replaced.
  template <class Visit>
  static void for_each_live(const std::atomic<std::uintptr_t>& head, Visit&& visit) {
    for (node* n = detail::memory::pointer(head.load(std::memory_order_acquire)); n != nullptr;) {
      const std::uintptr_t next = n->next.load(std::memory_order_acquire);
      if (!detail::memory::marked(next)) visit(static_cast<const node&>(*n));
      n = detail::memory::pointer(next);
    }
  }

  // What a look at a due lease ticket does with its bucket: answers whether it holds records
  // in progress whose lease is in ticket unit `unit`, and adds those that are stuck at `now`
  // (past their lease, not expired) to `out` while it has fewer than `limit`. An expired record
  // keeps its ticket until sweep removes it, so that a look at an earlier `now` still finds it.
  bool stuck_in(shard& home, std::size_t bucket, std::uint64_t unit, std::int64_t now,
                std::vector<record>* out, std::size_t limit) const {
    detail::epoch_guard<Lazy> guard;
    bool held = false;
    for_each_live(home.buckets[bucket], [&](const node& n) {
      if (n.state != node_state::in_progress || detail::memory::ticket_time(n.lease_until) != unit)
        return;
      held = true;
      if (n.lease_until <= now && now < n.expires_at && out != nullptr && out->size() < limit) {
        out->push_back(snapshot(n, true));
      }
    });
    return held;
  }

  // What a sweep does with each due bucket of `home`: removes its expired records, and gives
  // back what they counted.
  std::size_t remove_expired(shard& home, std::size_t bucket, std::int64_t now) {
    state& s = *state_;
    return detail::memory::remove_expired<Lazy>(home.buckets[bucket], now, [&s](const node& gone) {
      s.counts.forget_record(gone.id_size() + gone.payload_size());
      s.caps.give_back(gone.scope(), gone.expires_at);
    });
  }

  // Gives up a node made for a claim that another claim beat: it was never linked, so no
  // thread can have seen it.
  void drop_unlinked(node* fresh) {
    state_->counts.forget_record(fresh->id_size() + fresh->payload_size());
    state_->caps.give_back(fresh->scope(), fresh->expires_at);
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
    out.state =
        n.state == node_state::completed ? record_state::completed : record_state::in_progress;
    out.fence = n.fence;
    out.created_at = detail::memory::from_ns(n.created_at);
    out.lease_until = detail::memory::from_ns(n.lease_until);
    out.expires_at = detail::memory::from_ns(n.expires_at);
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
  // SetsLease: the new record has lease `lease` (checkpoint); a lease in another 2^30 ns unit
  // than the record's had gets a lease ticket (memory/leases.hpp).
  template <bool SetsLease = false, class Make>
  bool rewrite(const fenced_key& held, Make&& make, std::int64_t lease = 0) {
    if (held.scope.size() > max_id_bytes || held.key.size() > max_id_bytes) return false;
    state& s = *state_;
    const std::uint64_t hash = s.hash_of(held.scope, held.key);
    shard& home = s.shard_for(hash);
    const std::size_t bucket = hash & home.mask;
    std::atomic<std::uintptr_t>& head = home.buckets[bucket];
    const std::uint16_t hint = detail::memory::hint_of(hash);
    detail::epoch_guard<Lazy> guard;
    bool lease_pushed = false;
    for (;;) {
      const position at = detail::memory::search(head, hint, held.scope, held.key, guard);
      if (!at.found) return false;
      const node& seen = *at.current;
      if (seen.state == node_state::released || seen.fence != held.fence) return false;
      node* next = make(seen);
      const std::size_t old_size = seen.payload_size();
      const std::size_t new_size = next->payload_size();
      if (new_size > old_size && !s.counts.reserve_bytes(new_size - old_size)) {
        node::destroy(next);
        throw store_error(store_failure::full,
                          "idem::memory_store: " + std::to_string(new_size) +
                              " bytes do not fit in the store's max_bytes of " +
                              std::to_string(s.counts.max_bytes()));
      }
      // Whether the lease moves to another unit is asked only once tickets are kept; until then
      // it is taken to, which costs nothing more unless a look starts meanwhile.
      bool moves = SetsLease;
      if (SetsLease && home.leases.tracking()) {
        moves = detail::memory::ticket_time(lease) != detail::memory::ticket_time(seen.lease_until);
        if (moves && !lease_pushed) lease_pushed = home.leases.push_if_tracking(lease, bucket);
      }
      if (detail::memory::replace(at, next, guard)) {
        if (moves && home.leases.looked())
          home.leases.push_again_if_looked(lease, bucket, lease_pushed);
        if (new_size < old_size) s.counts.give_back_bytes(old_size - new_size);
        return true;
      }
      if (new_size > old_size) s.counts.give_back_bytes(new_size - old_size);
      node::destroy(next);
    }
  }

  std::shared_ptr<state> state_;
};

using memory_store = basic_memory_store<>;

}  // namespace idem

#endif  // IDEM_STORE_MEMORY_HPP
