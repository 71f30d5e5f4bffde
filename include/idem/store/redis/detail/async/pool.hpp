// redis_async_pool: async_redis_store's connections, a fixed number of slots on one strand, and
// async_redis_exchange, the one asynchronous operation the store's operations are made of.
//
// Each slot holds at most one connection. An exchange goes to a slot whose connection is ready
// (round robin among them, so the load is spread), else to one that is connecting or may connect
// now, where it waits until the handshake is done. A slot whose last attempt to connect failed
// waits before the next (reconnect_delay, doubling up to max_reconnect_delay): an exchange it
// is given meanwhile fails at once with store_error(unavailable), so a server that is down is
// answered promptly, never with a hang. A connection lost after it was ready is replaced at the
// next exchange, without waiting.
#ifndef IDEM_STORE_REDIS_DETAIL_ASYNC_POOL_HPP
#define IDEM_STORE_REDIS_DETAIL_ASYNC_POOL_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/async/connection.hpp>
#include <idem/store/redis/detail/async/exchange.hpp>
#include <idem/store/redis/detail/async/wire.hpp>
#include <idem/store/redis/detail/connection.hpp>

namespace idem::detail {

struct redis_backoff {
  std::chrono::milliseconds first{};
  std::chrono::milliseconds most{};
};

// The options of the asynchronous Redis stores beside their blocking twins' (their options
// derive from both): how a connection that failed waits to connect again.
struct redis_reconnect_options {
  /// After a failed attempt to connect, how long a connection waits before the next one;
  /// doubled after each failure in a row, up to max_reconnect_delay.
  std::chrono::milliseconds reconnect_delay{100};
  std::chrono::milliseconds max_reconnect_delay{5000};

  redis_backoff backoff() const noexcept { return {reconnect_delay, max_reconnect_delay}; }
};

class redis_pool_slot final : public redis_async_connection_owner,
                              public std::enable_shared_from_this<redis_pool_slot> {
 public:
  redis_pool_slot(std::shared_ptr<redis_async_common> common, const redis_strand& strand,
                  redis_backoff backoff)
      : common_(std::move(common)), strand_(strand), backoff_(backoff) {}

  // How willing it is to take an exchange now: 2 ready, 1 connecting or free to connect, 0
  // waiting after a failed attempt.
  int readiness(std::chrono::steady_clock::time_point now) const noexcept {
    if (current_) return current_->ready() ? 2 : 1;
    return now >= next_attempt_ ? 1 : 0;
  }
  bool open() const noexcept { return current_ && current_->ready(); }

  void start(const std::shared_ptr<redis_exchange>& exchange) {
    if (current_ && current_->ready()) return current_->send(exchange);
    if (current_) return waiting_.push_back(exchange);
    const auto now = std::chrono::steady_clock::now();
    if (closed_ || now < next_attempt_) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt_ - now).count();
      return exchange->finish(std::make_exception_ptr(store_error(
          store_failure::unavailable,
          common_->settings.who + ": " + exchange->operation + " failed: " +
              (closed_ ? std::string("the store is shutting down")
                       : "the server at " + common_->where +
                             " could not be reached at the last attempt (" + last_failure_ +
                             "); the next attempt is in " + std::to_string(wait) + " ms"))));
    }
    waiting_.push_back(exchange);
    current_ = std::make_shared<redis_async_connection>(common_, strand_, weak_from_this());
    current_->open();
  }

  void shut() {
    closed_ = true;
    if (current_) current_->close("the store was destroyed");
    fail_waiting("the store was destroyed");
  }

  void connection_up(redis_async_connection* which) override {
    if (which != current_.get()) return;
    failures_ = 0;
    std::vector<std::shared_ptr<redis_exchange>> ready;
    ready.swap(waiting_);
    for (const auto& exchange : ready) {
      if (!exchange->finished()) current_->send(exchange);
    }
  }

  void connection_down(redis_async_connection* which, const std::string& reason,
                       bool was_ready) override {
    if (which != current_.get()) return;
    current_.reset();
    if (was_ready) {
      next_attempt_ = {};  // the next exchange connects again at once
      return;
    }
    ++failures_;
    last_failure_ = reason;
    auto delay = backoff_.first;
    for (std::size_t i = 1; i < failures_ && delay < backoff_.most; ++i)
      delay *= 2;
    next_attempt_ = std::chrono::steady_clock::now() + std::min(delay, backoff_.most);
    fail_waiting("cannot connect to " + common_->where + ": " + reason);
  }

 private:
  void fail_waiting(const std::string& reason) {
    std::vector<std::shared_ptr<redis_exchange>> failed;
    failed.swap(waiting_);
    for (const auto& exchange : failed) {
      exchange->finish(std::make_exception_ptr(store_error(
          store_failure::unavailable, common_->settings.who + ": " + exchange->operation +
                                          " failed: " + reason + "; nothing was sent")));
    }
  }

  std::shared_ptr<redis_async_common> common_;
  redis_strand strand_;
  redis_backoff backoff_;
  std::shared_ptr<redis_async_connection> current_;
  std::vector<std::shared_ptr<redis_exchange>> waiting_;  // for the connection to be ready
  std::size_t failures_ = 0;                              // attempts failed in a row
  std::chrono::steady_clock::time_point next_attempt_{};
  std::string last_failure_;
  bool closed_ = false;
};

