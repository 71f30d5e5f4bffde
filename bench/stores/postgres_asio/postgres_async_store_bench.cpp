// idem::async_postgres_store (idem_async) beside the blocking idem::postgres_store (idem_sync),
// on the PostgreSQL server scripts/servers/postgres.sh starts (IDEM_TEST_PG_CONNINFO): fsync on
// and synchronous commits, as a deployment has them, the same for both sides; the server's
// clock. What one operation is, and the counters: bench/async_store_bench.hpp.
//
//   async_store_throughput/idem_async/postgres   64 operations in flight on 8 connections and
//                                                2 threads, as an event-loop server has them:
//                                                an io_context per thread, each with a store
//                                                of its own (pool_size 4, pipeline_depth 8)
//                                                and 32 operations in flight
//   async_store_throughput/idem_async_shared_loop/postgres   the same 64 on one store (pool_size
//                                                8) on one io_context run by 2 threads: every
//                                                operation hops between the threads (the
//                                                store's strand, the callers' coroutines)
//   async_store_throughput/idem_sync/postgres    64 threads on 8 pooled connections
//                                                (pool_size 8), one operation in flight each
//   async_store_single/{idem_async,idem_sync}/postgres   one operation at a time, pool_size 1
//
// Each claim and each completion is its own transaction on both sides, so an operation waits
// for two commits (two WAL flushes). Each run has a table of its own, dropped afterwards
// (untimed).
#include <benchmark/benchmark.h>

#include <libpq-fe.h>
#include <unistd.h>

#include <idem/asio.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/async.hpp>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "async_store_bench.hpp"

namespace {

namespace bench = idem_bench::async_store;
namespace asio = idem::asio;

constexpr int in_flight = 64;
constexpr std::size_t connections = 8;
constexpr int async_threads = 2;
// Operations per iteration: enough that the batch's ramp down (its last operations, with fewer
// in flight) is a small share of it.
constexpr std::uint64_t warm_up = 256;
constexpr std::uint64_t batch = 2048;

const char* conninfo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while benchmarks run
  return std::getenv("IDEM_TEST_PG_CONNINFO");
}

bool have_server(benchmark::State& state) {
  if (conninfo() != nullptr) return true;
  state.SkipWithError(
      "IDEM_TEST_PG_CONNINFO is not set: run scripts/servers/postgres.sh start DIR and source "
      "DIR/postgres.env");
  return false;
}

std::string table_name(const char* what) {
  static int runs = 0;
  return std::string("bench_") + what + "_" + std::to_string(::getpid()) + "_" +
         std::to_string(runs++);
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

idem::postgres_store::options sync_options(const std::string& table, std::size_t pool_size) {
  idem::postgres_store::options config;
  config.conninfo = conninfo();
  config.table = table;
  config.pool_size = pool_size;
  return config;
}

idem::async_postgres_store::options async_options(const std::string& table, std::size_t pool_size,
                                                  std::size_t pipeline_depth) {
  idem::async_postgres_store::options config;
  config.conninfo = conninfo();
  config.table = table;
  config.pool_size = pool_size;
  config.pipeline_depth = pipeline_depth;
  return config;
}

void throughput_async(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("async_tp_shared");
  const idem::digest print = bench::fingerprint();
  try {
    bench::running_loop loop(async_threads);
    idem::async_postgres_store store(
        loop.executor(),
        async_options(table, connections, static_cast<std::size_t>(in_flight) / connections));
    bench::throughput_loop(state, warm_up, batch, [&](std::uint64_t first, std::uint64_t count) {
      bench::run_in_flight(loop, in_flight, first, count, [&](std::uint64_t index) {
        return bench::async_cycle(store, index, print);
      });
    });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  drop(table);
}

void throughput_async_per_loop(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("async_tp_loops");
  const idem::digest print = bench::fingerprint();
  try {
    std::vector<std::unique_ptr<bench::running_loop>> loops;
    std::vector<bench::running_loop*> running;
    std::vector<idem::async_postgres_store> stores;
    for (int i = 0; i < async_threads; ++i) {
      loops.push_back(std::make_unique<bench::running_loop>(1));
      running.push_back(loops.back().get());
      stores.emplace_back(loops.back()->executor(),
                          async_options(table, connections / async_threads,
                                        static_cast<std::size_t>(in_flight) / connections));
    }
    bench::throughput_loop(state, warm_up, batch, [&](std::uint64_t first, std::uint64_t count) {
      bench::run_in_flight_on(running, in_flight / async_threads, first, count,
                              [&](std::size_t loop, std::uint64_t index) {
                                return bench::async_cycle(stores[loop], index, print);
                              });
    });
    stores.clear();  // closed while their loops still run
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  drop(table);
}

void throughput_sync(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("sync_tp");
  const idem::digest print = bench::fingerprint();
  try {
    idem::postgres_store store(sync_options(table, connections));
    bench::thread_crew crew(in_flight);
    bench::throughput_loop(state, warm_up, batch, [&](std::uint64_t first, std::uint64_t count) {
      crew.run(first, count, [&](std::uint64_t index) { bench::sync_cycle(store, index, print); });
    });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  drop(table);
}

void single_async(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("async_one");
  try {
    bench::run_single(state, [&](asio::io_context& io) {
      return idem::async_postgres_store(io.get_executor(), async_options(table, 1, 1));
    });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  drop(table);
}

void single_sync(benchmark::State& state) {
  if (!have_server(state)) return;
  const std::string table = table_name("sync_one");
  const idem::digest print = bench::fingerprint();
  try {
    idem::postgres_store store(sync_options(table, 1));
    std::uint64_t next = 0;
    bench::sync_cycle(store, next++, print);
    const double cpu_before = bench::process_cpu_seconds();
    for (auto _ : state)
      bench::sync_cycle(store, next++, print);
    bench::report(state, next - 1, bench::process_cpu_seconds() - cpu_before);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  drop(table);
}

}  // namespace

BENCHMARK(throughput_async_per_loop)
    ->Name("async_store_throughput/idem_async/postgres")
    ->UseRealTime();
BENCHMARK(throughput_async)
    ->Name("async_store_throughput/idem_async_shared_loop/postgres")
    ->UseRealTime();
BENCHMARK(throughput_sync)->Name("async_store_throughput/idem_sync/postgres")->UseRealTime();
BENCHMARK(single_async)->Name("async_store_single/idem_async/postgres")->UseRealTime();
BENCHMARK(single_sync)->Name("async_store_single/idem_sync/postgres")->UseRealTime();
