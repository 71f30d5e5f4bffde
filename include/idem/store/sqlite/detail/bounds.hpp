// sqlite_store's bounds (max_records, max_bytes): the usage row that triggers keep exact
// (store/sqlite/detail/statements.hpp), and the checks made inside a write transaction before a
// claim, a completion or a checkpoint adds to it. A check that fails leaves the transaction to roll
// back.
#ifndef IDEM_STORE_SQLITE_DETAIL_BOUNDS_HPP
#define IDEM_STORE_SQLITE_DETAIL_BOUNDS_HPP

#include <sqlite3.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <idem/store/contract.hpp>
#include <idem/store/sqlite/detail/connection.hpp>
#include <idem/store/sqlite/detail/record.hpp>
#include <idem/store/sqlite/detail/statements.hpp>

namespace idem::detail {

struct sqlite_bounds {
  std::size_t max_records = std::numeric_limits<std::size_t>::max();
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
};

// The usage row: records, and bytes of their scopes, keys, responses and recoveries.
inline std::pair<std::int64_t, std::int64_t> sqlite_usage(sqlite_connection& c) {
  sqlite_use read(c.statement(sqlite_statement::read_usage));
  if (c.step(read.get(), "read the usage row") != SQLITE_ROW) {
    throw store_error(store_failure::unavailable, "idem::sqlite_store: '" + c.settings().path +
                                                      "' lost its usage row (idem_usage)");
  }
  return {sqlite3_column_int64(read.get(), 0), sqlite3_column_int64(read.get(), 1)};
}

// Inside the claim's transaction: would one more record of scope + key + recovery bytes fit,
// once the record found (if any, of found_bytes) is replaced? Recovery bytes past the bound
// make the claim answer full like a record past it, never throw: nothing was written yet.
inline bool sqlite_has_room(sqlite_connection& c, const sqlite_bounds& bounds,
                            const claim_request& request, bool replacing,
                            std::int64_t found_bytes) {
  const auto [records, bytes] = sqlite_usage(c);
  const std::int64_t records_after = records - (replacing ? 1 : 0) + 1;
  const std::int64_t others = bytes - (replacing ? found_bytes : 0);
  const std::size_t adding = request.scope.size() + request.key.size() + request.recovery.size();
  return static_cast<std::uint64_t>(records_after) <= bounds.max_records &&
         static_cast<std::uint64_t>(others) <= bounds.max_bytes &&
         adding <= bounds.max_bytes - static_cast<std::size_t>(others);
}

// Within a write transaction: replacing `old_size` bytes of a record with `new_size` must
// keep the store within max_bytes, or this throws full (and the transaction rolls back).
inline void sqlite_reserve_bytes(sqlite_connection& c, const sqlite_bounds& bounds,
                                 std::size_t new_size, std::size_t old_size) {
  const std::int64_t held = sqlite_usage(c).second;
  const auto others = static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, held - static_cast<std::int64_t>(old_size)));
  if (others > bounds.max_bytes || new_size > bounds.max_bytes - others) {
    throw store_error(store_failure::full, "idem::sqlite_store: " + std::to_string(new_size) +
                                               " bytes do not fit in the store's max_bytes of " +
                                               std::to_string(bounds.max_bytes));
  }
}

// A checkpoint within a write transaction of a bounded store.
inline bool sqlite_bounded_checkpoint(sqlite_connection& c, const sqlite_bounds& bounds,
                                      const fenced_key& held, std::string_view recovery,
                                      store_time lease_until) {
  const std::optional<sqlite_held_size> sizes = sqlite_held_sizes(c, held);
  if (!sizes) return false;
  sqlite_reserve_bytes(c, bounds, recovery.size(), sizes->recovery);
  return sqlite_fenced_write(c, sqlite_statement::checkpoint, held, recovery, lease_until);
}

}  // namespace idem::detail

#endif  // IDEM_STORE_SQLITE_DETAIL_BOUNDS_HPP
