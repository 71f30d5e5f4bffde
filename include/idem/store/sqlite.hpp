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
//     that completes the record: the handler's writes and the stored response commit together
//     or not at all. Keep those tables in the same database file.
//   * Schema. Created on first open and versioned in the table idem_meta (PRAGMA user_version is
//     left to the application, whose tables may share the file): idem_records, keyed by
//     (scope, key) as BLOBs, with an index on expires_at for sweep. Times are INTEGER
//     nanoseconds since the Unix epoch, so they round-trip exactly.
//   * Bounds. With max_records or max_bytes set, the store keeps a usage row (maintained by
//     triggers, so every writer of the file keeps it exact) and checks it inside the claim,
//     complete and checkpoint transactions: a claim past a bound answers `full` after removing
//     expired records; a response or recovery that would pass max_bytes throws
//     store_error(full). Without bounds there is no usage row and no trigger.
//   * Errors. Options that can never work (an empty path, ":memory:", a zero pool) throw
//     std::invalid_argument. Everything SQLite refuses (a path that cannot be opened, a file that
//     is not a database, a read-only file, a database locked past the busy timeout, a schema from
//     a newer idem) throws store_error naming the path and SQLite's message; a full disk, or a
//     database at max_database_bytes, is store_failure::full. A failed write is rolled back:
//     nothing is half-written.
// Every option, its default and the durability trade-offs: docs/stores/sqlite.md. The SQL text
// is in store/sqlite/statements.hpp, connection handling in store/sqlite/connection.hpp.
#ifndef IDEM_STORE_SQLITE_HPP
#define IDEM_STORE_SQLITE_HPP

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

#include <idem/server/fingerprint/digest.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/detail/connection_pool.hpp>
#include <idem/store/sqlite/connection.hpp>
#include <idem/store/sqlite/error.hpp>
#include <idem/store/sqlite/statements.hpp>

