// What the Redis store's tests share: the server scripts/test.sh started (IDEM_TEST_REDIS_*),
// a key prefix of their own per store so parallel tests never meet, and private redis-server
// processes for the tests that kill, restart or reconfigure a server.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <idem/outbox/sink.hpp>
#include <idem/redis_streams/entry.hpp>
#include <idem/store/redis.hpp>

#include "support/temporary_directory.hpp"

namespace idem_redis_test {

using reply_ptr = std::unique_ptr<redisReply, decltype(&freeReplyObject)>;
using context_ptr = std::unique_ptr<redisContext, decltype(&redisFree)>;

/// A prefix no other store of any test process uses.
inline std::string unique_prefix() {
  static std::atomic<unsigned> counter{0};
  static const unsigned long long salt = std::random_device{}();
  return "idem-test:" + std::to_string(::getpid()) + "-" + std::to_string(salt % 1000000) + "-" +
         std::to_string(counter.fetch_add(1)) + ":";
}

/// Where the shared test server listens: FAILS the test when scripts/test.sh did not say.
inline std::pair<std::string, int> shared_server() {
  const char* host = std::getenv("IDEM_TEST_REDIS_HOST");
  const char* port = std::getenv("IDEM_TEST_REDIS_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    FAIL(
        "IDEM_TEST_REDIS_HOST and IDEM_TEST_REDIS_PORT are not set. Run the tests through "
        "scripts/test.sh, or start a server with `scripts/servers/redis.sh start DIR` and "
        "`source DIR/redis.env` first.");
  }
  return {host, std::atoi(port)};
}

inline idem::redis_store::options shared_options(idem::time_source time) {
  const auto [host, port] = shared_server();
  idem::redis_store::options options;
  options.host = host;
  options.port = port;
  options.prefix = unique_prefix();
  options.clock = time;
  return options;
}

/// A plain hiredis connection, for looking at what the store wrote.
inline context_ptr connect_raw(const std::string& host, int port) {
  timeval limit{2, 0};
  context_ptr context(redisConnectWithTimeout(host.c_str(), port, limit), &redisFree);
  if (!context || context->err != 0) {
    throw std::runtime_error("cannot connect to redis at " + host + ":" + std::to_string(port));
  }
  return context;
}

inline reply_ptr command(redisContext* context, const std::vector<std::string>& words) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const std::string& word : words) {
    argv.push_back(word.data());
    lengths.push_back(word.size());
  }
  auto* raw = static_cast<redisReply*>(
      redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  if (raw == nullptr) throw std::runtime_error(std::string("redis: ") + context->errstr);
  return reply_ptr(raw, &freeReplyObject);
}

/// The entries of one stream, decoded as a consumer decodes them (XRANGE, oldest first).
inline std::vector<idem::outbox_entry> read_stream(redisContext* context, const std::string& stream,
                                                   std::string_view topic) {
  const auto range = command(context, {"XRANGE", stream, "-", "+"});
  REQUIRE(range->type == REDIS_REPLY_ARRAY);
  std::vector<idem::outbox_entry> entries;
  for (std::size_t i = 0; i < range->elements; ++i) {
    const redisReply* pairs = range->element[i]->element[1];
    std::vector<std::pair<std::string_view, std::string_view>> fields;
    for (std::size_t f = 0; f + 1 < pairs->elements; f += 2) {
      fields.emplace_back(std::string_view{pairs->element[f]->str, pairs->element[f]->len},
                          std::string_view{pairs->element[f + 1]->str, pairs->element[f + 1]->len});
    }
    entries.push_back(idem::redis_streams::decode_entry(topic, fields));
  }
  return entries;
}

