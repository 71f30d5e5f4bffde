// Each store operation as its statement sees it: the parameters it sends and what its result
// answers. postgres_store runs them blocking, async_postgres_store pipelined on non-blocking
// connections; both encode and decode here, so the two stores agree on every record they share.
// No connection: a PGresult in, a record or a count out.
#ifndef IDEM_STORE_POSTGRES_DETAIL_REQUESTS_HPP
#define IDEM_STORE_POSTGRES_DETAIL_REQUESTS_HPP

#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/binary_array.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres {

// Server time: NULL, read by the statement itself. Caller time: the given `now`.
inline void add_now(parameters& values, bool caller_time, store_time now) noexcept {
  if (caller_time) {
    values.int8(to_nanoseconds(now));
  } else {
    values.null();
  }
}

inline std::int64_t fence_of(const fenced_key& held) noexcept {
  // Fences are int8 in the table; one beyond that range cannot match any row.
  return held.fence > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
             ? -1
             : static_cast<std::int64_t>(held.fence);
}

// Rows an UPDATE or DELETE touched.
inline std::size_t affected(const PGresult* result) {
  const char* count = PQcmdTuples(const_cast<PGresult*>(result));
  return *count == '\0' ? 0 : static_cast<std::size_t>(std::stoull(count));
}

inline void claim_parameters(parameters& values, const claim_request& request, bool caller_time) {
  values.bytes(request.scope)
      .bytes(request.key)
      .bytes(request.fingerprint)
      .int8(request.lease.count())
      .int8(request.retention.count());
  add_now(values, caller_time, request.now);
  // The recovery bytes a new record starts with; none is NULL, as a fresh record always
  // stored it, so a claim without them sends and stores nothing more.
  if (request.recovery.empty()) {
    values.null();
  } else {
    values.bytes(request.recovery);
  }
}

// What the claim statement's row says, or nothing when the claim must be asked again. The
// decision is the one INSERT ... ON CONFLICT statement; the snapshot that follows it in the same
// statement only reports an existing record. That report can come from a snapshot older than
// the row the decision saw (a record committed meanwhile, or removed): then the claim is asked
// again, so `existing` is always a record the claim could not take.
inline std::optional<claim_result> claim_answer(const PGresult* row, const claim_request& request) {
  if (PQntuples(row) == 0) return std::nullopt;
  claim_result answer;
  if (PQgetvalue(row, 0, 0)[0] != 0) {
    answer.fence = static_cast<std::uint64_t>(get_int(row, 0, 2));
    if (PQgetvalue(row, 0, 1)[0] != 0) {
      answer.status = claim_status::taken_over;
      read_record(row, 0, 2, answer.existing);
    } else {
      answer.status = claim_status::claimed;
    }
    return answer;
  }
  read_record(row, 0, 2, answer.existing);
  const std::int64_t now = get_int(row, 0, 10);
  const std::int64_t expires = to_nanoseconds(answer.existing.expires_at);
  const bool released = get_int(row, 0, 4) == released_state;
  const bool claimable = answer.existing.state == record_state::in_progress &&
                         answer.existing.fingerprint == request.fingerprint &&
                         to_nanoseconds(answer.existing.lease_until) <= now;
  if (released || expires <= now || claimable) return std::nullopt;
  answer.status = claim_status::existing;
  return answer;
}

// With max_records_per_scope, inside the claim's transaction: the scope's turn (scope_turn),
// then its room (scope_room).
inline void scope_parameters(parameters& values, const claim_request& request) {
  values.bytes(request.scope);
}
inline void room_parameters(parameters& values, const claim_request& request, bool caller_time) {
  values.bytes(request.scope).bytes(request.key);
  add_now(values, caller_time, request.now);
}
// Whether scope_room's row leaves no room for this claim: the key has no live record and the
// scope already holds `cap` others.
inline bool room_is_full(const PGresult* counted, std::size_t cap) {
  const auto others = static_cast<std::uint64_t>(get_int(counted, 0, 0));
  const bool live = PQgetvalue(counted, 0, 1)[0] != 0;
  return !live && others >= cap;
}

