// The SQL sqlite_store runs: its statements, the schema of its file (idem_records, idem_meta,
// idem_outbox and the relay's tables) and the usage row a bounded store keeps, and how times and
// states are stored. Text only: the statements are prepared by store/sqlite/connection.hpp.
#ifndef IDEM_STORE_SQLITE_DETAIL_STATEMENTS_HPP
#define IDEM_STORE_SQLITE_DETAIL_STATEMENTS_HPP

#include <array>
#include <chrono>
#include <cstdint>

#include <idem/store/contract.hpp>

namespace idem::detail {

inline std::int64_t sqlite_nanoseconds(store_time time) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}

inline store_time sqlite_time(std::int64_t nanoseconds) noexcept {
  return store_time{
      std::chrono::duration_cast<store_time::duration>(std::chrono::nanoseconds{nanoseconds})};
}

// The statements the store runs, prepared once per connection on first use.
enum class sqlite_statement : std::uint8_t {
  begin_immediate,
  commit,
  rollback,
  read_record,
  held_sizes,
  create_record,
  create_if_absent,
  take_over,
  complete,
  release,
  checkpoint,
  sweep_batch,
  delete_expired,
  stuck,
  read_usage,
  count_live_in_scope,
  count_,
};

// Record states as stored. A released record is a tombstone that keeps its fence until it
// expires (see idem/store/contract.hpp), so a holder of the released claim can never write again.
inline constexpr int sqlite_in_progress = 0;
inline constexpr int sqlite_completed = 1;
inline constexpr int sqlite_released = 2;

inline const char* sqlite_sql(sqlite_statement statement) noexcept {
  switch (statement) {
    case sqlite_statement::begin_immediate:
      return "BEGIN IMMEDIATE";
    case sqlite_statement::commit:
      return "COMMIT";
    case sqlite_statement::rollback:
      return "ROLLBACK";
    case sqlite_statement::read_record:
      return "SELECT state, fence, created_at, lease_until, expires_at, fingerprint, response, "
             "recovery FROM idem_records WHERE scope = ?1 AND key = ?2";
    case sqlite_statement::held_sizes:
      return "SELECT state, fence, length(response), length(recovery) FROM idem_records "
             "WHERE scope = ?1 AND key = ?2";
    case sqlite_statement::create_record:
      // One statement for a new key and for replacing an expired or released record: either
      // way the record starts with the claim's recovery bytes (?8), never the old record's.
      return "INSERT INTO idem_records (scope, key, state, fence, created_at, lease_until, "
             "expires_at, fingerprint, response, recovery) VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6, ?7, "
             "x'', ?8) ON CONFLICT (scope, key) DO UPDATE SET state = 0, fence = excluded.fence, "
             "created_at = excluded.created_at, lease_until = excluded.lease_until, expires_at = "
             "excluded.expires_at, fingerprint = excluded.fingerprint, response = x'', "
             "recovery = excluded.recovery";
    case sqlite_statement::create_if_absent:
      return "INSERT INTO idem_records (scope, key, state, fence, created_at, lease_until, "
             "expires_at, fingerprint, response, recovery) VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6, ?7, "
             "x'', ?8) ON CONFLICT (scope, key) DO NOTHING";
    case sqlite_statement::take_over:
      // Recovery is left as it is: a takeover continues the first holder's work.
      return "UPDATE idem_records SET fence = ?3, lease_until = ?4 WHERE scope = ?1 AND key = ?2";
    case sqlite_statement::complete:
      return "UPDATE idem_records SET state = 1, response = ?4, recovery = x'' "
             "WHERE scope = ?1 AND key = ?2 AND fence = ?3 AND state <> 2";
    case sqlite_statement::release:
      return "UPDATE idem_records SET state = 2, response = x'', recovery = x'' "
             "WHERE scope = ?1 AND key = ?2 AND fence = ?3 AND state <> 2";
    case sqlite_statement::checkpoint:
      return "UPDATE idem_records SET recovery = ?4, lease_until = ?5 "
             "WHERE scope = ?1 AND key = ?2 AND fence = ?3 AND state <> 2";
    case sqlite_statement::sweep_batch:
      // Through the expiry index, a batch at a time, so sweep never holds the write lock long.
      return "DELETE FROM idem_records WHERE (scope, key) IN (SELECT scope, key FROM "
             "idem_records WHERE expires_at <= ?1 LIMIT ?2)";
    case sqlite_statement::delete_expired:
      return "DELETE FROM idem_records WHERE expires_at <= ?1";
    case sqlite_statement::stuck:
      // Through the partial index of records in progress (schema version 4), oldest lease
      // first: the cost is what is stuck, not what the table holds.
      return "SELECT scope, key, state, fence, created_at, lease_until, expires_at, fingerprint, "
             "response, recovery FROM idem_records INDEXED BY idem_records_in_progress WHERE "
             "state = 0 AND lease_until <= ?1 AND expires_at > ?1 ORDER BY lease_until LIMIT ?2";
    case sqlite_statement::read_usage:
      return "SELECT records, bytes FROM idem_usage WHERE id = 1";
    case sqlite_statement::count_live_in_scope:
      // The scope's records through the primary key's range, so the cost is what the scope
      // holds (at most its cap), not what the store holds.
      return "SELECT count(*) FROM idem_records WHERE scope = ?1 AND expires_at > ?2";
    case sqlite_statement::count_:
      break;
  }
  return "";
}

