// A test's child process: a program forked and exec'd with pipes to its stdin and stdout, for the
// crash tests that kill a real process with SIGKILL at a point it reports (one line of output
// each) and drive it by single bytes on its stdin. A process still running when this goes is
// killed and waited for.
#ifndef IDEM_TESTS_SUPPORT_CHILD_PROCESS_HPP
#define IDEM_TESTS_SUPPORT_CHILD_PROCESS_HPP

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace idem::testing {

class child_process {
 public:
  child_process(std::string program, std::vector<std::string> arguments) {
    int to_child[2];
    int from_child[2];
    REQUIRE(::pipe2(to_child, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(from_child, O_CLOEXEC) == 0);
    std::vector<char*> argv;
    argv.reserve(arguments.size() + 2);
    argv.push_back(program.data());
    for (std::string& argument : arguments)
      argv.push_back(argument.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec.
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], STDOUT_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    input_ = to_child[1];
    output_ = from_child[0];
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() {
    kill_and_wait();
    ::close(input_);
    ::close(output_);
  }

  /// The next line the process printed; nothing at end of file. A process silent for two
  /// minutes fails the test rather than hanging it.
  std::optional<std::string> line() {
    for (;;) {
      const auto end = buffered_.find('\n');
      if (end != std::string::npos) {
        std::string out = buffered_.substr(0, end);
        buffered_.erase(0, end + 1);
        return out;
      }
      pollfd readable{output_, POLLIN, 0};
      if (::poll(&readable, 1, 120000) == 0) FAIL("the child process printed nothing for 2 min");
      char chunk[4096];
      const ssize_t got = ::read(output_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return std::nullopt;
      buffered_.append(chunk, static_cast<std::size_t>(got));
    }
  }

  void send(char byte) { REQUIRE(::write(input_, &byte, 1) == 1); }
  void kill() { ::kill(pid_, SIGKILL); }

  /// Waits for the process to end; its wait status.
  int wait() {
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    pid_ = -1;
    return status;
  }

  /// SIGKILL, and its wait status (0 when it had already been waited for).
  int kill_and_wait() {
    if (pid_ <= 0) return 0;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int input_ = -1;
  int output_ = -1;
  std::string buffered_;
};

}  // namespace idem::testing

#endif  // IDEM_TESTS_SUPPORT_CHILD_PROCESS_HPP
