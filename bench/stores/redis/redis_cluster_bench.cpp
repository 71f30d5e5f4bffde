// What a cluster costs a request: idem::redis_cluster_store's claim + complete cycle (a new key
// each iteration, a 64-byte response, scopes spread over the slots) on a cluster of three
// primaries, beside idem::redis_store's on one server, in one run, at 1 and 64 operations in
// flight (threads):
//   redis_cluster_cycle/idem_cluster   the cluster store: the slot of each scope computed, the
//                                      cycle sent to the primary that serves it
//   redis_cluster_cycle/single         the single-node store on one server
// Every server is this benchmark's own (redis-server on loopback, free ports, no persistence, no
// replicas), started when the first benchmark runs and killed at exit; the cluster is joined by
// redis-cli --cluster create. scripts/bench_ratios.py prints idem_cluster / single. On a 2-core
// machine the three primaries share the cores the single server has alone, so the ratio at 64
// in flight says what routing and three processes cost there, not what a cluster of machines
// gains.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <idem/store/redis.hpp>
#include <idem/store/redis/cluster.hpp>

#include "redis_private_server.hpp"

namespace {

using namespace std::chrono_literals;
using idem_bench::redis::free_port;
using idem_bench::redis::server;

// Whether the node on `port` says the cluster is ok with every slot served.
bool cluster_ok(int port) {
  timeval limit{0, 200000};
  redisContext* context = redisConnectWithTimeout("127.0.0.1", port, limit);
  bool ok = false;
  if (context != nullptr && context->err == 0) {
    auto* reply = static_cast<redisReply*>(redisCommand(context, "CLUSTER INFO"));
    if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
      const std::string text(reply->str, reply->len);
      ok = text.find("cluster_state:ok") != std::string::npos &&
           text.find("cluster_slots_ok:16384") != std::string::npos;
    }
    freeReplyObject(reply);
  }
  redisFree(context);
  return ok;
}

// The single server and the cluster's three primaries, started once.
struct servers_t {
  server single{{}};
  std::vector<std::unique_ptr<server>> nodes;
  servers_t() {
    for (int i = 0; i < 3; ++i) {
      nodes.push_back(std::make_unique<server>(
          std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                   "nodes.conf", "--cluster-port", std::to_string(free_port())}));
    }
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    auto wait_for = [&](auto ready, const char* what) {
      while (!ready()) {
        if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error(what);
        std::this_thread::sleep_for(20ms);
      }
    };
    const auto all_up = [&] {
      if (!idem_bench::redis::ready(single.port(), false)) return false;
      for (const auto& node : nodes) {
        if (!idem_bench::redis::ready(node->port(), false)) return false;
      }
      return true;
    };
    wait_for(all_up, "the benchmark's redis servers did not start");
    std::vector<std::string> words = {"redis-cli", "--cluster", "create"};
    for (const auto& node : nodes)
      words.push_back("127.0.0.1:" + std::to_string(node->port()));
    words.emplace_back("--cluster-yes");
    std::vector<char*> argv;
    for (std::string& word : words)
      argv.push_back(word.data());
    argv.push_back(nullptr);
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork failed");
    if (child == 0) {
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw std::runtime_error("redis-cli --cluster create failed");
    }
    const auto all_ok = [&] {
      for (const auto& node : nodes) {
        if (!cluster_ok(node->port())) return false;
      }
      return true;
    };
    wait_for(all_ok, "the benchmark's cluster did not settle");
  }
};

servers_t& servers() {
  static servers_t started;
  return started;
}

const idem::digest fingerprint = [] {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return idem::digest{bytes};
}();

std::string run_prefix(const char* side) {
  return std::string("idem-bench:cluster:") + side + ":" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ":";
}

// The stores a run's threads share, made by thread 0 before the timed loop.
template <class Store>
struct shared_store {
  std::shared_ptr<Store> store;
  std::atomic<std::uint64_t> counter{0};
};

template <class Store, class Make>
void cycle(benchmark::State& state, shared_store<Store>& shared, Make make) {
  if (state.thread_index() == 0) {
    shared.store = std::make_shared<Store>(make());
  }
  const std::string response(64, 'r');
  std::size_t wrong = 0;
  const auto now = std::chrono::system_clock::now();
  for (auto _ : state) {
    const std::uint64_t n = shared.counter.fetch_add(1, std::memory_order_relaxed);
    // 64 scopes, so that the cluster's three primaries all take a share.
    const std::string scope = "tenant-" + std::to_string(n % 64);
    const std::string key = "key-" + std::to_string(n);
    Store handle = *shared.store;
    const idem::claim_result claimed =
        handle.claim(idem::claim_request{scope, key, fingerprint, now, 30s, 10min});
    if (claimed.status != idem::claim_status::claimed ||
        !handle.complete({scope, key, claimed.fence}, response, now)) {
      ++wrong;
    }
  }
  if (wrong != 0) state.SkipWithError("a cycle did not claim and complete");
}

shared_store<idem::redis_cluster_store> cluster_shared;
shared_store<idem::redis_store> single_shared;

void redis_cluster_cycle_cluster(benchmark::State& state) {
  cycle(state, cluster_shared, [] {
    idem::redis_cluster_store::options options;
    for (const auto& node : servers().nodes)
      options.nodes.push_back("127.0.0.1:" + std::to_string(node->port()));
    options.prefix = run_prefix("cluster");
    options.pool_size = 64;
    return idem::redis_cluster_store(options);
  });
}

void redis_cluster_cycle_single(benchmark::State& state) {
  cycle(state, single_shared, [] {
    idem::redis_store::options options;
    options.port = servers().single.port();
    options.prefix = run_prefix("single");
    options.pool_size = 64;
    return idem::redis_store(options);
  });
}

}  // namespace

BENCHMARK(redis_cluster_cycle_cluster)
    ->Name("redis_cluster_cycle/idem_cluster")
    ->UseRealTime()
    ->Threads(1)
    ->Threads(64);
BENCHMARK(redis_cluster_cycle_single)
    ->Name("redis_cluster_cycle/single")
    ->UseRealTime()
    ->Threads(1)
    ->Threads(64);
