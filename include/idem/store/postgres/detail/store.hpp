// The class of idem::postgres_store, declared with every member: idem/store/postgres.hpp is its
// face (and documents it), and includes this header with the definitions of the members kept apart
// (detail/batch.hpp, detail/one_commit.hpp), which include this one.
#ifndef IDEM_STORE_POSTGRES_DETAIL_STORE_HPP
#define IDEM_STORE_POSTGRES_DETAIL_STORE_HPP

#include <libpq-fe.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/core/policy/backoff.hpp>
#include <idem/outbox/message.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/detail/connection_pool.hpp>
#include <idem/store/inspect.hpp>
#include <idem/store/one_commit.hpp>
#include <idem/store/postgres/detail/connection.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/requests.hpp>
#include <idem/store/postgres/detail/schema.hpp>
#include <idem/store/postgres/detail/session.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/detail/wire.hpp>
#include <idem/store/postgres/error.hpp>
#include <idem/store/postgres/outbox.hpp>
#include <idem/store/time_source.hpp>

namespace idem {

class postgres_version_gate;
namespace detail::postgres {
struct batch_access;
}

class postgres_store {
 public:
  /// Records keep no completion time: complete leaves expires_at as the claim set it, so the
  /// guard need not read the clock again for a completion (idem::reads_completion_time).
  static constexpr bool reads_completion_time = false;

  /// Isolation level of complete_within's transaction.
  enum class isolation : std::uint8_t { read_committed, repeatable_read, serializable };
  struct options {
    /// A libpq connection string ("host=... dbname=... user=...") or URI. Empty: libpq's
    /// defaults and PG* environment variables. With a primary and standbys, list every host
    /// with target_session_attrs=read-write ("host=a,b port=5432,5432 ..."): each connection
    /// the pool opens reaches whichever is the primary then, so the store follows a failover
    /// (docs/stores/postgres.md, "Replication and failover").
    std::string conninfo;
    /// Where the records live; plain identifiers (letters, digits, underscores). The schema is
    /// created when missing.
    std::string schema = "public";
    std::string table = "idem_records";
    /// Connections opened at most; a call waits for one when all are busy.
    std::size_t pool_size = 8;
    /// The most records one scope may hold that have not expired (released ones included: they
    /// keep their fence until then); a claim that would add one more answers `full`. Keeps one
    /// tenant from filling a table others share. When set, each claim is a transaction that
    /// takes a lock on its scope (pg_advisory_xact_lock) and counts the scope's records, three
    /// round trips more. Unlimited by default.
    std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
    /// Each statement's limit on the server (statement_timeout); zero: none. A statement that
    /// passes it is cancelled and the call throws store_error(unavailable).
    std::chrono::milliseconds statement_timeout{5000};
    /// How long a connection may sit idle inside a transaction before the server ends it
    /// (idle_in_transaction_session_timeout); zero: never. A holder paused inside
    /// complete_within keeps the record locked until then, so set it when handlers run in the
    /// transaction and a takeover must not wait for a stalled process.
    std::chrono::milliseconds idle_in_transaction_timeout{0};
    /// Connecting: libpq's connect_timeout, unless conninfo sets its own.
    std::chrono::milliseconds connect_timeout{10000};
    isolation transaction_isolation = isolation::read_committed;
    /// complete_within runs the handler at most 1 + this many times on 40001/40P01.
    unsigned max_serialization_retries = 10;
    /// How long complete_within waits before running the handler again: random, up to a bound
    /// that doubles with each retry. Retried at once, transactions that collided collide again:
    /// 64 connections completing over 16 shared rows under SERIALIZABLE saw some give up after
    /// 101 attempts.
    full_jitter serialization_backoff{std::chrono::microseconds{100},
                                      std::chrono::milliseconds{20}};
    time_source clock = time_source::server;
    /// Connect and migrate in the constructor, which then throws store_error(unavailable) when
    /// the server cannot be reached. false: the first call does it (and throws instead).
    bool connect_at_start = true;
    /// The largest payload transaction::publish accepts; a larger one throws
    /// std::invalid_argument at publish, and the handler's transaction rolls back. 1 MiB by
    /// default (idem::default_max_outbox_payload_bytes).
    std::size_t max_outbox_payload_bytes = default_max_outbox_payload_bytes;
    /// When the store creates its table: PARTITION BY HASH (scope) into this many partitions,
    /// <table>_p0 ... <table>_p<n-1>; 0 (the default) makes a plain table. 2 to 1024, or the
    /// constructor throws std::invalid_argument. Every statement that names a scope (claim,
    /// complete, release, checkpoint, find, the per-scope cap) is pruned to the one partition
    /// the scope hashes to, its uniqueness check included (the primary key holds the scope);
    /// sweep runs partition by partition. A table that exists keeps the layout it was made with:
    /// one made otherwise is refused, store_error(unavailable), when the store first connects
    /// (docs/stores/postgres.md, "Partitioning").
    std::size_t hash_partitions = 0;
    /// claim_within (commit_mode::one_commit): how long its claim waits for another
    /// transaction holding the same key (the transaction's lock_timeout) before it answers busy
    /// (in_progress). Keep it below statement_timeout, which would throw instead. It bounds
    /// the handler's own lock waits in that transaction too (SQLSTATE 55P03).
    std::chrono::milliseconds one_commit_lock_timeout{2000};
  };

