// The memory store's per-scope cap (limits::max_records_per_scope): how many records one scope
// may hold that have not expired, so one tenant cannot fill a store others share.
//
// A scope's records are spread over every shard, so what it holds is kept apart: per scope, the
// expiry of every record it holds (expired ones until swept), in one of 64 mutex-guarded stripes
// chosen by the scope's keyed hash. A claim counts the scope's records that have not expired, and
// adds its own expiry only if that count, less `replacing` (the record it replaces, when that one
// has not expired), is below the cap. Between the add and the claim's compare-and-swap the scope
// may count one record too many: a concurrent claim at the edge then answers full, never one past
// the cap. Unlimited, the cap keeps nothing and takes no lock.
#ifndef IDEM_STORE_MEMORY_DETAIL_SCOPE_CAPS_HPP
#define IDEM_STORE_MEMORY_DETAIL_SCOPE_CAPS_HPP

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/store/memory/detail/siphash.hpp>

namespace idem::detail::memory {

/// A scope's expiries, sorted: a count of those that have not expired is one binary search (a
/// multiset's count walked every live record). A new expiry is the claim's time plus the
/// retention, so it lands at or near the end; a sweep takes the oldest first, so an erase at the
/// front only moves the start (head_), and the vector is compacted once half is gone.
template <class Lazy = void>
class scope_expiries {
 public:
  bool empty() const noexcept { return head_ == times_.size(); }
  /// How many expire after `now`.
  std::size_t live_after(std::int64_t now) const noexcept {
    return static_cast<std::size_t>(times_.cend() - std::upper_bound(begin(), times_.cend(), now));
  }
  void insert(std::int64_t expires_at) {
    times_.insert(std::upper_bound(begin(), times_.cend(), expires_at), expires_at);
  }
  /// Erases one expiry equal to `expires_at`, if there is one.
  void erase_one(std::int64_t expires_at) {
    const auto one = std::lower_bound(begin(), times_.cend(), expires_at);
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
  using sorted_times = lazy_t<Lazy, std::vector<std::int64_t>>;
  typename sorted_times::const_iterator begin() const noexcept {
    return times_.begin() + static_cast<std::ptrdiff_t>(head_);
  }
  sorted_times times_;
  std::size_t head_ = 0;  // times_[0, head_) were erased
};

/// A template whose parameter means nothing, so that it compiles only where the memory store is
/// used (idem/core/detail/lazy.hpp): scope_caps<> is the cap, scope_expiries<> a scope's expiries.
template <class Lazy = void>
class scope_caps {
 public:
  scope_caps(std::size_t max_records_per_scope, siphash_key hash_key) noexcept
      : max_(max_records_per_scope), hash_key_(hash_key) {}
  scope_caps(const scope_caps&) = delete;
  scope_caps& operator=(const scope_caps&) = delete;

  /// Counts a record of `scope` that expires at `expires_at`, unless the scope already holds
  /// the cap of records that have not expired by `now`, not counting `replacing` of them (the
  /// record a claim replaces).
  bool reserve(std::string_view scope, std::int64_t now, std::size_t replacing,
               std::int64_t expires_at) {
    if (max_ == std::numeric_limits<std::size_t>::max()) return true;
    stripe& s = stripe_for(scope);
    const std::lock_guard lock(s.mutex);
    scope_expiries<Lazy>& held = s.expiries[std::string(scope)];
    const std::size_t live = held.live_after(now);
    if (live - std::min(live, replacing) >= max_) {
      if (held.empty()) s.expiries.erase(std::string(scope));
      return false;
    }
    held.insert(expires_at);
    return true;
  }
  /// Gives back what reserve counted for a record that is gone (removed, replaced, or never
  /// linked).
  void give_back(std::string_view scope, std::int64_t expires_at) {
    if (max_ == std::numeric_limits<std::size_t>::max()) return;
    stripe& s = stripe_for(scope);
    const std::lock_guard lock(s.mutex);
    const auto at = s.expiries.find(std::string(scope));
    if (at == s.expiries.end()) return;
    at->second.erase_one(expires_at);
    if (at->second.empty()) s.expiries.erase(at);
  }

 private:
  struct stripe {
    std::mutex mutex;
    std::unordered_map<std::string, scope_expiries<Lazy>> expiries;
  };
  stripe& stripe_for(std::string_view scope) noexcept {
    const char* bytes = scope.empty() ? "" : scope.data();
    return stripes_[siphash13::hash(hash_key_, bytes, scope.size()) & 63];
  }

  std::size_t max_;
  siphash_key hash_key_;
  std::array<stripe, 64> stripes_;
};

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_SCOPE_CAPS_HPP
