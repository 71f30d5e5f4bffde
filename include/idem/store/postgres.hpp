// postgres_store: records in a PostgreSQL table, so that many replicas of a service share one
// store. Needs libpq (link idem::postgres); include it by name, idem/idem.hpp does not.
//
//   idem::postgres_store::options config;
//   config.conninfo = "host=db.internal dbname=payments user=payments";
//   idem::postgres_store store{config};   // connects, creates or migrates its table
//
// What a user must know:
// * Claims are one atomic statement (INSERT ... ON CONFLICT (scope, key) DO UPDATE ... WHERE the
//   record may be claimed), so two replicas racing for one key are decided by the primary key,
//   never by a read followed by an insert. A record the claim creates or replaces starts with
//   the claim's recovery bytes; one it takes over keeps its own. complete, release and checkpoint
//   are UPDATEs conditional on the fence (WHERE fence = $n); zero rows means the holder lost the
//   key.
// * Time: by default (time_source::server) leases and expiry are read from the database
//   server's clock, so replicas whose clocks disagree still agree on when a lease ends; the
//   `now` the store is given is then ignored. time_source::caller uses the given `now` instead
//   (tests with a manual clock). Times are stored as int8 nanoseconds since the Unix epoch.
// * complete_within runs the handler's own SQL in the transaction that completes the record:
//   both commit or neither does, and so do the messages it publishes (transaction::publish)
//   into <table>_outbox (docs/outbox.md). Serialization failures and deadlocks (SQLSTATE 40001,
//   40P01) roll back and run the handler again, a bounded number of times.
// * Copies share one connection pool; the store may be used from many threads. A connection
//   found broken is dropped and a fresh one opened by the next call, so the store recovers by
//   itself after a server restart. A call the server cannot answer (down, restarting, statement
//   timeout) throws store_error(unavailable) carrying libpq's message.
// * The schema is created and migrated by the store itself, versioned in <table>_meta, under an
//   advisory lock so that replicas starting together do not race; a table from a newer idem is
//   refused. Needs PostgreSQL 13 or newer (the outbox keeps each row's xid8).
// Every option and its default: docs/stores/postgres.md. Its parts, in store/postgres/: the
// binary wire format and record decoding (wire.hpp), the statements' SQL (statements.hpp), the
// table's versions and their migration (schema.hpp), how a connection is opened and set up
// (session.hpp), each operation's parameters and answer (requests.hpp; async_postgres_store
// shares these), a borrowed connection (connection.hpp), how a failure is told apart
// (failure.hpp), what the handler's own SQL gets (error.hpp), and the outbox's writer
// (outbox.hpp).
#ifndef IDEM_STORE_POSTGRES_HPP
#define IDEM_STORE_POSTGRES_HPP

#include <idem/store/postgres/detail/batch.hpp>
#include <idem/store/postgres/detail/inspect.hpp>
#include <idem/store/postgres/detail/one_commit.hpp>
#include <idem/store/postgres/detail/store.hpp>

#endif  // IDEM_STORE_POSTGRES_HPP
