// redis_async_connection: one TCP connection of async_redis_store, on the store's strand. It
// connects (resolve, connect, then one pipelined handshake: AUTH, SELECT, the store's checks at
// start, SCRIPT LOAD), then carries many exchanges at once: what they send is appended to one
// buffer and written in one write while the previous write is in flight (pipelined, coalesced), and
// the replies, read by hiredis's reply reader, are matched to the FIFO of reply slots in order.
//
// It is used once: when it fails (I/O error, the server closing it, a reply the reader cannot
// parse, or a stall) it closes, every exchange in flight on it fails with
// store_error(unavailable) (its scripts may have run), and its owner (a pool slot) makes a new
// one for later operations.
//
// A stall: an exchange that times out keeps its reply slot, and the connection stays (the reply
// may come, late, and the ones behind it are good). But if nothing at all is read for another
// command timeout after that, the server or the path to it is taken as gone: the connection
// closes, so that a half-open connection is not kept forever.
//
// Sentinel discovery (settings.sentinels): before connecting, the connection asks a Sentinel for
// the primary's address (SENTINEL get-master-addr-by-name, on a short connection of its own), the
// next Sentinel when one does not answer or names none, and the handshake checks that the server
// it reached calls itself a master (ROLE). The Sentinel asked first is the one after the last one
// whose answer was refused, so a Sentinel that has not heard of a failover is not asked first
// again and again. A reply READONLY (a primary demoted while this connection was open) closes
// the connection once its exchange has its answer, so the next one finds the primary again.
#ifndef IDEM_STORE_REDIS_DETAIL_ASYNC_CONNECTION_HPP
#define IDEM_STORE_REDIS_DETAIL_ASYNC_CONNECTION_HPP

#include <hiredis/read.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/async/exchange.hpp>
#include <idem/store/redis/detail/async/wire.hpp>
#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/reply.hpp>
#include <idem/store/redis/detail/scripts.hpp>

#if defined(IDEM_ASIO_STANDALONE)
#include <asio/connect.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/write.hpp>
#else
#include <boost/asio/connect.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#endif

namespace idem::detail {

// What every connection of one store shares. Read and written on the strand only.
struct redis_async_common {
  redis_settings settings;
  std::string where;
  std::string digests[redis_script_count];  // from SCRIPT LOAD, the same on every connection
  std::size_t first_sentinel = 0;           // the Sentinel a new connection asks first
};

// What a connection tells its owner: it is ready, or it closed (`was_ready`: after it had
// been ready; otherwise, connecting failed).
class redis_async_connection_owner {
 public:
  virtual void connection_up(redis_async_connection* which) = 0;
  virtual void connection_down(redis_async_connection* which, const std::string& reason,
                               bool was_ready) = 0;

 protected:
  ~redis_async_connection_owner() = default;
};

class redis_async_connection : public std::enable_shared_from_this<redis_async_connection> {
 public:
  redis_async_connection(std::shared_ptr<redis_async_common> common, const redis_strand& strand,
                         std::weak_ptr<redis_async_connection_owner> owner)
      : common_(std::move(common)),
        strand_(strand),
        owner_(std::move(owner)),
        socket_(strand),
        sentinel_socket_(strand),
        resolver_(strand),
        connect_timer_(strand),
        stall_timer_(strand),
        reader_(redisReaderCreate()) {
    if (reader_ == nullptr) throw std::bad_alloc();
  }
  redis_async_connection(const redis_async_connection&) = delete;
  redis_async_connection& operator=(const redis_async_connection&) = delete;
  ~redis_async_connection() {
    redisReaderFree(reader_);
    if (sentinel_reader_ != nullptr) redisReaderFree(sentinel_reader_);
  }

  bool ready() const noexcept { return state_ == state::ready; }
  // Reply slots not yet answered (those of completed exchanges too).
  std::size_t in_flight() const noexcept { return fifo_.size(); }

