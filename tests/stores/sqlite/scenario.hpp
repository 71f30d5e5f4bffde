// What the process tests and their worker program (worker.cpp) share: the services they run
// over sqlite_store, where a worker can be stopped, and the downstream "provider" whose effects
// are counted after the fact.
//
// Two services, both idempotent<> over sqlite_store:
//   * external: the effect is a call to a provider outside the database. It is made in a step
//     with the request's downstream key, and the provider deduplicates by that key, as a
//     payment provider does. The provider's ledger and a log of every call it received are
//     append-only files (O_APPEND, one write each), so double effects show after the fact.
//   * transactional: the effect is a row in the table `effects`, written by a handler that runs
//     inside the transaction that completes its record.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/server/idempotent.hpp>
#include <idem/store/sqlite.hpp>

#include <sqlite3.h>

namespace idem::testing::scenario {

/// Where a worker stops to be killed (its hook reports reaching it).
enum class point : int {
  none = 0,
  after_claim = 1,         // the handler started: the claim is committed, nothing else
  after_effect = 2,        // the provider took the charge; the step is not recorded yet
  after_step = 3,          // the step is recorded; the record is not completed
  inside_transaction = 4,  // the effect row is written in the completing transaction
  after_complete = 5,      // the record is completed; the reply is not sent
  during_sweep = 6,        // sweep has begun
};

/// Called at each point with the key being handled. A worker sets it; the test's recovery pass
/// leaves it empty.
inline void (*on_point)(point, std::string_view key) = nullptr;

inline void reach(point where, std::string_view key) {
  if (on_point != nullptr) on_point(where, key);
}

/// The wall time every worker and recovery pass starts from (manual clocks, so that leases are
/// passed by moving the time, not by waiting).
inline store_time epoch() {
  return store_time{std::chrono::seconds{1767225600}};
}

inline void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  const std::string text = line + "\n";
  // One write of a short line to an O_APPEND file: it lands whole or not at all.
  const ssize_t written = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) throw std::runtime_error("short write");
}

/// A downstream that deduplicates by the downstream key: a second call with a key it has seen
/// answers the first call's charge id and charges nothing.
class provider {
 public:
  explicit provider(std::string directory) : directory_(std::move(directory)) {}

  std::string ledger() const { return directory_ + "/ledger"; }
  std::string calls() const { return directory_ + "/calls"; }

  std::string charge(std::string_view downstream_key, std::string_view key) {
    append_line(calls(), std::string(key));
    std::ifstream in(ledger());
    std::string down, charged_key, id;
    while (in >> down >> charged_key >> id) {
      if (down == downstream_key) return id;
    }
    const std::string fresh = "ch-" + std::to_string(::getpid()) + "-" + std::string(key);
    append_line(ledger(), std::string(downstream_key) + " " + std::string(key) + " " + fresh);
    return fresh;
  }

 private:
  std::string directory_;
};

/// Counts of whitespace-separated field `field` over the lines of a file.
inline std::map<std::string, int> count_field(const std::string& path, int field) {
  std::map<std::string, int> counts;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    for (int i = 0; i <= field && (words >> word); ++i) {
      if (i == field) ++counts[word];
    }
  }
  return counts;
}

struct policies : default_policies {
  using store = sqlite_store;
  using clock = manual_clock;
};

struct external_handler {
  provider* downstream;
  std::string operator()(handler_context& context, const std::string& body) const {
    reach(point::after_claim, context.key());
    const std::string id = context.step("charge", [&] {
      std::string charged =
          downstream->charge(context.downstream_key("charge").view(), context.key());
      reach(point::after_effect, context.key());
      return charged;
    });
    reach(point::after_step, context.key());
    return "charged " + id + " for " + body;
  }
};

struct transactional_handler {
  std::string operator()(handler_context& context, const std::string& body,
                         sqlite_store::transaction& transaction) const {
    reach(point::after_claim, context.key());
    transaction.exec("INSERT INTO effects (key, pid) VALUES (?1, ?2)", context.key(),
                     static_cast<std::int64_t>(::getpid()));
    reach(point::inside_transaction, context.key());
    return "effect for " + body;
  }
};

/// The application's own table, as an application would make it next to the store's.
inline void create_effects_table(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open(path.c_str(), &db);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(db, 10000);
    rc = sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL, pid INTEGER)",
                      nullptr, nullptr, nullptr);
  }
  const std::string message = sqlite3_errmsg(db);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error("cannot create the effects table: " + message);
}

template <class Handler>
using service = idempotent<Handler, policies>;

/// A service over `store` whose clock reads `now`.
template <class Handler>
std::unique_ptr<service<Handler>> make_service(sqlite_store store, Handler handler,
                                               store_time now) {
  typename service<Handler>::options parts;
  parts.store = std::move(store);
  parts.clock = manual_clock{now};
  return std::make_unique<service<Handler>>(std::move(handler), std::move(parts));
}

inline std::string body_for(std::string_view key) {
  return "order " + std::string(key);
}

/// The group commit crash test's records (worker.cpp's `group`): one fingerprint, and a
/// recovery and a response that name their key, long enough that a torn write would show.
inline digest group_fingerprint() {
  const std::uint8_t bytes[16] = {7, 1, 7, 1, 7, 1, 7, 1, 7, 1, 7, 1, 7, 1, 7, 1};
  return digest{bytes};
}
inline std::string group_recovery(std::string_view key) {
  return "recovery of " + std::string(key);
}
inline std::string group_response(std::string_view key) {
  std::string out = "response of " + std::string(key) + ":";
  while (out.size() < 300)
    out += std::string(key) + ";";
  return out;
}

}  // namespace idem::testing::scenario