/// Every key whose name starts with `prefix`.
inline std::vector<std::string> keys_under(redisContext* context, const std::string& prefix) {
  std::vector<std::string> found;
  std::string cursor = "0";
  do {
    const reply_ptr page =
        command(context, {"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    cursor.assign(page->element[0]->str, page->element[0]->len);
    for (std::size_t i = 0; i < page->element[1]->elements; ++i) {
      found.emplace_back(page->element[1]->element[i]->str, page->element[1]->element[i]->len);
    }
  } while (cursor != "0");
  return found;
}

/// Deletes what a test wrote under its prefix; never throws (it runs in destructors).
inline void remove_keys(const std::string& host, int port, const std::string& prefix) noexcept {
  try {
    const context_ptr context = connect_raw(host, port);
    for (const std::string& key : keys_under(context.get(), prefix))
      (void)command(context.get(), {"UNLINK", key});
  } catch (...) {
    // A server that is gone has nothing left to clean.
  }
}

/// The conformance factory's and other tests' stores on the shared server; deletes their keys
/// when the test case ends.
class shared_stores {
 public:
  shared_stores() = default;
  shared_stores(const shared_stores&) = delete;
  shared_stores& operator=(const shared_stores&) = delete;
  ~shared_stores() {
    for (const auto& options : made_)
      remove_keys(options.host, options.port, options.prefix);
  }
  idem::redis_store make(idem::time_source time = idem::time_source::caller) {
    return make(shared_options(time));
  }
  idem::redis_store make(const idem::redis_store::options& options) {
    made_.push_back(options);
    return idem::redis_store(options);
  }

 private:
  std::vector<idem::redis_store::options> made_;
};

/// Redis Cluster's hash tag of a key: the bytes between the first '{' and the first '}' after
/// it, when that is not empty; otherwise the whole key is hashed.
inline std::string hash_tag(std::string_view key) {
  const std::size_t open = key.find('{');
  if (open == std::string_view::npos) return std::string(key);
  const std::size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return std::string(key);
  return std::string(key.substr(open + 1, close - open - 1));
}

inline std::string redis_server_binary() {
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      const std::filesystem::path candidate = std::filesystem::path(dir) / "redis-server";
      if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  for (const char* candidate : {"/usr/bin/redis-server", "/usr/sbin/redis-server"}) {
    if (::access(candidate, X_OK) == 0) return candidate;
  }
  FAIL("redis-server is not installed (Debian: apt-get install redis-server)");
  return {};
}

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t size = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("no free loopback port");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

/// A redis-server of the test's own, on a private port and a temporary directory, with
/// appendonly and appendfsync always: killed (SIGKILL) and its directory removed when this
/// object goes, however the test ends, and killed by the kernel if the test process dies first
/// (PR_SET_PDEATHSIG: keep it on the thread that created it).
class private_redis {
 public:
  explicit private_redis(std::vector<std::string> config = {}) : config_(std::move(config)) {
    // The free port can be taken by another process before the server binds it: then another.
    for (int attempt = 1;; ++attempt) {
      port_ = free_port();
      if (launch()) return;
      if (attempt == 5) FAIL("redis-server exited at start five times; its log:\n" << log());
    }
  }
  private_redis(const private_redis&) = delete;
  private_redis& operator=(const private_redis&) = delete;
  ~private_redis() { kill9(); }  // then directory_ removes its files

  int port() const noexcept { return port_; }
  pid_t pid() const noexcept { return pid_; }
  /// SIGSTOP and SIGCONT: a paused server keeps its connections open and answers nothing.
  void pause() const noexcept {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void resume() const noexcept {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }
  std::string socket_path() const { return (directory_.path() / "redis.sock").string(); }
  bool running() const noexcept { return pid_ > 0; }

  idem::redis_store::options options(idem::time_source time = idem::time_source::server) const {
    idem::redis_store::options options;
    options.host = "127.0.0.1";
    options.port = port_;
    options.prefix = unique_prefix();
    options.clock = time;
    options.connect_timeout = std::chrono::milliseconds{2000};
    return options;
  }

  /// Starts the server (again: same port, same data) and waits until it answers PING; with
  /// `config`, that configuration from now on (a primary restarted as a replica, say).
  void start(std::vector<std::string> config) {
    config_ = std::move(config);
    start();
  }
  void start() {
    if (!running() && !launch()) FAIL("redis-server exited at start; its log:\n" << log());
  }

  /// kill -9: no shutdown, no final fsync; what it acknowledged is on disk or nowhere.
  void kill9() noexcept {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);  // a paused process dies on SIGKILL too; this only makes sure
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  context_ptr connect() const { return connect_raw("127.0.0.1", port_); }

  std::string log() const {
    std::ifstream file(directory_.path() / "redis.log");
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

 private:
  // Starts redis-server and waits until it answers PING; false if it exited first.
  bool launch() {
    const std::string binary = redis_server_binary();
    std::vector<std::string> words = {binary,
                                      "--port",
                                      std::to_string(port_),
                                      "--bind",
                                      "127.0.0.1",
                                      "--unixsocket",
                                      socket_path(),
                                      "--unixsocketperm",
                                      "700",
                                      "--dir",
                                      directory_.path().string(),
                                      "--appendonly",
                                      "yes",
                                      "--appendfsync",
                                      "always",
                                      "--save",
                                      "",
                                      "--maxmemory-policy",
                                      "noeviction",
                                      "--daemonize",
                                      "no",
                                      "--logfile",
                                      (directory_.path() / "redis.log").string()};
    for (const std::string& word : config_)
      words.push_back(word);
    std::vector<char*> argv;
    for (std::string& word : words)
      argv.push_back(word.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork failed");
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pid_ = child;
    return wait_until_ready();
  }

  bool wait_until_ready() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{30};
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      // Through its own socket: a server of another test that took the port cannot answer.
      timeval limit{0, 200000};
      const context_ptr context(redisConnectUnixWithTimeout(socket_path().c_str(), limit),
                                &redisFree);
      if (context && context->err == 0) {
        auto* raw = static_cast<redisReply*>(redisCommand(context.get(), "PING"));
        const reply_ptr reply(raw, &freeReplyObject);
        if (reply && reply->type == REDIS_REPLY_STATUS) return true;  // not LOADING, say
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
    FAIL("redis-server did not answer PING within 30 s; its log:\n" << log());
    return false;
  }

  std::vector<std::string> config_;
  idem::testing::temporary_directory directory_{"idem-redis"};
  int port_ = 0;
  pid_t pid_ = -1;
};

/// CONFIG SET on a private server; fails the test unless the server accepts it.
inline void config_set(const private_redis& server, const std::string& name,
                       const std::string& value) {
  const auto connection = server.connect();
  const auto reply = command(connection.get(), {"CONFIG", "SET", name, value});
  REQUIRE(reply->type == REDIS_REPLY_STATUS);
}

/// A claim of `key` in `scope` at this machine's time, kept 24 h: what the tests on private
/// servers ask.
inline idem::claim_request claim_now(std::string_view scope, std::string_view key,
                                     std::chrono::nanoseconds lease = std::chrono::hours{1}) {
  std::uint8_t bytes[16] = {1, 9, 9, 9};
  return idem::claim_request{scope,
                             key,
                             idem::digest{bytes},
                             std::chrono::system_clock::now(),
                             lease,
                             std::chrono::hours{24}};
}

}  // namespace idem_redis_test
