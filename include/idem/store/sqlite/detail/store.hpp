// The class of idem::sqlite_store, declared with every member: idem/store/sqlite.hpp is its face
// (and documents it), and includes this header with the definitions of the members kept
// apart (detail/batch.hpp, detail/one_commit.hpp), which include this one.
#ifndef IDEM_STORE_SQLITE_DETAIL_STORE_HPP
#define IDEM_STORE_SQLITE_DETAIL_STORE_HPP

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/outbox/message.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/detail/connection_pool.hpp>
#include <idem/store/inspect.hpp>
#include <idem/store/one_commit.hpp>
#include <idem/store/sqlite/detail/bounds.hpp>
#include <idem/store/sqlite/detail/connection.hpp>
#include <idem/store/sqlite/detail/handler_sql.hpp>
#include <idem/store/sqlite/detail/record.hpp>
#include <idem/store/sqlite/detail/statements.hpp>
#include <idem/store/sqlite/error.hpp>
#include <idem/store/sqlite/group_commit.hpp>
#include <idem/store/sqlite/outbox.hpp>

namespace idem {

class sqlite_version_gate;
namespace detail {
struct sqlite_batch_access;
}

class sqlite_store {
 public:
  /// Records keep no completion time: complete leaves expires_at as the claim set it, so the
  /// guard need not read the clock again for a completion (idem::reads_completion_time).
  static constexpr bool reads_completion_time = false;

  enum class synchronous_mode : std::uint8_t {
    /// fsync at every commit: a commit survives power loss. The default.
    full,
    /// No fsync at commit (WAL): survives a crash of the process, may lose the last commits on
    /// power loss or an OS crash. Several times faster on a disk with slow fsync.
    normal,
  };

  struct options {
    /// The database file (created if absent), or a "file:" URI.
    std::string path;
    synchronous_mode synchronous = synchronous_mode::full;
    /// How long a write waits for another connection's write lock (and a call for a free
    /// connection) before it throws store_error(unavailable).
    std::chrono::milliseconds busy_timeout{5000};
    /// Connections the store opens at most; they are opened as threads need them.
    std::size_t pool_size = 8;
    /// Bounds; see the top of this header. A bounded store keeps a usage row up to date.
    std::size_t max_records = std::numeric_limits<std::size_t>::max();
    std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
    /// The most records one scope may hold that have not expired (released ones included: they
    /// keep their fence until then); a claim that would add one more answers `full`. Keeps one
    /// tenant from filling a store others share. Counted inside the claim's write transaction.
    std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
    /// Records sweep removes per transaction: between batches other writers get the lock.
    std::size_t sweep_batch = 1000;
    /// A hard cap on the database's size (PRAGMA max_page_count); a write past it throws
    /// store_error(full). 0: none.
    std::uint64_t max_database_bytes = 0;
    /// The WAL's length, in pages, past which a commit restarts it: a RESTART checkpoint that
    /// waits (up to busy_timeout) for the transactions on older snapshots, copies every frame
    /// into the database and lets the next writer write the WAL from its start. SQLite's own
    /// checkpoint after a commit (every 1,000 pages, kept below this) copies what it can but
    /// never restarts a WAL that some transaction always reads: under a load that always has
    /// one open, the WAL grows without bound, and each checkpoint sorts all of it
    /// (docs/stores/sqlite.md, "The WAL"). 0: SQLite's own checkpoints only.
    std::size_t max_wal_pages = 4000;
    /// The largest payload transaction::publish accepts; a larger one throws
    /// std::invalid_argument at publish, and the handler's transaction rolls back. 1 MiB by
    /// default (idem::default_max_outbox_payload_bytes).
    std::size_t max_outbox_payload_bytes = default_max_outbox_payload_bytes;
    /// Group commit: concurrent claims, completions, releases and checkpoints of this store
    /// share one write transaction and its one fsync (store/sqlite/group_commit.hpp,
    /// docs/stores/sqlite.md). Off by default.
    sqlite_group_commit_options group_commit{};
  };

