// A plain SQLite connection of a test's own on the store's file, as another program sharing the
// file has (the application writing messages, an operator looking at the tables): runs SQL and
// reads results back as text, failing the test case when SQLite refuses.
#ifndef IDEM_TESTS_STORES_SQLITE_FILE_CONNECTION_HPP
#define IDEM_TESTS_STORES_SQLITE_FILE_CONNECTION_HPP

#include <sqlite3.h>
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace idem_sqlite_test {

class file_connection {
 public:
  explicit file_connection(const std::string& path, int busy_timeout_ms = 5000) {
    REQUIRE(sqlite3_open(path.c_str(), &db_) == SQLITE_OK);
    sqlite3_busy_timeout(db_, busy_timeout_ms);
  }
  file_connection(const file_connection&) = delete;
  file_connection& operator=(const file_connection&) = delete;
  ~file_connection() { sqlite3_close(db_); }

  sqlite3* get() const noexcept { return db_; }

  void exec(const std::string& sql) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    const std::string message = error != nullptr ? error : "";
    sqlite3_free(error);
    INFO(sql << ": " << message);
    REQUIRE(rc == SQLITE_OK);
  }

  // The rows, each its columns' values; any bytes (BLOBs as they are), NULL as "NULL".
  std::vector<std::vector<std::string>> rows(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK);
    std::vector<std::vector<std::string>> out;
    while (sqlite3_step(statement) == SQLITE_ROW) {
      std::vector<std::string>& row = out.emplace_back();
      for (int column = 0; column < sqlite3_column_count(statement); ++column) {
        if (sqlite3_column_type(statement, column) == SQLITE_NULL) {
          row.emplace_back("NULL");
          continue;
        }
        const auto* value = static_cast<const char*>(sqlite3_column_blob(statement, column));
        const auto size = static_cast<std::size_t>(sqlite3_column_bytes(statement, column));
        // An empty value comes back as nullptr.
        row.emplace_back(value != nullptr ? std::string(value, size) : std::string());
      }
    }
    sqlite3_finalize(statement);
    return out;
  }

  // The rows' values of one column, one line each.
  std::string text(const std::string& sql, int column = 0) {
    std::string out;
    bool first = true;
    for (const std::vector<std::string>& row : rows(sql)) {
      if (!first) out += "\n";
      first = false;
      out += row.at(static_cast<std::size_t>(column));
    }
    return out;
  }

  // What EXPLAIN QUERY PLAN says of `sql`: its detail column, one line a step.
  std::string plan(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &statement,
                               nullptr) == SQLITE_OK);
    std::string out;
    while (sqlite3_step(statement) == SQLITE_ROW) {
      out += reinterpret_cast<const char*>(sqlite3_column_text(statement, 3));
      out += "\n";
    }
    sqlite3_finalize(statement);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace idem_sqlite_test

#endif  // IDEM_TESTS_STORES_SQLITE_FILE_CONNECTION_HPP
