// One SQLite connection of sqlite_store's pool: opening and configuring it (WAL, synchronous,
// busy handler, size cap), its prepared statements, how an SQLite failure becomes a
// store_error, and the write transaction. Used by one thread at a time: the pool hands it out.
#ifndef IDEM_STORE_SQLITE_DETAIL_CONNECTION_HPP
#define IDEM_STORE_SQLITE_DETAIL_CONNECTION_HPP

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <idem/store/contract.hpp>
#include <idem/store/sqlite/detail/statements.hpp>
#include <idem/store/sqlite/error.hpp>

namespace idem::detail {

// A recursive lock taken with a timeout: std::recursive_timed_mutex's semantics, on a mutex and
// a condition variable. (libstdc++ 12 takes a timed mutex with pthread_mutex_clocklock, which
// Debian 12's ThreadSanitizer does not intercept: every unlock would be reported as of a mutex
// not held.)
class sqlite_writer_lock {
 public:
  // Taken by this thread (again, if it holds it already); false when another thread held it
  // throughout `timeout`.
  bool try_lock_for(std::chrono::nanoseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::thread::id me = std::this_thread::get_id();
    if (depth_ > 0 && owner_ == me) {
      ++depth_;
      return true;
    }
    if (!free_.wait_for(lock, timeout, [this] { return depth_ == 0; })) return false;
    owner_ = me;
    depth_ = 1;
    return true;
  }
  void unlock() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (--depth_ > 0) return;
    owner_ = std::thread::id{};
    lock.unlock();
    free_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable free_;
  std::thread::id owner_;
  int depth_ = 0;
};

struct sqlite_settings {
  std::string path;
  bool synchronous_full = true;
  std::chrono::milliseconds busy_timeout{};
  std::size_t sweep_batch = 0;
  std::uint64_t max_database_bytes = 0;
  int max_wal_pages = 0;  // 0: SQLite's own checkpoints only
  // The WAL's length at the last checkpoint one of the store's connections ran (after_commit).
  std::shared_ptr<std::atomic<int>> wal_checkpointed = std::make_shared<std::atomic<int>>(0);
  // Held by a write transaction of the store's connections (sqlite_write_transaction), from
  // before its BEGIN IMMEDIATE to its end: the store's writers wait for each other here, woken
  // when the lock is free, instead of polling SQLite's lock in the busy handler. Recursive, so
  // that a thread with a write transaction open that opens another (on another connection) is
  // refused by SQLite after the busy timeout, as it was without it.
  std::shared_ptr<sqlite_writer_lock> writer = std::make_shared<sqlite_writer_lock>();
};

// One SQLite connection and its prepared statements. Used by one thread at a time.
class sqlite_connection {
 public:
  sqlite_connection(const sqlite_connection&) = delete;
  sqlite_connection& operator=(const sqlite_connection&) = delete;

  static std::unique_ptr<sqlite_connection> open(const sqlite_settings& settings) {
    std::unique_ptr<sqlite_connection> opened(new sqlite_connection(settings));
    opened->configure();
    return opened;
  }

  ~sqlite_connection() {
    for (sqlite3_stmt*& statement : statements_) {
      sqlite3_finalize(statement);
    }
    for (auto& [sql, statement] : handler_statements_) {
      sqlite3_finalize(statement);
    }
    sqlite3_close_v2(db_);
  }

  sqlite3* db() const noexcept { return db_; }
  const sqlite_settings& settings() const noexcept { return *settings_; }

  sqlite3_stmt* statement(sqlite_statement which) {
    sqlite3_stmt*& slot = statements_[static_cast<std::size_t>(which)];
    if (slot == nullptr) slot = prepare(sqlite_sql(which), "prepare a statement");
    return slot;
  }

  // A statement of the handler's own, prepared once per connection and kept by its text.
  sqlite3_stmt* handler_statement(std::string_view sql) {
    const auto found = handler_statements_.find(std::string(sql));
    if (found != handler_statements_.end()) return found->second;
    sqlite3_stmt* prepared = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &prepared, nullptr);
    if (rc != SQLITE_OK) {
      throw sqlite_error(
          sqlite3_extended_errcode(db_),
          "idem::sqlite_store::transaction: " + std::string(sql) + ": " + sqlite3_errmsg(db_));
    }
    handler_statements_.emplace(std::string(sql), prepared);
    return prepared;
  }