  // Resolves, connects and sends the handshake; tells the owner how it went.
  void open() {
    auto self = shared_from_this();
    connect_timer_.expires_after(common_->settings.connect_timeout);
    connect_timer_.async_wait([self](const asio_error_code& error) {
      if (!error && self->state_ == state::connecting) {
        self->close("no connection within " +
                    std::to_string(self->common_->settings.connect_timeout.count()) + " ms");
      }
    });
    if (common_->settings.sentinels.empty() && !common_->settings.unix_socket.empty()) {
      dial_socket(common_->settings.unix_socket);
    } else if (common_->settings.sentinels.empty()) {
      dial(common_->settings.host, common_->settings.port);
    } else {
      ask_sentinel(0);
    }
  }

  // Sends an exchange's commands (ready connections only).
  void send(const std::shared_ptr<redis_exchange>& exchange) {
    const std::string* digests = exchange->by_digest ? common_->digests : nullptr;
    for (const redis_wire_command& command : exchange->commands) {
      redis_append_wire(outgoing_, command, digests);
      fifo_.push_back(exchange);
    }
    exchange->sent_on = weak_from_this();
    if (!writing_) write();
  }

  // An exchange sent here timed out: if nothing is read for one more command timeout, the
  // connection is taken as stalled and closed (see the top of this header).
  void exchange_timed_out() {
    if (state_ != state::ready || stall_watch_) return;
    stall_watch_ = true;
    const std::size_t reads_then = reads_;
    stall_timer_.expires_after(common_->settings.command_timeout);
    stall_timer_.async_wait([self = shared_from_this(), reads_then](const asio_error_code& error) {
      self->stall_watch_ = false;
      if (error || self->state_ != state::ready) return;
      if (self->reads_ == reads_then && !self->fifo_.empty()) {
        self->close("no answer for " +
                    std::to_string(2 * self->common_->settings.command_timeout.count()) +
                    " ms: the connection is taken as lost");
      }
    });
  }

  // Closes it: every exchange in flight fails, and the owner hears why.
  void close(const std::string& reason) {
    if (state_ == state::closed) return;
    const auto self = shared_from_this();
    const bool was_ready = state_ == state::ready;
    state_ = state::closed;
    asio_error_code ignored;
    socket_.close(ignored);
    sentinel_socket_.close(ignored);
    resolver_.cancel();
    connect_timer_.cancel();
    stall_timer_.cancel();
    std::deque<std::shared_ptr<redis_exchange>> lost;
    lost.swap(fifo_);
    for (const auto& exchange : lost) {
      if (exchange->finished()) continue;
      exchange->finish(std::make_exception_ptr(store_error(
          store_failure::unavailable, common_->settings.who + ": " + exchange->operation +
                                          " failed: the connection to " + common_->where +
                                          " was lost (" + reason +
                                          "); what it had sent may have run at the server")));
    }
    if (const auto owner = owner_.lock()) owner->connection_down(this, reason, was_ready);
  }

 private:
  enum class state : std::uint8_t { connecting, ready, closed };

  // Resolves and connects to the server at host:port, then sends the handshake.
  void dial(const std::string& host, int port) {
    resolver_.async_resolve(
        host, std::to_string(port),
        [self = shared_from_this()](const asio_error_code& error,
                                    const asio::ip::tcp::resolver::results_type& found) {
          if (self->state_ == state::closed) return;
          if (error) return self->close("cannot resolve the host: " + error.message());
          // The socket is a generic one (TCP or a unix socket): the addresses, as its kind.
          std::vector<asio::generic::stream_protocol::endpoint> addresses;
          for (const auto& entry : found)
            addresses.emplace_back(entry.endpoint());
          asio::async_connect(self->socket_, addresses,
                              [self](const asio_error_code& failed, const auto& /*endpoint*/) {
                                if (self->state_ == state::closed) return;
                                if (failed) return self->close(failed.message());
                                self->connected();
                              });
        });
  }