// complete, release: the held key, and the response.
inline void held_parameters(parameters& values, const fenced_key& held) {
  values.bytes(held.scope).bytes(held.key).int8(fence_of(held));
}

// A checkpoint's lease: the caller's deadline ($5), or with the server's clock, how far ahead
// it lies ($6): the caller's deadline is on its own clock.
inline void lease_parameters(parameters& values, store_time lease_until, bool caller_time) {
  if (caller_time) {
    values.int8(to_nanoseconds(lease_until)).null();
  } else {
    values.null().int8(to_nanoseconds(lease_until) -
                       to_nanoseconds(std::chrono::system_clock::now()));
  }
}

inline void checkpoint_parameters(parameters& values, const fenced_key& held,
                                  std::string_view recovery, store_time lease_until,
                                  bool caller_time) {
  held_parameters(values, held);
  values.bytes(recovery);
  lease_parameters(values, lease_until, caller_time);
}

// checkpoint_batch's arrays (statement checkpoint_batch), which its parameters point into.
struct checkpoint_arrays {
  std::string scopes;
  std::string keys;
  std::string fences;
  std::string recovery;
};

inline void checkpoint_batch_parameters(parameters& values, checkpoint_arrays& arrays,
                                        std::span<const batch_checkpoint> entries,
                                        store_time lease_until, bool caller_time) {
  binary_array scopes(bytea_oid);
  binary_array keys(bytea_oid);
  binary_array fences(int8_oid);
  binary_array recovery(bytea_oid);
  for (const batch_checkpoint& entry : entries) {
    scopes.add(entry.held.scope);
    keys.add(entry.held.key);
    fences.add(fence_of(entry.held));
    recovery.add(entry.recovery);
  }
  arrays = {scopes.bytes(), keys.bytes(), fences.bytes(), recovery.bytes()};
  values.bytes(arrays.scopes).bytes(arrays.keys).bytes(arrays.fences).bytes(arrays.recovery);
  lease_parameters(values, lease_until, caller_time);
}

// checkpoint_batch's answer: which of `size` entries were renewed (the positions it returned).
inline std::vector<bool> renewed_entries(const PGresult* result, std::size_t size) {
  std::vector<bool> applied(size, false);
  for (int row = 0; row < PQntuples(result); ++row) {
    const std::int64_t position = get_int(result, row, 0);
    if (position >= 1 && static_cast<std::size_t>(position) <= size)
      applied[static_cast<std::size_t>(position - 1)] = true;
  }
  return applied;
}

inline void find_parameters(parameters& values, std::string_view scope, std::string_view key,
                            store_time now, bool caller_time) {
  values.bytes(scope).bytes(key);
  add_now(values, caller_time, now);
}
inline std::optional<record> found_record(const PGresult* result, std::string_view scope,
                                          std::string_view key) {
  if (PQntuples(result) == 0) return std::nullopt;
  record found;
  found.scope = scope;
  found.key = key;
  read_record(result, 0, 0, found);
  return found;
}

inline void stuck_parameters(parameters& values, store_time now, std::size_t limit,
                             bool caller_time) {
  add_now(values, caller_time, now);
  values.int8(static_cast<std::int64_t>(std::min<std::size_t>(
      limit, static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()))));
}
inline std::vector<record> stuck_records(const PGresult* result) {
  std::vector<record> out;
  const int rows = PQntuples(result);
  out.reserve(static_cast<std::size_t>(rows));
  for (int row = 0; row < rows; ++row) {
    record& r = out.emplace_back();
    r.scope = get_bytes(result, row, 0);
    r.key = get_bytes(result, row, 1);
    read_record(result, row, 2, r);
  }
  return out;
}

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_REQUESTS_HPP