  // Takes the store's writer lock (sqlite_settings::writer) within the busy timeout; false
  // when another thread held it throughout.
  bool lock_writer() { return settings_->writer->try_lock_for(settings_->busy_timeout); }
  void unlock_writer() { settings_->writer->unlock(); }
  // lock_writer's refusal, worded as fail's for a database still locked.
  [[noreturn]] void fail_writer_busy() const {
    throw store_error(store_failure::unavailable,
                      "idem::sqlite_store: cannot begin a write transaction in '" +
                          settings_->path + "': database is locked by another write of this store" +
                          " (still locked after the busy timeout of " +
                          std::to_string(settings_->busy_timeout.count()) + " ms)");
  }

  // Throws the store_error that an SQLite failure `rc` while doing `what` deserves.
  [[noreturn]] void fail(int rc, std::string_view what) const {
    std::string message = "idem::sqlite_store: cannot " + std::string(what) + " in '" +
                          settings_->path + "': " + sqlite3_errmsg(db_);
    const int primary = rc & 0xff;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
      message += " (still locked after the busy timeout of " +
                 std::to_string(settings_->busy_timeout.count()) + " ms)";
    }
    throw store_error(primary == SQLITE_FULL || primary == SQLITE_TOOBIG
                          ? store_failure::full
                          : store_failure::unavailable,
                      message);
  }

  // Steps a statement of the store's; answers SQLITE_ROW or SQLITE_DONE, throws otherwise.
  int step(sqlite3_stmt* statement, std::string_view what) {
    const int rc = sqlite3_step(statement);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) fail(rc, what);
    return rc;
  }

  void run(sqlite_statement which, std::string_view what) {
    sqlite3_stmt* statement = this->statement(which);
    const int rc = sqlite3_step(statement);
    sqlite3_reset(statement);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) fail(rc, what);
  }

  // Runs SQL text that may hold several statements and binds nothing (schema, pragmas).
  void execute_script(const char* sql, std::string_view what) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
    sqlite3_free(error);
    if (rc != SQLITE_OK) fail(rc, what);
  }

  // One value from a one-row statement such as a pragma; empty when there is no row.
  std::string text_of(const char* sql, std::string_view what) {
    sqlite3_stmt* statement = prepare(sql, what);
    std::string value;
    const int rc = sqlite3_step(statement);
    if (rc == SQLITE_ROW) {
      const auto* text = sqlite3_column_text(statement, 0);
      if (text != nullptr) value = reinterpret_cast<const char*>(text);
    }
    sqlite3_finalize(statement);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) fail(rc, what);
    return value;
  }

 private:
  explicit sqlite_connection(const sqlite_settings& settings) : settings_(&settings) {}

  sqlite3_stmt* prepare(const char* sql, std::string_view what) {
    sqlite3_stmt* prepared = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &prepared, nullptr);
    if (rc != SQLITE_OK) fail(rc, what);
    return prepared;
  }

  void configure() {
    // NOMUTEX: the pool guarantees one thread at a time per connection, so SQLite's own
    // per-connection mutex would only cost time. URI filenames ("file:...?mode=ro") are allowed.
    const int rc = sqlite3_open_v2(
        settings_->path.c_str(), &db_,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI,
        nullptr);
    if (rc != SQLITE_OK) {
      const std::string reason = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_store: cannot open '" + settings_->path + "': " + reason);
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_handler(db_, &sqlite_connection::on_busy, this);
    if (sqlite3_db_readonly(db_, "main") == 1) {
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_store: cannot write '" + settings_->path +
                            "': the database is read-only (file permissions, a read-only "
                            "filesystem, or mode=ro)");
    }
    // The first statement that reads the file: a file that is not a database fails here.
    const std::string mode = switch_to_wal();
    if (mode != "wal") {
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_store: '" + settings_->path +
                            "' cannot use WAL mode (journal mode stays '" + mode +
                            "'); use a file on a local filesystem");
    }
    execute_script(
        settings_->synchronous_full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
        "set the synchronous mode");
    // In place of SQLite's automatic checkpoint, which it would replace anyway.
    if (settings_->max_wal_pages != 0) {
      sqlite3_wal_hook(db_, &sqlite_connection::after_commit, this);
    }
    if (settings_->max_database_bytes != 0) {
      const std::string page_size = text_of("PRAGMA page_size", "read the page size");
      const std::uint64_t pages =
          std::max<std::uint64_t>(1, settings_->max_database_bytes / std::stoull(page_size));
      execute_script(("PRAGMA max_page_count = " + std::to_string(pages)).c_str(),
                     "limit the database size");
    }
  }

  // PRAGMA journal_mode = WAL, answering the mode it left. Switching a new file to WAL needs
  // the file to itself, and SQLite answers SQLITE_BUSY at once rather than call the busy handler
  // when another connection is switching it too (processes opening a new file together): that
  // is retried here with the busy handler's pauses, up to the busy timeout.
  std::string switch_to_wal() {
    for (int attempt = 0;; ++attempt) {
      try {
        return text_of("PRAGMA journal_mode = WAL", "switch to WAL mode");
      } catch (const store_error&) {
        const int primary = sqlite3_errcode(db_) & 0xff;
        if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || on_busy(this, attempt) == 0) {
          throw;
        }
      }
    }
  }

  // After each commit in WAL mode, with `frames` in the WAL: SQLite's automatic checkpoint
  // (passive, from 1,000 frames), and past max_wal_pages a RESTART, which waits for the
  // transactions on older snapshots (through the busy handler) so that the WAL starts over. A
  // checkpoint that cannot finish now is tried again after a later commit; the commit itself
  // has happened whatever it answers. One checkpoint per `step` frames written since the store's
  // last, not one per commit as SQLite's own hook runs them once the WAL is past 1,000 frames
  // and not started over: each costs two syncs (the WAL's and the database's), and under a load
  // whose transactions always overlap that was one checkpoint every few commits.
  static int after_commit(void* self, sqlite3* db, const char* name, int frames) {
    constexpr int automatic = 1000;  // SQLITE_DEFAULT_WAL_AUTOCHECKPOINT
    const sqlite_settings& settings = *static_cast<sqlite_connection*>(self)->settings_;
    const int restart = settings.max_wal_pages;
    std::atomic<int>& checkpointed = *settings.wal_checkpointed;
    int last = checkpointed.load(std::memory_order_relaxed);
    // Shorter than at the last checkpoint: the WAL has started over since.
    if (frames < last && checkpointed.compare_exchange_strong(last, 0, std::memory_order_relaxed)) {
      last = 0;
    }
    if (frames < automatic && frames < restart) return SQLITE_OK;
    const int step = std::max(1, std::min(automatic, restart / 4));
    if (frames - last < step) return SQLITE_OK;
    // One connection runs it; another that got here with the same figure does not.
    if (!checkpointed.compare_exchange_strong(last, frames, std::memory_order_relaxed)) {
      return SQLITE_OK;
    }
    if (frames >= restart) {
      (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_RESTART, nullptr, nullptr);
    } else {
      (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    }
    return SQLITE_OK;
  }

  // Retries a locked database with short pauses, growing to 2 ms: a write transaction here
  // lasts tens of microseconds, and SQLite's own timeout handler sleeps 1 ms at least.
  static int on_busy(void* self, int attempt) {
    auto& connection = *static_cast<sqlite_connection*>(self);
    const auto now = std::chrono::steady_clock::now();
    if (attempt == 0) connection.busy_since_ = now;
    const auto waited = now - connection.busy_since_;
    const std::chrono::nanoseconds timeout = connection.settings_->busy_timeout;
    if (waited >= timeout) return 0;
    // xorshift: a little jitter, so contending processes do not wake in lockstep.
    connection.jitter_ ^= connection.jitter_ << 13;
    connection.jitter_ ^= connection.jitter_ >> 7;
    connection.jitter_ ^= connection.jitter_ << 17;
    const std::chrono::nanoseconds base =
        std::chrono::microseconds{20} * (1 << std::min(attempt, 7));  // 20 us .. 2.56 ms
    const std::chrono::nanoseconds pause =
        std::min<std::chrono::nanoseconds>(
            {base / 2 + std::chrono::nanoseconds{static_cast<std::int64_t>(
                            connection.jitter_ % static_cast<std::uint64_t>(base.count()))},
             std::chrono::milliseconds{2}, timeout - waited}) +
        std::chrono::nanoseconds{1};
    std::this_thread::sleep_for(pause);
    return 1;
  }

  const sqlite_settings* settings_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* statements_[static_cast<std::size_t>(sqlite_statement::count_)] = {};
  std::unordered_map<std::string, sqlite3_stmt*> handler_statements_;
  std::chrono::steady_clock::time_point busy_since_{};
  std::uint64_t jitter_ = 0x9e3779b97f4a7c15ULL ^ reinterpret_cast<std::uintptr_t>(this);
};

