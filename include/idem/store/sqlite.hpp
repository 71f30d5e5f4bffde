// sqlite_store: the embedded durable store. Records live in one SQLite database file, survive
// kill -9 and restarts, and can be shared by many threads and many processes on one machine.
//
//   idem::sqlite_store store{"/var/lib/payments/idem.sqlite3"};
//
// What a user must know:
//   * Durability. The file is in WAL mode. synchronous = full (the default) makes a commit
//     durable before claim/complete return, power loss included. synchronous = normal skips the
//     fsync at commit: a crash of the process (kill -9, a segfault) still loses nothing, but a
//     power loss or kernel crash may lose the last commits (never corrupt the file).
//   * Atomicity. Every write runs in a transaction that holds SQLite's one write lock from its
//     first statement (BEGIN IMMEDIATE, or a single autocommit write statement, which takes the
//     lock before it reads), so a claim's read and write cannot interleave with another writer in
//     any thread or process. Reads that change nothing (a replay, a 409) take no write lock: in
//     WAL mode they never wait for writers.
//   * Threads. A store is a handle: copies share one pool of connections. A connection is used by
//     one thread at a time (the pool hands it out), each keeps its prepared statements. A call
//     that finds every connection busy waits for one, at most the busy timeout.
//   * Processes. Open the file from as many processes as you like (one store per process; do
//     not carry a store across fork()). A writer that finds the file locked retries with short
//     pauses up to the busy timeout, then throws store_error(unavailable).
//   * Transactional completion. complete_within runs a handler's own SQL in the very transaction
//     that completes the record: the handler's writes, the messages it publishes
//     (transaction::publish) and the stored response commit together or not at all. Keep those
//     tables in the same database file.
//   * Schema. Created on first open and versioned in the table idem_meta (PRAGMA user_version is
//     left to the application, whose tables may share the file): idem_records, keyed by
//     (scope, key) as BLOBs, with an index on expires_at for sweep, and idem_outbox, the
//     messages transactional handlers publish (docs/outbox.md). Times are INTEGER nanoseconds
//     since the Unix epoch, so they round-trip exactly. An older file is migrated on open; a
//     file from a newer idem is refused.
//   * Bounds. With max_records or max_bytes set, the store keeps a usage row (maintained by
//     triggers, so every writer of the file keeps it exact) and checks it inside the claim,
//     complete and checkpoint transactions: a claim past a bound (the recovery bytes it gives
//     count) answers `full` after removing expired records; a response or checkpoint's recovery
//     that would pass max_bytes throws store_error(full). Without bounds there is no usage row
//     and no trigger.
//   * Errors. Options that can never work (an empty path, ":memory:", a zero pool) throw
//     std::invalid_argument. Everything SQLite refuses (a path that cannot be opened, a file that
//     is not a database, a read-only file, a database locked past the busy timeout, a schema from
//     a newer idem) throws store_error naming the path and SQLite's message; a full disk, or a
//     database at max_database_bytes, is store_failure::full. A failed write is rolled back:
//     nothing is half-written.
// Every option, its default and the durability trade-offs: docs/stores/sqlite.md. The parts, in
// store/sqlite/: the SQL text (statements.hpp), the connection and its write transaction
// (connection.hpp), a record in and out of the statements (record.hpp), the bounds (bounds.hpp),
// the handler's own SQL (handler_sql.hpp) and the outbox's writer (outbox.hpp).
#ifndef IDEM_STORE_SQLITE_HPP
#define IDEM_STORE_SQLITE_HPP

#include <idem/store/sqlite/detail/batch.hpp>
#include <idem/store/sqlite/detail/inspect.hpp>
#include <idem/store/sqlite/detail/one_commit.hpp>
#include <idem/store/sqlite/detail/store.hpp>

#endif  // IDEM_STORE_SQLITE_HPP
