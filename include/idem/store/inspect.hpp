// InspectableStore: what an operator reads and corrects in a store (the idem-admin console,
// docs/operations.md), an optional capability beside the contract (idem/store/contract.hpp).
//
// list_records(filter, cursor, limit, now) — one page of the live, unreleased records (as find
//   sees them at `now`) that pass `filter`, at most `limit` of them, in the store's own order,
//   whole (response and recovery bytes included); and the cursor of the next page, empty when
//   there is none. Walking the pages from the empty cursor visits each record that lives through
//   the walk once; a record claimed or removed meanwhile may be seen or not. A cursor is the
//   store's own text, only ever given back to the same store; a cursor the store did not make
//   throws std::invalid_argument.
// forget(request) — the operator's correction: the record of (scope, key) becomes free as a
//   release makes it, a tombstone that keeps its fence until it expires, so that a holder still
//   running can never complete, release or checkpoint it again, and the next claim runs anew
//   under a higher fence (a repeat after a forget takes effect once more: that is what
//   forgetting means). It refuses, changing nothing:
//     absent         no live, unreleased record of (scope, key);
//     fence_changed  request.fence is given and the record's is another (it was claimed again
//                    or taken over since the operator looked);
//     live_claim     an in-progress record whose lease has not passed, unless request.force.
//   Answers forgotten with the fence the record had.
#ifndef IDEM_STORE_INSPECT_HPP
#define IDEM_STORE_INSPECT_HPP

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <idem/store/contract.hpp>

namespace idem {

/// Which records list_records answers: every condition given must hold.
struct record_filter {
  std::optional<std::string> scope;          ///< one scope; none: every scope
  std::optional<record_state> state;         ///< only in-progress, or only completed records
  std::optional<store_time> created_before;  ///< claimed before this time
  std::optional<store_time> lease_ended_by;  ///< in progress with lease_until <= this
};

/// One page of records, and where the next one starts.
struct record_page {
  std::vector<record> records;
  std::string next;  ///< empty: this was the last page
};

/// What forget is asked to do.
struct forget_request {
  std::string_view scope;
  std::string_view key;
  store_time now;
  std::optional<std::uint64_t> fence;  ///< forget only the record under this fence
  bool force = false;                  ///< a live in-progress claim too: its holder is fenced out
};

enum class forget_status : std::uint8_t { forgotten, absent, fence_changed, live_claim };

constexpr std::string_view to_string(forget_status status) noexcept {
  switch (status) {
    case forget_status::forgotten:
      return "forgotten";
    case forget_status::absent:
      return "absent";
    case forget_status::fence_changed:
      return "fence_changed";
    case forget_status::live_claim:
      return "live_claim";
  }
  return "unknown";
}

struct forget_result {
  forget_status status = forget_status::absent;
  std::uint64_t fence = 0;  ///< the record's fence: forgotten, fence_changed, live_claim
};

/// Whether `record` passes `filter`.
inline bool passes(const record& r, const record_filter& filter) noexcept {
  if (filter.scope && r.scope != *filter.scope) return false;
  if (filter.state && r.state != *filter.state) return false;
  if (filter.created_before && !(r.created_at < *filter.created_before)) return false;
  if (filter.lease_ended_by &&
      (r.state != record_state::in_progress || *filter.lease_ended_by < r.lease_until)) {
    return false;
  }
  return true;
}

template <class S>
concept InspectableStore = Store<S> &&
    requires(S& store, const record_filter& filter, std::string_view cursor, std::size_t limit,
             store_time now, const forget_request& request) {
  { store.list_records(filter, cursor, limit, now) } -> std::same_as<record_page>;
  { store.forget(request) } -> std::same_as<forget_result>;
};

}  // namespace idem

#endif  // IDEM_STORE_INSPECT_HPP
