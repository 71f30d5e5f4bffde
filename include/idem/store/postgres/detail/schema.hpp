// The table postgres_store keeps its records in: its versions, each the SQL that makes it from
// the one before, and the migration that brings a table to the newest, once, however many
// replicas start at the same time. Also exec_or_throw, the one way this part and the session
// set-up run SQL text.
#ifndef IDEM_STORE_POSTGRES_DETAIL_SCHEMA_HPP
#define IDEM_STORE_POSTGRES_DETAIL_SCHEMA_HPP

#include <libpq-fe.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres {

// Runs SQL text; throws store_error(unavailable), `what` leading its message, unless the server
// accepted it.
inline void exec_or_throw(PGconn* connection, const char* sql, const char* what) {
  const result_ptr result{PQexec(connection, sql)};
  const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    throw store_error(store_failure::unavailable, std::string("idem::postgres_store: ") + what +
                                                      ": " + describe(connection, result.get()));
  }
}

// Version 1's records table: plain, or with `partitions` (not zero) PARTITION BY HASH (scope),
// <table>_p0 ... _p<n-1> (partition_names). The primary key (scope, key) holds the partition
// key, as PostgreSQL demands of a unique index on a partitioned table: so each partition keeps
// its own unique index, a claim's uniqueness check probes the one partition its scope hashes
// to, and every statement that names the scope (all but sweep and stuck) is pruned to it. The
// indexes created on the parent below are made on every partition. fillfactor is a partition's
// setting: a partitioned parent stores nothing.
inline std::string records_table(const quoted_names& names, std::string_view plain_table,
                                 std::size_t partitions) {
  const std::string columns =
      " ("
      "scope bytea NOT NULL, key bytea NOT NULL, fingerprint bytea NOT NULL, "
      "state int2 NOT NULL, fence int8 NOT NULL, taken_over bool NOT NULL, "
      "created_at int8 NOT NULL, lease_until int8 NOT NULL, expires_at int8 NOT NULL, "
      "response bytea, recovery bytea, PRIMARY KEY (scope, key))";
  if (partitions == 0) return "CREATE TABLE " + names.table + columns + " WITH (fillfactor = 80)";
  std::string sql = "CREATE TABLE " + names.table + columns + " PARTITION BY HASH (scope)";
  const std::vector<std::string> parts = partition_names(names.schema, plain_table, partitions);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    sql += "; CREATE TABLE " + parts[i] + " PARTITION OF " + names.table +
           " FOR VALUES WITH (MODULUS " + std::to_string(partitions) + ", REMAINDER " +
           std::to_string(i) + ") WITH (fillfactor = 80)";
  }
  return sql;
}

