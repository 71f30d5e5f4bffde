// redis_exchange: one operation of async_redis_store on the wire: its commands (each one reply
// slot in its connection's FIFO), the replies as they come, and the one completion it gets,
// whichever comes first: every reply, its timer, its cancellation, or its connection lost.
// A completed exchange keeps its reply slots: their replies are read and dropped when they come,
// so a late reply never answers another operation.
#ifndef IDEM_STORE_REDIS_DETAIL_ASYNC_EXCHANGE_HPP
#define IDEM_STORE_REDIS_DETAIL_ASYNC_EXCHANGE_HPP

#include <chrono>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/redis/detail/async/wire.hpp>
#include <idem/store/redis/detail/reply.hpp>

namespace idem::detail {

class redis_async_connection;

// Everything of one store runs on one strand; its I/O objects and coroutines are typed with it,
// so that the strand is never wrapped in an any_io_executor, whose large targets are shared
// through a reference count that ThreadSanitizer cannot follow (it ignores standalone fences).
using redis_strand = asio::strand<asio::any_io_executor>;
using redis_timer =
    asio::basic_waitable_timer<std::chrono::steady_clock,
                               asio::wait_traits<std::chrono::steady_clock>, redis_strand>;

class redis_exchange {
 public:
  redis_exchange(const redis_strand& strand, std::vector<redis_wire_command> sent, const char* name)
      : commands(std::move(sent)), operation(name), timer(strand) {}
  redis_exchange(const redis_exchange&) = delete;
  redis_exchange& operator=(const redis_exchange&) = delete;
  virtual ~redis_exchange() = default;

  bool finished() const noexcept { return finished_; }

  // Completes it, once: later calls do nothing. On the strand.
  void finish(std::exception_ptr error) {
    if (finished_) return;
    finished_ = true;
    timer.cancel();
    if (cancellation.is_connected()) cancellation.clear();
    deliver(std::move(error), std::move(replies));
  }

  std::vector<redis_wire_command> commands;
  std::vector<redis_reply> replies;
  const char* operation;
  bool by_digest = true;                 // EVALSHA; false once the server answered NOSCRIPT
  asio::steady_timer timer;              // the command timeout
  asio::cancellation_slot cancellation;  // the handler's, cleared before it is called
  std::weak_ptr<redis_async_connection> sent_on;

 private:
  virtual void deliver(std::exception_ptr error, std::vector<redis_reply> answers) = 0;
  bool finished_ = false;
};

// An exchange whose completion calls `done(error, replies)` (on the strand).
template <class Done>
class redis_exchange_with final : public redis_exchange {
 public:
  redis_exchange_with(const redis_strand& strand, std::vector<redis_wire_command> sent,
                      const char* name, Done done)
      : redis_exchange(strand, std::move(sent), name), done_(std::move(done)) {}

 private:
  void deliver(std::exception_ptr error, std::vector<redis_reply> answers) override {
    done_(std::move(error), std::move(answers));
  }
  Done done_;
};

template <class Done>
std::shared_ptr<redis_exchange> redis_make_exchange(const redis_strand& strand,
                                                    std::vector<redis_wire_command> sent,
                                                    const char* name, Done done) {
  return std::make_shared<redis_exchange_with<Done>>(strand, std::move(sent), name,
                                                     std::move(done));
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_ASYNC_EXCHANGE_HPP
