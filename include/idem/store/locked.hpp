// locked_store: one mutex around one sorted list. The reference model of the store contract.
//
// Deliberately simple, so that it is obviously right: every operation takes the one lock, does
// exactly what idem/store/contract.hpp says, and lets go. Other stores are tested against it,
// operation for operation. It is also a reasonable store for a process with little traffic; it is
// not durable (it survives nothing but the process) and every call serialises on its lock.
//
// Copies share one list: the store is a handle.
#ifndef IDEM_STORE_LOCKED_HPP
#define IDEM_STORE_LOCKED_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/detail/cursor.hpp>
#include <idem/store/inspect.hpp>

namespace idem {

class locked_store {
 public:
  /// Records keep no completion time: complete leaves expires_at as the claim set it, so the
  /// guard need not read the clock again for a completion (idem::reads_completion_time).
  static constexpr bool reads_completion_time = false;
  /// Every call answers from memory under one short lock (idem::never_blocks): asynchronous
  /// drivers call it inline.
  static constexpr bool never_blocks = true;

  /// How much the store may hold. A claim that would pass either bound answers `full`; a
  /// complete or checkpoint that would pass max_bytes throws store_error(full).
  struct options {
    std::size_t max_records = std::numeric_limits<std::size_t>::max();
    /// Counted as scope + key + response + recovery bytes of every record held.
    std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
    /// The most records one scope may hold that have not expired (released ones included:
    /// they keep their fence until then). A claim that would add one more answers `full`, so
    /// one tenant cannot fill a store others share.
    std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
  };

  locked_store() : locked_store(options{}) {}
  explicit locked_store(options bounds) : state_(std::make_shared<state>(bounds)) {}

  claim_result claim(const claim_request& request) {
    const std::lock_guard lock(state_->mutex);
    std::string id = make_id(request.scope, request.key);
    auto found = place_of(id);
    std::uint64_t previous_fence = 0;
    if (found != state_->records.end() && found->id == id) {
      entry& held = *found;
      if (!held.released && request.now < held.snapshot.expires_at) {
        record& existing = held.snapshot;
        if (existing.state == record_state::in_progress &&
            existing.fingerprint == request.fingerprint && existing.lease_until <= request.now) {
          ++existing.fence;
          existing.lease_until = request.now + request.lease;
          return {claim_status::taken_over, existing.fence, existing};
        }
        return {claim_status::existing, 0, existing};
      }
      // Expired or released: replaced below, under a higher fence than any handed out before.
      if (scope_at_cap(request.scope, id, request.now)) return {claim_status::full, 0, {}};
      previous_fence = held.snapshot.fence;
      state_->bytes -= held.bytes();
      found = state_->records.erase(found);
    } else if (scope_at_cap(request.scope, id, request.now)) {
      return {claim_status::full, 0, {}};
    }
    const std::size_t new_bytes =
        request.scope.size() + request.key.size() + request.recovery.size();
    if (!has_room(1, new_bytes)) {
      // Expired records are not live: make room from them before saying full.
      remove_expired(request.now);
      if (!has_room(1, new_bytes)) return {claim_status::full, 0, {}};
      found = place_of(id);
    }
    entry fresh;
    fresh.id = std::move(id);
    record& created = fresh.snapshot;
    created.scope = request.scope;
    created.key = request.key;
    created.fingerprint = request.fingerprint;
    created.state = record_state::in_progress;
    created.fence = previous_fence + 1;
    created.created_at = request.now;
    created.lease_until = request.now + request.lease;
    created.expires_at = request.now + request.retention;
    created.recovery = request.recovery;
    const std::uint64_t fence = created.fence;
    state_->bytes += fresh.bytes();
    state_->records.insert(found, std::move(fresh));
    return {claim_status::claimed, fence, {}};
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    const std::lock_guard lock(state_->mutex);
    entry* target = holding(held);
    if (target == nullptr) return false;
    // The recovery points are no longer needed once the response is stored.
    reserve_bytes(response.size(),
                  target->snapshot.response.size() + target->snapshot.recovery.size());
    target->snapshot.response.assign(response);
    target->snapshot.recovery.clear();
    target->snapshot.state = record_state::completed;
    return true;
  }

