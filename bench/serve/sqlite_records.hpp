// The floor server's records in SQLite, by hand: the recipe (recipe.hpp) in three statements and
// one transaction, on a pool of connections configured as idem::sqlite_store configures its own
// (WAL, synchronous = FULL, a 5 s busy timeout, at most 8 connections opened as threads need
// them), so that the two servers wait on the same disk and the same write lock.
//
// Thread-safe: each call borrows a connection for its statements and gives it back.
#pragma once

#include "recipe.hpp"

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace floor_server {

class sqlite_records {
 public:
  /// idem::sqlite_store's defaults.
  static constexpr std::size_t pool_size = 8;
  static constexpr int busy_timeout_ms = 5000;

  /// Opens (creating) the file and its tables.
  explicit sqlite_records(std::string path) : path_(std::move(path)) { (void)acquire(); }

  /// The claim; std::nullopt when this request now holds the key, else the record there
  /// (std::nullopt inside: released meanwhile).
  std::optional<std::optional<record>> claim(const std::string& account, const std::string& key,
                                             const std::string& hash) {
    lease c = acquire();
    statement& insert = c->claim;
    insert.bind(1, account).bind(2, key).bind(3, hash).bind(4, now_ns());
    insert.done(*c, "claim");
    if (sqlite3_changes(c->db) == 1) return std::nullopt;
    statement& select = c->select;
    select.bind(1, account).bind(2, key);
    std::optional<record> existing;
    if (select.row(*c, "read the record")) {
      existing.emplace();
      existing->request_hash = select.text(0);
      if (sqlite3_column_type(select.get(), 1) != SQLITE_NULL) {
        existing->response_status = sqlite3_column_int(select.get(), 1);
        existing->response_body = select.text(2);
      }
    }
    select.reset();
    return existing;
  }

  /// The payment row, its message and the response, one transaction.
  void complete(const std::string& account, const std::string& key, const completion& done) {
    lease c = acquire();
    c->begin.done(*c, "begin");
    try {
      const std::int64_t now = now_ns();
      c->payment.bind(1, done.payment_id).bind(2, account).bind(3, done.body);
      c->payment.done(*c, "write the payment");
      c->message.bind(1, done.payment_id)
          .bind(2, std::string(outbox_topic))
          .bind(3, account)
          .bind(4, now)
          .bind(5, done.message_headers)
          .bind(6, done.message_payload);
      c->message.done(*c, "write the message");
      c->complete.bind(1, 201).bind(2, done.body).bind(3, account).bind(4, key);
      c->complete.done(*c, "complete the record");
      c->commit.done(*c, "commit");
    } catch (...) {
      sqlite3_exec(c->db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  /// The claim given up (the charge failed): a retry runs the request.
  void release(const std::string& account, const std::string& key) {
    lease c = acquire();
    c->release.bind(1, account).bind(2, key);
    c->release.done(*c, "release");
  }

  /// GET /v1/payments/{id}: the payment's body, when it is `account`'s.
  std::optional<std::string> find(const std::string& id, const std::string& account) {
    lease c = acquire();
    c->find.bind(1, id).bind(2, account);
    std::optional<std::string> body;
    if (c->find.row(*c, "read the payment")) body = c->find.text(0);
    c->find.reset();
    return body;
  }

 private:
  // The records beside the demo's payments table, and an outbox with the columns a relay needs.
  static constexpr const char* schema =
      "CREATE TABLE IF NOT EXISTS floor_records (account TEXT NOT NULL, key TEXT NOT NULL, "
      "request_hash TEXT NOT NULL, created_at INTEGER NOT NULL, response_status INTEGER, "
      "response_body TEXT, PRIMARY KEY (account, key)) WITHOUT ROWID;"
      // For the cleanup a user runs (records past a day): DELETE ... WHERE created_at < ?.
      "CREATE INDEX IF NOT EXISTS floor_records_by_age ON floor_records (created_at);"
      "CREATE TABLE IF NOT EXISTS payments (id TEXT PRIMARY KEY, account TEXT NOT NULL, "
      "body TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS floor_outbox (sequence INTEGER PRIMARY KEY AUTOINCREMENT, "
      "id TEXT NOT NULL UNIQUE, topic TEXT NOT NULL, partition_key TEXT NOT NULL, "
      "created_at INTEGER NOT NULL, published_at INTEGER, headers TEXT NOT NULL, "
      "payload TEXT NOT NULL);"
      "CREATE INDEX IF NOT EXISTS floor_outbox_unpublished ON floor_outbox (sequence) "
      "WHERE published_at IS NULL;";

  struct connection;

  class statement {
   public:
    statement() = default;
    statement(const statement&) = delete;
    statement& operator=(const statement&) = delete;
    ~statement() { sqlite3_finalize(handle_); }

    void prepare(sqlite3* db, const char* sql) {
      if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &handle_, nullptr) !=
          SQLITE_OK) {
        throw records_error(std::string("floor sqlite: prepare: ") + sqlite3_errmsg(db));
      }
    }
    statement& bind(int index, const std::string& text) {
      sqlite3_bind_text(handle_, index, text.data(), static_cast<int>(text.size()),
                        SQLITE_TRANSIENT);
      return *this;
    }
    statement& bind(int index, std::int64_t value) {
      sqlite3_bind_int64(handle_, index, value);
      return *this;
    }
    statement& bind(int index, int value) {
      sqlite3_bind_int(handle_, index, value);
      return *this;
    }
    // Runs a statement that returns no row, and resets it.
    void done(const connection& c, const char* what) {
      const int rc = sqlite3_step(handle_);
      reset();
      if (rc != SQLITE_DONE) c.fail(what);
    }
    // Steps once: whether a row came (reset() after reading it).
    bool row(const connection& c, const char* what) {
      const int rc = sqlite3_step(handle_);
      if (rc == SQLITE_ROW) return true;
      reset();
      if (rc != SQLITE_DONE) c.fail(what);
      return false;
    }
    std::string text(int column) const {
      const auto* bytes = sqlite3_column_text(handle_, column);
      return bytes == nullptr
                 ? std::string{}
                 : std::string(reinterpret_cast<const char*>(bytes),
                               static_cast<std::size_t>(sqlite3_column_bytes(handle_, column)));
    }
    void reset() {
      sqlite3_reset(handle_);
      sqlite3_clear_bindings(handle_);
    }
    sqlite3_stmt* get() const { return handle_; }

   private:
    sqlite3_stmt* handle_ = nullptr;
  };

  struct connection {
    sqlite3* db = nullptr;
    // Declared after db, destroyed before it.
    statement claim, select, begin, payment, message, complete, commit, release, find;

    explicit connection(const std::string& path) {
      const int rc = sqlite3_open_v2(
          path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
          nullptr);
      if (rc != SQLITE_OK) fail("open " + path);
      sqlite3_busy_timeout(db, busy_timeout_ms);
      script("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;");
    }
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;
    // close_v2: the statements, finalized after this body, close it with the last of them.
    ~connection() { sqlite3_close_v2(db); }

    void prepare_statements() {
      claim.prepare(db,
                    "INSERT INTO floor_records (account, key, request_hash, created_at) "
                    "VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING");
      select.prepare(db,
                     "SELECT request_hash, response_status, response_body FROM floor_records "
                     "WHERE account = ?1 AND key = ?2");
      begin.prepare(db, "BEGIN IMMEDIATE");
      payment.prepare(db,
                      "INSERT INTO payments (id, account, body) VALUES (?1, ?2, ?3) "
                      "ON CONFLICT (id) DO NOTHING");
      message.prepare(db,
                      "INSERT INTO floor_outbox (id, topic, partition_key, created_at, headers, "
                      "payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING");
      complete.prepare(db,
                       "UPDATE floor_records SET response_status = ?1, response_body = ?2 "
                       "WHERE account = ?3 AND key = ?4");
      commit.prepare(db, "COMMIT");
      release.prepare(db,
                      "DELETE FROM floor_records WHERE account = ?1 AND key = ?2 "
                      "AND response_status IS NULL");
      find.prepare(db, "SELECT body FROM payments WHERE id = ?1 AND account = ?2");
    }
    void script(const char* sql) {
      if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail("schema");
    }
    [[noreturn]] void fail(const std::string& what) const {
      throw records_error("floor sqlite: " + what + ": " +
                          (db != nullptr ? sqlite3_errmsg(db) : "out of memory"));
    }
  };

  // A connection borrowed for one call.
  class lease {
   public:
    lease(sqlite_records& owner, std::unique_ptr<connection> c)
        : owner_(owner), connection_(std::move(c)) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { owner_.give_back(std::move(connection_)); }
    connection* operator->() const { return connection_.get(); }
    connection& operator*() const { return *connection_; }

   private:
    sqlite_records& owner_;
    std::unique_ptr<connection> connection_;
  };

  lease acquire() {
    std::unique_lock lock(mutex_);
    const bool got = freed_.wait_for(lock, std::chrono::milliseconds{busy_timeout_ms},
                                     [&] { return !idle_.empty() || opened_ < pool_size; });
    if (!got) throw records_error("floor sqlite: every connection busy for 5 s");
    if (!idle_.empty()) {
      std::unique_ptr<connection> c = std::move(idle_.back());
      idle_.pop_back();
      return lease(*this, std::move(c));
    }
    ++opened_;
    lock.unlock();
    try {
      auto c = std::make_unique<connection>(path_);
      // The first connection makes the tables before any statement is prepared against them.
      if (!schema_made_.load()) {
        c->script(schema);
        schema_made_.store(true);
      }
      c->prepare_statements();
      return lease(*this, std::move(c));
    } catch (...) {
      const std::lock_guard relock(mutex_);
      --opened_;
      freed_.notify_one();
      throw;
    }
  }

  void give_back(std::unique_ptr<connection> c) {
    {
      const std::lock_guard lock(mutex_);
      idle_.push_back(std::move(c));
    }
    freed_.notify_one();
  }

  std::string path_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<connection>> idle_;
  std::size_t opened_ = 0;
  std::atomic<bool> schema_made_{false};
};

}  // namespace floor_server