  /// A value of the handler's own SQL that is bound as a BLOB (strings are bound as TEXT).
  using blob = detail::sqlite_blob;

  class transaction;

  /// A handle to nothing: every operation throws store_error. Exists so that a policies struct
  /// can name sqlite_store; give the wrapper a store constructed with a path.
  sqlite_store() = default;
  explicit sqlite_store(std::string path) : sqlite_store(options_for(std::move(path))) {}
  explicit sqlite_store(options settings) : state_(std::make_shared<state>(std::move(settings))) {
    lease connection = acquire();
    migrate(*connection.get());
  }

  claim_result claim(const claim_request& request) {
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    const std::int64_t now = detail::sqlite_nanoseconds(request.now);
    bool absent = true;
    if (std::optional<record> existing = read_before_writing(c, request, now, absent)) {
      return {claim_status::existing, 0, std::move(*existing)};
    }
    if (state_->group.enabled()) {
      connection.give_back();  // the group's leader writes on a connection of its own
      auto write = [&](detail::sqlite_connection& leader) {
        detail::sqlite_enclosed_write in_group;
        return claim_writing(leader, request, absent, now, in_group);
      };
      return grouped(write);
    }
    // Atomic: BEGIN IMMEDIATE takes the database's one write lock before the statements below,
    // and COMMIT lets it go, so no connection in any thread or process writes this record
    // between our read and our write.
    detail::sqlite_write_transaction writing(c);
    return claim_writing(c, request, absent, now, writing);
  }

 private:
  // Read first without the write lock: a replay, a 409 or a mismatch changes nothing, and in WAL
  // mode such a read never waits for a writer. The snapshot of a record the caller may not run
  // (the state at this read's snapshot, which lies within the call), or nothing; `absent` is
  // cleared when the key has a record at all.
  static std::optional<record> read_before_writing(detail::sqlite_connection& c,
                                                   const claim_request& request, std::int64_t now,
                                                   bool& absent) {
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
    detail::sqlite_bind_key(c, read.get(), request.scope, request.key);
    if (c.step(read.get(), "read a record") != SQLITE_ROW) return std::nullopt;
    absent = false;
    const detail::sqlite_row found = detail::sqlite_read_row(read.get(), 0);
    if (detail::sqlite_decide(found, request, now) != detail::sqlite_decision::existing) {
      return std::nullopt;
    }
    return detail::sqlite_snapshot(read.get(), 0, found);
  }

