// The reconciler's pass on PostgreSQL, beside a pass that reads every record
// (bench/reconciler_bench.hpp says what both sides do and how they are named).
//
//   reconciler_pass/idem/postgres/records:N       idem::reconciler over idem::postgres_store
//                                                 (time_source::caller: the manual clock)
//   reconciler_pass/full_scan/postgres/records:N  one SELECT of the in-progress records past
//                                                 their lease, on a connection of its own whose
//                                                 planner may use no index (enable_indexscan,
//                                                 enable_bitmapscan, enable_indexonlyscan off: a
//                                                 sequential scan, as without the lease index);
//                                                 then the same takeovers through the store
//
// The table is the store's (its migrations and indexes), filled by one INSERT ... SELECT over
// generate_series, then VACUUM ANALYZE; one pooled connection, whose commits do not wait for the
// WAL flush (synchronous_commit=off, below). The server is the one scripts/servers/postgres.sh
// starts (IDEM_TEST_PG_CONNINFO).
#include <benchmark/benchmark.h>

#include <libpq-fe.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>

#include "reconciler_bench.hpp"

namespace {

namespace bench = idem_bench::reconciler;

const char* conninfo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while benchmarks run
  return std::getenv("IDEM_TEST_PG_CONNINFO");
}

std::int64_t nanoseconds(idem::store_time t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string hex(const idem::digest& print) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < print.size(); ++i) {
    const std::uint8_t byte = print.data()[i];
    out.push_back(digits[byte >> 4]);
    out.push_back(digits[byte & 0xf]);
  }
  return out;
}

// A plain connection: the filler, and the hand-written pass's reader.
class connection {
 public:
  connection() : connection_(PQconnectdb(conninfo())) {
    if (PQstatus(connection_) != CONNECTION_OK)
      throw std::runtime_error(PQerrorMessage(connection_));
    PQsetNoticeProcessor(
        connection_, [](void*, const char*) {}, nullptr);
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() { PQfinish(connection_); }

  void exec(const std::string& sql) {
    PGresult* result = PQexec(connection_, sql.c_str());
    const ExecStatusType status = PQresultStatus(result);
    PQclear(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
      throw std::runtime_error(sql + ": " + PQerrorMessage(connection_));
  }

  // The keys of the rows `sql` ($1: now, int8) answers, read in binary.
  std::vector<std::string> keys(const std::string& sql, std::int64_t now) {
    const std::string now_text = std::to_string(now);
    const char* values[1] = {now_text.c_str()};
    PGresult* result =
        PQexecParams(connection_, sql.c_str(), 1, nullptr, values, nullptr, nullptr, 1);
    if (PQresultStatus(result) != PGRES_TUPLES_OK) {
      PQclear(result);
      throw std::runtime_error(PQerrorMessage(connection_));
    }
    std::vector<std::string> out;
    const int rows = PQntuples(result);
    out.reserve(static_cast<std::size_t>(rows));
    for (int row = 0; row < rows; ++row) {
      out.emplace_back(PQgetvalue(result, row, 0),
                       static_cast<std::size_t>(PQgetlength(result, row, 0)));
    }
    PQclear(result);
    return out;
  }

 private:
  PGconn* connection_;
};

struct postgres_fixture : bench::filled<idem::postgres_store> {
  std::string table;
  std::string stuck_sql;
  connection raw;

  explicit postgres_fixture(std::size_t n)
      : table("bench_reconciler_" + std::to_string(::getpid()) + "_" + std::to_string(n)) {
    records = n;
    drop();
    idem::postgres_store::options options;
    // The takeovers commit without waiting for the WAL flush: with it, each waits for this
    // machine's disk (about 4 ms), the same on both sides, and 1,000 of them hide the listing
    // this measures (docs/performance.md, "The reconciler").
    options.conninfo = std::string(conninfo()) + " options='-c synchronous_commit=off'";
    options.table = table;
    options.pool_size = 1;
    options.clock = idem::time_source::caller;
    store = idem::postgres_store{options};

    const std::string t = std::to_string(nanoseconds(clock.wall_now()));
    const std::string every = std::to_string(n / bench::stuck_records);
    raw.exec("INSERT INTO \"" + table +
             "\" (scope, key, fingerprint, state, fence, taken_over, created_at, lease_until, "
             "expires_at, response, recovery) SELECT convert_to('" +
             bench::scope + "', 'UTF8'), convert_to('key-' || i, 'UTF8'), decode('" +
             hex(bench::fingerprint()) + "', 'hex'), CASE WHEN i % " + every +
             " = 0 THEN 0 ELSE 1 END, 1, false, " + t + ", " + t + " + " +
             std::to_string(bench::lease.count()) + ", " + t + " + " +
             std::to_string(bench::retention.count()) + ", CASE WHEN i % " + every +
             " = 0 THEN NULL ELSE convert_to(repeat('r', " +
             std::to_string(bench::response().size()) +
             "), 'UTF8') END, NULL FROM generate_series(0, " + std::to_string(n - 1) + ") AS i");
    raw.exec("VACUUM ANALYZE \"" + table + "\"");
    // The hand-written pass: no index, so the planner scans the table.
    raw.exec("SET enable_indexscan = off");
    raw.exec("SET enable_bitmapscan = off");
    raw.exec("SET enable_indexonlyscan = off");
    stuck_sql = "SELECT key FROM \"" + table + "\" WHERE scope = convert_to('" + bench::scope +
                "', 'UTF8') AND state = 0 AND lease_until <= $1::int8 AND expires_at > $1::int8";
  }
  postgres_fixture(const postgres_fixture&) = delete;
  postgres_fixture& operator=(const postgres_fixture&) = delete;
  ~postgres_fixture() {
    store = idem::postgres_store{};  // its connection closed before the table goes
    drop();
  }

  void drop() {
    raw.exec("DROP TABLE IF EXISTS \"" + table + "\", \"" + table + "_meta\", \"" + table +
             "_outbox\", \"" + table + "_outbox_dead\"; DROP FUNCTION IF EXISTS \"" + table +
             "_notify\"()");
  }
};

bool have_server(benchmark::State& state) {
  if (conninfo() != nullptr) return true;
  state.SkipWithError(
      "IDEM_TEST_PG_CONNINFO is not set: run scripts/servers/postgres.sh start DIR and source "
      "DIR/postgres.env");
  return false;
}

void reconciler_pass_idem_postgres(benchmark::State& state, std::int64_t records) {
  if (!have_server(state)) return;
  auto& fixture = bench::fixture_cache<postgres_fixture>(static_cast<std::size_t>(records));
  bench::run_idem(state, fixture);
}

void reconciler_pass_full_scan_postgres(benchmark::State& state, std::int64_t records) {
  if (!have_server(state)) return;
  auto& fixture = bench::fixture_cache<postgres_fixture>(static_cast<std::size_t>(records));
  bench::run_full_scan(state, fixture, [&](idem::store_time now) {
    return fixture.raw.keys(fixture.stuck_sql, nanoseconds(now));
  });
}

[[maybe_unused]] const bool registered =
    (bench::register_pair("postgres", reconciler_pass_idem_postgres,
                          reconciler_pass_full_scan_postgres),
     true);

}  // namespace
