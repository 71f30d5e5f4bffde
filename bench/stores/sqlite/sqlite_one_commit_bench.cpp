// One commit for a local effect (issue #34) on SQLite, beside the classic two-commit cycle
// written by hand.
//
//   one_commit_cycle/idem/sqlite            a new key each iteration through idempotent in
//                                           commit_mode::one_commit, with a handler that inserts
//                                           one effect row: claim, effect and completion in one
//                                           write transaction, one commit, one fsync.
//   one_commit_cycle/raw_two_commit/sqlite  the same work as an application writes it without
//                                           idem's one-commit mode, by hand with prepared
//                                           statements: INSERT the claim (its own commit); then
//                                           BEGIN IMMEDIATE, INSERT the effect row, UPDATE the
//                                           record to completed with a 64-byte response, COMMIT.
//
// Both sides: one database file each on a real disk (the temporary directory, not /dev/shm), WAL
// with synchronous = FULL (an fsync at every commit, as a deployment that must survive power loss
// runs it), idem's schema (the raw side's file is created by the store too), the same effect
// table, keys "order-<n>". The ratio idem / raw_two_commit is what issue #34 asks to be <= 0.6.
#include <benchmark/benchmark.h>

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include "stores/sqlite/raw_sqlite.hpp"
#include "temporary_directory.hpp"

namespace {

const std::string response(64, 'r');
constexpr const char* effects_schema =
    "CREATE TABLE IF NOT EXISTS effects (scope BLOB NOT NULL, key BLOB NOT NULL, "
    "amount INTEGER NOT NULL)";

idem::sqlite_store open_store(const std::string& path) {
  idem::sqlite_store::options options;
  options.path = path;
  options.synchronous = idem::sqlite_store::synchronous_mode::full;
  options.pool_size = 1;
  return idem::sqlite_store{options};
}

void create_effects(const std::string& path) {
  sqlite3* db = nullptr;
  const bool made = sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
                    sqlite3_exec(db, effects_schema, nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_close(db);
  if (!made) throw std::runtime_error("cannot create the effects table");
}

struct one_commit_policies : idem::default_policies {
  using store = idem::sqlite_store;
  static constexpr idem::commit_mode commit = idem::commit_mode::one_commit;
};

struct effect_handler {
  std::string operator()(idem::handler_context& context, const std::string& /*body*/,
                         idem::sqlite_store::transaction& txn) const {
    txn.exec("INSERT INTO effects (scope, key, amount) VALUES (?1, ?2, ?3)",
             idem::sqlite_store::blob{context.scope()}, idem::sqlite_store::blob{context.key()},
             1000);
    return response;
  }
};

void one_commit_cycle_idem_sqlite(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-one-commit-bench"};
  const std::string path = directory.file("idem.sqlite3");
  idem::idempotent<effect_handler, one_commit_policies>::options parts;
  parts.store = open_store(path);
  create_effects(path);
  idem::idempotent<effect_handler, one_commit_policies> guarded(effect_handler{}, std::move(parts));
  const std::string body = "amount=1000";
  std::int64_t n = 0;
  for (auto _ : state) {
    const std::string key = "order-" + std::to_string(n++);
    const auto outcome = guarded("bench", std::string_view{key}, body);
    if (outcome.verdict() != idem::verdict::executed) {
      state.SkipWithError("the one-commit call did not execute");
      break;
    }
    benchmark::DoNotOptimize(outcome);
  }
}

// The hand-written two-commit cycle on one connection.
class raw_two_commit {
 public:
  explicit raw_two_commit(const std::string& path) : db_(path) {
    { idem::sqlite_store made = open_store(path); }  // idem's schema, as on the other side
    create_effects(path);
    db_.exec("PRAGMA journal_mode = WAL");
    db_.exec("PRAGMA synchronous = FULL");
    claim_ = db_.prepare(
        "INSERT INTO idem_records (scope, key, state, fence, created_at, lease_until, expires_at, "
        "fingerprint, response, recovery) VALUES (?1, ?2, 0, 1, ?3, ?4, ?5, ?6, x'', x'') "
        "ON CONFLICT (scope, key) DO NOTHING");
    begin_ = db_.prepare("BEGIN IMMEDIATE");
    effect_ = db_.prepare("INSERT INTO effects (scope, key, amount) VALUES (?1, ?2, ?3)");
    complete_ = db_.prepare(
        "UPDATE idem_records SET state = 1, response = ?4, recovery = x'' WHERE scope = ?1 AND "
        "key = ?2 AND fence = ?3 AND state = 0");
    commit_ = db_.prepare("COMMIT");
  }
  bool cycle(std::string_view scope, std::string_view key) {
    const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const std::uint8_t print[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    bind_key(claim_, scope, key);
    sqlite3_bind_int64(claim_, 3, now);
    sqlite3_bind_int64(claim_, 4, now + 30'000'000'000);
    sqlite3_bind_int64(claim_, 5, now + 86'400'000'000'000);
    sqlite3_bind_blob(claim_, 6, print, sizeof print, SQLITE_STATIC);
    db_.step(claim_);  // its own transaction: the first commit
    if (db_.changes() != 1) return false;
    db_.step(begin_);
    bind_key(effect_, scope, key);
    sqlite3_bind_int64(effect_, 3, 1000);
    db_.step(effect_);
    bind_key(complete_, scope, key);
    sqlite3_bind_int64(complete_, 3, 1);
    sqlite3_bind_blob(complete_, 4, response.data(), static_cast<int>(response.size()),
                      SQLITE_STATIC);
    db_.step(complete_);
    const bool completed = db_.changes() == 1;
    db_.step(commit_);  // the second commit
    return completed;
  }

 private:
  static void bind_key(sqlite3_stmt* statement, std::string_view scope, std::string_view key) {
    sqlite3_bind_blob(statement, 1, scope.data(), static_cast<int>(scope.size()), SQLITE_STATIC);
    sqlite3_bind_blob(statement, 2, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
  }
  idem_bench::raw_sqlite db_;
  sqlite3_stmt* claim_ = nullptr;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* effect_ = nullptr;
  sqlite3_stmt* complete_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
};

void one_commit_cycle_raw_two_commit_sqlite(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-one-commit-bench"};
  raw_two_commit raw(directory.file("raw.sqlite3"));
  std::int64_t n = 0;
  for (auto _ : state) {
    const std::string key = "order-" + std::to_string(n++);
    if (!raw.cycle("bench", key)) {
      state.SkipWithError("the raw cycle did not claim and complete");
      break;
    }
  }
}

}  // namespace

BENCHMARK(one_commit_cycle_idem_sqlite)->Name("one_commit_cycle/idem/sqlite");
BENCHMARK(one_commit_cycle_raw_two_commit_sqlite)->Name("one_commit_cycle/raw_two_commit/sqlite");
