// idem's PostgreSQL store beside the same statements written by hand on libpq.
//
//   postgres_cycle/idem   a new key: postgres_store::claim, then complete (two round trips, two
//                         commits), with the default options (server time, pooled connection)
//   postgres_cycle/raw    the same two statements, prepared by hand on one libpq connection,
//                         binary parameters and results, decoded into the same record fields
//   postgres_replay/idem  a completed key (256-byte response): claim answers `existing` with
//                         the stored response
//   postgres_replay/raw   the same statement by hand
//
// Both sides use the same server, the same table layout (the raw side uses a table the store
// created) and synchronous commits with fsync on, as a deployment would. The server is the
// one scripts/servers/postgres.sh starts; IDEM_TEST_PG_CONNINFO says where.
#include <benchmark/benchmark.h>

#include <libpq-fe.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/store/postgres.hpp>

namespace {

using namespace std::chrono_literals;

const char* conninfo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while benchmarks run
  return std::getenv("IDEM_TEST_PG_CONNINFO");
}

std::string table_name(const char* what) {
  return std::string("bench_") + what + "_" + std::to_string(::getpid());
}

idem::digest fingerprint() {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(i * 17);
  return idem::digest{bytes};
}

idem::postgres_store make_store(const std::string& table) {
  idem::postgres_store::options config;
  config.conninfo = conninfo();
  config.table = table;
  config.pool_size = 1;
  return idem::postgres_store{config};
}

void drop(const std::string& table) {
  PGconn* admin = PQconnectdb(conninfo());
  PQsetNoticeProcessor(
      admin, [](void*, const char*) {}, nullptr);
  PQclear(PQexec(admin, ("DROP TABLE IF EXISTS \"" + table + "\", \"" + table + "_meta\", \"" +
                         table + "_outbox\", \"" + table +
                         "_outbox_dead\"; DROP FUNCTION IF EXISTS \"" + table + "_notify\"()")
                            .c_str()));
  PQfinish(admin);
}

// ---- the raw peer: the store's statements, prepared by hand --------------------------------

constexpr const char* server_now = "(extract(epoch FROM clock_timestamp()) * 1000000000)::int8";

std::string claim_sql(const std::string& t) {
  const std::string q = "\"" + t + "\"";
  const std::string cols =
      "fence, fingerprint, state, created_at, lease_until, expires_at, response, recovery";
  const std::string takeover = "(r.state = 0 AND r.expires_at > excluded.created_at)";
  return "WITH clock AS (SELECT COALESCE($6::int8, " + std::string(server_now) +
         ") AS n), decided AS (INSERT INTO " + q +
         " AS r (scope, key, fingerprint, state, fence, taken_over, created_at, lease_until, "
         "expires_at) SELECT $1, $2, $3, 0, 1, false, n, n + $4, n + $5 FROM clock "
         "ON CONFLICT (scope, key) DO UPDATE SET fence = r.fence + 1, taken_over = " +
         takeover + ", fingerprint = excluded.fingerprint, state = 0, created_at = CASE WHEN " +
         takeover +
         " THEN r.created_at ELSE excluded.created_at END, lease_until = "
         "excluded.lease_until, expires_at = CASE WHEN " +
         takeover +
         " THEN r.expires_at ELSE excluded.expires_at END, response = NULL, recovery = CASE WHEN " +
         takeover +
         " THEN r.recovery END WHERE r.state = 2 OR r.expires_at <= "
         "excluded.created_at OR (r.state = 0 AND r.fingerprint = excluded.fingerprint AND "
         "r.lease_until <= excluded.created_at) RETURNING taken_over, " +
         cols + ") SELECT true, taken_over, " + cols +
         ", NULL::int8 FROM decided UNION ALL SELECT "
         "false, false, " +
         cols + ", clock.n FROM " + q +
         ", clock WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM decided)";
}

std::string complete_sql(const std::string& t) {
  return "UPDATE \"" + t +
         "\" SET state = 1, response = $4, recovery = NULL WHERE scope = $1 AND key = $2 AND "
         "fence = $3 AND state <> 2";
}

std::int64_t read_int8(const PGresult* result, int row, int column) {
  const auto* b = reinterpret_cast<const unsigned char*>(PQgetvalue(result, row, column));
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v = (v << 8) | b[i];
  return static_cast<std::int64_t>(v);
}

