// One record of sqlite_store in and out of its statements (store/sqlite/detail/statements.hpp):
// binding a claim's values, reading a row back into a record, what a claim decides about the record
// it found, and the fenced writes (complete, release, checkpoint). Each function runs on the
// connection it is given; none opens a transaction of its own.
#ifndef IDEM_STORE_SQLITE_DETAIL_RECORD_HPP
#define IDEM_STORE_SQLITE_DETAIL_RECORD_HPP

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/sqlite/detail/connection.hpp>
#include <idem/store/sqlite/detail/statements.hpp>

namespace idem::detail {

// The columns of a record that a claim decides by, as stored.
struct sqlite_row {
  int state = 0;
  std::uint64_t fence = 0;
  std::int64_t created_at = 0;
  std::int64_t lease_until = 0;
  std::int64_t expires_at = 0;
  digest fingerprint;
};

// The state, fence check and stored sizes of a record a caller holds (see sqlite_held_sizes).
struct sqlite_held_size {
  int state = 0;
  std::size_t response = 0;
  std::size_t recovery = 0;
};

enum class sqlite_decision : std::uint8_t { existing, take_over, create };

inline void sqlite_bind_integer(sqlite_connection& c, sqlite3_stmt* statement, int index,
                                std::int64_t value) {
  const int rc = sqlite3_bind_int64(statement, index, value);
  if (rc != SQLITE_OK) c.fail(rc, "bind a value");
}

inline void sqlite_bind_bytes(sqlite_connection& c, sqlite3_stmt* statement, int index,
                              std::string_view bytes) {
  // A null pointer would bind NULL, not an empty BLOB. SQLITE_STATIC: every use resets the
  // statement before the bytes go away.
  const char* data = bytes.data() != nullptr ? bytes.data() : "";
  const int rc = sqlite3_bind_blob64(statement, index, data, bytes.size(), SQLITE_STATIC);
  if (rc != SQLITE_OK) c.fail(rc, "bind a value");
}

// ?1 and ?2: scope and key, as BLOBs.
inline void sqlite_bind_key(sqlite_connection& c, sqlite3_stmt* statement, std::string_view scope,
                            std::string_view key) {
  sqlite_bind_bytes(c, statement, 1, scope);
  sqlite_bind_bytes(c, statement, 2, key);
}

// ?1 .. ?8 of create_record and create_if_absent.
inline void sqlite_bind_new_record(sqlite_connection& c, sqlite3_stmt* statement,
                                   const claim_request& request, std::uint64_t fence) {
  sqlite_bind_key(c, statement, request.scope, request.key);
  sqlite_bind_integer(c, statement, 3, static_cast<std::int64_t>(fence));
  sqlite_bind_integer(c, statement, 4, sqlite_nanoseconds(request.now));
  sqlite_bind_integer(c, statement, 5, sqlite_nanoseconds(request.now + request.lease));
  sqlite_bind_integer(c, statement, 6, sqlite_nanoseconds(request.now + request.retention));
  const std::span<const std::uint8_t> print = request.fingerprint.bytes();
  sqlite_bind_bytes(c, statement, 7,
                    std::string_view(reinterpret_cast<const char*>(print.data()), print.size()));
  sqlite_bind_bytes(c, statement, 8, request.recovery);
}

// A BLOB (or NULL, as empty) column's bytes.
inline std::string sqlite_column_bytes(sqlite3_stmt* statement, int column) {
  const auto* data = static_cast<const char*>(sqlite3_column_blob(statement, column));
  const int size = sqlite3_column_bytes(statement, column);
  return data == nullptr ? std::string{} : std::string(data, static_cast<std::size_t>(size));
}

// Columns from `first` on: state, fence, created_at, lease_until, expires_at, fingerprint.
inline sqlite_row sqlite_read_row(sqlite3_stmt* statement, int first) {
  sqlite_row out;
  out.state = sqlite3_column_int(statement, first);
  out.fence = static_cast<std::uint64_t>(sqlite3_column_int64(statement, first + 1));
  out.created_at = sqlite3_column_int64(statement, first + 2);
  out.lease_until = sqlite3_column_int64(statement, first + 3);
  out.expires_at = sqlite3_column_int64(statement, first + 4);
  const auto* print = static_cast<const std::uint8_t*>(sqlite3_column_blob(statement, first + 5));
  const auto size = static_cast<std::size_t>(sqlite3_column_bytes(statement, first + 5));
  if (print != nullptr) out.fingerprint = digest{std::span<const std::uint8_t>(print, size)};
  return out;
}

// The record of a row; response and recovery follow the columns sqlite_read_row reads.
inline record sqlite_snapshot(sqlite3_stmt* statement, int first, const sqlite_row& found) {
  record out;
  out.fingerprint = found.fingerprint;
  out.state = found.state == sqlite_completed ? record_state::completed : record_state::in_progress;
  out.fence = found.fence;
  out.created_at = sqlite_time(found.created_at);
  out.lease_until = sqlite_time(found.lease_until);
  out.expires_at = sqlite_time(found.expires_at);
  out.response = sqlite_column_bytes(statement, first + 6);
  out.recovery = sqlite_column_bytes(statement, first + 7);
  return out;
}

// What a claim at `now` (nanoseconds) does to the record it found (see idem/store/contract.hpp).
inline sqlite_decision sqlite_decide(const sqlite_row& found, const claim_request& request,
                                     std::int64_t now) {
  if (found.state == sqlite_released || found.expires_at <= now) return sqlite_decision::create;
  if (found.state == sqlite_in_progress && found.fingerprint == request.fingerprint &&
      found.lease_until <= now) {
    return sqlite_decision::take_over;
  }
  return sqlite_decision::existing;
}

// The record `held` names, when it is there, not released and under the caller's fence.
inline std::optional<sqlite_held_size> sqlite_held_sizes(sqlite_connection& c,
                                                         const fenced_key& held) {
  sqlite_use read(c.statement(sqlite_statement::held_sizes));
  sqlite_bind_key(c, read.get(), held.scope, held.key);
  if (c.step(read.get(), "read a record") != SQLITE_ROW) return std::nullopt;
  sqlite_held_size out;
  out.state = sqlite3_column_int(read.get(), 0);
  const auto fence = static_cast<std::uint64_t>(sqlite3_column_int64(read.get(), 1));
  if (out.state == sqlite_released || fence != held.fence) return std::nullopt;
  out.response = static_cast<std::size_t>(sqlite3_column_int64(read.get(), 2));
  out.recovery = static_cast<std::size_t>(sqlite3_column_int64(read.get(), 3));
  return out;
}

// complete, release or checkpoint: one UPDATE ... WHERE fence = ?; applied when it changed a
// row. Outside a transaction it is one autocommit write statement.
inline bool sqlite_fenced_write(sqlite_connection& c, sqlite_statement which,
                                const fenced_key& held, std::string_view bytes,
                                store_time lease_until = {}) {
  sqlite_use write(c.statement(which));
  sqlite_bind_key(c, write.get(), held.scope, held.key);
  sqlite_bind_integer(c, write.get(), 3, static_cast<std::int64_t>(held.fence));
  if (which != sqlite_statement::release) sqlite_bind_bytes(c, write.get(), 4, bytes);
  if (which == sqlite_statement::checkpoint) {
    sqlite_bind_integer(c, write.get(), 5, sqlite_nanoseconds(lease_until));
  }
  c.step(write.get(), which == sqlite_statement::complete  ? "complete a record"
                      : which == sqlite_statement::release ? "release a record"
                                                           : "checkpoint a record");
  return sqlite3_changes64(c.db()) != 0;
}

}  // namespace idem::detail

#endif  // IDEM_STORE_SQLITE_DETAIL_RECORD_HPP
