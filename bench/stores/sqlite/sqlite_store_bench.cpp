// idem::sqlite_store beside the same work hand-written against sqlite3.
//
//   sqlite_cycle/idem     claim a new key, then complete it with a 64-byte response, through the
//                         store: what idempotent does for a request that executes.
//   sqlite_cycle/raw      the same statements hand-written with prepared statements: the
//                         lock-free SELECT of the row (none), BEGIN IMMEDIATE, INSERT ... ON
//                         CONFLICT DO NOTHING (one row), COMMIT; then the fenced UPDATE that
//                         completes it. This pair measures what the library adds.
//   sqlite_cycle/raw_write_lock_only
//                         the least a hand-writer could do: BEGIN IMMEDIATE; SELECT (none);
//                         INSERT; COMMIT; UPDATE. Against it, idem also pays for its first,
//                         lock-free read: the price of answering replays and 409s without ever
//                         taking the write lock (see sqlite_replay).
//   sqlite_replay/idem    claim a completed key again (a retry): the store answers `existing`
//                         with the record and its response (64 B or 1 KiB).
//   sqlite_replay/raw     the same SELECT, its columns copied out (the response into a string).
//
// Both sides use one database file each, in a temporary directory, in WAL mode with
// synchronous = NORMAL (so the disk's fsync does not drown the difference; both sides alike) and
// the same schema (idem's, created by the store; the raw side creates the identical table and
// indexes from the same text: version 1's, and version 4's index of the records in progress). Keys
// are "order-<n>", made in the loop on both sides. Nothing reads a clock: `now` is given, as
// idempotent gives it.
#include <benchmark/benchmark.h>

#include <idem/store/sqlite.hpp>

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "count_allocations.hpp"
#include "temporary_directory.hpp"

