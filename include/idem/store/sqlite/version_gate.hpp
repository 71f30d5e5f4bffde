// sqlite_version_gate: apply an entity's event only when its version is newer than the one
// applied last, with the consumer's writes in the same SQLite transaction as the bump.
//
//   idem::sqlite_store store{"/var/lib/orders/orders.sqlite3"};
//   idem::sqlite_version_gate gate{store};
//   for (const auto& event : queue.poll()) {
//     const auto outcome = gate.apply("orders", event.order_id, event.version,
//                                     [&](idem::sqlite_store::transaction& t) {
//                                       t.exec("UPDATE orders SET status = ?1 WHERE id = ?2",
//                                              event.status, event.order_id);
//                                     });
//     queue.ack(event);  // applied, duplicate or stale: the event is done with either way
//   }
//
// What a user must know:
//   * Atomicity. apply opens a write transaction with BEGIN IMMEDIATE, which takes the file's
//     one write lock before anything is read, then bumps the version with one conditional
//     upsert (INSERT ... ON CONFLICT (scope, entity) DO UPDATE ... WHERE excluded.version >
//     stored version); one row changed means the event is newer. Only then does the consumer
//     run, in that transaction, and COMMIT makes its writes and the new version durable
//     together. No other connection, thread or process can write between the check and the
//     commit, so two deliveries of one entity are applied one after the other, each seeing
//     what the other committed: the highest version wins, an older one never runs after it.
//   * The consumer. Called as consume(sqlite_store::transaction&), only for an applied event.
//     Its exception rolls back the bump and its writes and passes through unchanged: the
//     redelivery applies the event again. It must not COMMIT or ROLLBACK itself (SAVEPOINTs
//     are fine) nor call the store or the gate (they would wait for the lock it holds).
//     transaction::publish names messages after (scope, entity id + " " + version), so the
//     messages of one applied event get the same ids however often it is rolled back and
//     applied again, and never those of an idempotency key (a key has no space).
//   * The table. One row per (scope, entity id): scope and entity id as BLOBs (as the store's
//     records keep scope and key), the version as INTEGER, WITHOUT ROWID. Made on construction
//     when missing, in the store's file (the consumer's tables must be in that file too, to
//     share its transaction). A row is never removed by idem: removing it would let the
//     entity's old events apply again.
//   * Errors. Bad input throws std::invalid_argument before anything is read: an entity id
//     that is not 1 to max_entity_id_length bytes of visible ASCII, a negative version; so does
//     a bad table name at construction. The file locked past the busy timeout, an I/O error or
//     a full disk throw the store's store_error (unavailable, or full), with nothing committed.
// Every option and the reasoning: docs/version_gate.md.
#ifndef IDEM_STORE_SQLITE_VERSION_GATE_HPP
#define IDEM_STORE_SQLITE_VERSION_GATE_HPP

#include <sqlite3.h>

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
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/detail/connection.hpp>
#include <idem/store/sqlite/detail/record.hpp>
#include <idem/store/sqlite/error.hpp>
#include <idem/store/version_gate.hpp>

namespace idem {

class sqlite_version_gate {
 public:
  struct options {
    /// The table the versions are kept in, in the store's file; made when missing. A plain
    /// identifier: 1 to 50 letters, digits or underscores, not starting with a digit nor with
    /// "sqlite_" (SQLite keeps those names for itself).
    std::string table{default_version_gate_table};
    /// The longest entity id accepted, in bytes (1 to 255).
    std::size_t max_entity_id_length = max_key_length;
  };

  /// What the consumer is given: the store's own transaction, as complete_within hands it.
  using transaction = sqlite_store::transaction;

