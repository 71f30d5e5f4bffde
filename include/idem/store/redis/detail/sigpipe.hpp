// sigpipe_blocked: keeps a connection the Redis server closed from killing the process with
// SIGPIPE while redis_store talks to it (what libpq does for PostgreSQL).
#ifndef IDEM_STORE_REDIS_DETAIL_SIGPIPE_HPP
#define IDEM_STORE_REDIS_DETAIL_SIGPIPE_HPP

#include <pthread.h>

#include <cerrno>
#include <csignal>
#include <ctime>

namespace idem::detail {

// SIGPIPE blocked in this thread while it talks to the server, and a SIGPIPE its own write
// raised consumed before unblocking (what libpq does): a server that closed the connection must
// be an error, not the death of the process. Over a unix socket the first write to a server
// that died raises it. A process that ignores SIGPIPE (most servers do) needs none of this:
// `active` is false then, and the two system calls are saved.
class sigpipe_blocked {
 public:
  explicit sigpipe_blocked(bool active) noexcept : active_(active) {
    if (!active_) return;
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &previous_);
  }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;
  ~sigpipe_blocked() {
    if (active_) pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

  /// After an I/O error: takes away a SIGPIPE raised while blocked, unless one was pending for
  /// another reason before (then it is the process's, and stays).
  void consume_pending() const noexcept {
    if (!active_ || sigismember(&previous_, SIGPIPE) == 1) return;  // not ours to take
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) != 0 || sigismember(&pending, SIGPIPE) != 1) return;
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe, nullptr, &zero) == -1 && errno == EINTR) {
    }
  }

  /// Whether the process ignores SIGPIPE now (read once, when a store is made).
  static bool ignored() noexcept {
    struct sigaction current {};
    return sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
  }

 private:
  bool active_;
  sigset_t previous_{};
};

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_SIGPIPE_HPP