namespace idem {

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
  };

  /// A value of the handler's own SQL that is bound as a BLOB (strings are bound as TEXT).
  struct blob {
    std::string_view bytes;
  };

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
    {
      // Read first without the write lock: a replay, a 409 or a mismatch changes nothing, and
      // in WAL mode such a read never waits for a writer. The answer is the state at this
      // read's snapshot, which lies within the call.
      detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
      bind_key(c, read.get(), request.scope, request.key);
      if (c.step(read.get(), "read a record") == SQLITE_ROW) {
        absent = false;
        const row found = read_row(read.get(), 0);
        if (decide(found, request, now) == decision::existing) {
          return {claim_status::existing, 0, snapshot(read.get(), 0, found)};
        }
      }
    }
    // Atomic: BEGIN IMMEDIATE takes the database's one write lock before the statements below,
    // and COMMIT lets it go, so no connection in any thread or process writes this record
    // between our read and our write.
    write_transaction writing(c);
    const bool capped =
        state_->settings.max_records_per_scope != std::numeric_limits<std::size_t>::max();
    if (absent && !state_->bounded && !capped) {
      // The key was absent a moment ago and most likely still is: insert it unless it is there
      // now (the unique key decides, under the write lock). Only if it appeared in between do
      // we read it again and decide below.
      detail::sqlite_use insert(c.statement(detail::sqlite_statement::create_if_absent));
      bind_new_record(c, insert.get(), request, 1);
      c.step(insert.get(), "claim a record");
      if (sqlite3_changes64(c.db()) == 1) {
        writing.commit();
        return {claim_status::claimed, 1, {}};
      }
    }
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
    bind_key(c, read.get(), request.scope, request.key);
    std::optional<row> found;
    std::int64_t found_bytes = 0;
    if (c.step(read.get(), "read a record") == SQLITE_ROW) {
      found = read_row(read.get(), 0);
      found_bytes = static_cast<std::int64_t>(request.scope.size() + request.key.size()) +
                    sqlite3_column_bytes(read.get(), 6) + sqlite3_column_bytes(read.get(), 7);
    }
    const decision decided = found ? decide(*found, request, now) : decision::create;
    if (decided == decision::existing) {
      claim_result result{claim_status::existing, 0, snapshot(read.get(), 0, *found)};
      return result;  // rolled back: nothing was written
    }
    if (decided == decision::take_over) {
      record taken = snapshot(read.get(), 0, *found);
      sqlite3_reset(read.get());
      taken.fence = found->fence + 1;
      taken.lease_until = request.now + request.lease;
      detail::sqlite_use update(c.statement(detail::sqlite_statement::take_over));
      bind_key(c, update.get(), request.scope, request.key);
      bind_integer(c, update.get(), 3, static_cast<std::int64_t>(taken.fence));
      bind_integer(c, update.get(), 4, detail::sqlite_nanoseconds(taken.lease_until));
      c.step(update.get(), "take over a claim");
      writing.commit();
      const std::uint64_t fence = taken.fence;
      return {claim_status::taken_over, fence, std::move(taken)};
    }
    sqlite3_reset(read.get());
    // decision::create: a new key, or an expired or released record replaced under a higher
    // fence than it ever had.
    const std::uint64_t fence = found ? found->fence + 1 : 1;
    if (capped) {
      detail::sqlite_use count(c.statement(detail::sqlite_statement::count_live_in_scope));
      bind_bytes(c, count.get(), 1, request.scope);
      bind_integer(c, count.get(), 2, now);
      c.step(count.get(), "count the scope's records");
      std::int64_t live = sqlite3_column_int64(count.get(), 0);
      if (found && now < found->expires_at) --live;  // the record this claim replaces
      if (live >= 0 && static_cast<std::uint64_t>(live) >= state_->settings.max_records_per_scope) {
        writing.commit();
        return {claim_status::full, 0, {}};
      }
    }
    if (state_->bounded && !has_room(c, request, found.has_value(), found_bytes)) {
      // Expired records are not live: make room from them before saying full.
      detail::sqlite_use removal(c.statement(detail::sqlite_statement::delete_expired));
      bind_integer(c, removal.get(), 1, now);
      c.step(removal.get(), "remove expired records");
      const bool replaced_was_swept = found && found->expires_at <= now;
      if (!has_room(c, request, found && !replaced_was_swept,
                    replaced_was_swept ? 0 : found_bytes)) {
        writing.commit();
        return {claim_status::full, 0, {}};
      }
    }
    detail::sqlite_use insert(c.statement(detail::sqlite_statement::create_record));
    bind_new_record(c, insert.get(), request, fence);
    c.step(insert.get(), "claim a record");
    writing.commit();
    return {claim_status::claimed, fence, {}};
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    if (!state_->bounded)
      return fenced_write(c, detail::sqlite_statement::complete, held, response);
    write_transaction writing(c);
    std::optional<held_size> sizes = held_sizes(c, held);
    if (!sizes) return false;
    reserve_bytes(c, *state_, response.size(), sizes->response + sizes->recovery);
    if (!fenced_write(c, detail::sqlite_statement::complete, held, response)) return false;
    writing.commit();
    return true;
  }

  bool release(const fenced_key& held) {
    lease connection = acquire();
    return fenced_write(*connection.get(), detail::sqlite_statement::release, held, {});
  }

  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    if (!state_->bounded) {
      return fenced_write(c, detail::sqlite_statement::checkpoint, held, recovery, lease_until);
    }
    write_transaction writing(c);
    if (!bounded_checkpoint(c, *state_, held, recovery, lease_until)) return false;
    writing.commit();
    return true;
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) {
    lease connection = acquire();
    detail::sqlite_connection& c = *connection.get();
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
    bind_key(c, read.get(), scope, key);
    if (c.step(read.get(), "read a record") != SQLITE_ROW) return std::nullopt;
    const row found = read_row(read.get(), 0);
    if (found.state == detail::sqlite_released ||
        found.expires_at <= detail::sqlite_nanoseconds(now)) {
      return std::nullopt;
    }
    record out = snapshot(read.get(), 0, found);
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
      bind_integer(c, removal.get(), 1, detail::sqlite_nanoseconds(now));
      bind_integer(c, removal.get(), 2, static_cast<std::int64_t>(batch));
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
    bind_integer(c, list.get(), 1, detail::sqlite_nanoseconds(now));
    bind_integer(c, list.get(), 2,
                 static_cast<std::int64_t>(std::min<std::size_t>(
                     limit, static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()))));
    while (c.step(list.get(), "list stuck records") == SQLITE_ROW) {
      record found = snapshot(list.get(), 2, read_row(list.get(), 2));
      found.scope = column_bytes(list.get(), 0);
      found.key = column_bytes(list.get(), 1);
      out.push_back(std::move(found));
    }
    return out;
  }

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

  /// The file this store keeps its records in.
  const std::string& path() const {
    require();
    return state_->settings.path;
  }

 private:
  struct state {
    explicit state(options given) : settings(validate(std::move(given))) {
      bounded = settings.max_records != std::numeric_limits<std::size_t>::max() ||
                settings.max_bytes != std::numeric_limits<std::size_t>::max();
      connection_settings.path = settings.path;
      connection_settings.synchronous_full = settings.synchronous == synchronous_mode::full;
      connection_settings.busy_timeout = settings.busy_timeout;
      connection_settings.sweep_batch = settings.sweep_batch;
      connection_settings.max_database_bytes = settings.max_database_bytes;
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    options settings;
    detail::sqlite_settings connection_settings;
    bool bounded = false;
    detail::connection_pool<std::unique_ptr<detail::sqlite_connection>> connections{
        settings.pool_size, pool_hooks()};

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

  // BEGIN IMMEDIATE on construction; ROLLBACK unless committed.
  class write_transaction {
   public:
    explicit write_transaction(detail::sqlite_connection& connection) : connection_(connection) {
      connection_.run(detail::sqlite_statement::begin_immediate, "begin a write transaction");
    }
    write_transaction(const write_transaction&) = delete;
    write_transaction& operator=(const write_transaction&) = delete;
    void commit() {
      connection_.run(detail::sqlite_statement::commit, "commit");
      committed_ = true;
    }
    ~write_transaction() {
      // SQLite rolls back by itself on some errors (a full disk, an I/O error); only roll back
      // what is still open.
      if (!committed_ && sqlite3_get_autocommit(connection_.db()) == 0) {
        sqlite3_stmt* rollback = nullptr;
        try {
          rollback = connection_.statement(detail::sqlite_statement::rollback);
        } catch (const store_error&) {
          return;  // the lease drops a connection left inside a transaction
        }
        sqlite3_step(rollback);
        sqlite3_reset(rollback);
      }
    }

   private:
    detail::sqlite_connection& connection_;
    bool committed_ = false;
  };

  struct row {
    int state = 0;
    std::uint64_t fence = 0;
    std::int64_t created_at = 0;
    std::int64_t lease_until = 0;
    std::int64_t expires_at = 0;
    digest fingerprint;
  };

  struct held_size {
    int state = 0;
    std::size_t response = 0;
    std::size_t recovery = 0;
  };

  enum class decision : std::uint8_t { existing, take_over, create };

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

  // Creates or checks the schema. Inside BEGIN IMMEDIATE, so processes that open a new file at
  // once take turns: the first creates, the others find it made.
  void migrate(detail::sqlite_connection& c) {
    write_transaction writing(c);
    c.execute_script(
        "CREATE TABLE IF NOT EXISTS idem_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "create the schema");
    const std::string found =
        c.text_of("SELECT value FROM idem_meta WHERE name = 'schema_version'", "read the schema");
    if (found.empty()) {
      c.execute_script(detail::sqlite_schema_v1, "create the schema");
      c.execute_script(("INSERT INTO idem_meta (name, value) VALUES ('schema_version', " +
                        std::to_string(detail::sqlite_schema_version) + ")")
                           .c_str(),
                       "create the schema");
    } else if (std::stoi(found) > detail::sqlite_schema_version) {
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_store: '" + state_->settings.path +
                            "' holds idem schema version " + found + ", newer than this idem's " +
                            std::to_string(detail::sqlite_schema_version) + "; upgrade idem");
    }
    // Later versions migrate here, one version at a time, in this same transaction.
    if (state_->bounded) c.execute_script(detail::sqlite_usage_schema, "create the usage row");
    writing.commit();
  }

  static void bind_integer(detail::sqlite_connection& c, sqlite3_stmt* statement, int index,
                           std::int64_t value) {
    const int rc = sqlite3_bind_int64(statement, index, value);
    if (rc != SQLITE_OK) c.fail(rc, "bind a value");
  }

  static void bind_bytes(detail::sqlite_connection& c, sqlite3_stmt* statement, int index,
                         std::string_view bytes) {
    // A null pointer would bind NULL, not an empty BLOB. SQLITE_STATIC: every use resets the
    // statement before the bytes go away.
    const char* data = bytes.data() != nullptr ? bytes.data() : "";
    const int rc = sqlite3_bind_blob64(statement, index, data, bytes.size(), SQLITE_STATIC);
    if (rc != SQLITE_OK) c.fail(rc, "bind a value");
  }

  // ?1 .. ?7 of create_record and create_if_absent.
  static void bind_new_record(detail::sqlite_connection& c, sqlite3_stmt* statement,
                              const claim_request& request, std::uint64_t fence) {
    bind_key(c, statement, request.scope, request.key);
    bind_integer(c, statement, 3, static_cast<std::int64_t>(fence));
    bind_integer(c, statement, 4, detail::sqlite_nanoseconds(request.now));
    bind_integer(c, statement, 5, detail::sqlite_nanoseconds(request.now + request.lease));
    bind_integer(c, statement, 6, detail::sqlite_nanoseconds(request.now + request.retention));
    const std::span<const std::uint8_t> print = request.fingerprint.bytes();
    bind_bytes(c, statement, 7,
               std::string_view(reinterpret_cast<const char*>(print.data()), print.size()));
  }

  static void bind_key(detail::sqlite_connection& c, sqlite3_stmt* statement,
                       std::string_view scope, std::string_view key) {
    bind_bytes(c, statement, 1, scope);
    bind_bytes(c, statement, 2, key);
  }

  static std::string column_bytes(sqlite3_stmt* statement, int column) {
    const auto* data = static_cast<const char*>(sqlite3_column_blob(statement, column));
    const int size = sqlite3_column_bytes(statement, column);
    return data == nullptr ? std::string{} : std::string(data, static_cast<std::size_t>(size));
  }

  // Columns from `first` on: state, fence, created_at, lease_until, expires_at, fingerprint.
  static row read_row(sqlite3_stmt* statement, int first) {
    row out;
    out.state = sqlite3_column_int(statement, first);
    out.fence = static_cast<std::uint64_t>(sqlite3_column_int64(statement, first + 1));
    out.created_at = sqlite3_column_int64(statement, first + 2);
    out.lease_until = sqlite3_column_int64(statement, first + 3);
    out.expires_at = sqlite3_column_int64(statement, first + 4);
    const auto* print = static_cast<const std::uint8_t*>(sqlite3_column_blob(statement, first + 5));
    const auto size = static_cast<std::size_t>(sqlite3_column_bytes(statement, first + 5));
    if (print != nullptr) out.fingerprint = digest{std::span<const std::uint8_t>(print, size)};
    return out;
  }

  // The record of a row; response and recovery follow the columns read_row reads.
  static record snapshot(sqlite3_stmt* statement, int first, const row& found) {
    record out;
    out.fingerprint = found.fingerprint;
    out.state = found.state == detail::sqlite_completed ? record_state::completed
                                                        : record_state::in_progress;
    out.fence = found.fence;
    out.created_at = detail::sqlite_time(found.created_at);
    out.lease_until = detail::sqlite_time(found.lease_until);
    out.expires_at = detail::sqlite_time(found.expires_at);
    out.response = column_bytes(statement, first + 6);
    out.recovery = column_bytes(statement, first + 7);
    return out;
  }

  // What a claim does to the record it found (see idem/store/contract.hpp).
  static decision decide(const row& found, const claim_request& request, std::int64_t now) {
    if (found.state == detail::sqlite_released || found.expires_at <= now) return decision::create;
    if (found.state == detail::sqlite_in_progress && found.fingerprint == request.fingerprint &&
        found.lease_until <= now) {
      return decision::take_over;
    }
    return decision::existing;
  }

  // Inside the claim's transaction: would one more record of scope + key bytes fit, once the
  // record found (if any, of found_bytes) is replaced?
  bool has_room(detail::sqlite_connection& c, const claim_request& request, bool replacing,
                std::int64_t found_bytes) {
    const auto [records, bytes] = usage(c);
    const std::int64_t records_after = records - (replacing ? 1 : 0) + 1;
    const std::int64_t others = bytes - (replacing ? found_bytes : 0);
    const std::size_t adding = request.scope.size() + request.key.size();
    const options& bounds = state_->settings;
    return static_cast<std::uint64_t>(records_after) <= bounds.max_records &&
           static_cast<std::uint64_t>(others) <= bounds.max_bytes &&
           adding <= bounds.max_bytes - static_cast<std::size_t>(others);
  }

  static std::pair<std::int64_t, std::int64_t> usage(detail::sqlite_connection& c) {
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_usage));
    if (c.step(read.get(), "read the usage row") != SQLITE_ROW) {
      throw store_error(store_failure::unavailable, "idem::sqlite_store: '" + c.settings().path +
                                                        "' lost its usage row (idem_usage)");
    }
    return {sqlite3_column_int64(read.get(), 0), sqlite3_column_int64(read.get(), 1)};
  }

  // Within a write transaction: replacing `old_size` bytes of a record with `new_size` must
  // keep the store within max_bytes, or this throws full (and the transaction rolls back).
  static void reserve_bytes(detail::sqlite_connection& c, const state& owner, std::size_t new_size,
                            std::size_t old_size) {
    const std::int64_t held = usage(c).second;
    const auto others = static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, held - static_cast<std::int64_t>(old_size)));
    const std::size_t max_bytes = owner.settings.max_bytes;
    if (others > max_bytes || new_size > max_bytes - others) {
      throw store_error(store_failure::full, "idem::sqlite_store: " + std::to_string(new_size) +
                                                 " bytes do not fit in the store's max_bytes of " +
                                                 std::to_string(max_bytes));
    }
  }

  // The record `held` names, when it is there, not released and under the caller's fence.
  static std::optional<held_size> held_sizes(detail::sqlite_connection& c, const fenced_key& held) {
    detail::sqlite_use read(c.statement(detail::sqlite_statement::held_sizes));
    bind_key(c, read.get(), held.scope, held.key);
    if (c.step(read.get(), "read a record") != SQLITE_ROW) return std::nullopt;
    held_size out;
    out.state = sqlite3_column_int(read.get(), 0);
    const auto fence = static_cast<std::uint64_t>(sqlite3_column_int64(read.get(), 1));
    if (out.state == detail::sqlite_released || fence != held.fence) return std::nullopt;
    out.response = static_cast<std::size_t>(sqlite3_column_int64(read.get(), 2));
    out.recovery = static_cast<std::size_t>(sqlite3_column_int64(read.get(), 3));
    return out;
  }

  // complete, release or checkpoint: one UPDATE ... WHERE fence = ?; applied when it changed a
  // row. Outside a transaction it is one autocommit write statement.
  static bool fenced_write(detail::sqlite_connection& c, detail::sqlite_statement which,
                           const fenced_key& held, std::string_view bytes,
                           store_time lease_until = {}) {
    detail::sqlite_use write(c.statement(which));
    bind_key(c, write.get(), held.scope, held.key);
    bind_integer(c, write.get(), 3, static_cast<std::int64_t>(held.fence));
    if (which != detail::sqlite_statement::release) bind_bytes(c, write.get(), 4, bytes);
    if (which == detail::sqlite_statement::checkpoint) {
      bind_integer(c, write.get(), 5, detail::sqlite_nanoseconds(lease_until));
    }
    c.step(write.get(), which == detail::sqlite_statement::complete  ? "complete a record"
                        : which == detail::sqlite_statement::release ? "release a record"
                                                                     : "checkpoint a record");
    return sqlite3_changes64(c.db()) != 0;
  }

  // A checkpoint within a write transaction of a bounded store.
  static bool bounded_checkpoint(detail::sqlite_connection& c, const state& owner,
                                 const fenced_key& held, std::string_view recovery,
                                 store_time lease_until) {
    const std::optional<held_size> sizes = held_sizes(c, held);
    if (!sizes) return false;
    reserve_bytes(c, owner, recovery.size(), sizes->recovery);
    return fenced_write(c, detail::sqlite_statement::checkpoint, held, recovery, lease_until);
  }

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
    detail::sqlite_use use(prepared(sql, values...));
    while (step(use.get(), sql) == SQLITE_ROW) {
    }
    return sqlite3_changes64(connection_->db());
  }

  /// Runs one statement like exec and calls `on_row(sqlite3_stmt*)` for each row it answers
  /// (read columns with sqlite3_column_*); answers the number of rows.
  template <class OnRow, class... Values>
  std::size_t query(std::string_view sql, OnRow&& on_row, const Values&... values) {
    detail::sqlite_use use(prepared(sql, values...));
    std::size_t rows = 0;
    while (step(use.get(), sql) == SQLITE_ROW) {
      on_row(use.get());
      ++rows;
    }
    return rows;
  }

  /// A recovery point recorded inside this transaction (a step of a transactional handler):
  /// the same as sqlite_store::checkpoint, on this transaction's connection; it commits or
  /// rolls back with the transaction.
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    if (owner_->bounded) {
      return bounded_checkpoint(*connection_, *owner_, held, recovery, lease_until);
    }
    return fenced_write(*connection_, detail::sqlite_statement::checkpoint, held, recovery,
                        lease_until);
  }

 private:
  friend class sqlite_store;
  transaction(detail::sqlite_connection& connection, state& owner) noexcept
      : connection_(&connection), owner_(&owner) {}

  template <class... Values>
  sqlite3_stmt* prepared(std::string_view sql, const Values&... values) {
    // SQLite rolls a transaction back by itself on some errors (a full disk, an I/O error):
    // a statement run after that would commit on its own, outside the record's transaction.
    if (sqlite3_get_autocommit(connection_->db()) != 0) {
      throw sqlite_error(SQLITE_ABORT_ROLLBACK,
                         "idem::sqlite_store::transaction: the transaction is no longer open "
                         "(an earlier error rolled it back); not running " +
                             std::string(sql));
    }
    sqlite3_stmt* statement = connection_->handler_statement(sql);
    sqlite3_reset(statement);
    int index = 0;
    (bind(statement, ++index, values, sql), ...);
    return statement;
  }

  int step(sqlite3_stmt* statement, std::string_view sql) {
    const int rc = sqlite3_step(statement);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      throw sqlite_error(sqlite3_extended_errcode(connection_->db()),
                         "idem::sqlite_store::transaction: " + std::string(sql) + ": " +
                             sqlite3_errmsg(connection_->db()));
    }
    return rc;
  }

  template <class Value>
  void bind(sqlite3_stmt* statement, int index, const Value& value, std::string_view sql) {
    int rc = SQLITE_OK;
    if constexpr (std::is_same_v<Value, blob>) {
      const char* data = value.bytes.data() != nullptr ? value.bytes.data() : "";
      rc = sqlite3_bind_blob64(statement, index, data, value.bytes.size(), SQLITE_TRANSIENT);
    } else if constexpr (std::is_same_v<Value, std::nullptr_t>) {
      rc = sqlite3_bind_null(statement, index);
    } else if constexpr (std::is_same_v<Value, bool> || std::is_integral_v<Value>) {
      rc = sqlite3_bind_int64(statement, index, static_cast<sqlite3_int64>(value));
    } else if constexpr (std::is_floating_point_v<Value>) {
      rc = sqlite3_bind_double(statement, index, static_cast<double>(value));
    } else if constexpr (std::is_convertible_v<const Value&, std::string_view>) {
      const std::string_view text = value;
      const char* data = text.data() != nullptr ? text.data() : "";
      rc = sqlite3_bind_text64(statement, index, data, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
    } else {
      static_assert(std::is_same_v<Value, blob>,
                    "sqlite_store::transaction binds integers, floating point, strings, "
                    "sqlite_store::blob and nullptr.");
    }
    if (rc != SQLITE_OK) {
      throw sqlite_error(rc, "idem::sqlite_store::transaction: cannot bind value " +
                                 std::to_string(index) + " of " + std::string(sql) + ": " +
                                 sqlite3_errstr(rc));
    }
  }

  detail::sqlite_connection* connection_;
  state* owner_;
};

