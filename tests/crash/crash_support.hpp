// What the crash matrix's tests share (relay_crash_test.cpp, consumer_crash_test.cpp): how many
// runs a point gets, workers run together to their end, and one type per store that makes a
// fresh database for a run, tells a worker where it is, writes outbox messages and reads back
// what the workers left there. A test is written once, as a TEMPLATE_TEST_CASE over on_sqlite
// and on_postgres.
//
// Runs per point: IDEM_CRASH_RUNS (a positive number) when set, else 50, the count issue #29
// asks for; 20 for the reconciler's matrix (reconcile_crash_test.cpp: 21 cells, three stores by
// seven points). scripts/test.sh sets 3 for its sanitizer builds and for --quick
// (docs/development.md, "Crash matrix").
#pragma once

#include <catch2/catch.hpp>

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/outbox/message.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/outbox.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/outbox.hpp>

#include "stores/postgres/postgres_test_support.hpp"
#include "stores/sqlite/file_connection.hpp"
#include "support/child_process.hpp"
#include "support/temporary_directory.hpp"

namespace idem_crash {

/// Runs per crash point per store (see the top of this header): IDEM_CRASH_RUNS, else
/// `when_unset` (a matrix whose runs cost more than the outbox's may ask for fewer by default).
inline int runs_per_point(int when_unset = 50) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while tests run
  const char* text = std::getenv("IDEM_CRASH_RUNS");
  if (text == nullptr || *text == '\0') return when_unset;
  char* end = nullptr;
  const long runs = std::strtol(text, &end, 10);
  if (*end != '\0' || runs < 1 || runs > 100000) {
    FAIL("IDEM_CRASH_RUNS must be a positive number of runs, not '" << text << "'");
  }
  return static_cast<int>(runs);
}

/// Runs started together: the workers of one round are independent (each its own database and
/// stream), so they run at once and a round takes about as long as its slowest run.
inline constexpr int runs_at_once = 8;

/// A worker that ran to its end: everything it printed, and its wait status.
struct finished {
  int status = 0;
  std::vector<std::string> lines;

  bool killed() const { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }
  bool exited_ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  /// The first line that starts with `prefix`, without it.
  std::optional<std::string> line_after(std::string_view prefix) const {
    for (const std::string& line : lines) {
      if (line.starts_with(prefix)) return line.substr(prefix.size());
    }
    return std::nullopt;
  }
  std::string text() const {
    std::string all;
    for (const std::string& line : lines)
      all += line + "\n";
    return all;
  }
};

/// Starts one `program` per argument list, all at once, and waits for every one to end.
inline std::vector<finished> run_together(const std::string& program,
                                          const std::vector<std::vector<std::string>>& runs) {
  std::vector<std::unique_ptr<idem::testing::child_process>> started;
  started.reserve(runs.size());
  for (const std::vector<std::string>& arguments : runs)
    started.push_back(std::make_unique<idem::testing::child_process>(program, arguments));
  std::vector<finished> results(runs.size());
  // Each pipe holds far more than a worker prints, so reading them one after the other never
  // stalls a worker that is not being read yet.
  for (std::size_t i = 0; i < started.size(); ++i) {
    while (const std::optional<std::string> line = started[i]->line())
      results[i].lines.push_back(*line);
    results[i].status = started[i]->wait();
  }
  return results;
}

/// The words of `text`, split at spaces.
inline std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string> words;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) words.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

/// An outbox message as the crash tests write it.
struct written {
  std::string id;
  idem::outbox_message message;
};

/// A fresh SQLite file with idem's schema, removed when the run ends.
class on_sqlite {
 public:
  static constexpr const char* name = "SQLite";

  on_sqlite() { idem::sqlite_store made{path_}; }

  /// Where the workers find it: their --store and --outbox/--inbox.
  std::vector<std::string> worker_arguments(const std::string& role) const {
    return {"--store=sqlite", "--" + role + "=" + path_};
  }