  class transaction;

  /// A handle with no database: every call throws store_error(unavailable). It exists so that
  /// policies can hold a store before it is configured; give it options to use it.
  postgres_store() = default;

  /// Checks the options and the connection string (std::invalid_argument when either is
  /// malformed); with connect_at_start, connects and creates or migrates the table.
  explicit postgres_store(options config) : state_(std::make_shared<pool>(std::move(config))) {
    if (state_->config.connect_at_start) {
      auto connection = state_->acquire();
      connection.give_back();
    }
  }

  claim_result claim(const claim_request& request) {
    namespace pg = detail::postgres;
    const bool capped =
        state_checked().config.max_records_per_scope != std::numeric_limits<std::size_t>::max();
    // A claim whose answer is not yet decided (pg::claim_answer) is asked again.
    for (int attempt = 0; attempt < 1000; ++attempt) {
      pg::parameters values;
      pg::claim_parameters(values, request, caller_time());
      auto connection = state_checked().acquire();
      if (capped) {
        std::optional<claim_result> answer;
        try {
          answer = claim_within_cap(connection, request, values);
        } catch (...) {
          connection.roll_back();
          throw;
        }
        connection.give_back();
        if (answer) return *answer;
        continue;
      }
      const pg::result_ptr result = connection.run(pg::claim, values, "claim");
      connection.give_back();
      if (std::optional<claim_result> answer = pg::claim_answer(result.get(), request)) {
        return *answer;
      }
    }
    throw store_error(store_failure::unavailable,
                      "idem::postgres_store: claim: the record kept changing under 1000 attempts");
  }

  // With max_records_per_scope: the claim in a transaction that first takes the scope's turn
  // and counts its records; `full` when this claim would add one past the cap.
  std::optional<claim_result> claim_within_cap(auto& connection, const claim_request& request,
                                               const detail::postgres::parameters& values) {
    namespace pg = detail::postgres;
    connection.run_text("BEGIN", "claim: begin");
    pg::parameters scope;
    pg::scope_parameters(scope, request);
    (void)connection.run(pg::scope_turn, scope, "claim: wait for the scope's turn");
    pg::parameters room;
    pg::room_parameters(room, request, caller_time());
    const pg::result_ptr counted =
        connection.run(pg::scope_room, room, "claim: count the scope's records");
    if (pg::room_is_full(counted.get(), state_checked().config.max_records_per_scope)) {
      connection.run_text("COMMIT", "claim: commit");
      return claim_result{claim_status::full, 0, {}};
    }
    const pg::result_ptr result = connection.run(pg::claim, values, "claim");
    connection.run_text("COMMIT", "claim: commit");
    return pg::claim_answer(result.get(), request);
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    namespace pg = detail::postgres;
    pg::parameters values;
    pg::held_parameters(values, held);
    values.bytes(response);
    auto connection = state_checked().acquire();
    return pg::affected(connection.run(pg::complete, values, "complete").get()) == 1;
  }

