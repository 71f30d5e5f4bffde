// A replicated PostgreSQL pair of a test's own: a primary and its synchronous streaming standby,
// started through scripts/failover/postgres-replicated.sh in a temporary folder, which the test
// may crash (kill -9), pause and promote. Stopped, and its folder removed, however the test ends.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "postgres_test_support.hpp"

namespace idem::testing::postgres {

class replicated_pair {
 public:
  replicated_pair() {
    ::chmod(dir_.c_str(), 0755);  // the servers run as an unprivileged user
    script("start");
    std::ifstream env(dir_ + "/postgres-replicated.env");
    std::string line;
    while (std::getline(env, line)) {
      read(line, "IDEM_TEST_PG_REPLICATED_CONNINFO", conninfo_);
      read(line, "IDEM_TEST_PG_PRIMARY_CONNINFO", primary_);
      read(line, "IDEM_TEST_PG_STANDBY_CONNINFO", standby_);
    }
    if (conninfo_.empty() || primary_.empty() || standby_.empty()) {
      script("stop");
      throw std::runtime_error("scripts/failover/postgres-replicated.sh wrote no conninfo");
    }
  }
  replicated_pair(const replicated_pair&) = delete;
  replicated_pair& operator=(const replicated_pair&) = delete;
  ~replicated_pair() {
    // A standby paused by the test is continued first, so that the stop finds it answering.
    if (paused_ > 0) ::kill(paused_, SIGCONT);
    try {
      script("stop");
    } catch (const std::exception&) {
      // The script's own kill -9 fallback has run; the folder goes with directory_.
    }
  }

  /// Both hosts, the standby first, target_session_attrs=read-write: whichever is the primary.
  const std::string& conninfo() const { return conninfo_; }
  /// Each node alone (its port stays across a crash and restart).
  const std::string& primary() const { return primary_; }
  const std::string& standby() const { return standby_; }

  /// kill -9 of every process of a node ("primary" or "standby") at once.
  void crash(const char* node) { script("crash", node); }
  /// A crashed node started again on its data.
  void restart(const char* node) { script("restart", node); }
  /// pg_ctl promote: the standby becomes a primary.
  void promote(const char* node) { script("promote", node); }

  /// SIGSTOP of the standby's WAL receiver: it reads no WAL and acknowledges none, so a
  /// synchronous commit on the primary waits (the rest of the standby keeps running).
  void pause_wal_receiver() {
    connection standby(standby_);
    const postgres_result pid = standby.exec("SELECT pid FROM pg_stat_wal_receiver");
    if (pid.rows() != 1) throw std::runtime_error("the standby has no WAL receiver");
    paused_ = static_cast<pid_t>(std::stol(std::string(pid.value(0, 0))));
    if (::kill(paused_, SIGSTOP) != 0)
      throw std::runtime_error("SIGSTOP of the WAL receiver failed");
  }
  /// SIGCONT of the receiver pause_wal_receiver stopped.
  void resume_wal_receiver() {
    if (paused_ > 0) ::kill(paused_, SIGCONT);
    paused_ = 0;
  }
  /// Forget the paused receiver (its node was crashed: nothing to continue).
  void forget_paused() { paused_ = 0; }

  /// Waits until `sql` answers `wanted` on `info`, or throws after `patience` saying what it
  /// answered last.
  static void wait_for(const std::string& info, const std::string& sql, long long wanted,
                       std::chrono::seconds patience, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    connection on(info);
    for (long long answer = on.scalar(sql); answer != wanted; answer = on.scalar(sql)) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error(std::string("waited ") + std::to_string(patience.count()) +
                                 " s in vain for " + what + ": `" + sql + "` answered " +
                                 std::to_string(answer) + ", not " + std::to_string(wanted));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  static void read(const std::string& line, const std::string& name, std::string& into) {
    const std::string prefix = "export " + name + "='";
    if (line.rfind(prefix, 0) == 0)
      into = line.substr(prefix.size(), line.size() - prefix.size() - 1);
  }

  void script(const char* command, const char* node = nullptr) {
    const std::string line = std::string("bash '") + IDEM_POSTGRES_REPLICATED_SCRIPT + "' " +
                             command + (node != nullptr ? std::string(" ") + node : "") + " '" +
                             dir_ + "' >>'" + dir_ + "/script.log' 2>&1";
    // NOLINTNEXTLINE(concurrency-mt-unsafe): called from the test's main thread only
    if (std::system(line.c_str()) != 0) {
      throw std::runtime_error(std::string("scripts/failover/postgres-replicated.sh ") + command +
                               " failed; see " + dir_ + "/script.log");
    }
  }

  idem::testing::temporary_directory directory_{"idem-pg-replicated"};
  std::string dir_ = directory_.path().string();
  std::string conninfo_;
  std::string primary_;
  std::string standby_;
  pid_t paused_ = 0;
};

}  // namespace idem::testing::postgres