namespace {

using namespace std::chrono_literals;

const idem::store_time now{std::chrono::seconds{1767225600}};
const std::string response(64, 'r');

idem::digest fingerprint() {
  const std::uint8_t bytes[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  return idem::digest{bytes};
}

idem::sqlite_store open_idem(const std::string& path) {
  idem::sqlite_store::options options;
  options.path = path;
  options.synchronous = idem::sqlite_store::synchronous_mode::normal;
  options.pool_size = 1;
  return idem::sqlite_store{options};
}

// The hand-written side: one connection, the same pragmas and schema, prepared statements.
class raw_store {
 public:
  explicit raw_store(const std::string& path) {
    check(sqlite3_open_v2(path.c_str(), &db_,
                          SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                          nullptr));
    sqlite3_busy_timeout(db_, 5000);
    exec("PRAGMA journal_mode = WAL");
    exec("PRAGMA synchronous = NORMAL");
    exec(idem::detail::sqlite_schema_v1);
    // The records in progress by lease (schema version 4), which the reconciler's listing
    // reads: the same index writes as idem's side.
    exec(idem::detail::sqlite_schema_v4);
    begin_ = prepare("BEGIN IMMEDIATE");
    commit_ = prepare("COMMIT");
    select_ = prepare(
        "SELECT state, fence, created_at, lease_until, expires_at, fingerprint, response, "
        "recovery FROM idem_records WHERE scope = ?1 AND key = ?2");
    insert_ = prepare(
        "INSERT INTO idem_records (scope, key, state, fence, created_at, lease_until, "
        "expires_at, fingerprint, response, recovery) VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6, ?7, "
        "x'', x'')");
    insert_if_absent_ = prepare(
        "INSERT INTO idem_records (scope, key, state, fence, created_at, lease_until, "
        "expires_at, fingerprint, response, recovery) VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6, ?7, "
        "x'', x'') ON CONFLICT (scope, key) DO NOTHING");
    complete_ = prepare(
        "UPDATE idem_records SET state = 1, response = ?4, recovery = x'' "
        "WHERE scope = ?1 AND key = ?2 AND fence = ?3 AND state <> 2");
  }
  raw_store(const raw_store&) = delete;
  raw_store& operator=(const raw_store&) = delete;
  ~raw_store() {
    for (sqlite3_stmt* statement :
         {begin_, commit_, select_, insert_, insert_if_absent_, complete_}) {
      sqlite3_finalize(statement);
    }
    sqlite3_close(db_);
  }

  struct row {
    int state = 0;
    std::int64_t fence = 0, created_at = 0, lease_until = 0, expires_at = 0;
    idem::digest fingerprint;
    std::string response, recovery;
  };

  // Claim a new key as idem does: a lock-free look, then insert-if-absent under the write lock.
  // True when the row was created.
  bool claim(std::string_view scope, std::string_view key, std::int64_t at) {
    bind_key(select_, scope, key);
    const bool exists = sqlite3_step(select_) == SQLITE_ROW;
    sqlite3_reset(select_);
    if (exists) return false;
    step(begin_);
    bind_new(insert_if_absent_, scope, key, at);
    step(insert_if_absent_);
    const bool created = sqlite3_changes(db_) == 1;
    step(commit_);
    return created;
  }

  // Claim a new key with the least work: read and insert under the write lock.
  bool claim_under_write_lock(std::string_view scope, std::string_view key, std::int64_t at) {
    step(begin_);
    bind_key(select_, scope, key);
    const bool exists = sqlite3_step(select_) == SQLITE_ROW;
    sqlite3_reset(select_);
    if (!exists) {
      bind_new(insert_, scope, key, at);
      step(insert_);
    }
    step(commit_);
    return !exists;
  }

  bool complete(std::string_view scope, std::string_view key, std::int64_t fence,
                std::string_view bytes) {
    bind_key(complete_, scope, key);
    sqlite3_bind_int64(complete_, 3, fence);
    sqlite3_bind_blob(complete_, 4, bytes.data(), static_cast<int>(bytes.size()), SQLITE_STATIC);
    step(complete_);
    return sqlite3_changes(db_) == 1;
  }

  bool read(std::string_view scope, std::string_view key, row& out) {
    bind_key(select_, scope, key);
    const bool found = sqlite3_step(select_) == SQLITE_ROW;
    if (found) {
      out.state = sqlite3_column_int(select_, 0);
      out.fence = sqlite3_column_int64(select_, 1);
      out.created_at = sqlite3_column_int64(select_, 2);
      out.lease_until = sqlite3_column_int64(select_, 3);
      out.expires_at = sqlite3_column_int64(select_, 4);
      out.fingerprint = idem::digest{std::span<const std::uint8_t>(
          static_cast<const std::uint8_t*>(sqlite3_column_blob(select_, 5)),
          static_cast<std::size_t>(sqlite3_column_bytes(select_, 5)))};
      out.response.assign(static_cast<const char*>(sqlite3_column_blob(select_, 6)),
                          static_cast<std::size_t>(sqlite3_column_bytes(select_, 6)));
      const void* recovery = sqlite3_column_blob(select_, 7);
      out.recovery.assign(recovery != nullptr ? static_cast<const char*>(recovery) : "",
                          static_cast<std::size_t>(sqlite3_column_bytes(select_, 7)));
    }
    sqlite3_reset(select_);
    return found;
  }

 private:
  void check(int rc) const {
    if (rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE) {
      throw std::runtime_error(std::string("sqlite: ") + sqlite3_errmsg(db_));
    }
  }
  void exec(const char* sql) { check(sqlite3_exec(db_, sql, nullptr, nullptr, nullptr)); }
  sqlite3_stmt* prepare(const char* sql) {
    sqlite3_stmt* statement = nullptr;
    check(sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &statement, nullptr));
    return statement;
  }
  void step(sqlite3_stmt* statement) {
    const int rc = sqlite3_step(statement);
    sqlite3_reset(statement);
    check(rc);
  }
  static void bind_new(sqlite3_stmt* statement, std::string_view scope, std::string_view key,
                       std::int64_t at) {
    bind_key(statement, scope, key);
    sqlite3_bind_int64(statement, 3, 1);
    sqlite3_bind_int64(statement, 4, at);
    sqlite3_bind_int64(statement, 5, at + std::chrono::nanoseconds{30s}.count());
    sqlite3_bind_int64(statement, 6, at + std::chrono::nanoseconds{24h}.count());
    const idem::digest print = fingerprint();
    sqlite3_bind_blob(statement, 7, print.data(), static_cast<int>(print.size()), SQLITE_TRANSIENT);
  }
  static void bind_key(sqlite3_stmt* statement, std::string_view scope, std::string_view key) {
    sqlite3_bind_blob(statement, 1, scope.data(), static_cast<int>(scope.size()), SQLITE_STATIC);
    sqlite3_bind_blob(statement, 2, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
  }

  sqlite3* db_ = nullptr;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* select_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
  sqlite3_stmt* insert_if_absent_ = nullptr;
  sqlite3_stmt* complete_ = nullptr;
};

// "order-<n>" into a reused buffer, the same on both sides.
std::string_view key_for(std::uint64_t n, char (&buffer)[32]) {
  const int length =
      std::snprintf(buffer, sizeof buffer, "order-%llu", static_cast<unsigned long long>(n));
  return {buffer, static_cast<std::size_t>(length)};
}

void report_allocations(benchmark::State& state, std::size_t before) {
  state.counters["allocs_per_op"] =
      benchmark::Counter(static_cast<double>(idem_test::allocations_on_this_thread() - before),
                         benchmark::Counter::kAvgIterations);
}

void sqlite_cycle_idem(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-sqlite-bench"};
  idem::sqlite_store store = open_idem(directory.file("idem.sqlite3"));
  const idem::digest print = fingerprint();
  std::uint64_t next = 0;
  char buffer[32];
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    const std::string_view key = key_for(next++, buffer);
    const idem::claim_result claimed = store.claim({"tenant", key, print, now, 30s, 24h});
    if (claimed.status != idem::claim_status::claimed) state.SkipWithError("not claimed");
    if (!store.complete({"tenant", key, claimed.fence}, response, now)) {
      state.SkipWithError("not completed");
    }
  }
  report_allocations(state, before);
}

void sqlite_cycle_raw(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-sqlite-bench"};
  raw_store store(directory.file("raw.sqlite3"));
  const std::int64_t at = idem::detail::sqlite_nanoseconds(now);
  std::uint64_t next = 0;
  char buffer[32];
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    const std::string_view key = key_for(next++, buffer);
    if (!store.claim("tenant", key, at)) state.SkipWithError("not claimed");
    if (!store.complete("tenant", key, 1, response)) state.SkipWithError("not completed");
  }
  report_allocations(state, before);
}

