// Writing an outbox message into an SQLite file: the one INSERT both writers run, the store's
// transaction (sqlite_store::transaction::publish) and an application's own
// (idem::sqlite_outbox::publish), so the SQL and its checks exist once.
//
//   sqlite3_exec(db, "BEGIN IMMEDIATE", ...);
//   ... the application's own writes ...
//   idem::sqlite_outbox::publish(db, order_id + "/shipped", message);
//   sqlite3_exec(db, "COMMIT", ...);
//
// The table (idem_outbox) is part of sqlite_store's schema: open a store on the file once
// before writing to it this way. Its columns: store/sqlite/detail/statements.hpp; the rest:
// docs/outbox.md.
#ifndef IDEM_STORE_SQLITE_OUTBOX_HPP
#define IDEM_STORE_SQLITE_OUTBOX_HPP

#include <sqlite3.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/outbox/headers.hpp>
#include <idem/outbox/message.hpp>
#include <idem/store/sqlite/detail/handler_sql.hpp>
#include <idem/store/sqlite/error.hpp>

namespace idem::detail {

// A message already there under the same id is left as it is: a handler run again after a
// takeover writes the same id, and the outbox keeps the first row. next_attempt_at starts at
// created_at: a new message may be sent at once.
inline constexpr std::string_view sqlite_outbox_insert =
    "INSERT INTO idem_outbox (id, topic, partition_key, payload, headers, created_at, "
    "next_attempt_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (id) DO NOTHING";

// Binds the message to the prepared insert and runs it; answers true when it added a row.
// `insert` is prepared on `db`, which must be inside a transaction.
inline bool sqlite_write_outbox(sqlite3* db, sqlite3_stmt* insert, std::string_view id,
                                const outbox_message& message, std::int64_t created_at) {
  const std::string headers = encode_outbox_headers(message.headers);
  const std::string_view sql = sqlite_outbox_insert;
  sqlite3_reset(insert);
  sqlite_bind_handler_value(insert, 1, id, sql);
  sqlite_bind_handler_value(insert, 2, std::string_view{message.topic}, sql);
  sqlite_bind_handler_value(insert, 3, sqlite_blob{message.partition_key}, sql);
  sqlite_bind_handler_value(insert, 4, sqlite_blob{message.payload}, sql);
  sqlite_bind_handler_value(insert, 5, sqlite_blob{headers}, sql);
  sqlite_bind_handler_value(insert, 6, created_at, sql);
  if (sqlite3_step(insert) != SQLITE_DONE) {
    // Read before the reset, which may put another message in its place.
    const int code = sqlite3_extended_errcode(db);
    std::string message = "idem: publishing to the outbox: " + std::string(sqlite3_errmsg(db));
    sqlite3_reset(insert);
    throw sqlite_error(code, message);
  }
  const bool added = sqlite3_changes64(db) == 1;
  // Reset at once: the statement is kept for the next message and would otherwise hold on to
  // this one's payload.
  sqlite3_reset(insert);
  return added;
}

}  // namespace idem::detail

namespace idem::sqlite_outbox {

/// Adds `message` under `id` to the outbox of the SQLite file `db` is open on, inside the
/// transaction `db` has open, so that it commits with the application's own writes or not at
/// all. Answers true when it added the row, false when a message with this id was already
/// there (the row is left as it was). `id` is the application's: derive it from what makes the
/// message unique (an order id and an event name), never from a clock or a random number, so
/// that writing the message again adds nothing; idem::outbox_message_id derives one from a
/// scope, a key and a name.
///
/// Throws std::invalid_argument for an id that is not 1 to 255 bytes of visible ASCII, a
/// message without a topic, or a payload past `max_payload_bytes`; std::logic_error when `db`
/// is not inside a transaction (the message would commit alone); sqlite_error when SQLite
/// refuses the row (a file without an idem_outbox table: open an idem::sqlite_store on it
/// first). It does not roll back: the transaction is the application's.
inline bool publish(sqlite3* db, std::string_view id, const outbox_message& message,
                    std::size_t max_payload_bytes = default_max_outbox_payload_bytes) {
  constexpr const char* who = "idem::sqlite_outbox::publish";
  detail::check_outbox_message(id, message, max_payload_bytes, who);
  if (db == nullptr || sqlite3_get_autocommit(db) != 0) {
    throw std::logic_error(std::string(who) +
                           ": the connection is not inside a transaction; BEGIN first, so that "
                           "the message commits with the writes it reports");
  }
  sqlite3_stmt* insert = nullptr;
  const std::string_view sql = detail::sqlite_outbox_insert;
  if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &insert, nullptr) !=
      SQLITE_OK) {
    const std::string reason = sqlite3_errmsg(db);
    sqlite3_finalize(insert);
    throw sqlite_error(sqlite3_extended_errcode(db),
                       std::string(who) + ": " + reason +
                           " (the table idem_outbox is made by idem::sqlite_store: open one on "
                           "this file first)");
  }
  const auto created_at = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  try {
    const bool added = detail::sqlite_write_outbox(db, insert, id, message, created_at);
    sqlite3_finalize(insert);
    return added;
  } catch (...) {
    sqlite3_finalize(insert);
    throw;
  }
}

}  // namespace idem::sqlite_outbox

#endif  // IDEM_STORE_SQLITE_OUTBOX_HPP