  /// Makes the table when missing. Throws std::invalid_argument for a bad option, store_error
  /// when the file cannot be written or the table there is not a version gate's.
  explicit sqlite_version_gate(sqlite_store store)
      : sqlite_version_gate(std::move(store), options{}) {}
  sqlite_version_gate(sqlite_store store, options settings)
      : store_(std::move(store)), options_(validate(std::move(settings))) {
    const std::string table = "\"" + options_.table + "\"";
    bump_sql_ = "INSERT INTO " + table +
                " (scope, entity, version) VALUES (?1, ?2, ?3) ON CONFLICT (scope, entity) DO "
                "UPDATE SET version = excluded.version WHERE excluded.version > " +
                table + ".version";
    read_sql_ = "SELECT version FROM " + table + " WHERE scope = ?1 AND entity = ?2";
    sqlite_store::lease connection = store_.acquire();
    detail::sqlite_connection& c = *connection.get();
    const std::string create = "CREATE TABLE IF NOT EXISTS " + table +
                               " (scope BLOB NOT NULL, entity BLOB NOT NULL, version INTEGER NOT "
                               "NULL CHECK (version >= 0), PRIMARY KEY (scope, entity)) "
                               "WITHOUT ROWID";
    c.execute_script(create.c_str(), "create the version gate's table");
    // A table of that name made by someone else fails here, with its reason, rather than at
    // the first event.
    (void)statement(c, bump_sql_);
    (void)statement(c, read_sql_);
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
                  "sqlite_version_gate::apply's consumer must be callable with an "
                  "idem::sqlite_store::transaction&: it writes through that transaction, so that "
                  "its writes commit with the version.");
    detail::check_version_gate_event(entity_id, version, options_.max_entity_id_length, who);
    sqlite_store::lease connection = store_.acquire();
    detail::sqlite_connection& c = *connection.get();
    // The write lock from here to COMMIT (or the rollback on leaving): the upsert's comparison
    // and the consumer's writes see no other writer's changes in between.
    detail::sqlite_write_transaction writing(c);
    {
      detail::sqlite_use bump(statement(c, bump_sql_));
      detail::sqlite_bind_key(c, bump.get(), scope, entity_id);
      detail::sqlite_bind_integer(c, bump.get(), 3, version);
      c.step(bump.get(), "bump an entity's version");
    }
    if (sqlite3_changes64(c.db()) == 0) {
      // The upsert's WHERE kept the row: what it holds is this version or a newer one.
      const std::optional<std::int64_t> stored = read(c, scope, entity_id);
      if (!stored) {
        throw store_error(store_failure::unavailable,
                          std::string(who) + ": the upsert changed no row and found none");
      }
      return {*stored == version ? version_gate_verdict::duplicate : version_gate_verdict::stale,
              *stored};
    }
    // The messages consume publishes are named after this event (see the top of this header).
    const std::string event_key = std::string(entity_id) + " " + std::to_string(version);
    transaction open(c, *store_.state_, fenced_key{scope, event_key, 0},
                     std::chrono::system_clock::now());
    std::invoke(consume, open);
    if (sqlite3_get_autocommit(c.db()) != 0) {
      throw std::logic_error(std::string(who) +
                             ": the consumer ended the transaction itself (COMMIT or ROLLBACK, "
                             "or a failed statement it went on after); use SAVEPOINTs");
    }
    writing.commit();
    return {version_gate_verdict::applied, version};
  }

  /// The version stored for (scope, entity_id); nothing when no event of it was applied. Reads
  /// without the write lock (in WAL mode a read never waits for a writer): the answer is the
  /// committed version at a moment within the call.
  std::optional<std::int64_t> stored_version(std::string_view scope, std::string_view entity_id) {
    detail::check_version_gate_event(entity_id, 0, options_.max_entity_id_length, who);
    sqlite_store::lease connection = store_.acquire();
    return read(*connection.get(), scope, entity_id);
  }

  const options& settings() const noexcept { return options_; }

 private:
  static constexpr const char* who = "idem::sqlite_version_gate";

  static options validate(options settings) {
    detail::check_version_gate_name(settings.table, "table", who);
    if (settings.table.size() >= 7 && sqlite3_strnicmp(settings.table.c_str(), "sqlite_", 7) == 0) {
      throw std::invalid_argument(std::string(who) + ": the table name '" + settings.table +
                                  "' starts with sqlite_, which SQLite keeps for itself");
    }
    detail::check_version_gate_max_length(settings.max_entity_id_length, who);
    return settings;
  }

  // The gate's statements are kept with the connection like a handler's own (prepared once per
  // connection, by their text); a failure to prepare is the store's, not the consumer's.
  sqlite3_stmt* statement(detail::sqlite_connection& c, const std::string& sql) const {
    try {
      return c.handler_statement(sql);
    } catch (const sqlite_error& error) {
      throw store_error(store_failure::unavailable,
                        std::string(who) + ": the table '" + options_.table + "' in '" +
                            c.settings().path + "' is not a version gate's (scope, entity, " +
                            "version): " + error.what());
    }
  }

  std::optional<std::int64_t> read(detail::sqlite_connection& c, std::string_view scope,
                                   std::string_view entity_id) const {
    detail::sqlite_use find(statement(c, read_sql_));
    detail::sqlite_bind_key(c, find.get(), scope, entity_id);
    if (c.step(find.get(), "read an entity's version") != SQLITE_ROW) return std::nullopt;
    return sqlite3_column_int64(find.get(), 0);
  }

  sqlite_store store_;
  options options_;
  std::string bump_sql_;
  std::string read_sql_;
};

}  // namespace idem

#endif  // IDEM_STORE_SQLITE_VERSION_GATE_HPP
