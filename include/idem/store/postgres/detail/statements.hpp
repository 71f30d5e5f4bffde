// The statements postgres_store prepares on every connection: their names, their SQL text (built
// from the configured schema and table, quoted), and the types of their parameters. Text and
// numbers only: no connection, so the SQL can be checked without a server.
#ifndef IDEM_STORE_POSTGRES_DETAIL_STATEMENTS_HPP
#define IDEM_STORE_POSTGRES_DETAIL_STATEMENTS_HPP

#include <libpq-fe.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/store/postgres/detail/binary_array.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres {

// The prepared statements every connection gets, by index.
enum statement : std::uint8_t {
  claim,
  complete,
  release,
  checkpoint,
  find,
  sweep,
  stuck,
  lock,
  scope_turn,
  scope_room,
  complete_checked,  // one commit's completion: fails (22012) when it changes no row
  lock_timeout,      // one commit's bound on lock waits, for its transaction only
  outbox_insert,     // transaction::publish's message (outbox_insert_sql)
  checkpoint_batch,  // checkpoint for a batch of records, over arrays (the heartbeat's renewals)
  count
};
inline constexpr std::array<const char*, statement::count> statement_names{"idem_claim",
                                                                           "idem_complete",
                                                                           "idem_release",
                                                                           "idem_checkpoint",
                                                                           "idem_find",
                                                                           "idem_sweep",
                                                                           "idem_stuck",
                                                                           "idem_lock",
                                                                           "idem_scope_turn",
                                                                           "idem_scope_room",
                                                                           "idem_complete_checked",
                                                                           "idem_lock_timeout",
                                                                           "idem_outbox_insert",
                                                                           "idem_checkpoint_batch"};

// Whether `result` is complete_checked's refusal: it found no record in progress under the
// fence (its division by zero, SQLSTATE 22012), so the COMMIT sent behind it did not run.
inline bool found_no_record_in_progress(const PGresult* result) noexcept {
  const char* state = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_SQLSTATE);
  return state != nullptr && std::string_view(state) == "22012";
}

// Identifiers are validated, then quoted: a configured name can never inject SQL, and stays
// short enough that the derived names (<table>_meta, <table>_outbox, <table>_by_expiry,
// <table>_in_progress) fit in 63 bytes.
inline std::string quoted_identifier(std::string_view name, const char* what,
                                     std::size_t max_length = 50) {
  const bool valid = !name.empty() && name.size() <= max_length &&
                     std::all_of(name.begin(), name.end(),
                                 [](char c) {
                                   return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                          (c >= '0' && c <= '9') || c == '_';
                                 }) &&
                     !(name.front() >= '0' && name.front() <= '9');
  if (!valid) {
    throw std::invalid_argument(std::string("idem::postgres_store: the ") + what + " name '" +
                                std::string(name) +
                                "' must be 1 to 50 letters, digits or underscores, not starting "
                                "with a digit");
  }
  return "\"" + std::string(name) + "\"";
}

// The configured names as the SQL text uses them: validated, quoted, the tables qualified by
// their schema.
struct quoted_names {
  std::string schema;          // "schema"
  std::string table;           // "schema"."table"
  std::string meta;            // "schema"."table_meta": the schema version
  std::string outbox;          // "schema"."table_outbox": the messages (docs/outbox.md)
  std::string outbox_dead;     // "schema"."table_outbox_dead": messages no sink would take
  std::string outbox_notify;   // "schema"."table_notify": the trigger function of the hint
  std::string outbox_channel;  // 'table_outbox': the LISTEN/NOTIFY channel, a string literal
};

inline quoted_names quote_names(std::string_view schema, std::string_view table) {
  quoted_names names;
  names.schema = quoted_identifier(schema, "schema");
  names.table = names.schema + "." + quoted_identifier(table, "table");
  names.meta = names.schema + "." + quoted_identifier(std::string(table) + "_meta", "table", 63);
  names.outbox =
      names.schema + "." + quoted_identifier(std::string(table) + "_outbox", "table", 63);
  names.outbox_dead =
      names.schema + "." + quoted_identifier(std::string(table) + "_outbox_dead", "table", 63);
  names.outbox_notify =
      names.schema + "." + quoted_identifier(std::string(table) + "_notify", "table", 63);
  // The channel is the outbox's unqualified name: validated above, so it needs no escaping as a
  // literal. Two schemas with the same table name share it; a relay then wakes for the other's
  // rows too, which a hint allows.
  names.outbox_channel = "'" + std::string(table) + "_outbox'";
  return names;
}