  bool release(const fenced_key& held) {
    namespace pg = detail::postgres;
    pg::parameters values;
    pg::held_parameters(values, held);
    auto connection = state_checked().acquire();
    return pg::affected(connection.run(pg::release, values, "release").get()) == 1;
  }

  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    auto connection = state_checked().acquire();
    return checkpoint_on(connection, held, recovery, lease_until, false);
  }

  /// checkpoint for every entry in one statement (idem/store/batch.hpp's checkpoint_batch): a
  /// heartbeat's renewals.
  std::vector<bool> checkpoint_batch(std::span<const batch_checkpoint> entries,
                                     store_time lease_until) {
    namespace pg = detail::postgres;
    if (entries.empty()) return {};
    pg::parameters values;
    pg::checkpoint_arrays arrays;
    pg::checkpoint_batch_parameters(values, arrays, entries, lease_until, caller_time());
    auto connection = state_checked().acquire();
    return pg::renewed_entries(
        connection.run(pg::checkpoint_batch, values, "checkpoint_batch").get(), entries.size());
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    namespace pg = detail::postgres;
    pg::parameters values;
    pg::find_parameters(values, scope, key, now, caller_time());
    auto connection = state_checked().acquire();
    return pg::found_record(connection.run(pg::find, values, "find").get(), scope, key);
  }

  std::size_t sweep(store_time now) {
    namespace pg = detail::postgres;
    pool& shared = state_checked();
    auto connection = shared.acquire();
    if (shared.partition_sweeps.empty()) {
      pg::parameters values;
      pg::add_now(values, caller_time(), now);
      return pg::affected(connection.run(pg::sweep, values, "sweep").get());
    }
    // A partitioned table, one partition at a time: each statement walks that partition's
    // scopes through its own primary key, where one on the parent would merge every
    // partition's index at each step; and each commits on its own, so locks are held for one
    // partition's expired records at most.
    // The time is written into the SQL (a number, or NULL for the server's clock), not passed
    // as a parameter, which this session would plan generically (plan_cache_mode, session.hpp):
    // planned for its value, the walk over the scopes is chosen as on a plain table.
    const std::string time = caller_time() ? std::to_string(pg::to_nanoseconds(now)) : "NULL";
    std::size_t removed = 0;
    for (const std::string& sql : shared.partition_sweeps) {
      removed += pg::affected(connection.run_sql(pg::with_time(sql, time), "sweep").get());
    }
    return removed;
  }

  std::vector<record> stuck(store_time now, std::size_t limit) const {
    namespace pg = detail::postgres;
    pg::parameters values;
    pg::stuck_parameters(values, now, limit, caller_time());
    auto connection = state_checked().acquire();
    return pg::stuck_records(connection.run(pg::stuck, values, "stuck").get());
  }

  /// InspectableStore (idem/store/inspect.hpp; defined in detail/inspect.hpp).
  record_page list_records(const record_filter& filter, std::string_view cursor, std::size_t limit,
                           store_time now) const;
  forget_result forget(const forget_request& request);

  /// Runs `produce(transaction&)`, which returns the encoded response (std::string), inside one
  /// transaction that also completes the record under `held`: the handler's writes and the
  /// record commit together or not at all. Answers false, without calling produce, when the
  /// record is no longer held under that fence (or false after produce, if the fenced update
  /// finds it gone). produce's own exception rolls back and passes through unchanged; a
  /// serialization failure or deadlock rolls back and calls produce again, at most
  /// 1 + max_serialization_retries times, then throws store_error(unavailable).
  template <class Produce>
  bool complete_within(const fenced_key& held, store_time now, Produce&& produce);

  /// Batches (idem/store/batch.hpp), each one statement: store/postgres/batch.hpp.
  std::vector<claim_result> claim_batch(std::span<const claim_request> requests);
  std::vector<bool> complete_batch(std::span<const batch_completion> done, store_time now);
  template <class Produce>
  std::vector<bool> complete_batch_within(std::span<const fenced_key> held, store_time now,
                                          Produce&& produce);