  // The claim's writing part, under the write lock: in `writing` (a transaction of its own, or
  // a group commit's savepoint), whose commit() makes it final.
  template <class Writing>
  claim_result claim_writing(detail::sqlite_connection& c, const claim_request& request,
                             bool absent, std::int64_t now, Writing& writing) {
    const bool capped =
        state_->settings.max_records_per_scope != std::numeric_limits<std::size_t>::max();
    if (absent && !state_->bounded && !capped) {
      // The key was absent a moment ago and most likely still is: insert it, with the claim's
      // recovery bytes, unless it is there now (the unique key decides, under the write lock).
      // Only if it appeared in between do we read it again and decide below.
      detail::sqlite_use insert(c.statement(detail::sqlite_statement::create_if_absent));
      detail::sqlite_bind_new_record(c, insert.get(), request, 1);
      c.step(insert.get(), "claim a record");
      if (sqlite3_changes64(c.db()) == 1) {
        writing.commit();
        return {claim_status::claimed, 1, {}};
      }
    }
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
    detail::sqlite_bind_key(c, read.get(), request.scope, request.key);
    std::optional<detail::sqlite_row> found;
    std::int64_t found_bytes = 0;
    if (c.step(read.get(), "read a record") == SQLITE_ROW) {
      found = detail::sqlite_read_row(read.get(), 0);
      found_bytes = static_cast<std::int64_t>(request.scope.size() + request.key.size()) +
                    sqlite3_column_bytes(read.get(), 6) + sqlite3_column_bytes(read.get(), 7);
    }
    const detail::sqlite_decision decided =
        found ? detail::sqlite_decide(*found, request, now) : detail::sqlite_decision::create;
    if (decided == detail::sqlite_decision::existing) {
      claim_result result{claim_status::existing, 0,
                          detail::sqlite_snapshot(read.get(), 0, *found)};
      return result;  // rolled back: nothing was written
    }
    if (decided == detail::sqlite_decision::take_over) {
      // The record keeps its recovery bytes: the new holder resumes from them.
      record taken = detail::sqlite_snapshot(read.get(), 0, *found);
      sqlite3_reset(read.get());
      taken.fence = found->fence + 1;
      taken.lease_until = request.now + request.lease;
      detail::sqlite_use update(c.statement(detail::sqlite_statement::take_over));
      detail::sqlite_bind_key(c, update.get(), request.scope, request.key);
      detail::sqlite_bind_integer(c, update.get(), 3, static_cast<std::int64_t>(taken.fence));
      detail::sqlite_bind_integer(c, update.get(), 4,
                                  detail::sqlite_nanoseconds(taken.lease_until));
      c.step(update.get(), "take over a claim");
      writing.commit();
      const std::uint64_t fence = taken.fence;
      return {claim_status::taken_over, fence, std::move(taken)};
    }
    sqlite3_reset(read.get());
    // detail::sqlite_decision::create: a new key, or an expired or released record replaced under a
    // higher fence than it ever had, starting with this claim's recovery bytes.
    const std::uint64_t fence = found ? found->fence + 1 : 1;
    if (capped) {
      detail::sqlite_use count(c.statement(detail::sqlite_statement::count_live_in_scope));
      detail::sqlite_bind_bytes(c, count.get(), 1, request.scope);
      detail::sqlite_bind_integer(c, count.get(), 2, now);
      c.step(count.get(), "count the scope's records");
      std::int64_t live = sqlite3_column_int64(count.get(), 0);
      if (found && now < found->expires_at) --live;  // the record this claim replaces
      if (live >= 0 && static_cast<std::uint64_t>(live) >= state_->settings.max_records_per_scope) {
        writing.commit();
        return {claim_status::full, 0, {}};
      }
    }
    if (state_->bounded &&
        !detail::sqlite_has_room(c, state_->limits, request, found.has_value(), found_bytes)) {
      // Expired records are not live: make room from them before saying full.
      detail::sqlite_use removal(c.statement(detail::sqlite_statement::delete_expired));
      detail::sqlite_bind_integer(c, removal.get(), 1, now);
      c.step(removal.get(), "remove expired records");
      const bool replaced_was_swept = found && found->expires_at <= now;
      if (!detail::sqlite_has_room(c, state_->limits, request, found && !replaced_was_swept,
                                   replaced_was_swept ? 0 : found_bytes)) {
        writing.commit();
        return {claim_status::full, 0, {}};
      }
    }
    detail::sqlite_use insert(c.statement(detail::sqlite_statement::create_record));
    detail::sqlite_bind_new_record(c, insert.get(), request, fence);
    c.step(insert.get(), "claim a record");
    writing.commit();
    return {claim_status::claimed, fence, {}};
  }

 public:
  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    if (grouping()) return grouped(detail::sqlite_group_complete{limits(), held, response});
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    if (!state_->bounded)
      return detail::sqlite_fenced_write(c, detail::sqlite_statement::complete, held, response);
    detail::sqlite_write_transaction writing(c);
    std::optional<detail::sqlite_held_size> sizes = detail::sqlite_held_sizes(c, held);
    if (!sizes) return false;
    detail::sqlite_reserve_bytes(c, state_->limits, response.size(),
                                 sizes->response + sizes->recovery);
    if (!detail::sqlite_fenced_write(c, detail::sqlite_statement::complete, held, response))
      return false;
    writing.commit();
    return true;
  }