// The most partitions options::hash_partitions may ask for. Each is a table with its three
// indexes, and a sweep runs one statement per partition: a thousand is already far past the
// point where more partitions shrink anything a claim touches.
inline constexpr std::size_t max_hash_partitions = 1024;

// The partitions of a table created PARTITION BY HASH (scope): <table>_p0 ... <table>_p<n-1>, in
// `schema` (quoted), quoted and qualified; none when `partitions` is zero.
inline std::vector<std::string> partition_names(const std::string& schema, std::string_view table,
                                                std::size_t partitions) {
  std::vector<std::string> names;
  names.reserve(partitions);
  for (std::size_t i = 0; i < partitions; ++i) {
    names.push_back(schema + "." +
                    quoted_identifier(std::string(table) + "_p" + std::to_string(i), "table", 63));
  }
  return names;
}

// The server's clock in int8 nanoseconds (microsecond resolution), unless the caller's `now`
// was passed as parameter `parameter`.
inline std::string now_sql(int parameter) {
  return "COALESCE($" + std::to_string(parameter) +
         "::int8, (extract(epoch FROM clock_timestamp()) * 1000000000)::int8)";
}

// The distinct scopes of `table`, walked in the primary key's order (a loose index scan: one
// index probe per scope, whatever the table holds), and the clock ($1): the head of the
// statements that read across scopes.
inline std::string scopes_sql(const std::string& table) {
  return "WITH RECURSIVE clock AS (SELECT " + now_sql(1) +
         " AS n), scopes AS ((SELECT scope FROM " + table +
         " ORDER BY scope LIMIT 1) UNION ALL SELECT (SELECT t.scope FROM " + table +
         " t WHERE t.scope > s.scope ORDER BY t.scope LIMIT 1) FROM scopes s WHERE s.scope IS "
         "NOT NULL) ";
}

// The sweep of `table` ($1: now, or NULL for the server's clock): every expired record, scope
// by scope. Run on a partition of a partitioned table, it walks that partition's scopes only.
inline std::string sweep_sql(const std::string& table) {
  return scopes_sql(table) + "DELETE FROM " + table +
         " t USING scopes s, clock WHERE t.scope = s.scope AND t.expires_at <= clock.n";
}

// `sql` with its parameter $1 (the clock, in sweep_sql) replaced by `time`: digits, or NULL.
inline std::string with_time(std::string_view sql, std::string_view time) {
  std::string out;
  out.reserve(sql.size() + 2 * time.size());
  for (std::size_t at = 0; at < sql.size();) {
    const std::size_t found = sql.find("$1", at);
    if (found == std::string_view::npos) {
      out.append(sql.substr(at));
      break;
    }
    out.append(sql.substr(at, found - at)).append(time);
    at = found + 2;
  }
  return out;
}

// The columns a claim answers, and find reads.
inline constexpr const char* record_columns =
    "fence, fingerprint, state, created_at, lease_until, expires_at, response, recovery";