  // Connects to the server's unix socket at `path`, then sends the handshake.
  void dial_socket(const std::string& path) {
    const asio::local::stream_protocol::endpoint local(path);
    socket_.async_connect(asio::generic::stream_protocol::endpoint(local),
                          [self = shared_from_this()](const asio_error_code& failed) {
                            if (self->state_ == state::closed) return;
                            if (failed) return self->close(failed.message());
                            self->connected();
                          });
  }

  // Asks the Sentinel `tried` places after the first one for the primary, and dials it; the
  // next Sentinel when this one fails. Closes when none named a primary.
  void ask_sentinel(std::size_t tried) {
    const std::vector<std::string>& sentinels = common_->settings.sentinels;
    if (tried == sentinels.size()) {
      return close("no primary of '" + common_->settings.master_name +
                   "' could be found through the Sentinels" + sentinel_failures_);
    }
    asking_ = (common_->first_sentinel + tried) % sentinels.size();
    const std::optional<redis_address> address = redis_address_of(sentinels[asking_]);
    auto self = shared_from_this();
    const auto next = [self, tried](const std::string& why) {
      asio_error_code ignored;
      self->sentinel_socket_.close(ignored);
      self->sentinel_failures_.append("; Sentinel ")
          .append(self->common_->settings.sentinels[self->asking_])
          .append(": ")
          .append(why);
      self->ask_sentinel(tried + 1);
    };
    resolver_.async_resolve(address->host, std::to_string(address->port),
                            [self, next](const asio_error_code& error,
                                         const asio::ip::tcp::resolver::results_type& found) {
                              if (self->state_ == state::closed) return;
                              if (error) return next("cannot resolve it: " + error.message());
                              asio::async_connect(self->sentinel_socket_, found,
                                                  [self, next](const asio_error_code& failed,
                                                               const auto& /*endpoint*/) {
                                                    if (self->state_ == state::closed) return;
                                                    if (failed) return next(failed.message());
                                                    self->sentinel_query(next);
                                                  });
                            });
  }

  // On the Sentinel's connection: SENTINEL get-master-addr-by-name, and its one reply.
  template <class Next>
  void sentinel_query(Next next) {
    const std::string_view words[] = {"SENTINEL", "get-master-addr-by-name",
                                      common_->settings.master_name};
    sentinel_request_.clear();
    redis_append_wire(sentinel_request_, redis_wire_of(std::span<const std::string_view>(words)),
                      nullptr);
    if (sentinel_reader_ != nullptr) redisReaderFree(sentinel_reader_);
    sentinel_reader_ = redisReaderCreate();
    if (sentinel_reader_ == nullptr) throw std::bad_alloc();
    asio::async_write(sentinel_socket_, asio::buffer(sentinel_request_),
                      [self = shared_from_this(), next](const asio_error_code& error, std::size_t) {
                        if (self->state_ == state::closed) return;
                        if (error) return next(error.message());
                        self->sentinel_read(next);
                      });
  }

  template <class Next>
  void sentinel_read(Next next) {
    sentinel_socket_.async_read_some(
        asio::buffer(buffer_),
        [self = shared_from_this(), next](const asio_error_code& error, std::size_t size) {
          if (self->state_ == state::closed) return;
          if (error) return next(error.message());
          if (redisReaderFeed(self->sentinel_reader_, self->buffer_.data(), size) != REDIS_OK) {
            return next("unreadable reply");
          }
          void* raw = nullptr;
          if (redisReaderGetReply(self->sentinel_reader_, &raw) != REDIS_OK) {
            return next("unreadable reply");
          }
          if (raw == nullptr) return self->sentinel_read(next);
          const redis_reply answer(static_cast<redisReply*>(raw));
          const std::optional<redis_address> primary = redis_sentinel_primary(answer.get());
          if (!primary) {
            return next("knows no primary named '" + self->common_->settings.master_name + "'");
          }
          asio_error_code ignored;
          self->sentinel_socket_.close(ignored);
          self->dialled_ = primary->host + ":" + std::to_string(primary->port);
          self->dial(primary->host, primary->port);
        });
  }

