// What the PostgreSQL store's tests share: where the server is, unique table names, a plain
// libpq connection for checking the tables behind the store's back, and a private server.
#pragma once

#include <catch2/catch.hpp>

#include <libpq-fe.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <idem/store/postgres.hpp>

#include "support/temporary_directory.hpp"

namespace idem::testing::postgres {

/// The shared test server (scripts/servers/postgres.sh, started by scripts/test.sh). A test that
/// needs it fails without it: a missing server must never pass as a skipped test.
inline std::string conninfo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while tests run
  const char* value = std::getenv("IDEM_TEST_PG_CONNINFO");
  if (value == nullptr || *value == '\0') {
    FAIL(
        "IDEM_TEST_PG_CONNINFO is not set: run the tests through scripts/test.sh, or run "
        "`scripts/servers/postgres.sh start DIR` and `source DIR/postgres.env` first");
  }
  return value;
}

/// A table name no other test, build or run uses at the same time.
inline std::string unique_table(std::string_view what) {
  static std::atomic<int> counter{0};
  static const unsigned salt = std::random_device{}() % 100000;
  return "t_" + std::string(what) + "_" + std::to_string(::getpid()) + "_" + std::to_string(salt) +
         "_" + std::to_string(counter.fetch_add(1));
}

/// A plain libpq connection, for setting up and checking what the store wrote.
class connection {
 public:
  explicit connection(const std::string& info) : raw_(PQconnectdb(info.c_str())) {
    if (PQstatus(raw_.get()) != CONNECTION_OK) {
      throw std::runtime_error("test connection failed: " +
                               std::string(PQerrorMessage(raw_.get())));
    }
    PQsetNoticeProcessor(
        raw_.get(), [](void*, const char*) {}, nullptr);
  }
  connection() : connection(conninfo()) {}

  postgres_result exec(const std::string& sql) {
    postgres_result result{PQexec(raw_.get(), sql.c_str())};
    const ExecStatusType status = PQresultStatus(result.get());
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      throw std::runtime_error("test SQL failed: " + sql + ": " +
                               PQresultErrorMessage(result.get()));
    }
    return result;
  }
  long long scalar(const std::string& sql) {
    const postgres_result result = exec(sql);
    return std::stoll(std::string(result.value(0, 0)));
  }
  PGconn* get() const noexcept { return raw_.get(); }

 private:
  struct closer {
    void operator()(PGconn* c) const noexcept { PQfinish(c); }
  };
  std::unique_ptr<PGconn, closer> raw_;
};

inline void drop_table(const std::string& info, const std::string& table) {
  try {
    connection admin(info);
    admin.exec("DROP TABLE IF EXISTS \"" + table + "\", \"" + table + "_meta\", \"" + table +
               "_outbox\", \"" + table + "_outbox_dead\"");
    admin.exec("DROP FUNCTION IF EXISTS \"" + table + "_notify\"()");
  } catch (const std::exception&) {
    // Cleanup only: a server already gone takes its tables with it.
  }
}

/// Drops its table (with its _meta, _outbox, _outbox_dead and trigger function, and the _effects
/// table a test may keep beside it) when the test case ends.
struct table_guard {
  std::string name;
  explicit table_guard(std::string table) : name(std::move(table)) {}
  table_guard(const table_guard&) = delete;
  table_guard& operator=(const table_guard&) = delete;
  ~table_guard() {
    drop_table(conninfo(), name);
    drop_table(conninfo(), name + "_effects");
  }
};

inline postgres_store::options caller_time_options(const std::string& table) {
  postgres_store::options config;
  config.conninfo = conninfo();
  config.table = table;
  config.clock = time_source::caller;
  // A sanitizer build's 64-connection storm, beside another build's, opened its last
  // connections after more than the default 10 s (CI of stop 44): the tests check effects,
  // not how fast PostgreSQL forks a backend on 2 busy cores.
  config.connect_timeout = std::chrono::seconds{60};
  return config;
}

/// A PostgreSQL server of the test's own (its own data directory and port), started through
/// scripts/servers/postgres.sh, so that a test may stop and restart it without disturbing the
/// tests that share the common server. Stopped, and its directory removed, however the test
/// ends.
class private_server {
 public:
  private_server() {
    ::chmod(dir_.c_str(), 0755);  // the server runs as an unprivileged user
  }
  private_server(const private_server&) = delete;
  private_server& operator=(const private_server&) = delete;
  ~private_server() { stop(); }  // then directory_ removes its files

  void start() {
    script("start");
    std::ifstream env(dir_ + "/postgres.env");
    std::string line;
    while (std::getline(env, line)) {
      const std::string prefix = "export IDEM_TEST_PG_CONNINFO='";
      if (line.rfind(prefix, 0) == 0)
        conninfo_ = line.substr(prefix.size(), line.size() - prefix.size() - 1);
    }
    if (conninfo_.empty()) throw std::runtime_error("the private server wrote no conninfo");
  }
  /// Stops it at once (-m immediate: what a crash of the server looks like); the data stays.
  void stop() { script("stop"); }

  /// Where it listens (known after the first start; the port stays across restarts).
  const std::string& conninfo() const { return conninfo_; }

 private:
  void script(const char* command) {
    const std::string line = std::string("bash '") + IDEM_POSTGRES_SERVER_SCRIPT + "' " + command +
                             " '" + dir_ + "' >>'" + dir_ + "/script.log' 2>&1";
    // NOLINTNEXTLINE(concurrency-mt-unsafe): called from the test's main thread only
    if (std::system(line.c_str()) != 0) {
      throw std::runtime_error(std::string("scripts/servers/postgres.sh ") + command +
                               " failed; see " + dir_ + "/script.log");
    }
  }

  idem::testing::temporary_directory directory_{"idem-pg-private"};
  std::string dir_ = directory_.path().string();
  std::string conninfo_;
};

}  // namespace idem::testing::postgres