  /// Claims, runs `produce(transaction&, claim_result&) -> std::string` and completes the
  /// record in ONE transaction, one commit (OneCommitStore, idem/store/one_commit.hpp): a
  /// duplicate waits on the key's index (at most one_commit_lock_timeout: then busy). Defined
  /// in store/postgres/one_commit.hpp.
  template <class Produce>
  one_commit_result claim_within(const claim_request& request, Produce&& produce);

  /// The options the store was made with (its table, isolation, time source).
  const options& configuration() const { return state_checked().config; }

  /// This store's outbox, for idem::postgres_outbox::publish in an application's own
  /// transaction: its schema and table, and its payload limit.
  postgres_outbox::target outbox_target() const {
    const options& config = state_checked().config;
    return {config.schema, config.table, config.max_outbox_payload_bytes};
  }

 private:
  friend class async_postgres_store;
  // The version gate (store/postgres/version_gate.hpp) borrows this store's connections and
  // runs its consumer in a transaction of this type.
  friend class postgres_version_gate;
  friend struct detail::postgres::batch_access;
  class pool;
  using connection_pool = detail::connection_pool<detail::postgres::connection_ptr>;
  using borrowed = detail::postgres::borrowed_connection;

  // The shared state of every copy: options, SQL, and the idle connections.
  class pool {
   public:
    explicit pool(options given) : config(with_pool(std::move(given))) {
      for (const std::string& partition :
           detail::postgres::partition_names(names.schema, config.table, config.hash_partitions)) {
        partition_sweeps.push_back(detail::postgres::sweep_sql(partition));
      }
    }
    pool(const pool&) = delete;
    pool& operator=(const pool&) = delete;
    ~pool() = default;

    borrowed acquire() { return borrowed{connections.acquire()}; }

    options config;
    // Checks the options, and opens every connection of the pool.
    detail::postgres::session_opener opener{session_options_of(config, "idem::postgres_store")};
    const detail::postgres::quoted_names& names = opener.names();
    // With hash_partitions: the sweep's SQL on each partition; empty for a plain table.
    std::vector<std::string> partition_sweeps;
    connection_pool connections{config.pool_size, pool_hooks()};

   private:
    // Checked before the connection pool is made from it.
    static options with_pool(options given) {
      if (given.pool_size == 0) {
        throw std::invalid_argument("idem::postgres_store: pool_size must be at least 1");
      }
      return given;
    }

    connection_pool::hooks pool_hooks() {
      // Usable: connected, and not left inside a transaction (a failed rollback).
      const auto usable = [](detail::postgres::connection_ptr& connection) {
        return PQstatus(connection.get()) == CONNECTION_OK &&
               PQtransactionStatus(connection.get()) == PQTRANS_IDLE;
      };
      return {
          .open = [this] { return connect(); },
          .reusable = usable,
          // A server that restarted closed every idle connection; reading what it sent notices
          // that here, for the price of one non-blocking recv, instead of failing the call.
          .alive =
              [usable](detail::postgres::connection_ptr& connection) {
                return PQconsumeInput(connection.get()) == 1 && usable(connection);
              },
      };
    }

    detail::postgres::connection_ptr connect() { return opener.open(); }
  };

  pool& state_checked() const {
    if (!state_) {
      throw store_error(store_failure::unavailable,
                        "idem::postgres_store: default-constructed, it has no database; construct "
                        "it with options");
    }
    return *state_;
  }

  // What opening a connection takes from the options; `who` leads its errors.
  static detail::postgres::session_options session_options_of(const options& config,
                                                              std::string who) {
    return {config.conninfo,
            config.connect_timeout,
            config.statement_timeout,
            config.idle_in_transaction_timeout,
            config.schema,
            config.table,
            std::move(who),
            config.hash_partitions};
  }

  bool caller_time() const { return state_checked().config.clock == time_source::caller; }

  bool checkpoint_on(borrowed& connection, const fenced_key& held, std::string_view recovery,
                     store_time lease_until, bool in_transaction) {
    namespace pg = detail::postgres;
    pg::parameters values;
    pg::checkpoint_parameters(values, held, recovery, lease_until, caller_time());
    return pg::affected(
               connection.run(pg::checkpoint, values, "checkpoint", in_transaction).get()) == 1;
  }