void sqlite_cycle_raw_write_lock_only(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-sqlite-bench"};
  raw_store store(directory.file("raw.sqlite3"));
  const std::int64_t at = idem::detail::sqlite_nanoseconds(now);
  std::uint64_t next = 0;
  char buffer[32];
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    const std::string_view key = key_for(next++, buffer);
    if (!store.claim_under_write_lock("tenant", key, at)) state.SkipWithError("not claimed");
    if (!store.complete("tenant", key, 1, response)) state.SkipWithError("not completed");
  }
  report_allocations(state, before);
}

void sqlite_replay_idem(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-sqlite-bench"};
  idem::sqlite_store store = open_idem(directory.file("idem.sqlite3"));
  const idem::digest print = fingerprint();
  const std::string body(static_cast<std::size_t>(state.range(0)), 'r');
  const auto claimed = store.claim({"tenant", "order-17", print, now, 30s, 24h});
  (void)store.complete({"tenant", "order-17", claimed.fence}, body, now);
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    idem::claim_result again = store.claim({"tenant", "order-17", print, now + 1s, 30s, 24h});
    if (again.existing.response.size() != body.size()) state.SkipWithError("no replay");
    benchmark::DoNotOptimize(again);
  }
  report_allocations(state, before);
}

void sqlite_replay_raw(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-sqlite-bench"};
  raw_store store(directory.file("raw.sqlite3"));
  const std::string body(static_cast<std::size_t>(state.range(0)), 'r');
  const std::int64_t at = idem::detail::sqlite_nanoseconds(now);
  store.claim("tenant", "order-17", at);
  store.complete("tenant", "order-17", 1, body);
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    raw_store::row found;
    if (!store.read("tenant", "order-17", found) || found.response.size() != body.size()) {
      state.SkipWithError("no replay");
    }
    benchmark::DoNotOptimize(found);
  }
  report_allocations(state, before);
}

}  // namespace

BENCHMARK(sqlite_cycle_idem)->Name("sqlite_cycle/idem");
BENCHMARK(sqlite_cycle_raw)->Name("sqlite_cycle/raw");
BENCHMARK(sqlite_cycle_raw_write_lock_only)->Name("sqlite_cycle/raw_write_lock_only");
BENCHMARK(sqlite_replay_idem)->Name("sqlite_replay/idem")->Arg(64)->Arg(1024);
BENCHMARK(sqlite_replay_raw)->Name("sqlite_replay/raw")->Arg(64)->Arg(1024);