  bool release(const fenced_key& held) {
    if (grouping()) return grouped(detail::sqlite_group_release{held});
    lease connection = acquire();
    return detail::sqlite_fenced_write(*connection.get(), detail::sqlite_statement::release, held,
                                       {});
  }

  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    if (grouping()) {
      return grouped(detail::sqlite_group_checkpoint{limits(), held, recovery, lease_until});
    }
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    if (!state_->bounded) {
      return detail::sqlite_fenced_write(c, detail::sqlite_statement::checkpoint, held, recovery,
                                         lease_until);
    }
    detail::sqlite_write_transaction writing(c);
    if (!detail::sqlite_bounded_checkpoint(c, state_->limits, held, recovery, lease_until))
      return false;
    writing.commit();
    return true;
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) {
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
    detail::sqlite_bind_key(c, read.get(), scope, key);
    if (c.step(read.get(), "read a record") != SQLITE_ROW) return std::nullopt;
    const detail::sqlite_row found = detail::sqlite_read_row(read.get(), 0);
    if (found.state == detail::sqlite_released ||
        found.expires_at <= detail::sqlite_nanoseconds(now)) {
      return std::nullopt;
    }
    record out = detail::sqlite_snapshot(read.get(), 0, found);
    out.scope = scope;
    out.key = key;
    return out;
  }

  std::size_t sweep(store_time now) {
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    const std::size_t batch = state_->settings.sweep_batch;
    std::size_t removed = 0;
    for (;;) {
      // Each batch is one autocommit statement: its own write transaction.
      detail::sqlite_use removal(c.statement(detail::sqlite_statement::sweep_batch));
      detail::sqlite_bind_integer(c, removal.get(), 1, detail::sqlite_nanoseconds(now));
      detail::sqlite_bind_integer(c, removal.get(), 2, static_cast<std::int64_t>(batch));
      c.step(removal.get(), "sweep expired records");
      const auto changed = static_cast<std::size_t>(sqlite3_changes64(c.db()));
      removed += changed;
      if (changed < batch) return removed;
    }
  }

  std::vector<record> stuck(store_time now, std::size_t limit) {
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    std::vector<record> out;
    if (limit == 0) return out;
    detail::sqlite_use list(c.statement(detail::sqlite_statement::stuck));
    detail::sqlite_bind_integer(c, list.get(), 1, detail::sqlite_nanoseconds(now));
    detail::sqlite_bind_integer(
        c, list.get(), 2,
        static_cast<std::int64_t>(std::min<std::size_t>(
            limit, static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()))));
    while (c.step(list.get(), "list stuck records") == SQLITE_ROW) {
      record found = detail::sqlite_snapshot(list.get(), 2, detail::sqlite_read_row(list.get(), 2));
      found.scope = detail::sqlite_column_bytes(list.get(), 0);
      found.key = detail::sqlite_column_bytes(list.get(), 1);
      out.push_back(std::move(found));
    }
    return out;
  }

  /// InspectableStore (idem/store/inspect.hpp; defined in detail/inspect.hpp).
  record_page list_records(const record_filter& filter, std::string_view cursor, std::size_t limit,
                           store_time now);
  forget_result forget(const forget_request& request);

  /// Runs `produce(transaction&) -> std::string` (the encoded response) inside ONE write
  /// transaction that also completes the record held, so the handler's own writes and the
  /// stored response commit together or not at all.
  ///   * The record is not in progress under held.fence: rolls back, answers false, and never
  ///     calls produce.
  ///   * produce throws: rolls back and rethrows the same exception.
  ///   * The store's own statements fail (begin, complete, commit): rolls back, throws
  ///     store_error; a response past max_bytes throws store_error(full).
  /// produce must not end the transaction itself (COMMIT, ROLLBACK); use SAVEPOINTs inside it.
  /// It must not call this store's other operations either: they would wait for the write lock
  /// this transaction holds. Record a recovery point with transaction::checkpoint instead.
  template <class Produce>
  bool complete_within(const fenced_key& held, store_time now, Produce&& produce);

  /// What group commit has done since this store was opened (zeros when it is off).
  sqlite_group_commit_stats group_commit_stats() const {
    require();
    return state_->group.stats();
  }

  /// Batches (idem/store/batch.hpp), each in one write transaction: store/sqlite/batch.hpp.
  std::vector<claim_result> claim_batch(std::span<const claim_request> requests);
  std::vector<bool> complete_batch(std::span<const batch_completion> done, store_time now);
  template <class Produce>
  std::vector<bool> complete_batch_within(std::span<const fenced_key> held, store_time now,
                                          Produce&& produce);

  /// Claims, runs `produce(transaction&, claim_result&) -> std::string` and completes the
  /// record in ONE write transaction, one commit (OneCommitStore, idem/store/one_commit.hpp):
  /// a duplicate waits on the write lock (at most the busy timeout: then busy). Defined in
  /// store/sqlite/one_commit.hpp.
  template <class Produce>
  one_commit_result claim_within(const claim_request& request, Produce&& produce);

  /// The file this store keeps its records in.
  const std::string& path() const {
    require();
    return state_->settings.path;
  }

 private:
  struct state {
    explicit state(options given) : settings(validate(std::move(given))) {
      limits = {.max_records = settings.max_records, .max_bytes = settings.max_bytes};
      bounded = settings.max_records != std::numeric_limits<std::size_t>::max() ||
                settings.max_bytes != std::numeric_limits<std::size_t>::max();
      connection_settings.path = settings.path;
      connection_settings.synchronous_full = settings.synchronous == synchronous_mode::full;
      connection_settings.busy_timeout = settings.busy_timeout;
      connection_settings.sweep_batch = settings.sweep_batch;
      connection_settings.max_database_bytes = settings.max_database_bytes;
      connection_settings.max_wal_pages = static_cast<int>(settings.max_wal_pages);
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    options settings;
    detail::sqlite_settings connection_settings;
    detail::sqlite_bounds limits;
    bool bounded = false;
    detail::connection_pool<std::unique_ptr<detail::sqlite_connection>> connections{
        settings.pool_size, pool_hooks()};
    detail::sqlite_group_committer group{settings.group_commit};

   private:
    detail::connection_pool<std::unique_ptr<detail::sqlite_connection>>::hooks pool_hooks() {
      return {
          .open = [this] { return detail::sqlite_connection::open(connection_settings); },
          // A connection still inside a transaction (its rollback failed) is not handed on.
          .reusable =
              [](const std::unique_ptr<detail::sqlite_connection>& connection) {
                return sqlite3_get_autocommit(connection->db()) != 0;
              },
          .alive = {},
      };
    }
  };

  // A connection borrowed from the pool for one operation.
  using lease = detail::connection_pool<std::unique_ptr<detail::sqlite_connection>>::lease;

  static options options_for(std::string path) {
    options settings;
    settings.path = std::move(path);
    return settings;
  }

  static options validate(options settings) {
    if (settings.path.empty()) {
      throw std::invalid_argument("idem::sqlite_store: the database path is empty");
    }
    if (settings.path == ":memory:") {
      throw std::invalid_argument(
          "idem::sqlite_store: ':memory:' gives each connection a database of its own and keeps "
          "nothing; use a file, or idem::memory_store for a store that need not survive");
    }
    if (settings.pool_size == 0) {
      throw std::invalid_argument("idem::sqlite_store: pool_size must be at least 1");
    }
    if (settings.sweep_batch == 0 ||
        settings.sweep_batch > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw std::invalid_argument("idem::sqlite_store: sweep_batch must be 1 to 2^31 - 1");
    }
    if (settings.busy_timeout < std::chrono::milliseconds::zero()) {
      throw std::invalid_argument("idem::sqlite_store: the busy timeout cannot be negative");
    }
    if (settings.max_wal_pages > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw std::invalid_argument("idem::sqlite_store: max_wal_pages must be 0 to 2^31 - 1");
    }
    detail::sqlite_check_group_commit(settings.group_commit);
    return settings;
  }

  void require() const {
    if (!state_) {
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_store: this store was default-constructed and has no "
                        "database; construct it with a path");
    }
  }

  lease acquire() {
    require();
    lease connection = state_->connections.acquire_for(state_->settings.busy_timeout);
    if (!connection.held()) {
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_store: all " + std::to_string(state_->settings.pool_size) +
                            " connections to '" + state_->settings.path +
                            "' stayed busy past the busy timeout");
    }
    return connection;
  }

  bool grouping() const {
    require();
    return state_->group.enabled();
  }
  const detail::sqlite_bounds* limits() const {
    return state_->bounded ? &state_->limits : nullptr;
  }

  // Runs `write(connection&)` in the next group commit (store/sqlite/group_commit.hpp).
  template <class Write>
  std::invoke_result_t<Write&, detail::sqlite_connection&> grouped(Write&& write) {
    auto lend = [this] { return acquire(); };
    return state_->group.run(lend, write);
  }

  // Creates, migrates or checks the schema. Inside BEGIN IMMEDIATE, so processes that open a
  // file at once take turns: the first creates or migrates, the others find it done.
  void migrate(detail::sqlite_connection& c) {
    detail::sqlite_write_transaction writing(c);
    c.execute_script(
        "CREATE TABLE IF NOT EXISTS idem_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "create the schema");
    const std::string found =
        c.text_of("SELECT value FROM idem_meta WHERE name = 'schema_version'", "read the schema");
    const int version = found.empty() ? 0 : std::stoi(found);
    if (version > detail::sqlite_schema_version) {
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_store: '" + state_->settings.path +
                            "' holds idem schema version " + found + ", newer than this idem's " +
                            std::to_string(detail::sqlite_schema_version) +
                            " (its tables, idem_outbox among them, may have changed in ways "
                            "this idem would write wrongly); upgrade idem");
    }
    // One version at a time, all in this transaction: a file is at one version or the next.
    for (int next = version; next < detail::sqlite_schema_version; ++next) {
      c.execute_script(detail::sqlite_schema_versions[static_cast<std::size_t>(next)],
                       "migrate the schema");
    }
    if (version < detail::sqlite_schema_version) {
      c.execute_script(("INSERT INTO idem_meta (name, value) VALUES ('schema_version', " +
                        std::to_string(detail::sqlite_schema_version) +
                        ") ON CONFLICT (name) DO UPDATE SET value = excluded.value")
                           .c_str(),
                       "migrate the schema");
    }
    if (state_->bounded) c.execute_script(detail::sqlite_usage_schema, "create the usage row");
    writing.commit();
  }

  // The version gate (store/sqlite/version_gate.hpp) borrows this store's connections and runs
  // its consumer in a transaction of this type.
  friend class sqlite_version_gate;
  friend struct detail::sqlite_batch_access;

  std::shared_ptr<state> state_;
};