// The schema versions: entry i takes the table from version i to i + 1. `plain_table` is the
// configured table name, unquoted, that the index names are derived from; `partitions`, when
// not zero, makes version 1's table partitioned (records_table). Only a table's creation reads
// it: a table that exists keeps the layout it was made with (migrate checks it).
inline std::vector<std::string> migrations(const quoted_names& names, std::string_view plain_table,
                                           std::size_t partitions = 0) {
  const std::string table(plain_table);
  const std::string index_prefix = quoted_identifier(table + "_by_expiry", "table", 63);
  const std::string by_lease_index = quoted_identifier(table + "_by_lease", "table", 63);
  const std::string in_progress_index = quoted_identifier(table + "_in_progress", "table", 63);
  return {// 1: the records. (scope, key) is the identity; scope leads every index, so a table
          // partitioned by scope prunes to one partition. Any bytes go: bytea, never text.
          // Up to version 3, completing changed no indexed column (state was in no index, not
          // even a partial one's predicate), so with the room fillfactor leaves on the page a
          // completion was a HOT update that wrote no index page: under SERIALIZABLE, concurrent
          // completions of neighbouring keys did not collide on the primary key's leaf pages
          // (predicate locks there are page-sized). That was chosen over a partial index on
          // state after a 64-thread storm of completions met ~6,000 serialization failures with
          // one. Version 4 brings such an index back, for stuck(), and pays that price (below).
          records_table(names, plain_table, partitions) +
              "; "
              "CREATE INDEX " +
              index_prefix + " ON " + names.table +
              " (scope, expires_at); "
              "CREATE INDEX " +
              by_lease_index + " ON " + names.table + " (scope, lease_until)",
          // 2: the outbox, <table>_outbox beside the records (docs/outbox.md): messages written
          // in the transaction that completes a record, which a relay sends on. The columns
          // past headers are the relay's, set when it comes:
          //   sequence        the order rows were written in. Under concurrent writers that is
          //                   not quite their commit order (a sequence is drawn at the insert);
          //                   docs/outbox_relay.md says what order the relay promises.
          //   transaction_id  the writing transaction, for an operator tracing a message to
          //                   what wrote it. The relay does not use it: neither xid order nor
          //                   the snapshot's xmin tells whether an open transaction holds a
          //                   lower sequence than a committed row (docs/outbox_relay.md).
          //   id              outbox_message_id(scope, key, name), or the application's own;
          //                   unique, so writing a message again adds nothing.
          //   headers         netstrings (idem/outbox/headers.hpp).
          //   created_at      int8 nanoseconds since the Unix epoch, as the records' times.
          //   attempts, next_attempt_at, last_error
          //                   the relay's retries with backoff, and why the last one failed.
          //   published_at    NULL until the sink acknowledged the message.
          // The partial index holds only what waits to be sent, in order. Its name is left to
          // PostgreSQL: one derived from a 50-byte table name would pass 63 bytes.
          "CREATE TABLE " + names.outbox +
              " ("
              "sequence int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id text NOT NULL UNIQUE, "
              "topic text NOT NULL, partition_key bytea NOT NULL, "
              "transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(), "
              "created_at int8 NOT NULL, attempts int4 NOT NULL DEFAULT 0, "
              "next_attempt_at int8 NOT NULL, published_at int8, last_error text, "
              "headers bytea NOT NULL, payload bytea NOT NULL); "
              "CREATE INDEX ON " +
              names.outbox + " (sequence) WHERE published_at IS NULL",
          // 3: what the relay needs (store/postgres/outbox_reader.hpp, docs/outbox_relay.md).
          //   <table>_outbox_dead  messages no sink would take, or that failed their last
          //                   attempt: the row's fields, attempts, dead_at and the reason. The
          //                   sequence is the one the row had; id stays unique so a requeue
          //                   finds one row.
          //   (partition_key, sequence) WHERE published_at IS NULL
          //                   answers "the previous unpublished row of this key" with one index
          //                   probe per fetched row: the hold-back rule that keeps a key's
          //                   order through retries and several relays.
          //   (published_at) WHERE published_at IS NOT NULL
          //                   retention: purge costs what it removes, not what the table keeps.
          //   <table>_notify, a statement-level trigger idem_outbox_notify, made DISABLED
          //                   NOTIFY on the channel '<table>_outbox' after every INSERT, from
          //                   any writer (the store, postgres_outbox::publish, an operator's
          //                   SQL): the relays' wake-up hint. Once per statement, and
          //                   PostgreSQL folds a transaction's equal notifications into one.
          //                   Off unless an operator enables it, because a transaction that
          //                   notified takes a database-wide lock at commit that serialises it
          //                   with every other such commit (no group commit): 8 concurrent
          //                   writers committed 666/s with it, 2,118/s without (pgbench, one
          //                   insert each, fsync on). Without it relays poll. docs/outbox_relay.md.
          "CREATE TABLE " + names.outbox_dead +
              " ("
              "sequence int8 PRIMARY KEY, id text NOT NULL UNIQUE, topic text NOT NULL, "
              "partition_key bytea NOT NULL, transaction_id xid8 NOT NULL, "
              "created_at int8 NOT NULL, attempts int4 NOT NULL, dead_at int8 NOT NULL, "
              "reason text NOT NULL, headers bytea NOT NULL, payload bytea NOT NULL); "
              "CREATE INDEX ON " +
              names.outbox +
              " (partition_key, sequence) WHERE published_at IS NULL; "
              "CREATE INDEX ON " +
              names.outbox +
              " (published_at) WHERE published_at IS NOT NULL; "
              "CREATE FUNCTION " +
              names.outbox_notify +
              "() RETURNS trigger LANGUAGE plpgsql AS $idem$ BEGIN PERFORM pg_notify(" +
              names.outbox_channel +
              ", ''); RETURN NULL; END $idem$; "
              "CREATE TRIGGER idem_outbox_notify AFTER INSERT ON " +
              names.outbox + " FOR EACH STATEMENT EXECUTE FUNCTION " + names.outbox_notify +
              "(); ALTER TABLE " + names.outbox + " DISABLE TRIGGER idem_outbox_notify",
          // 4: the lease index holds only the records in progress. Version 1's (scope,
          // lease_until) held every record, and a completed one keeps its lease_until in the
          // past, so stuck()'s range `lease_until <= now` fetched every completed record of the
          // scope from the heap to drop it on `state = 0`: its cost followed the table, not what
          // is stuck. On 100,000 records with 1,000 stuck, one call of 256 removed 99,000 rows
          // by filter, 2,995 buffers, 17 to 25 ms; through this index 260 buffers, 0.3 ms (a
          // completed record's dead entry is read once, by the first call after it, until
          // vacuum). The reconciler's pass at 10^6 records went from 1.0 to 1.5 s to 0.22 to
          // 0.36 s. The price, measured on PostgreSQL 15: a completion changes the predicate's
          // column, so it is no longer a HOT update and writes the primary key's and the expiry
          // index's pages too: 915 to 1,092 WAL bytes a claim-and-complete, about 5% more
          // server time a cycle; and the 64-thread SERIALIZABLE storm's retries went from
          // 1,200 to 1,500 to 6,900 to 7,300 (READ COMMITTED: none either way).
          // IF EXISTS / IF NOT EXISTS: the migration runs in one transaction, where the index
          // build blocks the table's writes; on a big table an operator may build
          // <table>_in_progress beforehand with CREATE INDEX CONCURRENTLY, and this keeps it
          // (docs/stores/postgres.md).
          "DROP INDEX IF EXISTS " + names.schema + "." + by_lease_index +
              "; CREATE INDEX IF NOT EXISTS " + in_progress_index + " ON " + names.table +
              " (scope, lease_until) WHERE state = 0"};
}