void be8(std::array<char, 8>& out, std::int64_t value) {
  auto v = static_cast<std::uint64_t>(value);
  for (int i = 7; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

class raw_peer {
 public:
  explicit raw_peer(const std::string& table) : connection_(PQconnectdb(conninfo())) {
    if (PQstatus(connection_) != CONNECTION_OK)
      throw std::runtime_error(PQerrorMessage(connection_));
    const Oid claim_types[6] = {17, 17, 17, 20, 20, 20};
    const Oid complete_types[4] = {17, 17, 20, 17};
    PQclear(PQprepare(connection_, "claim", claim_sql(table).c_str(), 6, claim_types));
    PQclear(PQprepare(connection_, "complete", complete_sql(table).c_str(), 4, complete_types));
  }
  raw_peer(const raw_peer&) = delete;
  raw_peer& operator=(const raw_peer&) = delete;
  ~raw_peer() { PQfinish(connection_); }

  // Claim: returns the fence when won, else decodes the existing record.
  std::uint64_t claim(std::string_view scope, std::string_view key, const idem::digest& print,
                      idem::record& existing) {
    std::array<char, 8> lease{}, retention{};
    be8(lease, std::chrono::nanoseconds(30s).count());
    be8(retention, std::chrono::nanoseconds(24h).count());
    const char* values[6] = {
        scope.data(), key.data(),       reinterpret_cast<const char*>(print.data()),
        lease.data(), retention.data(), nullptr};
    const int lengths[6] = {static_cast<int>(scope.size()),
                            static_cast<int>(key.size()),
                            static_cast<int>(print.size()),
                            8,
                            8,
                            0};
    const int formats[6] = {1, 1, 1, 1, 1, 1};
    PGresult* result = PQexecPrepared(connection_, "claim", 6, values, lengths, formats, 1);
    if (PQresultStatus(result) != PGRES_TUPLES_OK)
      throw std::runtime_error(PQerrorMessage(connection_));
    std::uint64_t fence = 0;
    if (*PQgetvalue(result, 0, 0) != 0) {
      fence = static_cast<std::uint64_t>(read_int8(result, 0, 2));
    } else {
      existing.fence = static_cast<std::uint64_t>(read_int8(result, 0, 2));
      const auto* p = reinterpret_cast<const std::uint8_t*>(PQgetvalue(result, 0, 3));
      existing.fingerprint = idem::digest{
          std::span<const std::uint8_t>{p, static_cast<std::size_t>(PQgetlength(result, 0, 3))}};
      existing.state = idem::record_state::completed;
      existing.created_at = idem::store_time{std::chrono::nanoseconds{read_int8(result, 0, 5)}};
      existing.lease_until = idem::store_time{std::chrono::nanoseconds{read_int8(result, 0, 6)}};
      existing.expires_at = idem::store_time{std::chrono::nanoseconds{read_int8(result, 0, 7)}};
      existing.response.assign(PQgetvalue(result, 0, 8),
                               static_cast<std::size_t>(PQgetlength(result, 0, 8)));
      existing.recovery.assign(PQgetvalue(result, 0, 9),
                               static_cast<std::size_t>(PQgetlength(result, 0, 9)));
    }
    PQclear(result);
    return fence;
  }

  bool complete(std::string_view scope, std::string_view key, std::uint64_t fence,
                std::string_view response) {
    std::array<char, 8> fence_bytes{};
    be8(fence_bytes, static_cast<std::int64_t>(fence));
    const char* values[4] = {scope.data(), key.data(), fence_bytes.data(), response.data()};
    const int lengths[4] = {static_cast<int>(scope.size()), static_cast<int>(key.size()), 8,
                            static_cast<int>(response.size())};
    const int formats[4] = {1, 1, 1, 1};
    PGresult* result = PQexecPrepared(connection_, "complete", 4, values, lengths, formats, 1);
    if (PQresultStatus(result) != PGRES_COMMAND_OK)
      throw std::runtime_error(PQerrorMessage(connection_));
    const bool applied = std::string_view(PQcmdTuples(result)) == "1";
    PQclear(result);
    return applied;
  }

 private:
  PGconn* connection_;
};

bool have_server(benchmark::State& state) {
  if (conninfo() != nullptr) return true;
  state.SkipWithError(
      "IDEM_TEST_PG_CONNINFO is not set: run scripts/servers/postgres.sh start DIR and source "
      "DIR/postgres.env");
  return false;
}

const std::string response(256, 'r');

void postgres_cycle_idem(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("cycle_idem");
  {
    idem::postgres_store store = make_store(table);
    const idem::digest print = fingerprint();
    std::uint64_t n = 0;
    std::string key;
    for (auto _ : state) {
      key = "key-" + std::to_string(n++);
      const idem::claim_result claimed =
          store.claim({"bench", key, print, std::chrono::system_clock::now(), 30s, 24h});
      benchmark::DoNotOptimize(store.complete({"bench", key, claimed.fence}, response,
                                              std::chrono::system_clock::now()));
    }
  }
  drop(table);
}

void postgres_cycle_raw(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("cycle_raw");
  { (void)make_store(table); }  // the same table layout, created by the store
  {
    raw_peer raw(table);
    const idem::digest print = fingerprint();
    idem::record existing;
    std::uint64_t n = 0;
    std::string key;
    for (auto _ : state) {
      key = "key-" + std::to_string(n++);
      const std::uint64_t fence = raw.claim("bench", key, print, existing);
      benchmark::DoNotOptimize(raw.complete("bench", key, fence, response));
    }
  }
  drop(table);
}

void postgres_replay_idem(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("replay_idem");
  {
    idem::postgres_store store = make_store(table);
    const idem::digest print = fingerprint();
    const auto now = std::chrono::system_clock::now();
    const auto claimed = store.claim({"bench", "done", print, now, 30s, 24h});
    store.complete({"bench", "done", claimed.fence}, response, now);
    for (auto _ : state) {
      idem::claim_result again =
          store.claim({"bench", "done", print, std::chrono::system_clock::now(), 30s, 24h});
      benchmark::DoNotOptimize(again.existing.response.data());
    }
  }
  drop(table);
}

void postgres_replay_raw(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("replay_raw");
  { (void)make_store(table); }
  {
    raw_peer raw(table);
    const idem::digest print = fingerprint();
    idem::record existing;
    const std::uint64_t fence = raw.claim("bench", "done", print, existing);
    raw.complete("bench", "done", fence, response);
    for (auto _ : state) {
      idem::record again;
      benchmark::DoNotOptimize(raw.claim("bench", "done", print, again));
      benchmark::DoNotOptimize(again.response.data());
    }
  }
  drop(table);
}

}  // namespace

BENCHMARK(postgres_cycle_idem)->Name("postgres_cycle/idem")->UseRealTime()->MinTime(2.0);
BENCHMARK(postgres_cycle_raw)->Name("postgres_cycle/raw")->UseRealTime()->MinTime(2.0);
BENCHMARK(postgres_replay_idem)->Name("postgres_replay/idem")->UseRealTime()->MinTime(2.0);
BENCHMARK(postgres_replay_raw)->Name("postgres_replay/raw")->UseRealTime()->MinTime(2.0);