/// What complete_within's handler is given: the connection inside the open write transaction.
/// Its own statements run in that transaction and commit with the record, or not at all.
class sqlite_store::transaction {
 public:
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;

  /// The raw connection, for anything exec and query do not cover. Do not COMMIT or ROLLBACK
  /// (SAVEPOINT and RELEASE are fine), and do not keep it past the handler.
  sqlite3* connection() const noexcept { return connection_->db(); }

  /// Runs one statement with `values` bound to ?1, ?2, ... and answers the rows it changed.
  /// Integers bind as INTEGER, floating point as REAL, strings as TEXT, sqlite_store::blob as
  /// BLOB, nullptr as NULL. Statements are prepared once per connection and kept by their text.
  /// Throws sqlite_error.
  template <class... Values>
  std::int64_t exec(std::string_view sql, const Values&... values) {
    detail::sqlite_use use(detail::sqlite_handler_statement(*connection_, sql, values...));
    while (detail::sqlite_handler_step(*connection_, use.get(), sql) == SQLITE_ROW) {
    }
    return sqlite3_changes64(connection_->db());
  }

  /// Runs one statement like exec and calls `on_row(sqlite3_stmt*)` for each row it answers
  /// (read columns with sqlite3_column_*); answers the number of rows.
  template <class OnRow, class... Values>
  std::size_t query(std::string_view sql, OnRow&& on_row, const Values&... values) {
    detail::sqlite_use use(detail::sqlite_handler_statement(*connection_, sql, values...));
    std::size_t rows = 0;
    while (detail::sqlite_handler_step(*connection_, use.get(), sql) == SQLITE_ROW) {
      on_row(use.get());
      ++rows;
    }
    return rows;
  }