  std::shared_ptr<pool> state_;
};

/// What complete_within's `produce` is given: the connection inside the open transaction.
class postgres_store::transaction {
 public:
  /// The raw connection, for the handler's own SQL. Do not commit, roll back or close it. A
  /// serialization failure or deadlock met through it should be thrown as postgres_error (or
  /// run the SQL through exec, which does) so that complete_within retries.
  PGconn* connection() const noexcept { return connection_->get(); }

  /// Runs one SQL statement with text parameters (std::nullopt is NULL) and text results.
  /// Throws postgres_error when the server refuses it (a 40001/40P01 also marks the
  /// transaction for a retry, even if the handler catches the exception), and
  /// store_error(unavailable) when the connection is lost.
  postgres_result exec(std::string_view sql,
                       std::initializer_list<std::optional<std::string_view>> params = {}) {
    std::vector<std::string> owned;
    owned.reserve(params.size());
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const std::optional<std::string_view>& param : params) {
      if (param) {
        values.push_back(owned.emplace_back(*param).c_str());
      } else {
        values.push_back(nullptr);
      }
    }
    const std::string text(sql);
    postgres_result result{PQexecParams(connection(), text.c_str(), static_cast<int>(values.size()),
                                        nullptr, values.data(), nullptr, nullptr, 0)};
    const ExecStatusType status =
        result.get() != nullptr ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return result;
    const std::string message = detail::postgres::describe(connection(), result.get());
    if (detail::postgres::classify(connection(), result.get()) ==
        detail::postgres::failure_kind::connection) {
      // Not the handler's SQL failing: the database went away under it.
      throw store_error(store_failure::unavailable,
                        "idem::postgres_store: the handler's SQL: " + message);
    }
    const char* state = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
    postgres_error error(state != nullptr ? state : "", message);
    if (error.retryable()) retry_ = true;
    throw error;
  }

  /// Adds `message` to the outbox in this transaction, so that it commits with the handler's
  /// writes and the completed record, or not at all; answers its id,
  /// outbox_message_id(scope, key, name) of the record this transaction completes.
  ///
  /// The handler names the message rather than choosing its id, so that every run for one
  /// (scope, key) (a run after a takeover, or after a serialization failure) writes the same
  /// id: a name already published for this record adds nothing. Use one name per message of a
  /// handler. Throws std::invalid_argument for an empty name, a message without a topic, or a
  /// payload past options::max_outbox_payload_bytes; postgres_error when the server refuses the
  /// row (40001/40P01 mark the transaction for a retry, as exec does). Either passes through
  /// the handler and rolls the whole transaction back.
  std::string publish(std::string_view name, const outbox_message& message) {
    constexpr const char* who = "idem::postgres_store::transaction::publish";
    if (name.empty()) throw std::invalid_argument(std::string(who) + ": the message name is empty");
    std::string id = outbox_message_id(held_.scope, held_.key, name);
    const pool& shared = store_->state_checked();
    detail::check_outbox_message(id, message, shared.config.max_outbox_payload_bytes, who);
    try {
      (void)detail::postgres::write_outbox_prepared(connection(), id, message, now_, who);
    } catch (const postgres_error& error) {
      if (error.retryable()) retry_ = true;
      throw;
    }
    return id;
  }

  /// A recovery point recorded in this transaction (Store::checkpoint's semantics, on this
  /// connection: another one would wait on the lock this transaction holds). It commits or
  /// rolls back with the transaction.
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    return store_->checkpoint_on(*connection_, held, recovery, lease_until, true);
  }

 private:
  friend class postgres_store;
  friend class postgres_version_gate;
  friend struct detail::postgres::batch_access;
  transaction(postgres_store* store, borrowed* connection, const fenced_key& held,
              std::optional<std::int64_t> now) noexcept
      : store_(store), connection_(connection), held_(held), now_(now) {}

  postgres_store* store_;
  borrowed* connection_;
  // The claim this transaction completes: its scope and key name the messages published.
  fenced_key held_;
  // When the messages were written: the caller's time, or nothing for the server's clock.
  std::optional<std::int64_t> now_;
  bool retry_ = false;
};

