// One SQLite connection as a hand-written peer of idem uses it (the benchmarks' peers of
// sqlite_one_commit_bench.cpp and sqlite_webhook_bench.cpp): statements prepared once and kept,
// each step reset after it, every failure an exception with SQLite's message.
#pragma once

#include <sqlite3.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace idem_bench {

class raw_sqlite {
 public:
  explicit raw_sqlite(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK) {
      sqlite3_close(db_);
      throw std::runtime_error("cannot open " + path);
    }
    sqlite3_busy_timeout(db_, 5000);
  }
  raw_sqlite(const raw_sqlite&) = delete;
  raw_sqlite& operator=(const raw_sqlite&) = delete;
  ~raw_sqlite() {
    for (sqlite3_stmt* statement : prepared_)
      sqlite3_finalize(statement);
    sqlite3_close(db_);
  }

  sqlite3* db() const noexcept { return db_; }

  void exec(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK)
      throw std::runtime_error(sqlite3_errmsg(db_));
  }
  /// Prepared once, kept until the connection closes.
  sqlite3_stmt* prepare(const char* sql) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &statement, nullptr) !=
        SQLITE_OK)
      throw std::runtime_error(sqlite3_errmsg(db_));
    prepared_.push_back(statement);
    return statement;
  }
  void step(sqlite3_stmt* statement) {
    const int rc = sqlite3_step(statement);
    sqlite3_reset(statement);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) throw std::runtime_error(sqlite3_errmsg(db_));
  }
  int changes() const noexcept { return sqlite3_changes(db_); }

 private:
  sqlite3* db_ = nullptr;
  std::vector<sqlite3_stmt*> prepared_;
};

}  // namespace idem_bench