  /// Writes the messages in one transaction of the application's own.
  void write(const std::vector<written>& messages) {
    idem_sqlite_test::file_connection db(path_, busy_timeout_ms);
    db.exec("BEGIN IMMEDIATE");
    for (const written& each : messages)
      REQUIRE(idem::sqlite_outbox::publish(db.get(), each.id, each.message));
    db.exec("COMMIT");
  }

  /// Outbox rows not marked published (what a relay still has to send).
  long long unpublished() const {
    return count("SELECT count(*) FROM idem_outbox WHERE published_at IS NULL");
  }
  long long dead_letters() const { return count("SELECT count(*) FROM idem_outbox_dead"); }

  /// The consumer's effects: how many rows each message id has.
  std::map<std::string, int> effects() const {
    idem_sqlite_test::file_connection db(path_, busy_timeout_ms);
    std::map<std::string, int> counts;
    for (const auto& row : db.rows("SELECT message_id, count(*) FROM effects GROUP BY message_id"))
      counts[row[0]] = std::stoi(row[1]);
    return counts;
  }

 private:
  static constexpr int busy_timeout_ms = 30000;

  long long count(const std::string& sql) const {
    idem_sqlite_test::file_connection db(path_, busy_timeout_ms);
    return std::stoll(db.text(sql));
  }

  idem::testing::temporary_directory directory_{"idem-crash"};
  std::string path_ = directory_.file("idem.sqlite3");
};

/// A fresh table of its own (with its outbox) on the shared PostgreSQL server, dropped when the
/// run ends, with the effects table and the relay worker's trigger function.
class on_postgres {
 public:
  static constexpr const char* name = "PostgreSQL";

  on_postgres() {
    idem::postgres_store::options options;
    options.conninfo = conninfo_;
    options.table = table_;
    options.pool_size = 1;
    idem::postgres_store made(options);
  }
  on_postgres(const on_postgres&) = delete;
  on_postgres& operator=(const on_postgres&) = delete;
  ~on_postgres() {
    try {
      idem::testing::postgres::connection admin(conninfo_);
      admin.exec("DROP FUNCTION IF EXISTS \"" + table_ + "_crash\"() CASCADE");
    } catch (const std::exception&) {
      // Cleanup only: a server already gone takes its functions with it.
    }
  }

  std::vector<std::string> worker_arguments(const std::string& role) const {
    return {"--store=postgres", "--conninfo=" + conninfo_, "--" + role + "=" + table_};
  }

  void write(const std::vector<written>& messages) {
    idem::testing::postgres::connection app(conninfo_);
    app.exec("BEGIN");
    for (const written& each : messages) {
      REQUIRE(idem::postgres_outbox::publish(app.get(), each.id, each.message, {.table = table_}));
    }
    app.exec("COMMIT");
  }

  long long unpublished() const {
    return scalar("SELECT count(*) FROM \"" + table_ + "_outbox\" WHERE published_at IS NULL");
  }
  long long dead_letters() const {
    return scalar("SELECT count(*) FROM \"" + table_ + "_outbox_dead\"");
  }

  std::map<std::string, int> effects() const {
    idem::testing::postgres::connection reader(conninfo_);
    const idem::postgres_result rows = reader.exec("SELECT message_id, count(*) FROM \"" + table_ +
                                                   "_effects\" GROUP BY message_id");
    std::map<std::string, int> counts;
    for (int row = 0; row < rows.rows(); ++row)
      counts[std::string(rows.value(row, 0))] = std::stoi(std::string(rows.value(row, 1)));
    return counts;
  }

 private:
  long long scalar(const std::string& sql) const {
    idem::testing::postgres::connection reader(conninfo_);
    return reader.scalar(sql);
  }

  std::string conninfo_ = idem::testing::postgres::conninfo();
  std::string table_ = idem::testing::postgres::unique_table("crash");
  idem::testing::postgres::table_guard guard_{table_};
};

}  // namespace idem_crash
