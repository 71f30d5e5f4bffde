// tiered_store: repeats of a completed key answered from process memory, and what the tier adds
// to a key's first call. Each through idem::idempotent (default policies but the store), a
// 256-byte request body, a handler returning 64 bytes.
//
//   tiered_replay/idem_tiered_postgres  a completed key through tiered_store<postgres_store>:
//                                       a tier hit (1,024 keys, each repeated once beforehand,
//                                       which keeps it)
//   tiered_replay/idem_tiered_redis     the same over redis_store
//   tiered_replay/idem_memory           the same keys through memory_store: the goal's yardstick
//   tiered_first/idem_tiered_postgres   a new key through tiered_store<postgres_store>: a tier
//                                       miss, the claim, the handler, the completion
//   tiered_first/idem_postgres          the same through postgres_store alone
//
// PostgreSQL and Redis are the servers scripts/servers/*.sh start (IDEM_TEST_PG_CONNINFO,
// IDEM_TEST_REDIS_HOST/PORT); postgres_store with its defaults (server time, synchronous
// commits), one pooled connection, as postgres_cycle/idem.
#include <benchmark/benchmark.h>

#include <libpq-fe.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/tiered.hpp>

#include "redis_bench_server.hpp"

namespace {

constexpr std::size_t replay_keys = 1024;

const char* conninfo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while benchmarks run
  return std::getenv("IDEM_TEST_PG_CONNINFO");
}

std::string table_name(const char* what) {
  return std::string("bench_tiered_") + what + "_" + std::to_string(::getpid());
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

idem::postgres_store make_postgres(const std::string& table) {
  idem::postgres_store::options config;
  config.conninfo = conninfo();
  config.table = table;
  config.pool_size = 1;
  return idem::postgres_store{config};
}

const std::string& body() {
  static const std::string bytes(256, 'b');
  return bytes;
}

struct handler {
  std::string operator()(idem::handler_context& /*context*/, const std::string& request) const {
    return std::string(64, request.empty() ? 'e' : 'r');
  }
};

template <class S>
struct policies : idem::default_policies {
  using store = S;
};

template <class S>
using guarded = idem::idempotent<handler, policies<S>>;

template <class S>
std::unique_ptr<guarded<S>> guard_over(S store) {
  typename guarded<S>::options parts;
  parts.store = std::move(store);
  return std::make_unique<guarded<S>>(handler{}, std::move(parts));
}

std::vector<std::string> keys(const char* prefix, std::size_t count) {
  std::vector<std::string> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i)
    out.push_back(std::string(prefix) + "-" + std::to_string(i));
  return out;
}

// 1,024 keys run once and repeated once (which a tier keeps), then repeated in turn.
template <class S>
void replay(benchmark::State& state, S store) {
  auto guard = guard_over(std::move(store));
  const std::vector<std::string> all = keys("replay", replay_keys);
  for (int pass = 0; pass < 2; ++pass)
    for (const std::string& key : all)
      (void)(*guard)("bench", key, body());
  std::size_t next = 0;
  std::size_t wrong = 0;
  for (auto _ : state) {
    auto outcome = (*guard)("bench", all[next++ & (replay_keys - 1)], body());
    wrong += outcome.verdict() == idem::verdict::replayed ? 0 : 1;
    benchmark::DoNotOptimize(outcome);
  }
  state.SetItemsProcessed(state.iterations());
  if (wrong != 0) state.SkipWithError("a completed key was not replayed");
}

template <class S>
void first(benchmark::State& state, S store) {
  auto guard = guard_over(std::move(store));
  std::uint64_t n = 0;
  std::size_t wrong = 0;
  std::string key;
  for (auto _ : state) {
    key = "first-" + std::to_string(n++);
    auto outcome = (*guard)("bench", key, body());
    wrong += outcome.verdict() == idem::verdict::executed ? 0 : 1;
    benchmark::DoNotOptimize(outcome);
  }
  state.SetItemsProcessed(state.iterations());
  if (wrong != 0) state.SkipWithError("a new key did not run the handler");
}

bool have_postgres(benchmark::State& state) {
  if (conninfo() != nullptr) return true;
  state.SkipWithError("IDEM_TEST_PG_CONNINFO is not set: run scripts/servers/postgres.sh");
  return false;
}

void tiered_replay_postgres(benchmark::State& state) {
  if (!have_postgres(state)) return;
  const std::string table = table_name("replay");
  replay(state, idem::tiered_store<idem::postgres_store>{make_postgres(table)});
  drop(table);
}

void tiered_replay_redis(benchmark::State& state) {
  const auto where = idem_bench::redis::bench_server();
  if (!where) {
    state.SkipWithError(idem_bench::redis::no_server);
    return;
  }
  idem::redis_store::options options;
  options.host = where->host;
  options.port = where->port;
  options.prefix = idem_bench::redis::unique_prefix("tiered-replay");
  options.pool_size = 1;
  replay(state, idem::tiered_store<idem::redis_store>{idem::redis_store{options}});
  idem_bench::redis::forget(*where, options.prefix);
}

void tiered_replay_memory(benchmark::State& state) {
  replay(state, idem::memory_store{});
}

void tiered_first_tiered_postgres(benchmark::State& state) {
  if (!have_postgres(state)) return;
  const std::string table = table_name("first_tiered");
  first(state, idem::tiered_store<idem::postgres_store>{make_postgres(table)});
  drop(table);
}

void tiered_first_postgres(benchmark::State& state) {
  if (!have_postgres(state)) return;
  const std::string table = table_name("first_bare");
  first(state, make_postgres(table));
  drop(table);
}

}  // namespace

BENCHMARK(tiered_replay_postgres)->Name("tiered_replay/idem_tiered_postgres");
BENCHMARK(tiered_replay_redis)->Name("tiered_replay/idem_tiered_redis");
BENCHMARK(tiered_replay_memory)->Name("tiered_replay/idem_memory");
BENCHMARK(tiered_first_tiered_postgres)
    ->Name("tiered_first/idem_tiered_postgres")
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK(tiered_first_postgres)->Name("tiered_first/idem_postgres")->UseRealTime()->MinTime(2.0);