// Version 1 of the schema. Column order puts the small fixed fields first, so they stay on the
// B-tree page while a large response spills to overflow pages.
inline constexpr const char* sqlite_schema_v1 =
    "CREATE TABLE idem_records ("
    "  scope BLOB NOT NULL,"
    "  key BLOB NOT NULL,"
    "  state INTEGER NOT NULL,"
    "  fence INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  lease_until INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL,"
    "  fingerprint BLOB NOT NULL,"
    "  response BLOB NOT NULL,"
    "  recovery BLOB NOT NULL,"
    "  PRIMARY KEY (scope, key)"
    ") WITHOUT ROWID;"
    "CREATE INDEX idem_records_by_expiry ON idem_records (expires_at);";

// Version 2: the outbox (docs/outbox.md), messages written in the transaction that completes a
// record; a relay sends them on. The columns past headers are the relay's, set when it comes:
//   sequence        the order rows were written in, which under SQLite's one writer is the
//                   order they committed in. AUTOINCREMENT so that a sequence is never used
//                   twice, even after the newest rows were deleted: a relay may remember where
//                   it stopped.
//   id              outbox_message_id(scope, key, name), or the application's own; unique, so
//                   writing a message again (a run after a takeover) adds nothing.
//   headers         netstrings (idem/outbox/headers.hpp).
//   created_at      nanoseconds since the Unix epoch, as every time in the file.
//   attempts, next_attempt_at, last_error
//                   the relay's retries with backoff, and why the last one failed.
//   published_at    NULL until the sink acknowledged the message.
// The partial index holds only what waits to be sent, in order, so the relay's scan costs what
// waits, not what the table keeps until retention removes it.
inline constexpr const char* sqlite_schema_v2 =
    "CREATE TABLE idem_outbox ("
    "  sequence INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  topic TEXT NOT NULL,"
    "  partition_key BLOB NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  next_attempt_at INTEGER NOT NULL,"
    "  published_at INTEGER,"
    "  last_error TEXT,"
    "  headers BLOB NOT NULL,"
    "  payload BLOB NOT NULL"
    ");"
    "CREATE INDEX idem_outbox_unpublished ON idem_outbox (sequence) WHERE published_at IS NULL;";