  void connected() {
    // TCP only: a unix socket refuses both, and the refusal is of no consequence.
    asio_error_code ignored;
    socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
    socket_.set_option(asio::socket_base::keep_alive(true), ignored);
    read();
    handshake();
  }

  // AUTH, SELECT, the checks at start (INFO server; CONFIG GET maxmemory-policy) and SCRIPT
  // LOAD, pipelined in one write; the connection is ready once every answer is right.
  void handshake() {
    const redis_settings& settings = common_->settings;
    std::vector<std::vector<std::string_view>> words;
    const std::string database = std::to_string(settings.database);
    if (!settings.password.empty()) {
      if (settings.username.empty()) {
        words.push_back({"AUTH", settings.password});
      } else {
        words.push_back({"AUTH", settings.username, settings.password});
      }
    }
    if (settings.database != 0) words.push_back({"SELECT", database});
    words.push_back({"INFO", "server"});
    if (settings.verify_eviction_policy) words.push_back({"CONFIG", "GET", "maxmemory-policy"});
    for (std::size_t i = 0; i < redis_script_count; ++i) {
      words.push_back({"SCRIPT", "LOAD", redis_script_text(static_cast<redis_script>(i))});
    }
    if (!settings.sentinels.empty()) words.push_back({"ROLE"});
    std::vector<redis_wire_command> commands;
    commands.reserve(words.size());
    for (const auto& each : words)
      commands.push_back(redis_wire_of(std::span<const std::string_view>(each)));
    std::weak_ptr<redis_async_connection> weak = weak_from_this();
    send(redis_make_exchange(
        strand_, std::move(commands), "connecting",
        [weak](const std::exception_ptr& error, const std::vector<redis_reply>& replies) {
          const auto self = weak.lock();
          // A failed handshake closed the connection already, and said why.
          if (error || !self) return;
          self->handshaken(replies);
        }));
  }

  void handshaken(const std::vector<redis_reply>& replies) {
    const redis_settings& settings = common_->settings;
    std::size_t at = 0;
    const auto refused = [&](const char* what) {
      const redisReply* reply = replies.at(at++).get();
      if (reply->type != REDIS_REPLY_ERROR) return false;
      close(std::string("the server refused ") + what + ": " + std::string(reply_text(reply)));
      return true;
    };
    if (!settings.password.empty() && refused("AUTH")) return;
    if (settings.database != 0 && refused("SELECT")) return;
    try {
      redis_check_version(replies.at(at++).get(), common_->where);
      if (settings.verify_eviction_policy) {
        redis_check_eviction_policy(replies.at(at++).get(), common_->where);
      }
    } catch (const std::invalid_argument& refusal) {
      return close(refusal.what());
    }
    for (std::size_t i = 0; i < redis_script_count; ++i) {
      const redisReply* reply = replies.at(at++).get();
      if (reply->type != REDIS_REPLY_STRING) {
        return close("the server refused a script: " + std::string(reply_text(reply)));
      }
      common_->digests[i] = reply_text(reply);
    }
    if (!settings.sentinels.empty() && !redis_role_is_primary(replies.at(at++).get())) {
      // The next connection asks the next Sentinel first.
      common_->first_sentinel = (asking_ + 1) % settings.sentinels.size();
      return close("Sentinel " + settings.sentinels[asking_] + " named " + dialled_ +
                   ", which is not a master (ROLE): a replica, or a demoted primary, is never "
                   "written to");
    }
    state_ = state::ready;
    connect_timer_.cancel();
    if (const auto owner = owner_.lock()) owner->connection_up(this);
  }

  void write() {
    writing_ = true;
    sending_.swap(outgoing_);
    outgoing_.clear();
    asio::async_write(socket_, asio::buffer(sending_),
                      [self = shared_from_this()](const asio_error_code& error, std::size_t) {
                        self->writing_ = false;
                        if (self->state_ == state::closed) return;
                        if (error) return self->close(error.message());
                        if (!self->outgoing_.empty()) self->write();
                      });
  }