// The claim on `table` (quoted and qualified: quoted_names::table); the batch claim
// (batch.hpp) decides with its very condition.
inline std::string claim_sql(const std::string& table) {
  const auto now = [](int parameter) { return now_sql(parameter); };
  const std::string columns = record_columns;
  // A live in-progress record is taken over (same fingerprint, lease passed: the WHERE) and
  // keeps its recovery bytes; an expired or released one is replaced by a new claim under the
  // next fence, which starts, like a new key's record, with the claim's recovery bytes ($7,
  // NULL for none).
  const std::string takeover = "(r.state = 0 AND r.expires_at > excluded.created_at)";
  std::string sql =
      "WITH clock AS (SELECT " + now(6) +
      " AS n), "
      "decided AS (INSERT INTO " +
      table +
      " AS r (scope, key, fingerprint, state, fence, taken_over, created_at, lease_until, "
      "expires_at, recovery) SELECT $1, $2, $3, 0, 1, false, n, n + $4, n + $5, $7 FROM "
      "clock "
      "ON CONFLICT (scope, key) DO UPDATE SET fence = r.fence + 1, taken_over = " +
      takeover + ", fingerprint = excluded.fingerprint, state = 0, created_at = CASE WHEN " +
      takeover +
      " THEN r.created_at ELSE excluded.created_at END, "
      "lease_until = excluded.lease_until, expires_at = CASE WHEN " +
      takeover +
      " THEN r.expires_at ELSE excluded.expires_at END, response = NULL, recovery = CASE "
      "WHEN " +
      takeover +
      " THEN r.recovery ELSE excluded.recovery END "
      "WHERE r.state = 2 OR r.expires_at <= excluded.created_at OR (r.state = 0 AND "
      "r.fingerprint = excluded.fingerprint AND r.lease_until <= excluded.created_at) "
      "RETURNING taken_over, " +
      columns +
      ") "
      "SELECT true, taken_over, " +
      columns + ", NULL::int8 FROM decided UNION ALL SELECT false, false, " + columns +
      ", clock.n FROM " + table +
      ", clock WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM decided)";
  return sql;
}

// The insert into `outbox` (quoted and qualified: quoted_names::outbox). A message already
// there under the same id is left as it is: a handler run again after a takeover writes the
// same id, and the outbox keeps the first row. created_at is $6, or the server's clock when $6
// is NULL (as the records' times); next_attempt_at starts there: a new message may go at once.
// The stores' transactions run it prepared (statement outbox_insert); postgres_outbox::publish
// runs the same text with PQexecParams on the application's connection, which has none of the
// store's statements: one text for both writers keeps them from drifting apart.
inline std::string outbox_insert_sql(const std::string& outbox) {
  return "INSERT INTO " + outbox +
         " (id, topic, partition_key, payload, headers, created_at, next_attempt_at) "
         "SELECT $1, $2, $3, $4, $5, n, n FROM (SELECT COALESCE($6::int8, (extract(epoch FROM "
         "clock_timestamp()) * 1000000000)::int8) AS n) AS clock ON CONFLICT (id) DO NOTHING";
}