// The key of the advisory lock a migration holds: FNV-1a of the qualified, quoted table name.
// Every replica, of this idem or another, must compute the same key for one table, or two
// could migrate it at once: it is part of the schema's contract, never to be changed.
inline std::int64_t migration_lock_key(std::string_view qualified_table) noexcept {
  std::uint64_t hash = 1469598103934665603ULL;
  for (const char c : qualified_table) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return static_cast<std::int64_t>(hash);
}

// A store asked for `partitions` hash partitions finds its table made so: one made before,
// plain or with another count, would leave it sweeping partitions that do not exist.
inline void check_partitions(PGconn* connection, const quoted_names& names,
                             std::size_t partitions) {
  const std::string sql =
      "SELECT count(*) FROM pg_inherits i JOIN pg_partitioned_table p ON "
      "p.partrelid = i.inhparent WHERE p.partstrat = 'h' AND i.inhparent = "
      "'" +
      names.table + "'::regclass";
  const result_ptr result{PQexec(connection, sql.c_str())};
  if (!result || PQresultStatus(result.get()) != PGRES_TUPLES_OK) {
    throw store_error(store_failure::unavailable,
                      "idem::postgres_store: migrating: reading the table's partitions: " +
                          describe(connection, result.get()));
  }
  const std::string found = PQgetvalue(result.get(), 0, 0);
  if (found != std::to_string(partitions)) {
    throw store_error(store_failure::unavailable,
                      "idem::postgres_store: the table " + names.table +
                          " exists with another layout: hash_partitions asks for " +
                          std::to_string(partitions) + " hash partitions, it has " + found +
                          "; a table keeps the layout it was made with (docs/stores/postgres.md, "
                          "\"Partitioning\")");
  }
}

// Schema versions, applied in order inside one transaction under an advisory lock keyed by
// the table's name, so that replicas starting at once migrate it exactly once. Creates the
// schema and the meta table when missing; refuses a table at a version newer than this idem
// knows. The connection must be outside a transaction; it is left outside one. `partitions`:
// records_table's.
inline void migrate(PGconn* connection, const quoted_names& names, std::string_view plain_table,
                    std::size_t partitions = 0) {
  const std::vector<std::string> versions = migrations(names, plain_table, partitions);
  exec_or_throw(connection, "BEGIN", "migrating: begin");
  try {
    const std::string lock =
        "SELECT pg_advisory_xact_lock(" + std::to_string(migration_lock_key(names.table)) + ")";
    exec_or_throw(connection, lock.c_str(), "migrating: advisory lock");
    exec_or_throw(connection, ("CREATE SCHEMA IF NOT EXISTS " + names.schema).c_str(),
                  "migrating: schema");
    exec_or_throw(connection,
                  ("CREATE TABLE IF NOT EXISTS " + names.meta + " (version int4 NOT NULL)").c_str(),
                  "migrating: meta table");
    const result_ptr result{PQexec(connection, ("SELECT version FROM " + names.meta).c_str())};
    if (!result || PQresultStatus(result.get()) != PGRES_TUPLES_OK) {
      throw store_error(store_failure::unavailable,
                        "idem::postgres_store: migrating: reading the schema version: " +
                            describe(connection, result.get()));
    }
    std::size_t version = 0;
    if (PQntuples(result.get()) > 0) {
      version = static_cast<std::size_t>(std::stoul(PQgetvalue(result.get(), 0, 0)));
    } else {
      exec_or_throw(connection, ("INSERT INTO " + names.meta + " VALUES (0)").c_str(),
                    "migrating: meta row");
    }
    if (version > versions.size()) {
      throw store_error(store_failure::unavailable,
                        "idem::postgres_store: the table " + names.table +
                            " is at schema version " + std::to_string(version) +
                            ", newer than this idem (" + std::to_string(versions.size()) +
                            "): its tables, " + names.outbox +
                            " among them, may have changed in ways this idem would write "
                            "wrongly; upgrade idem");
    }
    for (; version < versions.size(); ++version) {
      exec_or_throw(connection, versions[version].c_str(), "migrating");
    }
    if (partitions > 0) check_partitions(connection, names, partitions);
    exec_or_throw(
        connection,
        ("UPDATE " + names.meta + " SET version = " + std::to_string(versions.size())).c_str(),
        "migrating: version");
    exec_or_throw(connection, "COMMIT", "migrating: commit");
  } catch (...) {
    const result_ptr rollback{PQexec(connection, "ROLLBACK")};
    throw;
  }
}

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_SCHEMA_HPP