  /// Adds `message` to the outbox in this transaction, so that it commits with the handler's
  /// writes and the completed record, or not at all; answers its id,
  /// outbox_message_id(scope, key, name) of the record this transaction completes.
  ///
  /// The handler names the message rather than choosing its id, so that every run for one
  /// (scope, key) (a run after a takeover included) writes the same id: a name already
  /// published for this record adds nothing. Use one name per message of a handler.
  /// Throws std::invalid_argument for an empty name, a message without a topic, or a payload
  /// past options::max_outbox_payload_bytes; sqlite_error when SQLite refuses the row. Either
  /// passes through the handler and rolls the whole transaction back.
  std::string publish(std::string_view name, const outbox_message& message) {
    constexpr const char* who = "idem::sqlite_store::transaction::publish";
    if (name.empty()) throw std::invalid_argument(std::string(who) + ": the message name is empty");
    std::string id = outbox_message_id(held_.scope, held_.key, name);
    detail::check_outbox_message(id, message, owner_->settings.max_outbox_payload_bytes, who);
    sqlite3_stmt* insert =
        detail::sqlite_handler_statement(*connection_, detail::sqlite_outbox_insert);
    (void)detail::sqlite_write_outbox(connection_->db(), insert, id, message,
                                      detail::sqlite_nanoseconds(now_));
    return id;
  }

