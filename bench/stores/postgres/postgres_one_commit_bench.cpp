// One commit for a local effect (issue #34) on PostgreSQL, beside the classic two-commit cycle
// written by hand.
//
//   one_commit_cycle/idem/postgres            a new key each iteration through idempotent in
//                                             commit_mode::one_commit, with a handler that
//                                             inserts one effect row (transaction::exec): BEGIN
//                                             (with its lock_timeout), the claim, the effect,
//                                             the completion, COMMIT: one commit, one WAL flush.
//   one_commit_cycle/raw_two_commit/postgres  the same work as an application writes it without
//                                             idem's one-commit mode, by hand on one libpq
//                                             connection with prepared statements: INSERT the
//                                             claim (autocommit: the first commit); then BEGIN,
//                                             INSERT the effect row, UPDATE the record to
//                                             completed with a 64-byte response, COMMIT.
//
// Both sides: the same server (scripts/servers/postgres.sh: fsync on, synchronous_commit on),
// a records table the store created and an effect table of the same layout each, keys
// "order-<n>". IDEM_TEST_PG_CONNINFO says where the server is.
#include <benchmark/benchmark.h>

#include <libpq-fe.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>

namespace {

const std::string response(64, 'r');

const char* conninfo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while benchmarks run
  return std::getenv("IDEM_TEST_PG_CONNINFO");
}

std::string table_name(const char* what) {
  return std::string("bench_one_commit_") + what + "_" + std::to_string(::getpid());
}

// An admin connection: runs SQL, throws on failure.
class admin_connection {
 public:
  admin_connection() : connection_(PQconnectdb(conninfo())) {
    if (PQstatus(connection_) != CONNECTION_OK)
      throw std::runtime_error(PQerrorMessage(connection_));
    PQsetNoticeProcessor(
        connection_, [](void*, const char*) {}, nullptr);
  }
  admin_connection(const admin_connection&) = delete;
  admin_connection& operator=(const admin_connection&) = delete;
  ~admin_connection() { PQfinish(connection_); }
  void exec(const std::string& sql) {
    PGresult* result = PQexec(connection_, sql.c_str());
    const ExecStatusType status = PQresultStatus(result);
    PQclear(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
      throw std::runtime_error(PQerrorMessage(connection_));
  }

 private:
  PGconn* connection_;
};

// The table (made by the store, with its effect table beside it), dropped at the end.
class bench_tables {
 public:
  explicit bench_tables(const char* what) : table_(table_name(what)) {
    idem::postgres_store::options config;
    config.conninfo = conninfo();
    config.table = table_;
    config.pool_size = 1;
    { idem::postgres_store made(config); }
    admin_connection().exec("CREATE TABLE IF NOT EXISTS \"" + table_ +
                            "_effects\" (scope bytea NOT NULL, key bytea NOT NULL, amount int8 "
                            "NOT NULL)");
  }
  bench_tables(const bench_tables&) = delete;
  bench_tables& operator=(const bench_tables&) = delete;
  ~bench_tables() {
    try {
      admin_connection().exec("DROP TABLE IF EXISTS \"" + table_ + "\", \"" + table_ +
                              "_meta\", \"" + table_ + "_outbox\", \"" + table_ +
                              "_outbox_dead\", \"" + table_ +
                              "_effects\"; DROP FUNCTION IF EXISTS \"" + table_ + "_notify\"()");
    } catch (const std::exception&) {
      // Cleanup only.
    }
  }
  const std::string& table() const noexcept { return table_; }

