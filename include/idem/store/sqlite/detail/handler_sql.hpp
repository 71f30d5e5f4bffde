// The SQL of a transactional handler's own (sqlite_store::transaction's exec and query):
// preparing it inside the record's open write transaction, binding its values by type, and
// stepping it. Every failure throws sqlite_error naming the statement.
#ifndef IDEM_STORE_SQLITE_DETAIL_HANDLER_SQL_HPP
#define IDEM_STORE_SQLITE_DETAIL_HANDLER_SQL_HPP

#include <sqlite3.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include <idem/store/sqlite/detail/connection.hpp>
#include <idem/store/sqlite/error.hpp>

namespace idem::detail {

// A value bound as a BLOB (strings are bound as TEXT): sqlite_store::blob.
struct sqlite_blob {
  std::string_view bytes;
};

// Integers bind as INTEGER, floating point as REAL, strings as TEXT, sqlite_blob as BLOB,
// nullptr as NULL; anything else does not compile.
template <class Value>
void sqlite_bind_handler_value(sqlite3_stmt* statement, int index, const Value& value,
                               std::string_view sql) {
  int rc = SQLITE_OK;
  if constexpr (std::is_same_v<Value, sqlite_blob>) {
    const char* data = value.bytes.data() != nullptr ? value.bytes.data() : "";
    rc = sqlite3_bind_blob64(statement, index, data, value.bytes.size(), SQLITE_TRANSIENT);
  } else if constexpr (std::is_same_v<Value, std::nullptr_t>) {
    rc = sqlite3_bind_null(statement, index);
  } else if constexpr (std::is_same_v<Value, bool> || std::is_integral_v<Value>) {
    rc = sqlite3_bind_int64(statement, index, static_cast<sqlite3_int64>(value));
  } else if constexpr (std::is_floating_point_v<Value>) {
    rc = sqlite3_bind_double(statement, index, static_cast<double>(value));
  } else if constexpr (std::is_convertible_v<const Value&, std::string_view>) {
    const std::string_view text = value;
    const char* data = text.data() != nullptr ? text.data() : "";
    rc = sqlite3_bind_text64(statement, index, data, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  } else {
    static_assert(std::is_same_v<Value, sqlite_blob>,
                  "sqlite_store::transaction binds integers, floating point, strings, "
                  "sqlite_store::blob and nullptr.");
  }
  if (rc != SQLITE_OK) {
    throw sqlite_error(rc, "idem::sqlite_store::transaction: cannot bind value " +
                               std::to_string(index) + " of " + std::string(sql) + ": " +
                               sqlite3_errstr(rc));
  }
}

// The handler's statement `sql`, prepared once per connection, reset, with `values` bound to
// ?1, ?2, ...; only while the record's write transaction is still open.
template <class... Values>
sqlite3_stmt* sqlite_handler_statement(sqlite_connection& connection, std::string_view sql,
                                       const Values&... values) {
  // SQLite rolls a transaction back by itself on some errors (a full disk, an I/O error):
  // a statement run after that would commit on its own, outside the record's transaction.
  if (sqlite3_get_autocommit(connection.db()) != 0) {
    throw sqlite_error(SQLITE_ABORT_ROLLBACK,
                       "idem::sqlite_store::transaction: the transaction is no longer open "
                       "(an earlier error rolled it back); not running " +
                           std::string(sql));
  }
  sqlite3_stmt* statement = connection.handler_statement(sql);
  sqlite3_reset(statement);
  int index = 0;
  (sqlite_bind_handler_value(statement, ++index, values, sql), ...);
  return statement;
}

// Steps the handler's statement: SQLITE_ROW or SQLITE_DONE, or throws.
inline int sqlite_handler_step(sqlite_connection& connection, sqlite3_stmt* statement,
                               std::string_view sql) {
  const int rc = sqlite3_step(statement);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    throw sqlite_error(sqlite3_extended_errcode(connection.db()),
                       "idem::sqlite_store::transaction: " + std::string(sql) + ": " +
                           sqlite3_errmsg(connection.db()));
  }
  return rc;
}

}  // namespace idem::detail

#endif  // IDEM_STORE_SQLITE_DETAIL_HANDLER_SQL_HPP
