// The batched inbox (inbox::deduplicate_batch) beside one deduplicate per event, on Redis.
//
//   batch_inbox/idem_batch/redis   256 new event ids a batch: the claim scripts of the batch
//                                  pipelined in one round trip, the consumer function for each,
//                                  the complete scripts pipelined in one more
//   batch_inbox/idem_single/redis  the same 256 events, one deduplicate each (a claim and a
//                                  complete: two round trips an event)
//
// events_per_second counts the events answered. Both use the same server (the one
// scripts/servers/redis.sh starts; IDEM_TEST_REDIS_HOST/PORT say where), a key prefix of their
// own, one pooled connection, and the server's own persistence settings.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/redis.hpp>

#include "redis_bench_server.hpp"

namespace {

using idem_bench::redis::bench_server;

constexpr std::size_t batch_size = 256;

struct redis_policies : idem::default_policies {
  using store = idem::redis_store;
};
using redis_inbox = idem::inbox<redis_policies>;

redis_inbox make_inbox(const idem_bench::redis::server_address& where, const std::string& prefix) {
  idem::redis_store::options config;
  config.host = where.host;
  config.port = where.port;
  config.prefix = prefix;
  config.pool_size = 1;
  redis_inbox::options parts;
  parts.store = idem::redis_store{config};
  return redis_inbox(std::move(parts));
}

void next_batch(std::vector<std::string>& ids, std::uint64_t& counter) {
  ids.resize(batch_size);
  for (std::string& id : ids)
    id = "event-" + std::to_string(counter++);
}

template <bool Batched>
void batch_inbox_redis(benchmark::State& state) {
  const std::optional<idem_bench::redis::server_address> where = bench_server();
  if (!where) {
    state.SkipWithError(idem_bench::redis::no_server);
    return;
  }
  const std::string prefix = idem_bench::redis::unique_prefix(Batched ? "batch" : "single");
  {
    redis_inbox inbox = make_inbox(*where, prefix);
    std::vector<std::string> ids;
    std::uint64_t counter = 0;
    std::uint64_t effects = 0;
    for (auto _ : state) {
      state.PauseTiming();
      next_batch(ids, counter);
      state.ResumeTiming();
      if constexpr (Batched) {
        const auto answers =
            inbox.deduplicate_batch("events", ids, [&](std::size_t) { ++effects; });
        benchmark::DoNotOptimize(answers.data());
      } else {
        for (const std::string& id : ids) {
          const auto answer = inbox.deduplicate("events", id, [&] { ++effects; });
          benchmark::DoNotOptimize(&answer);
        }
      }
    }
    if (effects != counter) state.SkipWithError("an event did not run exactly once");
    state.counters["events_per_second"] = benchmark::Counter(
        static_cast<double>(state.iterations() * batch_size), benchmark::Counter::kIsRate);
  }
  idem_bench::redis::forget(*where, prefix);
}

}  // namespace

BENCHMARK(batch_inbox_redis<true>)
    ->Name("batch_inbox/idem_batch/redis")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(batch_inbox_redis<false>)
    ->Name("batch_inbox/idem_single/redis")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