// Defined here, where transaction is a complete type.
template <class Produce>
bool sqlite_store::complete_within(const fenced_key& held, store_time /*now*/, Produce&& produce) {
  static_assert(std::is_invocable_r_v<std::string, Produce&, transaction&>,
                "complete_within's argument must be callable as "
                "std::string(idem::sqlite_store::transaction&): it returns the encoded response.");
  lease connection = acquire();
  detail::sqlite_connection& c = *connection.get();
  write_transaction writing(c);
  std::optional<held_size> sizes = held_sizes(c, held);
  if (!sizes || sizes->state != detail::sqlite_in_progress) return false;
  transaction open(c, *state_);
  const std::string response = produce(open);
  if (sqlite3_get_autocommit(c.db()) != 0) {
    throw std::logic_error(
        "idem::sqlite_store::complete_within: the handler ended the transaction itself "
        "(COMMIT or ROLLBACK, or a failed statement it went on after); use SAVEPOINTs");
  }
  if (state_->bounded) {
    sizes = held_sizes(c, held);
    if (!sizes) return false;
    reserve_bytes(c, *state_, response.size(), sizes->response + sizes->recovery);
  }
  if (!fenced_write(c, detail::sqlite_statement::complete, held, response)) return false;
  writing.commit();
  return true;
}

}  // namespace idem

#endif  // IDEM_STORE_SQLITE_HPP
