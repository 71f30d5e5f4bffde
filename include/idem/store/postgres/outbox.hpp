// Writing an outbox message into PostgreSQL: the one INSERT both writers run, the store's
// transaction (postgres_store::transaction::publish) and an application's own
// (idem::postgres_outbox::publish), so the SQL and its checks exist once.
//
//   PQexec(connection, "BEGIN");
//   ... the application's own writes ...
//   idem::postgres_outbox::publish(connection, order_id + "/shipped", message,
//                                  store.outbox_target());
//   PQexec(connection, "COMMIT");
//
// The table (<table>_outbox, beside the store's records) is made by postgres_store's migration:
// construct a store on the database once before writing to it this way. Its columns:
// store/postgres/detail/schema.hpp; the rest: docs/outbox.md.
#ifndef IDEM_STORE_POSTGRES_OUTBOX_HPP
#define IDEM_STORE_POSTGRES_OUTBOX_HPP

#include <libpq-fe.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/outbox/headers.hpp>
#include <idem/outbox/message.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/detail/wire.hpp>
#include <idem/store/postgres/error.hpp>

namespace idem::detail::postgres {

// The insert's parameters (binary, of parameter_types(outbox_insert)) for one message; the
// message and the id must outlive it.
struct outbox_row {
  outbox_row(std::string_view id, const outbox_message& message,
             std::optional<std::int64_t> created_at)
      : headers(encode_outbox_headers(message.headers)) {
    values.bytes(id).bytes(message.topic).bytes(message.partition_key).bytes(message.payload);
    values.bytes(headers);
    if (created_at) {
      values.int8(*created_at);
    } else {
      values.null();
    }
  }
  outbox_row(const outbox_row&) = delete;
  outbox_row& operator=(const outbox_row&) = delete;

  std::string headers;
  parameters values;
};

// The insert's answer on `connection`: true when it added a row. Throws postgres_error with the
// SQLSTATE when the server refused it (40001 and 40P01 are retryable), store_error(unavailable)
// when the connection is lost.
inline bool outbox_written(PGconn* connection, const result_ptr& result, const char* who) {
  const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK) {
    const char* count = PQcmdTuples(result.get());
    return count[0] == '1' && count[1] == '\0';
  }
  const std::string message_text = std::string(who) + ": " + describe(connection, result.get());
  if (classify(connection, result.get()) == failure_kind::connection) {
    throw store_error(store_failure::unavailable, message_text);
  }
  const char* state = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
  throw postgres_error(state != nullptr ? state : "", message_text);
}

// Runs the insert `sql` (outbox_insert_sql) on `connection`, inside its open transaction: an
// application's connection, which has none of the store's prepared statements. Answers as
// outbox_written.
inline bool write_outbox(PGconn* connection, const std::string& sql, std::string_view id,
                         const outbox_message& message, std::optional<std::int64_t> created_at,
                         const char* who) {
  const outbox_row row(id, message, created_at);
  const std::array<Oid, 8> types = parameter_types(statement::outbox_insert);
  const result_ptr result{PQexecParams(connection, sql.c_str(), row.values.count(), types.data(),
                                       row.values.values(), row.values.lengths(),
                                       parameters::formats(), 1)};
  return outbox_written(connection, result, who);
}

// The same on one of the store's connections, whose statement outbox_insert is prepared: the
// server parses and plans it once a connection, not once a message.
inline bool write_outbox_prepared(PGconn* connection, std::string_view id,
                                  const outbox_message& message,
                                  std::optional<std::int64_t> created_at, const char* who) {
  const outbox_row row(id, message, created_at);
  const result_ptr result{PQexecPrepared(connection, statement_names[statement::outbox_insert],
                                         row.values.count(), row.values.values(),
                                         row.values.lengths(), parameters::formats(), 1)};
  return outbox_written(connection, result, who);
}

}  // namespace idem::detail::postgres

namespace idem::postgres_outbox {

/// Which outbox a message goes to, and how large a payload it takes: the outbox of the store
/// whose records are schema.table is schema.table_outbox. postgres_store::outbox_target()
/// answers its own.
struct target {
  std::string schema = "public";
  std::string table = "idem_records";
  std::size_t max_payload_bytes = default_max_outbox_payload_bytes;
};

/// Adds `message` under `id` to the outbox `where` names, inside the transaction `connection`
/// has open, so that it commits with the application's own writes or not at all; created_at is
/// the server's clock. Answers true when it added the row, false when a message with this id
/// was already there (the row is left as it was). `id` is the application's: derive it from
/// what makes the message unique (an order id and an event name), never from a clock or a
/// random number, so that writing the message again adds nothing; idem::outbox_message_id
/// derives one from a scope, a key and a name.
///
/// Throws std::invalid_argument for an id that is not 1 to 255 bytes of visible ASCII, a
/// message without a topic, a payload past where.max_payload_bytes, or a schema or table name
/// that is not an identifier; std::logic_error when the connection is not inside a
/// transaction (the message would commit alone); postgres_error when the server refuses the
/// row (a database without the outbox table: construct an idem::postgres_store on it first);
/// store_error(unavailable) when the connection is lost. It does not roll back: the
/// transaction is the application's.
inline bool publish(PGconn* connection, std::string_view id, const outbox_message& message,
                    const target& where = {}) {
  constexpr const char* who = "idem::postgres_outbox::publish";
  detail::check_outbox_message(id, message, where.max_payload_bytes, who);
  if (connection == nullptr || PQtransactionStatus(connection) != PQTRANS_INTRANS) {
    throw std::logic_error(std::string(who) +
                           ": the connection is not inside a transaction (or the transaction "
                           "failed); BEGIN first, so that the message commits with the writes "
                           "it reports");
  }
  const detail::postgres::quoted_names names =
      detail::postgres::quote_names(where.schema, where.table);
  return detail::postgres::write_outbox(connection,
                                        detail::postgres::outbox_insert_sql(names.outbox), id,
                                        message, std::nullopt, who);
}

}  // namespace idem::postgres_outbox

#endif  // IDEM_STORE_POSTGRES_OUTBOX_HPP