 private:
  std::string table_;
};

struct one_commit_policies : idem::default_policies {
  using store = idem::postgres_store;
  static constexpr idem::commit_mode commit = idem::commit_mode::one_commit;
};

struct effect_handler {
  std::string insert;
  std::string operator()(idem::handler_context& context, const std::string& /*body*/,
                         idem::postgres_store::transaction& txn) const {
    txn.exec(insert, {context.scope(), context.key(), "1000"});
    return response;
  }
};

void one_commit_cycle_idem_postgres(benchmark::State& state) {
  if (conninfo() == nullptr) {
    state.SkipWithError("IDEM_TEST_PG_CONNINFO is not set");
    return;
  }
  const bench_tables tables("idem");
  idem::postgres_store::options config;
  config.conninfo = conninfo();
  config.table = tables.table();
  config.pool_size = 1;
  idem::idempotent<effect_handler, one_commit_policies>::options parts;
  parts.store = idem::postgres_store{config};
  idem::idempotent<effect_handler, one_commit_policies> guarded(
      effect_handler{"INSERT INTO \"" + tables.table() +
                     "_effects\" (scope, key, amount) VALUES ($1, $2, $3)"},
      std::move(parts));
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

// The hand-written two-commit cycle: prepared statements, text parameters, one connection.
class raw_two_commit {
 public:
  explicit raw_two_commit(const std::string& table) : connection_(PQconnectdb(conninfo())) {
    if (PQstatus(connection_) != CONNECTION_OK)
      throw std::runtime_error(PQerrorMessage(connection_));
    const std::string records = "\"" + table + "\"";
    prepare("claim", "INSERT INTO " + records +
                         " (scope, key, fingerprint, state, fence, taken_over, created_at, "
                         "lease_until, expires_at) VALUES ($1, $2, $3, 0, 1, false, $4, $4 + "
                         "30000000000, $4 + 86400000000000) ON CONFLICT (scope, key) DO NOTHING");
    prepare("effect",
            "INSERT INTO \"" + table + "_effects\" (scope, key, amount) VALUES ($1, $2, $3)");
    prepare("complete", "UPDATE " + records +
                            " SET state = 1, response = $4, recovery = NULL WHERE scope = $1 AND "
                            "key = $2 AND fence = $3 AND state <> 2");
  }
  raw_two_commit(const raw_two_commit&) = delete;
  raw_two_commit& operator=(const raw_two_commit&) = delete;
  ~raw_two_commit() { PQfinish(connection_); }

  bool cycle(const std::string& scope, const std::string& key) {
    const std::string now = std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
    const char* claim[] = {scope.c_str(), key.c_str(), "\\x0102030405060708090a0b0c0d0e0f10",
                           now.c_str()};
    if (run("claim", 4, claim) != 1) return false;  // autocommit: the first commit
    text("BEGIN");
    const char* effect[] = {scope.c_str(), key.c_str(), "1000"};
    (void)run("effect", 3, effect);
    const char* complete[] = {scope.c_str(), key.c_str(), "1", response.c_str()};
    const bool completed = run("complete", 4, complete) == 1;
    text("COMMIT");  // the second commit
    return completed;
  }

 private:
  void prepare(const char* name, const std::string& sql) {
    PGresult* result = PQprepare(connection_, name, sql.c_str(), 0, nullptr);
    const bool ok = PQresultStatus(result) == PGRES_COMMAND_OK;
    PQclear(result);
    if (!ok) throw std::runtime_error(PQerrorMessage(connection_));
  }
  long run(const char* name, int count, const char* const* values) {
    PGresult* result = PQexecPrepared(connection_, name, count, values, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(result) == PGRES_COMMAND_OK;
    const long rows = ok ? std::strtol(PQcmdTuples(result), nullptr, 10) : -1;
    PQclear(result);
    if (!ok) throw std::runtime_error(PQerrorMessage(connection_));
    return rows;
  }
  void text(const char* sql) {
    PGresult* result = PQexec(connection_, sql);
    const bool ok = PQresultStatus(result) == PGRES_COMMAND_OK;
    PQclear(result);
    if (!ok) throw std::runtime_error(PQerrorMessage(connection_));
  }

  PGconn* connection_;
};

void one_commit_cycle_raw_two_commit_postgres(benchmark::State& state) {
  if (conninfo() == nullptr) {
    state.SkipWithError("IDEM_TEST_PG_CONNINFO is not set");
    return;
  }
  const bench_tables tables("raw");
  raw_two_commit raw(tables.table());
  const std::string scope = "bench";
  std::int64_t n = 0;
  for (auto _ : state) {
    const std::string key = "order-" + std::to_string(n++);
    if (!raw.cycle(scope, key)) {
      state.SkipWithError("the raw cycle did not claim and complete");
      break;
    }
  }
}

}  // namespace

BENCHMARK(one_commit_cycle_idem_postgres)->Name("one_commit_cycle/idem/postgres");
BENCHMARK(one_commit_cycle_raw_two_commit_postgres)
    ->Name("one_commit_cycle/raw_two_commit/postgres");
