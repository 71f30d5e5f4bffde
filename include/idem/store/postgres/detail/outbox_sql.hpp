// The SQL of the PostgreSQL outbox reader (store/postgres/outbox_reader.hpp); its batched
// statements take binary arrays (binary_array.hpp). Text and bytes only, no connection, so the SQL
// can be checked without a server.
#ifndef IDEM_STORE_POSTGRES_DETAIL_OUTBOX_SQL_HPP
#define IDEM_STORE_POSTGRES_DETAIL_OUTBOX_SQL_HPP

#include <libpq-fe.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <idem/store/postgres/detail/binary_array.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/outbox.hpp>

namespace idem::detail::postgres {

// The columns of a fetched row and of a dead letter, in the order the reader decodes them.
inline constexpr const char* outbox_entry_columns =
    "sequence, id, topic, partition_key, created_at, attempts, headers, payload";

// fetch: $1 now (int8 ns), $2 limit. Claims the first `limit` due, unpublished rows in
// sequence order that no other relay holds (FOR UPDATE SKIP LOCKED: concurrent relays take
// disjoint batches and never wait for each other; LIMIT counts only the rows claimed), and
// answers with each the sequence of the previous unpublished row of its partition key, due or
// not, claimed by anyone or not (NULL: none), from the (partition_key, sequence) index. The
// reader keeps a row only when that previous row is kept in the same batch before it.
//
// The probe, one index lookup a row, is skipped when the batch is every unpublished row up to
// its last (`whole`: those rows counted in sequence order, at most one more than a batch, so
// that even a generic plan walks an index rather than the table): then each row's
// previous unpublished row is in the batch, as the probe would find, and the reader keeps them
// all. A relay alone on its outbox, with nothing waiting for a retry, claims such batches.
// Both read the statement's one snapshot, so the count and the probes see the same rows: the
// rows claimed are among the rows counted, and equal counts mean the same rows.
//
// Under READ COMMITTED a row another relay published after this statement's snapshot was
// taken is re-checked once its lock is granted (published_at IS NULL fails, so it is left
// out): a row is never claimed twice. The previous-row probe reads the snapshot and takes no
// lock; what it may see stale is a row being published right now, which only holds a row
// back one pass longer.
inline std::string outbox_fetch_sql(const quoted_names& names) {
  return "WITH claimed AS MATERIALIZED (SELECT " + std::string(outbox_entry_columns) + " FROM " +
         names.outbox +
         " WHERE published_at IS NULL AND next_attempt_at <= $1 ORDER BY sequence LIMIT $2 "
         "FOR UPDATE SKIP LOCKED), whole AS (SELECT count(*) = (SELECT count(*) FROM claimed) "
         "AS batch FROM (SELECT 1 FROM " +
         names.outbox +
         " p WHERE p.published_at IS NULL AND p.sequence <= (SELECT max(sequence) FROM claimed) "
         "ORDER BY p.sequence LIMIT $2 + 1) AS w) "
         "SELECT c.sequence, c.id, c.topic, c.partition_key, c.created_at, c.attempts, "
         "c.headers, c.payload, CASE WHEN (SELECT batch FROM whole) THEN NULL ELSE (SELECT "
         "p.sequence FROM " +
         names.outbox +
         " p WHERE p.partition_key = c.partition_key AND p.published_at IS NULL AND p.sequence < "
         "c.sequence ORDER BY p.sequence DESC LIMIT 1) END FROM claimed c ORDER BY c.sequence";
}

// settle: $1 sequences, $2 kinds (0 published, 1 retry, 2 dead), $3 errors, $4 next attempt
// times (int8[], int8[], text[], int8[], one element per settled row), $5 now. One statement
// for the whole batch; answers how many rows it published, rescheduled and buried, which the
// reader compares with what it asked. A dead letter keeps the row's sequence, its attempts
// with this one counted, and the reason; a message with the same id buried before (written
// again after an operator removed its dead letter from the outbox) is replaced by the newer.
inline std::string outbox_settle_sql(const quoted_names& names) {
  return "WITH s AS (SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[], $4::int8[]) AS "
         "s(sequence, kind, error, next_attempt_at)), "
         "published AS (UPDATE " +
         names.outbox +
         " o SET published_at = $5 FROM s WHERE o.sequence = s.sequence AND s.kind = 0 AND "
         "o.published_at IS NULL RETURNING 1), "
         "retried AS (UPDATE " +
         names.outbox +
         " o SET attempts = o.attempts + 1, next_attempt_at = s.next_attempt_at, last_error = "
         "s.error FROM s WHERE o.sequence = s.sequence AND s.kind = 1 AND o.published_at IS NULL "
         "RETURNING 1), "
         "moved AS (DELETE FROM " +
         names.outbox +
         " o USING s WHERE o.sequence = s.sequence AND s.kind = 2 AND o.published_at IS NULL "
         "RETURNING o.sequence, o.id, o.topic, o.partition_key, o.transaction_id, o.created_at, "
         "o.attempts + 1 AS attempts, s.error, o.headers, o.payload), "
         "buried AS (INSERT INTO " +
         names.outbox_dead +
         " (sequence, id, topic, partition_key, transaction_id, created_at, attempts, dead_at, "
         "reason, headers, payload) SELECT sequence, id, topic, partition_key, transaction_id, "
         "created_at, attempts, $5, error, headers, payload FROM moved ON CONFLICT (id) DO "
         "UPDATE SET sequence = excluded.sequence, topic = excluded.topic, partition_key = "
         "excluded.partition_key, transaction_id = excluded.transaction_id, created_at = "
         "excluded.created_at, attempts = excluded.attempts, dead_at = excluded.dead_at, reason "
         "= excluded.reason, headers = excluded.headers, payload = excluded.payload RETURNING 1) "
         "SELECT (SELECT count(*) FROM published), (SELECT count(*) FROM retried), (SELECT "
         "count(*) FROM buried)";
}

// purge: $1 published before (int8 ns), $2 limit; the oldest first, through the index on
// published_at, so a purge costs what it removes. `= ANY (ARRAY(...))` rather than `IN (...)`:
// with IN the planner joined the chosen rows to a sequential scan of the whole table (a hash
// semi-join, 200,000 rows for 1,000 removed); with an array it probes the primary key.
inline std::string outbox_purge_sql(const quoted_names& names) {
  return "DELETE FROM " + names.outbox + " WHERE sequence = ANY (ARRAY(SELECT sequence FROM " +
         names.outbox +
         " WHERE published_at IS NOT NULL AND published_at < $1 ORDER BY published_at LIMIT "
         "$2))";
}

// backlog: what waits, through the partial index of unpublished rows.
inline std::string outbox_backlog_sql(const quoted_names& names) {
  return "SELECT count(*), min(created_at) FROM " + names.outbox + " WHERE published_at IS NULL";
}

// dead letters: $1 after sequence, $2 limit; in sequence order, so an operator pages through.
inline std::string outbox_dead_letters_sql(const quoted_names& names) {
  return "SELECT " + std::string(outbox_entry_columns) + ", dead_at, reason FROM " +
         names.outbox_dead + " WHERE sequence > $1 ORDER BY sequence LIMIT $2";
}

// requeue: $1 sequences (int8[], no sequence twice), $2 now. Copies the dead letters asked into
// the outbox as new rows (a new sequence, attempts 0, due at $2), keeping id, created_at, topic,
// key, headers and payload, in their old sequence order: the messages go after whatever their
// keys wrote before the requeue. Only what was inserted leaves the dead letters. One whose id is
// in the outbox again (written since) is not copied and stays a dead letter: its payload may
// differ from the new row's, and the operator decides; a writer adding the id between the check
// and the insert is answered by ON CONFLICT, with the same outcome. Answers one row per sequence
// asked, in the order asked: the sequence and 0 (requeued), 1 (no such dead letter) or 2 (id
// already in the outbox), as outbox_requeue_status numbers them. The final SELECT sees the dead
// letters as they were before the statement (one snapshot for every part of a WITH). The insert
// fires the wake-up trigger.
inline std::string outbox_requeue_sql(const quoted_names& names) {
  return "WITH asked AS (SELECT wanted.sequence, wanted.position FROM unnest($1::int8[]) WITH "
         "ORDINALITY AS wanted(sequence, position)), added AS (INSERT INTO " +
         names.outbox +
         " (id, topic, partition_key, created_at, next_attempt_at, headers, payload) SELECT "
         "dead.id, dead.topic, dead.partition_key, dead.created_at, $2, dead.headers, "
         "dead.payload FROM " +
         names.outbox_dead +
         " AS dead WHERE dead.sequence = ANY($1::int8[]) AND NOT EXISTS (SELECT 1 FROM " +
         names.outbox +
         " AS written WHERE written.id = dead.id) ORDER BY dead.sequence ON CONFLICT (id) DO "
         "NOTHING RETURNING id), moved AS (DELETE FROM " +
         names.outbox_dead +
         " AS dead WHERE dead.sequence = ANY($1::int8[]) AND dead.id IN (SELECT id FROM added) "
         "RETURNING dead.sequence) SELECT asked.sequence, (CASE WHEN moved.sequence IS NOT NULL "
         "THEN 0 WHEN dead.sequence IS NOT NULL THEN 2 ELSE 1 END)::int8 FROM asked LEFT JOIN "
         "moved ON moved.sequence = asked.sequence LEFT JOIN " +
         names.outbox_dead + " AS dead ON dead.sequence = asked.sequence ORDER BY asked.position";
}

// LISTEN for the hint: the channel the trigger notifies, as an identifier.
inline std::string outbox_listen_sql(std::string_view plain_table) {
  return "LISTEN \"" + std::string(plain_table) + "_outbox\"";
}

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_OUTBOX_SQL_HPP