class redis_async_pool {
 public:
  redis_async_pool(const asio::any_io_executor& executor, redis_settings settings,
                   redis_backoff backoff)
      : redis_async_pool(asio::make_strand(executor), std::move(settings), backoff) {}
  // On a strand given (a cluster's pools share the cluster's, and its map with them).
  redis_async_pool(redis_strand strand, redis_settings settings, redis_backoff backoff)
      : strand_(std::move(strand)),
        common_(std::make_shared<redis_async_common>(redis_async_common{
            .settings = redis_checked_settings(std::move(settings)), .where = {}, .digests = {}})) {
    common_->where = redis_where(common_->settings);
    if (backoff.first <= std::chrono::milliseconds::zero() || backoff.most < backoff.first) {
      throw std::invalid_argument(common_->settings.who +
                                  ": reconnect_delay must be positive and max_reconnect_delay "
                                  "at least as long");
    }
    for (std::size_t i = 0; i < common_->settings.pool_size; ++i) {
      slots_.push_back(std::make_shared<redis_pool_slot>(common_, strand_, backoff));
    }
  }
  redis_async_pool(const redis_async_pool&) = delete;
  redis_async_pool& operator=(const redis_async_pool&) = delete;
  ~redis_async_pool() = default;

  const redis_strand& strand() const noexcept { return strand_; }
  const redis_settings& settings() const noexcept { return common_->settings; }
  const std::string& where() const noexcept { return common_->where; }

  // On the strand: starts the exchange's timer and sends it on a slot.
  void start(const std::shared_ptr<redis_exchange>& exchange) {
    if (exchange->finished()) return;  // cancelled before it reached the strand
    exchange->timer.expires_after(common_->settings.command_timeout);
    exchange->timer.async_wait([weak = std::weak_ptr<redis_exchange>(exchange),
                                common = common_](const asio_error_code& error) {
      const auto timed_out = weak.lock();
      if (error || !timed_out || timed_out->finished()) return;
      timed_out->finish(std::make_exception_ptr(store_error(
          store_failure::unavailable, common->settings.who + ": " + timed_out->operation +
                                          " failed: no answer from " + common->where + " within " +
                                          std::to_string(common->settings.command_timeout.count()) +
                                          " ms; what it sent may still run at the server")));
      if (const auto connection = timed_out->sent_on.lock()) connection->exchange_timed_out();
    });
    pick().start(exchange);
  }

  // On the strand: closes every connection; what is in flight fails.
  void shut() {
    for (const auto& slot : slots_)
      slot->shut();
  }

  // On the strand: how many connections are open and ready.
  std::size_t open_connections() const {
    return static_cast<std::size_t>(
        std::count_if(slots_.begin(), slots_.end(), [](const auto& slot) { return slot->open(); }));
  }

 private:
  // Round robin over the most willing slots.
  redis_pool_slot& pick() {
    const auto now = std::chrono::steady_clock::now();
    const std::size_t count = slots_.size();
    const std::size_t first = next_++ % count;
    redis_pool_slot* best = slots_[first].get();
    int best_readiness = best->readiness(now);
    for (std::size_t i = 1; i < count && best_readiness < 2; ++i) {
      redis_pool_slot* slot = slots_[(first + i) % count].get();
      const int readiness = slot->readiness(now);
      if (readiness > best_readiness) {
        best = slot;
        best_readiness = readiness;
      }
    }
    return *best;
  }

  redis_strand strand_;
  std::shared_ptr<redis_async_common> common_;
  std::vector<std::shared_ptr<redis_pool_slot>> slots_;
  std::size_t next_ = 0;
};

// Sends `commands` on one of the pool's connections and completes with their replies, in order,
// or with store_error(unavailable): the connection lost, the command timeout, or the handler's
// cancellation slot (any type of cancellation), each of which completes it at once and leaves
// its reply slots to be dropped when their replies come. Completes on the handler's associated
// executor (the pool's strand when it has none), never inside this call.
template <class Token>
auto async_redis_exchange(std::shared_ptr<redis_async_pool> pool,
                          std::vector<redis_wire_command> commands, const char* operation,
                          Token&& token) {
  return asio::async_initiate<Token, void(std::exception_ptr, std::vector<redis_reply>)>(
      [](auto handler, const std::shared_ptr<redis_async_pool>& on,
         std::vector<redis_wire_command> sent, const char* name) {
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto home = asio::prefer(asio::get_associated_executor(handler, on->strand()),
                                 asio::execution::outstanding_work.tracked);
        auto exchange = redis_make_exchange(
            on->strand(), std::move(sent), name,
            [handler = std::move(handler), home = std::move(home)](
                std::exception_ptr error, std::vector<redis_reply> replies) mutable {
              asio::post(home, [handler = std::move(handler), error = std::move(error),
                                replies = std::move(replies)]() mutable {
                std::move(handler)(std::move(error), std::move(replies));
              });
            });
        if (slot.is_connected()) {
          exchange->cancellation = slot;
          slot.assign([weak = std::weak_ptr<redis_exchange>(exchange), strand = on->strand(),
                       who = on->settings().who](asio::cancellation_type type) {
            if (type == asio::cancellation_type::none) return;
            asio::dispatch(strand, [weak, who] {
              const auto cancelled = weak.lock();
              if (!cancelled || cancelled->finished()) return;
              cancelled->finish(std::make_exception_ptr(
                  store_error(store_failure::unavailable,
                              who + ": " + cancelled->operation +
                                  " was cancelled; what it sent may still run at the server")));
            });
          });
        }
        asio::dispatch(on->strand(), [on, exchange] { on->start(exchange); });
      },
      token, std::move(pool), std::move(commands), operation);
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_ASYNC_POOL_HPP
