// postgres_version_gate: apply an entity's event only when its version is newer than the one
// applied last, with the consumer's writes in the same PostgreSQL transaction as the bump, so
// that many replicas consuming one stream agree on what was applied.
//
//   idem::postgres_store store{config};
//   idem::postgres_version_gate gate{store};
//   const auto outcome = gate.apply("orders", event.order_id, event.version,
//                                   [&](idem::postgres_store::transaction& t) {
//                                     t.exec("UPDATE orders SET status = $1 WHERE id = $2",
//                                            {event.status, event.order_id});
//                                   });
//
// What a user must know:
//   * Atomicity. One transaction (at the store's transaction_isolation) runs one statement,
//       INSERT INTO <table> ... ON CONFLICT (scope, entity) DO UPDATE SET version =
//       excluded.version
//         WHERE <table>.version < excluded.version RETURNING version
//     then, only when it returned a row, the consumer, then COMMIT. The primary key decides
//     between racing first events (the later insert waits for the earlier to commit, then takes
//     the update path); ON CONFLICT DO UPDATE locks the entity's row and, under READ COMMITTED,
//     judges the WHERE against its newest committed version, not the statement's snapshot. The
//     lock is held to COMMIT, so a second delivery of the entity waits until the first has
//     committed or rolled back and then compares with what is really stored: the highest
//     version wins, an older one never runs after a newer one committed, and no version runs
//     twice. Under REPEATABLE READ and SERIALIZABLE the server refuses such an update (40001)
//     instead; the gate then rolls back and runs the whole transaction again, as
//     complete_within does (max_serialization_retries, serialization_backoff).
//   * The consumer. Called as consume(postgres_store::transaction&), only for an applied event,
//     and again if the transaction is retried (it rolled back: nothing of the first run stays).
//     Its exception rolls back the bump and its writes and passes through unchanged. It must
//     not COMMIT, ROLLBACK or use another connection for the entity's writes.
//     transaction::publish names messages after (scope, entity id + " " + version).
//   * The table, <schema>.<table> (idem_versions in the store's schema by default): scope and
//     entity id as bytea (as the store's records keep scope and key), version int8 >= 0,
//     primary key (scope, entity), fillfactor 80 so that a bump (no indexed column changes) is
//     a HOT update. Made on construction when missing, under an advisory lock so that replicas
//     starting together do not race. A row is never removed by idem: removing it would let the
//     entity's old events apply again.
//   * Errors. Bad input throws std::invalid_argument before anything is sent: an entity id that
//     is not 1 to max_entity_id_length bytes of visible ASCII, a negative version, a schema or
//     table name that is not a plain identifier. A server that cannot be reached, a lost
//     connection or a statement timeout throw store_error(unavailable), a full disk
//     store_error(full), with nothing committed, except that a connection lost during COMMIT
//     leaves unknown whether it committed: redeliver the event, and the gate answers applied or
//     duplicate, which is the point of it.
// Every option and the reasoning: docs/version_gate.md.
#ifndef IDEM_STORE_POSTGRES_VERSION_GATE_HPP
#define IDEM_STORE_POSTGRES_VERSION_GATE_HPP

#include <libpq-fe.h>

#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <idem/core/key.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/detail/connection.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/schema.hpp>
#include <idem/store/postgres/detail/wire.hpp>
#include <idem/store/postgres/error.hpp>
#include <idem/store/version_gate.hpp>

namespace idem {

class postgres_version_gate {
 public:
  struct options {
    /// The schema the table is in; empty: the store's (postgres_store::options::schema). A
    /// plain identifier, made when missing.
    std::string schema{};
    /// The table the versions are kept in; made when missing. A plain identifier: 1 to 50
    /// letters, digits or underscores, not starting with a digit.
    std::string table{default_version_gate_table};
    /// The longest entity id accepted, in bytes (1 to 255).
    std::size_t max_entity_id_length = max_key_length;
  };

  /// What the consumer is given: the store's own transaction, as complete_within hands it.
  using transaction = postgres_store::transaction;

  /// Connects and makes the table when missing. Throws std::invalid_argument for a bad option,
  /// store_error(unavailable) when the server cannot be reached or the table there is not a
  /// version gate's.
  explicit postgres_version_gate(postgres_store store)
      : postgres_version_gate(std::move(store), options{}) {}
  postgres_version_gate(postgres_store store, options settings)
      : store_(std::move(store)), options_(validate(std::move(settings), store_)) {
    const std::string schema = "\"" + options_.schema + "\"";
    const std::string table = schema + ".\"" + options_.table + "\"";
    bump_sql_ = "INSERT INTO " + table +
                " AS stored (scope, entity, version) VALUES ($1, $2, $3) ON CONFLICT (scope, "
                "entity) DO UPDATE SET version = excluded.version WHERE stored.version < "
                "excluded.version RETURNING version";
    read_sql_ = "SELECT version FROM " + table + " WHERE scope = $1 AND entity = $2";
    make_table(schema, table);
  }