// Version 3: the relay's tables (docs/outbox_relay.md, "SQLite specifics").
//   idem_outbox_dead   a message the relay gave up on (the sink rejected it, or failed it
//                      max_attempts times): the row's fields, the attempts made, when, and why.
//                      Keyed by the row's sequence, which AUTOINCREMENT never hands out twice.
//                      Its id is not unique here: a message requeued and dead again, or written
//                      again after it died, is another dead letter.
//   idem_outbox_relay  the one relay lease of the file: who holds it, its fence (bumped by
//                      every takeover, so a relay that lost it cannot settle), and until when.
// idem_outbox_by_key serves the hold-back rule (a row waits while an earlier unpublished row of
// its key is not due), idem_outbox_published the purge of published rows past retention; both
// are partial, so each costs only the rows it is for.
inline constexpr const char* sqlite_schema_v3 =
    "CREATE TABLE idem_outbox_dead ("
    "  sequence INTEGER PRIMARY KEY,"
    "  id TEXT NOT NULL,"
    "  topic TEXT NOT NULL,"
    "  partition_key BLOB NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  attempts INTEGER NOT NULL,"
    "  dead_at INTEGER NOT NULL,"
    "  reason TEXT NOT NULL,"
    "  headers BLOB NOT NULL,"
    "  payload BLOB NOT NULL"
    ");"
    "CREATE TABLE idem_outbox_relay ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  holder TEXT NOT NULL,"
    "  fence INTEGER NOT NULL,"
    "  lease_until INTEGER NOT NULL"
    ");"
    "INSERT INTO idem_outbox_relay (id, holder, fence, lease_until) VALUES (1, '', 0, 0);"
    "CREATE INDEX idem_outbox_by_key ON idem_outbox (partition_key, sequence) "
    "WHERE published_at IS NULL;"
    "CREATE INDEX idem_outbox_published ON idem_outbox (published_at) "
    "WHERE published_at IS NOT NULL;";

// Version 4: the records in progress by lease, for stuck() (the reconciler's listing). Partial,
// so it holds only claims in progress: a pass costs what is stuck, not what the table keeps
// until retention removes it. Its price is an index entry made by each claim, moved by each
// recovery point and removed by each completion (docs/performance.md, "The reconciler").
inline constexpr const char* sqlite_schema_v4 =
    "CREATE INDEX IF NOT EXISTS idem_records_in_progress ON idem_records (lease_until) "
    "WHERE state = 0;";

// The schema versions in order: entry i takes the file from version i to i + 1. A newer idem
// adds an entry; an older one refuses a file whose version is past its last.
inline constexpr std::array<const char*, 4> sqlite_schema_versions{
    sqlite_schema_v1, sqlite_schema_v2, sqlite_schema_v3, sqlite_schema_v4};
inline constexpr int sqlite_schema_version = static_cast<int>(sqlite_schema_versions.size());

// The usage row bounded stores check. Triggers keep it exact whichever connection, process or
// version of the application writes idem_records. Bytes count as locked_store counts them:
// scope + key + response + recovery.
inline constexpr const char* sqlite_usage_schema =
    "CREATE TABLE IF NOT EXISTS idem_usage (id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  records INTEGER NOT NULL, bytes INTEGER NOT NULL);"
    "INSERT OR IGNORE INTO idem_usage (id, records, bytes) SELECT 1, count(*), coalesce(sum("
    "  length(scope) + length(key) + length(response) + length(recovery)), 0) FROM idem_records;"
    "CREATE TRIGGER IF NOT EXISTS idem_usage_on_insert AFTER INSERT ON idem_records BEGIN"
    "  UPDATE idem_usage SET records = records + 1, bytes = bytes + length(new.scope) +"
    "  length(new.key) + length(new.response) + length(new.recovery) WHERE id = 1; END;"
    "CREATE TRIGGER IF NOT EXISTS idem_usage_on_update AFTER UPDATE ON idem_records BEGIN"
    "  UPDATE idem_usage SET bytes = bytes - length(old.scope) - length(old.key) -"
    "  length(old.response) - length(old.recovery) + length(new.scope) + length(new.key) +"
    "  length(new.response) + length(new.recovery) WHERE id = 1; END;"
    "CREATE TRIGGER IF NOT EXISTS idem_usage_on_delete AFTER DELETE ON idem_records BEGIN"
    "  UPDATE idem_usage SET records = records - 1, bytes = bytes - length(old.scope) -"
    "  length(old.key) - length(old.response) - length(old.recovery) WHERE id = 1; END;";

}  // namespace idem::detail

#endif  // IDEM_STORE_SQLITE_DETAIL_STATEMENTS_HPP