namespace detail::postgres {
// BEGIN at an isolation level (complete_within's, both twins').
inline const char* begin_sql(postgres_store::isolation level) noexcept {
  switch (level) {
    case postgres_store::isolation::repeatable_read:
      return "BEGIN ISOLATION LEVEL REPEATABLE READ";
    case postgres_store::isolation::serializable:
      return "BEGIN ISOLATION LEVEL SERIALIZABLE";
    case postgres_store::isolation::read_committed:
      break;
  }
  return "BEGIN ISOLATION LEVEL READ COMMITTED";
}
}  // namespace detail::postgres

template <class Produce>
bool postgres_store::complete_within(const fenced_key& held, store_time now, Produce&& produce) {
  namespace pg = detail::postgres;
  pool& shared = state_checked();
  const char* begin = pg::begin_sql(shared.config.transaction_isolation);
  pg::parameters key;
  key.bytes(held.scope).bytes(held.key);
  for (unsigned attempt = 0;; ++attempt) {
    // A retry waits with its connection back in the pool.
    if (attempt > 0) pg::wait_before_retry(shared.config.serialization_backoff, attempt - 1);
    borrowed connection = shared.acquire();
    transaction txn(this, &connection, held,
                    shared.config.clock == time_source::caller
                        ? std::optional<std::int64_t>{pg::to_nanoseconds(now)}
                        : std::nullopt);
    try {
      // BEGIN and the lock in one round trip. The record is locked for the whole transaction: a
      // takeover waits for it to end.
      std::vector<pg::result_ptr> got =
          pg::pipelined(connection, 2, "complete_within: begin", [&](PGconn* c) {
            return PQsendQueryParams(c, begin, 0, nullptr, nullptr, nullptr, nullptr, 1) == 1 &&
                   PQsendQueryPrepared(c, pg::statement_names[pg::lock], key.count(), key.values(),
                                       key.lengths(), pg::parameters::formats(), 1) == 1;
          });
      if (!pg::succeeded(got[0])) connection.fail(got[0].get(), "complete_within: begin", true);
      if (!pg::succeeded(got[1])) connection.fail(got[1].get(), "complete_within: lock", true);
      const pg::result_ptr& locked = got[1];
      if (PQntuples(locked.get()) == 0 ||
          static_cast<std::uint64_t>(pg::get_int(locked.get(), 0, 0)) != held.fence ||
          pg::get_int(locked.get(), 0, 1) != 0) {
        connection.roll_back();
        return false;
      }
      const std::string bytes = produce(txn);
      if (txn.retry_) {
        // The handler met a serialization failure and swallowed it: the transaction is aborted.
        throw postgres_error("40001",
                             "idem::postgres_store: complete_within: the handler's "
                             "transaction hit a serialization failure");
      }
      // The completion and COMMIT in one round trip; a completion that finds the record no
      // longer in progress under the fence (the handler's own SQL changed it) commits nothing.
      pg::parameters values;
      pg::held_parameters(values, held);
      values.bytes(bytes);
      if (!pg::complete_and_commit(connection, values, "complete_within: complete",
                                   "complete_within: commit")) {
        connection.roll_back();
        return false;
      }
      return true;
    } catch (const postgres_error& error) {
      connection.roll_back();
      if (!error.retryable()) throw;
      if (attempt >= shared.config.max_serialization_retries) {
        throw store_error(store_failure::unavailable,
                          "idem::postgres_store: complete_within gave up after " +
                              std::to_string(attempt + 1) +
                              " serialization failures or deadlocks; the last: " + error.what());
      }
    } catch (...) {
      connection.roll_back();
      // A handler that turned a serialization failure into an exception of its own still ran
      // in an aborted transaction: run it again, as for postgres_error.
      if (!txn.retry_) throw;
      if (attempt >= shared.config.max_serialization_retries) {
        throw store_error(store_failure::unavailable,
                          "idem::postgres_store: complete_within gave up after " +
                              std::to_string(attempt + 1) + " serialization failures or deadlocks");
      }
    }
  }
}

}  // namespace idem

#endif  // IDEM_STORE_POSTGRES_DETAIL_STORE_HPP