  /// Runs `consume(transaction&)` when `version` is newer than the version stored for
  /// (scope, entity_id), or when none is stored, in the transaction that stores `version`;
  /// answers applied. Answers duplicate (the same version is stored) or stale (a newer one is)
  /// without running it. consume's exception rolls both back and passes through; its result,
  /// if any, is discarded.
  template <class Consume>
  version_gate_outcome apply(std::string_view scope, std::string_view entity_id,
                             std::int64_t version, Consume&& consume) {
    static_assert(std::invocable<Consume&, transaction&>,
                  "postgres_version_gate::apply's consumer must be callable with an "
                  "idem::postgres_store::transaction&: it writes through that transaction, so "
                  "that its writes commit with the version.");
    namespace pg = detail::postgres;
    detail::check_version_gate_event(entity_id, version, options_.max_entity_id_length, who);
    postgres_store::pool& shared = store_.state_checked();
    const postgres_store::options& config = shared.config;
    const char* begin = "BEGIN ISOLATION LEVEL READ COMMITTED";
    if (config.transaction_isolation == postgres_store::isolation::repeatable_read) {
      begin = "BEGIN ISOLATION LEVEL REPEATABLE READ";
    } else if (config.transaction_isolation == postgres_store::isolation::serializable) {
      begin = "BEGIN ISOLATION LEVEL SERIALIZABLE";
    }
    pg::parameters values;
    values.bytes(scope).bytes(entity_id).int8(version);
    // The messages consume publishes are named after this event (see the top of this header).
    const std::string event_key = std::string(entity_id) + " " + std::to_string(version);
    for (unsigned attempt = 0;; ++attempt) {
      // A retry waits with its connection back in the pool.
      if (attempt > 0) pg::wait_before_retry(config.serialization_backoff, attempt - 1);
      postgres_store::borrowed connection = shared.acquire();
      transaction open(&store_, &connection, fenced_key{scope, event_key, 0}, written_at(config));
      try {
        connection.run_text(begin, "version gate: begin", true);
        const pg::result_ptr bumped = run(connection, bump_sql_, values, "version gate: bump");
        if (PQntuples(bumped.get()) == 0) {
          // The WHERE kept the row, which this transaction now holds locked: what it stores is
          // this version or a newer one, committed.
          const pg::result_ptr found =
              run(connection, read_sql_, values, "version gate: read the stored version");
          connection.roll_back();
          if (PQntuples(found.get()) == 0) {
            throw store_error(store_failure::unavailable,
                              std::string(who) + ": the upsert changed no row and found none");
          }
          const std::int64_t stored = pg::get_int(found.get(), 0, 0);
          return {stored == version ? version_gate_verdict::duplicate : version_gate_verdict::stale,
                  stored};
        }
        std::invoke(consume, open);
        if (open.retry_) {
          // The consumer met a serialization failure and swallowed it: the transaction is
          // aborted.
          throw postgres_error("40001", std::string(who) +
                                            ": the consumer's transaction hit a serialization "
                                            "failure");
        }
        connection.run_text("COMMIT", "version gate: commit", true);
        return {version_gate_verdict::applied, version};
      } catch (const postgres_error& error) {
        connection.roll_back();
        if (!error.retryable()) throw;
        give_up_after(attempt, config, error.what());
      } catch (...) {
        connection.roll_back();
        // A consumer that turned a serialization failure into an exception of its own still
        // ran in an aborted transaction: run it again, as for postgres_error.
        if (!open.retry_) throw;
        give_up_after(attempt, config, "the consumer's own exception");
      }
    }
  }

  /// The version stored for (scope, entity_id); nothing when no event of it was applied. The
  /// committed version at a moment within the call.
  std::optional<std::int64_t> stored_version(std::string_view scope, std::string_view entity_id) {
    namespace pg = detail::postgres;
    detail::check_version_gate_event(entity_id, 0, options_.max_entity_id_length, who);
    pg::parameters values;
    values.bytes(scope).bytes(entity_id);
    postgres_store::borrowed connection = store_.state_checked().acquire();
    const pg::result_ptr found =
        run(connection, read_sql_, values, "version gate: read the stored version");
    if (PQntuples(found.get()) == 0) return std::nullopt;
    return pg::get_int(found.get(), 0, 0);
  }

