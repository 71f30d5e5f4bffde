// What waiting for a replica costs: idem::redis_store's claim + complete cycle (a new key each
// iteration, a 64-byte response) on a primary with one replica, with options::replicas = 1 (WAIT
// 1 pipelined after each write: the replica's round trip added to each) beside the same store
// with replicas = 0 (asynchronous replication), in one run on the same two servers:
//   redis_wait_cycle/with_wait   replicas = 1, replica_timeout 10 s
//   redis_wait_cycle/no_wait     replicas = 0
// The two servers are this benchmark's own (redis-server on loopback, free ports, no
// persistence: the replica's round trip is what is measured, not a disk), started when the
// first benchmark runs and killed at exit. scripts/bench_ratios.py prints with_wait / no_wait.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <idem/store/redis.hpp>

#include "redis_private_server.hpp"

namespace {

using namespace std::chrono_literals;

using idem_bench::redis::ready;
using idem_bench::redis::server;

// The primary and its replica, started once.
struct replicated {
  server primary{{}};
  server replica{{"--replicaof", "127.0.0.1", std::to_string(primary.port())}};
  replicated() {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!(ready(primary.port(), false) && ready(replica.port(), true))) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("the primary and its replica did not start");
      }
      std::this_thread::sleep_for(20ms);
    }
  }
};

replicated& servers() {
  static replicated both;
  return both;
}

const idem::digest fingerprint = [] {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(i * 5 + 3);
  return idem::digest{bytes};
}();

void cycle(benchmark::State& state, std::size_t replicas) {
  idem::redis_store::options options;
  options.port = servers().primary.port();
  options.pool_size = 1;
  // A prefix of each run's own: the servers keep what earlier runs wrote (until exit).
  options.prefix = "idem-bench:wait:" + std::to_string(replicas) + ":" +
                   std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) +
                   ":";
  options.replicas = replicas;
  // Long enough that a replica slowed by a loaded machine (the suite's bench.runs beside other
  // tests) still acknowledges: a timely acknowledgement costs the same under any timeout.
  options.replica_timeout = 10s;
  options.command_timeout = 15s;
  const idem::redis_store store(options);
  const std::string response(64, 'r');
  std::uint64_t counter = 0;
  std::size_t wrong = 0;
  const auto now = std::chrono::system_clock::now();
  try {
    for (auto _ : state) {
      const std::string key = "key-" + std::to_string(counter++);
      idem::redis_store handle = store;
      const idem::claim_result claimed =
          handle.claim(idem::claim_request{"tenant", key, fingerprint, now, 30s, 10min});
      if (claimed.status != idem::claim_status::claimed ||
          !handle.complete({"tenant", key, claimed.fence}, response, now)) {
        ++wrong;
      }
    }
  } catch (const idem::store_error& error) {
    state.SkipWithError(error.what());
    return;
  }
  if (wrong != 0) state.SkipWithError("a cycle did not claim and complete");
}

void redis_wait_cycle_with_wait(benchmark::State& state) {
  cycle(state, 1);
}
void redis_wait_cycle_no_wait(benchmark::State& state) {
  cycle(state, 0);
}

}  // namespace

BENCHMARK(redis_wait_cycle_with_wait)->Name("redis_wait_cycle/with_wait")->UseRealTime();
BENCHMARK(redis_wait_cycle_no_wait)->Name("redis_wait_cycle/no_wait")->UseRealTime();
