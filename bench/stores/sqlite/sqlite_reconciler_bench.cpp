// The reconciler's pass on SQLite, beside a pass that reads every record
// (bench/reconciler_bench.hpp says what both sides do and how they are named).
//
//   reconciler_pass/idem/sqlite/records:N       idem::reconciler over idem::sqlite_store
//   reconciler_pass/full_scan/sqlite/records:N  one SELECT of the in-progress records past their
//                                               lease, on a connection of its own, told not to
//                                               use an index (NOT INDEXED: a full scan of the
//                                               table); then the same takeovers through the store
//
// One database file in a temporary directory, WAL mode, synchronous = NORMAL (as
// bench/stores/sqlite/sqlite_store_bench.cpp), the store's schema. Filled by one INSERT ...
// SELECT over a recursive count, in one transaction, on a connection of its own.
#include <benchmark/benchmark.h>

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include "reconciler_bench.hpp"
#include "temporary_directory.hpp"

namespace {

namespace bench = idem_bench::reconciler;

std::int64_t nanoseconds(idem::store_time t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// A plain connection to the store's file: the filler, and the hand-written pass's reader.
class connection {
 public:
  explicit connection(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) !=
        SQLITE_OK) {
      throw std::runtime_error("cannot open " + path);
    }
    sqlite3_busy_timeout(db_, 5000);
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() {
    sqlite3_finalize(stuck_);
    sqlite3_close(db_);
  }

  void exec(const std::string& sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
      const std::string what = message != nullptr ? message : "?";
      sqlite3_free(message);
      throw std::runtime_error(what);
    }
  }

  // The filler: `records` rows as the store writes them (state 0 in progress, 1 completed).
  void fill(std::size_t records, idem::store_time now) {
    const std::int64_t t = nanoseconds(now);
    const std::int64_t every = static_cast<std::int64_t>(records / bench::stuck_records);
    const idem::digest print = bench::fingerprint();
    sqlite3_stmt* insert = prepare(
        "INSERT INTO idem_records (scope, key, state, fence, created_at, lease_until, "
        "expires_at, fingerprint, response, recovery) "
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1) "
        "SELECT CAST(?2 AS BLOB), CAST('key-' || i AS BLOB), CASE WHEN i % ?3 = 0 THEN 0 ELSE 1 "
        "END, 1, ?4, ?5, ?6, ?7, CASE WHEN i % ?3 = 0 THEN x'' ELSE ?8 END, x'' FROM n");
    sqlite3_bind_int64(insert, 1, static_cast<std::int64_t>(records));
    sqlite3_bind_text(insert, 2, bench::scope, -1, SQLITE_STATIC);
    sqlite3_bind_int64(insert, 3, every);
    sqlite3_bind_int64(insert, 4, t);
    sqlite3_bind_int64(insert, 5, t + bench::lease.count());
    sqlite3_bind_int64(insert, 6, t + bench::retention.count());
    sqlite3_bind_blob(insert, 7, print.data(), static_cast<int>(print.size()), SQLITE_STATIC);
    sqlite3_bind_blob(insert, 8, bench::response().data(),
                      static_cast<int>(bench::response().size()), SQLITE_STATIC);
    exec("BEGIN");
    const int done = sqlite3_step(insert);
    sqlite3_finalize(insert);
    if (done != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db_));
    exec("COMMIT");
  }

  // The hand-written pass's read: every row, through no index.
  std::vector<std::string> stuck(idem::store_time now) {
    if (stuck_ == nullptr) {
      stuck_ = prepare(
          "SELECT key FROM idem_records NOT INDEXED WHERE state = 0 AND lease_until <= ?1 AND "
          "expires_at > ?1 AND scope = ?2");
    }
    sqlite3_bind_int64(stuck_, 1, nanoseconds(now));
    sqlite3_bind_blob(stuck_, 2, bench::scope, 5, SQLITE_STATIC);
    std::vector<std::string> keys;
    while (sqlite3_step(stuck_) == SQLITE_ROW) {
      keys.emplace_back(static_cast<const char*>(sqlite3_column_blob(stuck_, 0)),
                        static_cast<std::size_t>(sqlite3_column_bytes(stuck_, 0)));
    }
    sqlite3_reset(stuck_);
    return keys;
  }

 private:
  sqlite3_stmt* prepare(const char* sql) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &statement, nullptr) != SQLITE_OK) {
      throw std::runtime_error(sqlite3_errmsg(db_));
    }
    return statement;
  }

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stuck_ = nullptr;
};

// The directory is a base of its own so that it is made before the store and removed after it.
struct sqlite_directory {
  idem::testing::temporary_directory directory{"idem-reconciler-bench"};
};

struct sqlite_fixture : sqlite_directory, bench::filled<idem::sqlite_store> {
  connection raw;

  explicit sqlite_fixture(std::size_t n) : raw(open_store(n)) {
    raw.fill(n, clock.wall_now());
    raw.exec("ANALYZE");
  }

  // Creates the file and its schema through the store, and answers its path for `raw`.
  std::string open_store(std::size_t n) {
    records = n;
    idem::sqlite_store::options options;
    options.path = directory.file("records.db");
    options.synchronous = idem::sqlite_store::synchronous_mode::normal;
    options.pool_size = 1;
    store = idem::sqlite_store{options};
    return options.path;
  }
};

void reconciler_pass_idem_sqlite(benchmark::State& state, std::int64_t records) {
  auto& fixture = bench::fixture_cache<sqlite_fixture>(static_cast<std::size_t>(records));
  bench::run_idem(state, fixture);
}

void reconciler_pass_full_scan_sqlite(benchmark::State& state, std::int64_t records) {
  auto& fixture = bench::fixture_cache<sqlite_fixture>(static_cast<std::size_t>(records));
  bench::run_full_scan(state, fixture,
                       [&](idem::store_time now) { return fixture.raw.stuck(now); });
}

[[maybe_unused]] const bool registered =
    (bench::register_pair("sqlite", reconciler_pass_idem_sqlite, reconciler_pass_full_scan_sqlite),
     true);

}  // namespace