  bool release(const fenced_key& held) {
    const std::lock_guard lock(state_->mutex);
    entry* target = holding(held);
    if (target == nullptr) return false;
    // A tombstone that keeps the fence until the record would have expired (see store.hpp);
    // its response and recovery bytes are freed.
    state_->bytes -= target->snapshot.response.size() + target->snapshot.recovery.size();
    target->snapshot.response.clear();
    target->snapshot.recovery.clear();
    target->released = true;
    return true;
  }

  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    const std::lock_guard lock(state_->mutex);
    entry* target = holding(held);
    if (target == nullptr) return false;
    reserve_bytes(recovery.size(), target->snapshot.recovery.size());
    target->snapshot.recovery.assign(recovery);
    target->snapshot.lease_until = lease_until;
    return true;
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    const std::lock_guard lock(state_->mutex);
    const entry* found = held_at(make_id(scope, key));
    if (found == nullptr || found->released || found->snapshot.expires_at <= now) {
      return std::nullopt;
    }
    return found->snapshot;
  }

  std::size_t sweep(store_time now) {
    const std::lock_guard lock(state_->mutex);
    return remove_expired(now);
  }

  std::vector<record> stuck(store_time now, std::size_t limit) const {
    const std::lock_guard lock(state_->mutex);
    std::vector<record> out;
    for (const entry& held : state_->records) {
      if (out.size() >= limit) break;
      const record& r = held.snapshot;
      if (!held.released && r.state == record_state::in_progress && r.lease_until <= now &&
          now < r.expires_at) {
        out.push_back(r);
      }
    }
    return out;
  }

  /// InspectableStore (idem/store/inspect.hpp): a page of the live records that pass `filter`,
  /// in (scope, key) order, the scope's length first.
  record_page list_records(const record_filter& filter, std::string_view cursor, std::size_t limit,
                           store_time now) const {
    if (limit == 0) throw std::invalid_argument("idem::locked_store::list_records: a limit of 0");
    std::string after;
    if (!cursor.empty()) {
      const auto [scope, key] =
          detail::record_at_cursor(cursor, "idem::locked_store::list_records");
      after = make_id(scope, key);
    }
    const std::lock_guard lock(state_->mutex);
    auto it = cursor.empty()
                  ? state_->records.cbegin()
                  : std::upper_bound(
                        state_->records.cbegin(), state_->records.cend(), after,
                        [](const std::string& wanted, const entry& e) { return wanted < e.id; });
    record_page page;
    for (; it != state_->records.cend(); ++it) {
      if (it->released || it->snapshot.expires_at <= now || !passes(it->snapshot, filter)) continue;
      if (page.records.size() == limit) {
        const record& last = page.records.back();
        page.next = detail::record_cursor(last.scope, last.key);
        break;
      }
      page.records.push_back(it->snapshot);
    }
    return page;
  }

  /// InspectableStore: the record made free as a release frees it (idem/store/inspect.hpp).
  forget_result forget(const forget_request& request) {
    const std::lock_guard lock(state_->mutex);
    entry* target = held_at(make_id(request.scope, request.key));
    if (target == nullptr || target->released || target->snapshot.expires_at <= request.now) {
      return {forget_status::absent, 0};
    }
    record& r = target->snapshot;
    if (request.fence && *request.fence != r.fence) return {forget_status::fence_changed, r.fence};
    if (r.state == record_state::in_progress && request.now < r.lease_until && !request.force) {
      return {forget_status::live_claim, r.fence};
    }
    const std::uint64_t fence = r.fence;
    state_->bytes -= r.response.size() + r.recovery.size();
    r.response.clear();
    r.recovery.clear();
    target->released = true;  // a tombstone: its holder writes nothing more, the next claim runs
                              // under a higher fence
    return {forget_status::forgotten, fence};
  }

  /// Records held, expired-but-unswept ones and release tombstones included.
  std::size_t size() const {
    const std::lock_guard lock(state_->mutex);
    return state_->records.size();
  }
  /// Bytes held, counted as `options::max_bytes` counts them.
  std::size_t bytes() const {
    const std::lock_guard lock(state_->mutex);
    return state_->bytes;
  }