  const options& settings() const noexcept { return options_; }

 private:
  static constexpr const char* who = "idem::postgres_version_gate";

  static options validate(options settings, const postgres_store& store) {
    if (settings.schema.empty()) settings.schema = store.configuration().schema;
    detail::check_version_gate_name(settings.schema, "schema", who);
    detail::check_version_gate_name(settings.table, "table", who);
    detail::check_version_gate_max_length(settings.max_entity_id_length, who);
    return settings;
  }

  // The time the messages consume publishes are written at: the server's, unless the store
  // reads the caller's clock (then this machine's: the gate is given no clock).
  static std::optional<std::int64_t> written_at(const postgres_store::options& config) {
    if (config.clock == time_source::server) return std::nullopt;
    return detail::postgres::to_nanoseconds(std::chrono::system_clock::now());
  }

  [[noreturn]] static void give_up(unsigned attempt, const std::string& last) {
    throw store_error(store_failure::unavailable,
                      std::string(who) + ": gave up after " + std::to_string(attempt + 1) +
                          " serialization failures or deadlocks; the last: " + last);
  }
  static void give_up_after(unsigned attempt, const postgres_store::options& config,
                            const std::string& last) {
    if (attempt >= config.max_serialization_retries) give_up(attempt, last);
  }

  // One statement of the gate's, its parameters bound in binary (bytea, bytea, int8), its
  // results binary; a failure throws as the store's own statements do (a 40001 or 40P01 as
  // postgres_error, for the retry).
  static detail::postgres::result_ptr run(postgres_store::borrowed& connection,
                                          const std::string& sql,
                                          const detail::postgres::parameters& values,
                                          const char* what) {
    namespace pg = detail::postgres;
    static constexpr std::array<Oid, 3> types{pg::bytea_oid, pg::bytea_oid, pg::int8_oid};
    pg::result_ptr result{PQexecParams(connection.get(), sql.c_str(), values.count(), types.data(),
                                       values.values(), values.lengths(), pg::parameters::formats(),
                                       1)};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return result;
    connection.fail(result.get(), what, true);
  }

  // Creates the schema and the table when missing, under an advisory lock on the table's name
  // (replicas starting together would otherwise race in CREATE TABLE IF NOT EXISTS, which is
  // not safe against itself), then checks that the table is a gate's.
  void make_table(const std::string& schema, const std::string& table) {
    namespace pg = detail::postgres;
    postgres_store::borrowed connection = store_.state_checked().acquire();
    const std::string lock = "SELECT pg_advisory_xact_lock(" +
                             std::to_string(pg::migration_lock_key("idem version gate " + table)) +
                             ")";
    const std::string create =
        "CREATE TABLE IF NOT EXISTS " + table +
        " (scope bytea NOT NULL, entity bytea NOT NULL, version int8 NOT NULL CHECK (version >= "
        "0), PRIMARY KEY (scope, entity)) WITH (fillfactor = 80)";
    try {
      connection.run_text("BEGIN", "version gate: making the table: begin");
      connection.run_text(lock.c_str(), "version gate: making the table: advisory lock");
      connection.run_text(("CREATE SCHEMA IF NOT EXISTS " + schema).c_str(),
                          "version gate: making the table: schema");
      connection.run_text(create.c_str(), "version gate: making the table");
      connection.run_text("COMMIT", "version gate: making the table: commit");
    } catch (...) {
      connection.roll_back();
      throw;
    }
    // The upsert planned, not run: EXPLAIN finds the columns and the unique key ON CONFLICT
    // needs, so that a table of that name made by someone else fails here, with the server's
    // reason, rather than at the first event.
    pg::parameters probe;
    probe.bytes("").bytes("").int8(0);
    const std::string explain = "EXPLAIN " + bump_sql_;
    try {
      (void)run(connection, explain, probe, "version gate: checking the table");
    } catch (const store_error& error) {
      throw store_error(error.failure(), std::string(who) + ": the table " + table +
                                             " is not a version gate's (scope, entity, version, "
                                             "primary key (scope, entity)): " +
                                             error.what());
    }
  }

  postgres_store store_;
  options options_;
  std::string bump_sql_;
  std::string read_sql_;
};

}  // namespace idem

#endif  // IDEM_STORE_POSTGRES_VERSION_GATE_HPP