// Resets a statement when the scope ends: a SELECT left unreset would hold its read snapshot.
class sqlite_use {
 public:
  explicit sqlite_use(sqlite3_stmt* statement) noexcept : statement_(statement) {}
  sqlite_use(const sqlite_use&) = delete;
  sqlite_use& operator=(const sqlite_use&) = delete;
  ~sqlite_use() { sqlite3_reset(statement_); }
  sqlite3_stmt* get() const noexcept { return statement_; }

 private:
  sqlite3_stmt* statement_;
};

// Says that the caller began the write transaction itself (one_commit.hpp's
// sqlite_begin_or_busy, which answers busy rather than throwing).
struct sqlite_begun_t {};
inline constexpr sqlite_begun_t sqlite_begun{};

// BEGIN IMMEDIATE on construction (the database's one write lock, taken before any statement
// reads), after the store's writer lock (sqlite_settings::writer), unless the caller began it
// (sqlite_begun: it holds both); ROLLBACK unless committed; the writer lock given back at the
// end.
class sqlite_write_transaction {
 public:
  explicit sqlite_write_transaction(sqlite_connection& connection) : connection_(connection) {
    if (!connection_.lock_writer()) connection_.fail_writer_busy();
    try {
      connection_.run(sqlite_statement::begin_immediate, "begin a write transaction");
    } catch (...) {
      connection_.unlock_writer();
      throw;
    }
  }
  sqlite_write_transaction(sqlite_connection& connection, sqlite_begun_t) noexcept
      : connection_(connection) {}
  sqlite_write_transaction(const sqlite_write_transaction&) = delete;
  sqlite_write_transaction& operator=(const sqlite_write_transaction&) = delete;
  void commit() {
    connection_.run(sqlite_statement::commit, "commit");
    committed_ = true;
    connection_.unlock_writer();
  }
  ~sqlite_write_transaction() {
    if (committed_) return;
    // SQLite rolls back by itself on some errors (a full disk, an I/O error); only roll back
    // what is still open.
    if (sqlite3_get_autocommit(connection_.db()) == 0) {
      sqlite3_stmt* rollback = nullptr;
      try {
        rollback = connection_.statement(sqlite_statement::rollback);
      } catch (const store_error&) {
        // The pool drops a connection left inside a transaction.
      }
      if (rollback != nullptr) {
        sqlite3_step(rollback);
        sqlite3_reset(rollback);
      }
    }
    connection_.unlock_writer();
  }

 private:
  sqlite_connection& connection_;
  bool committed_ = false;
};

// What the claim's writing part (sqlite_store::claim_writing) takes when its writes stay in a
// transaction its caller commits: a group commit's savepoint, which the committer releases, or
// a one-commit transaction, which commits with the handler's writes and the completion.
struct sqlite_enclosed_write {
  void commit() noexcept {}
};

}  // namespace idem::detail

#endif  // IDEM_STORE_SQLITE_DETAIL_CONNECTION_HPP