 private:
  // An id to search the list for: entry < by_id is what std::lower_bound asks.
  struct by_id {
    std::string_view id;
  };
  struct entry {
    std::string id;  // make_id(scope, key): what the list is sorted by
    record snapshot;
    bool released = false;
    std::size_t bytes() const noexcept {
      return snapshot.scope.size() + snapshot.key.size() + snapshot.response.size() +
             snapshot.recovery.size();
    }
    bool operator<(by_id wanted) const noexcept { return std::string_view(id) < wanted.id; }
  };
  struct state {
    explicit state(options given) : bounds(given) {}
    mutable std::mutex mutex;
    // Sorted by id, so by (scope, key) through the length-prefixed id: what stuck() lists by,
    // and what keeps a scope's records together. A sorted vector rather than a std::map: the
    // model needs order, not speed, and <map> would cost every unit that includes idem.
    std::vector<entry> records;
    std::size_t bytes = 0;
    options bounds;
  };

  // The scope's length goes first, so ("a:b", "c") and ("a", "b:c") can never meet.
  static std::string make_id(std::string_view scope, std::string_view key) {
    std::string id;
    id.reserve(8 + scope.size() + key.size());
    const std::uint64_t length = scope.size();
    for (int shift = 56; shift >= 0; shift -= 8) {
      id.push_back(static_cast<char>((length >> shift) & 0xff));
    }
    id.append(scope);
    id.append(key);
    return id;
  }

  // Where the record `id` is, or would go, in the sorted list.
  std::vector<entry>::iterator place_of(std::string_view id) const {
    return std::lower_bound(state_->records.begin(), state_->records.end(), by_id{id});
  }

  // The record `id`, held or not, or nullptr.
  entry* held_at(std::string_view id) const {
    const auto found = place_of(id);
    return found != state_->records.end() && found->id == id ? &*found : nullptr;
  }

  // The record `held` names, when it is live and still under the caller's fence.
  entry* holding(const fenced_key& held) {
    entry* target = held_at(make_id(held.scope, held.key));
    if (target == nullptr || target->released || target->snapshot.fence != held.fence) {
      return nullptr;
    }
    return target;
  }

  // Whether the scope already holds max_records_per_scope records that have not expired, other
  // than the record `id` (which a claim would replace). Its records lie together in the list
  // (the id begins with the scope), so this costs what the scope holds.
  bool scope_at_cap(std::string_view scope, std::string_view id, store_time now) const {
    const std::size_t cap = state_->bounds.max_records_per_scope;
    if (cap == std::numeric_limits<std::size_t>::max()) return false;
    const std::string prefix = make_id(scope, {});
    std::size_t live = 0;
    for (auto it = place_of(prefix); it != state_->records.end() && it->id.starts_with(prefix);
         ++it) {
      if (it->id != id && now < it->snapshot.expires_at && ++live >= cap) return true;
    }
    return live >= cap;
  }

  bool has_room(std::size_t records, std::size_t bytes) const noexcept {
    const options& bounds = state_->bounds;
    return state_->records.size() + records <= bounds.max_records &&
           state_->bytes <= bounds.max_bytes && bytes <= bounds.max_bytes - state_->bytes;
  }

  // Accounts for replacing `old_size` bytes of a record with `new_size`, or throws full.
  void reserve_bytes(std::size_t new_size, std::size_t old_size) {
    const std::size_t others = state_->bytes - old_size;
    if (others > state_->bounds.max_bytes || new_size > state_->bounds.max_bytes - others) {
      throw store_error(store_failure::full, "idem::locked_store: " + std::to_string(new_size) +
                                                 " bytes do not fit in the store's max_bytes of " +
                                                 std::to_string(state_->bounds.max_bytes));
    }
    state_->bytes = others + new_size;
  }

  std::size_t remove_expired(store_time now) {
    // Compacts the list in one pass, keeping the order of what stays.
    auto& records = state_->records;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (records[i].snapshot.expires_at <= now) {
        state_->bytes -= records[i].bytes();
      } else {
        if (kept != i) records[kept] = std::move(records[i]);
        ++kept;
      }
    }
    const std::size_t removed = records.size() - kept;
    records.erase(records.begin() + static_cast<std::ptrdiff_t>(kept), records.end());
    return removed;
  }

  std::shared_ptr<state> state_;
};

}  // namespace idem

#endif  // IDEM_STORE_LOCKED_HPP
