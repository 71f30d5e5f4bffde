// Private redis-server processes for the benchmarks that need servers of their own (a primary
// and its replica for redis_wait_bench.cpp, a cluster for redis_cluster_bench.cpp): on free
// loopback ports, no persistence, killed when they go (and by the kernel if the benchmark dies
// first).
#pragma once

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace idem_bench::redis {

inline int free_port() {
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
inline bool ready(int port, bool replica) {
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
                 ("idem-bench-redis-" + std::to_string(::getpid()) + "-" + std::to_string(port_));
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

}  // namespace idem_bench::redis