  void read() {
    socket_.async_read_some(
        asio::buffer(buffer_),
        [self = shared_from_this()](const asio_error_code& error, std::size_t size) {
          self->on_read(error, size);
        });
  }

  void on_read(const asio_error_code& error, std::size_t size) {
    if (state_ == state::closed) return;
    if (error) {
      return close(error == asio::error::eof ? std::string("the server closed the connection")
                                             : error.message());
    }
    ++reads_;
    if (redisReaderFeed(reader_, buffer_.data(), size) != REDIS_OK) {
      return close("unreadable reply: " + std::string(reader_->errstr));
    }
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
        return close("unreadable reply: " + std::string(reader_->errstr));
      }
      if (raw == nullptr) break;
      answer(redis_reply(static_cast<redisReply*>(raw)));
      if (state_ == state::closed) return;
    }
    read();
  }

  // The reply of the oldest slot: dropped when its exchange has completed already (timed out,
  // cancelled), else kept; the last of an exchange's replies completes it, or sends it again
  // with EVAL when the server had lost a script.
  void answer(redis_reply reply) {
    if (fifo_.empty()) return close("a reply that no command asked for");
    const std::shared_ptr<redis_exchange> exchange = std::move(fifo_.front());
    fifo_.pop_front();
    if (exchange->finished()) return;
    exchange->replies.push_back(std::move(reply));
    if (exchange->replies.size() < exchange->commands.size()) return;
    if (exchange->by_digest && any_noscript(exchange->replies)) {
      exchange->by_digest = false;
      exchange->replies.clear();
      return send(exchange);
    }
    const bool demoted = any_readonly(exchange->replies);
    exchange->finish(nullptr);
    // A replica now: its exchange has the answer (nothing was written), and this connection is
    // replaced by one to the primary found again.
    if (demoted) close("the server answered READONLY: it is a replica now");
  }

  static bool any_readonly(const std::vector<redis_reply>& replies) noexcept {
    return std::any_of(replies.begin(), replies.end(), [](const redis_reply& reply) {
      return reply->type == REDIS_REPLY_ERROR && reply_text(reply.get()).starts_with("READONLY");
    });
  }

  static bool any_noscript(const std::vector<redis_reply>& replies) noexcept {
    return std::any_of(replies.begin(), replies.end(), [](const redis_reply& reply) {
      return reply->type == REDIS_REPLY_ERROR && reply_text(reply.get()).starts_with("NOSCRIPT");
    });
  }

  std::shared_ptr<redis_async_common> common_;
  redis_strand strand_;
  std::weak_ptr<redis_async_connection_owner> owner_;
  // TCP or a unix socket (options.unix_socket): a generic stream socket holds either.
  asio::basic_stream_socket<asio::generic::stream_protocol, redis_strand> socket_;
  asio::basic_stream_socket<asio::ip::tcp, redis_strand> sentinel_socket_;  // while asking one
  asio::ip::basic_resolver<asio::ip::tcp, redis_strand> resolver_;
  redis_timer connect_timer_;
  redis_timer stall_timer_;
  redisReader* reader_;
  redisReader* sentinel_reader_ = nullptr;
  std::string sentinel_request_;
  std::string sentinel_failures_;  // why each Sentinel asked named no primary
  std::size_t asking_ = 0;         // the Sentinel asked last
  std::string dialled_;            // host:port it named
  state state_ = state::connecting;
  std::deque<std::shared_ptr<redis_exchange>> fifo_;  // one entry per reply awaited
  std::string outgoing_;                              // what the next write sends
  std::string sending_;                               // what the write in flight sends
  bool writing_ = false;
  bool stall_watch_ = false;
  std::size_t reads_ = 0;
  std::array<char, 16384> buffer_{};
};

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_ASYNC_CONNECTION_HPP