  /// A recovery point recorded inside this transaction (a step of a transactional handler):
  /// the same as sqlite_store::checkpoint, on this transaction's connection; it commits or
  /// rolls back with the transaction.
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    if (owner_->bounded) {
      return detail::sqlite_bounded_checkpoint(*connection_, owner_->limits, held, recovery,
                                               lease_until);
    }
    return detail::sqlite_fenced_write(*connection_, detail::sqlite_statement::checkpoint, held,
                                       recovery, lease_until);
  }

 private:
  friend class sqlite_store;
  friend class sqlite_version_gate;
  friend struct detail::sqlite_batch_access;
  transaction(detail::sqlite_connection& connection, state& owner, const fenced_key& held,
              store_time now) noexcept
      : connection_(&connection), owner_(&owner), held_(held), now_(now) {}

  detail::sqlite_connection* connection_;
  state* owner_;
  // The claim this transaction completes: its scope and key name the messages published.
  fenced_key held_;
  // When the messages were written: the completion's time (the guard's clock).
  store_time now_;
};

// Defined here, where transaction is a complete type.
template <class Produce>
bool sqlite_store::complete_within(const fenced_key& held, store_time now, Produce&& produce) {
  static_assert(std::is_invocable_r_v<std::string, Produce&, transaction&>,
                "complete_within's argument must be callable as "
                "std::string(idem::sqlite_store::transaction&): it returns the encoded response.");
  lease connection = acquire();
  detail::sqlite_connection& c = *connection.get();
  detail::sqlite_write_transaction writing(c);
  std::optional<detail::sqlite_held_size> sizes = detail::sqlite_held_sizes(c, held);
  if (!sizes || sizes->state != detail::sqlite_in_progress) return false;
  transaction open(c, *state_, held, now);
  const std::string response = produce(open);
  if (sqlite3_get_autocommit(c.db()) != 0) {
    throw std::logic_error(
        "idem::sqlite_store::complete_within: the handler ended the transaction itself "
        "(COMMIT or ROLLBACK, or a failed statement it went on after); use SAVEPOINTs");
  }
  if (state_->bounded) {
    sizes = detail::sqlite_held_sizes(c, held);
    if (!sizes) return false;
    detail::sqlite_reserve_bytes(c, state_->limits, response.size(),
                                 sizes->response + sizes->recovery);
  }
  if (!detail::sqlite_fenced_write(c, detail::sqlite_statement::complete, held, response))
    return false;
  writing.commit();
  return true;
}

}  // namespace idem

#endif  // IDEM_STORE_SQLITE_DETAIL_STORE_HPP