// The SQL of every statement, by index, on the configured tables (quote_names).
inline std::array<std::string, statement::count> statement_sql(const quoted_names& names) {
  const std::string& table = names.table;
  std::array<std::string, statement::count> sql;
  const auto now = [](int parameter) { return now_sql(parameter); };
  const std::string columns = record_columns;
  sql[claim] = claim_sql(table);
  sql[outbox_insert] = outbox_insert_sql(names.outbox);
  const std::string held = " WHERE scope = $1 AND key = $2 AND fence = $3 AND state <> 2";
  sql[complete] = "UPDATE " + table + " SET state = 1, response = $4, recovery = NULL" + held;
  // complete, made an error (division by zero) when it finds no record in progress under the
  // fence, so that the COMMIT pipelined behind it never runs (complete_and_commit in
  // connection.hpp, async_postgres_store::run_within; found_no_record_in_progress above).
  sql[complete_checked] =
      "WITH done AS (" + sql[complete] + " RETURNING 1) SELECT 1 / count(*)::int4 FROM done";
  // SET LOCAL takes no parameter; set_config(..., true) is the same, for the transaction only.
  sql[lock_timeout] = "SELECT set_config('lock_timeout', ($1::int8)::text, true)";
  sql[release] = "UPDATE " + table + " SET state = 2, response = NULL, recovery = NULL" + held;
  sql[checkpoint] = "UPDATE " + table + " SET recovery = $4, lease_until = COALESCE($5, " +
                    "(extract(epoch FROM clock_timestamp()) * 1000000000)::int8 + $6)" + held;
  // The same, for every record of the arrays at once: $1 scopes, $2 keys, $3 fences, $4 recovery
  // bytes, then $5 and $6 as checkpoint's; the positions (from 1) of the records it renewed.
  sql[checkpoint_batch] =
      "UPDATE " + table + " AS t SET recovery = u.recovery, lease_until = COALESCE($5, " +
      "(extract(epoch FROM clock_timestamp()) * 1000000000)::int8 + $6) FROM unnest($1::bytea[], "
      "$2::bytea[], $3::int8[], $4::bytea[]) WITH ORDINALITY AS u(scope, key, fence, recovery, "
      "ord) WHERE t.scope = u.scope AND t.key = u.key AND t.fence = u.fence AND t.state <> 2 "
      "RETURNING u.ord";
  sql[find] = "SELECT " + columns + " FROM " + table +
              " WHERE scope = $1 AND key = $2 AND state <> 2 AND expires_at > " + now(3);
  // Scope leads every index, so reading across scopes walks the distinct scopes first (a
  // loose index scan of the primary key), then each scope's index range: the cost follows
  // the scopes and what is found, not what the table holds.
  const std::string scopes = scopes_sql(table);
  sql[sweep] = sweep_sql(table);
  sql[stuck] = scopes + "SELECT t.scope, t.key, t.fence, t.fingerprint, t.state, " +
               "t.created_at, t.lease_until, t.expires_at, t.response, t.recovery " +
               "FROM scopes s CROSS JOIN clock CROSS JOIN LATERAL (SELECT * FROM " + table +
               " r WHERE r.scope = s.scope AND r.state = 0 AND r.lease_until <= clock.n "
               "AND r.expires_at > clock.n ORDER BY r.lease_until LIMIT $2) t "
               "WHERE s.scope IS NOT NULL LIMIT $2";
  sql[lock] = "SELECT fence, state FROM " + table + " WHERE scope = $1 AND key = $2 FOR UPDATE";
  // For max_records_per_scope, inside the claim's transaction: first a transaction-scoped
  // lock on the scope, so that claims of one scope, from every replica, take turns; then,
  // in a statement of its own (read committed: a snapshot taken after the lock, which sees
  // what the previous turn committed), the scope's unexpired records other than this key,
  // and whether this key's record is live (a replay or takeover needs no room).
  sql[scope_turn] = "SELECT pg_advisory_xact_lock(hashtextextended(encode($1, 'hex'), 7238))";
  sql[scope_room] =
      "WITH clock AS (SELECT " + now(3) +
      " AS n) SELECT count(*) FILTER (WHERE r.key <> $2 AND r.expires_at > clock.n), "
      "COALESCE(bool_or(r.key = $2 AND r.state <> 2 AND r.expires_at > clock.n), false) "
      "FROM clock LEFT JOIN " +
      table + " AS r ON r.scope = $1";
  return sql;
}

// The types of a statement's parameters, in order, as PQprepare takes them; the entries past
// parameter_count(which) are zero.
inline std::array<Oid, 8> parameter_types(statement which) {
  switch (which) {
    case claim:
      return {bytea_oid, bytea_oid, bytea_oid, int8_oid, int8_oid, int8_oid, bytea_oid};
    case complete:
      return {bytea_oid, bytea_oid, int8_oid, bytea_oid};
    case release:
      return {bytea_oid, bytea_oid, int8_oid};
    case checkpoint:
      return {bytea_oid, bytea_oid, int8_oid, bytea_oid, int8_oid, int8_oid};
    case find:
      return {bytea_oid, bytea_oid, int8_oid};
    case sweep:
      return {int8_oid};
    case stuck:
      return {int8_oid, int8_oid};
    case lock:
      return {bytea_oid, bytea_oid};
    case scope_turn:
      return {bytea_oid};
    case scope_room:
      return {bytea_oid, bytea_oid, int8_oid};
    case complete_checked:
      return {bytea_oid, bytea_oid, int8_oid, bytea_oid};
    case lock_timeout:
      return {int8_oid};
    case outbox_insert:
      return {text_oid, text_oid, bytea_oid, bytea_oid, bytea_oid, int8_oid};
    case checkpoint_batch:
      return {bytea_array_oid, bytea_array_oid, int8_array_oid,
              bytea_array_oid, int8_oid,        int8_oid};
    case count:
      break;
  }
  return {};
}

// How many parameters a statement takes ($1 to $n in its SQL).
inline int parameter_count(statement which) {
  constexpr std::array<int, statement::count> counts{7, 4, 3, 6, 3, 1, 2, 2, 1, 3, 4, 1, 6, 6};
  return counts[which];
}

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_STATEMENTS_HPP
