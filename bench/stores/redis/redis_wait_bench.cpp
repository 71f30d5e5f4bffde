// What waiting for a replica costs: idem::redis_store's claim + complete cycle (a new key each
// iteration, a 64-byte response) on a primary with one replica, with options::replicas = 1 (WAIT
// 1 pipelined after each write: the replica's round trip added to each) beside the same store
// with replicas = 0 (asynchronous replication), in one run on the same two servers:
//   redis_wait_cycle/with_wait   replicas = 1, replica_timeout 1 s
//   redis_wait_cycle/no_wait     replicas = 0
// The two servers are this benchmark's own (redis-server on loopback, free ports, no
// persistence: the replica's round trip is what is measured, not a disk), started when the
// first benchmark runs and killed at exit. scripts/bench_ratios.py prints with_wait / no_wait.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <idem/store/redis.hpp>

namespace {

using namespace std::chrono_literals;

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("no free loopback port");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// ROLE of the server on `port` says it is a replica with its link up ("connected"), or it is a
// primary: what each waits for before use.
bool ready(int port, bool replica) {
  timeval limit{0, 200000};
  redisContext* context = redisConnectWithTimeout("127.0.0.1", port, limit);
  bool up = false;
  if (context != nullptr && context->err == 0) {
    auto* reply = static_cast<redisReply*>(redisCommand(context, "ROLE"));
    if (reply != nullptr && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1) {
      const std::string role(reply->element[0]->str, reply->element[0]->len);
      up = replica ? role == "slave" && reply->elements >= 4 &&
                         std::string(reply->element[3]->str, reply->element[3]->len) == "connected"
                   : role == "master";
    }
    freeReplyObject(reply);
  }
  redisFree(context);
  return up;
}

// One redis-server of the benchmark's own, killed when it goes (and by the kernel if the
// benchmark dies first).
class server {
 public:
  explicit server(std::vector<std::string> extra) : port_(free_port()) {
    directory_ = std::filesystem::temp_directory_path() /
                 ("idem-bench-wait-" + std::to_string(::getpid()) + "-" + std::to_string(port_));
    std::filesystem::create_directories(directory_);
    std::vector<std::string> words = {"redis-server",
                                      "--port",
                                      std::to_string(port_),
                                      "--bind",
                                      "127.0.0.1",
                                      "--dir",
                                      directory_.string(),
                                      "--save",
                                      "",
                                      "--appendonly",
                                      "no",
                                      "--repl-diskless-sync-delay",
                                      "0"};
    words.insert(words.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& word : words)
      argv.push_back(word.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
  }
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  ~server() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  int port() const noexcept { return port_; }

 private:
  int port_;
  pid_t pid_ = -1;
  std::filesystem::path directory_;
};

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
  const idem::redis_store store(options);
  const std::string response(64, 'r');
  std::uint64_t counter = 0;
  std::size_t wrong = 0;
  const auto now = std::chrono::system_clock::now();
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
