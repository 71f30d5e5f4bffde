// idem::async_redis_store (idem_async) beside the blocking idem::redis_store (idem_sync), on the
// Redis server scripts/servers/redis.sh starts (IDEM_TEST_REDIS_HOST/PORT), both with the
// server's clock and the default scripts. What one operation is, and the counters:
// bench/async_store_bench.hpp.
//
//   async_store_throughput/idem_async/redis   64 operations in flight on one connection
//                                             (connections = 1), an io_context run by one thread
//   async_store_throughput/idem_sync/redis    8 threads on 8 pooled connections (pool_size 8),
//                                             one operation in flight each
//   async_store_single/{idem_async,idem_sync}/redis   one operation at a time, one connection
//
// Each run writes under a key prefix of its own, deleted afterwards (untimed).
#include <benchmark/benchmark.h>

#include <hiredis/hiredis.h>

#include <idem/asio.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/redis/async.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "async_store_bench.hpp"

#include "redis_bench_server.hpp"

namespace {

using idem_bench::redis::bench_server;
using idem_bench::redis::forget;
using idem_bench::redis::no_server;
using idem_bench::redis::server_address;
using idem_bench::redis::unique_prefix;

namespace bench = idem_bench::async_store;
namespace asio = idem::asio;

constexpr int async_in_flight = 64;
constexpr int sync_threads = 8;
// Operations per iteration: enough that the batch's ramp down (its last operations, with fewer
// in flight) is a small share of it.
constexpr std::uint64_t warm_up = 256;
constexpr std::uint64_t batch = 4096;

idem::redis_store::options sync_options(const server_address& where, std::size_t pool_size) {
  idem::redis_store::options options;
  options.host = where.host;
  options.port = where.port;
  options.prefix = unique_prefix("async-store-sync");
  options.pool_size = pool_size;
  return options;
}

idem::async_redis_store::options async_options(const server_address& where) {
  idem::async_redis_store::options options;
  options.host = where.host;
  options.port = where.port;
  options.prefix = unique_prefix("async-store-async");
  options.pool_size = 1;
  return options;
}

void throughput_async(benchmark::State& state) {
  const auto where = bench_server();
  if (!where) return state.SkipWithError(no_server);
  const idem::digest print = bench::fingerprint();
  std::string prefix;
  {
    bench::running_loop loop(1);
    {
      idem::async_redis_store store(loop.executor(), async_options(*where));
      prefix = store.settings().prefix;
      bench::throughput_loop(state, warm_up, batch, [&](std::uint64_t first, std::uint64_t count) {
        bench::run_in_flight(loop, async_in_flight, first, count, [&](std::uint64_t index) {
          return bench::async_cycle(store, index, print);
        });
      });
    }  // the store's connections close on the loop, before it stops
  }
  forget(*where, prefix);
}

void throughput_sync(benchmark::State& state) {
  const auto where = bench_server();
  if (!where) return state.SkipWithError(no_server);
  const idem::digest print = bench::fingerprint();
  std::string prefix;
  {
    idem::redis_store store(sync_options(*where, sync_threads));
    prefix = store.settings().prefix;
    bench::thread_crew crew(sync_threads);
    bench::throughput_loop(state, warm_up, batch, [&](std::uint64_t first, std::uint64_t count) {
      crew.run(first, count, [&](std::uint64_t index) { bench::sync_cycle(store, index, print); });
    });
  }
  forget(*where, prefix);
}

void single_async(benchmark::State& state) {
  const auto where = bench_server();
  if (!where) return state.SkipWithError(no_server);
  std::string prefix;
  bench::run_single(state, [&](asio::io_context& io) {
    idem::async_redis_store store(io.get_executor(), async_options(*where));
    prefix = store.settings().prefix;
    return store;
  });
  forget(*where, prefix);
}

void single_sync(benchmark::State& state) {
  const auto where = bench_server();
  if (!where) return state.SkipWithError(no_server);
  const idem::digest print = bench::fingerprint();
  std::string prefix;
  {
    idem::redis_store store(sync_options(*where, 1));
    prefix = store.settings().prefix;
    try {
      std::uint64_t next = 0;
      bench::sync_cycle(store, next++, print);
      const double cpu_before = bench::process_cpu_seconds();
      for (auto _ : state)
        bench::sync_cycle(store, next++, print);
      bench::report(state, next - 1, bench::process_cpu_seconds() - cpu_before);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
    }
  }
  forget(*where, prefix);
}

}  // namespace

BENCHMARK(throughput_async)->Name("async_store_throughput/idem_async/redis")->UseRealTime();
BENCHMARK(throughput_sync)->Name("async_store_throughput/idem_sync/redis")->UseRealTime();
BENCHMARK(single_async)->Name("async_store_single/idem_async/redis")->UseRealTime();
BENCHMARK(single_sync)->Name("async_store_single/idem_sync/redis")->UseRealTime();
