// An HTTP/1.1 server on Boost.Beast for payments_server --async: event loops, one io_context
// and one thread each, and one acceptor handing connections to them in turn. It knows nothing
// of payments: each request goes to a coroutine the program gives (route), which answers a
// reply (service.hpp).
//
// Why one acceptor and not an SO_REUSEPORT acceptor per loop: the loops get connections in
// turn, evenly whatever their number (the kernel's hash over the address pairs may put several
// of a few long-lived keep-alive connections on one loop and none on another); a second server
// started on the same port fails as the blocking server does instead of silently sharing it; and
// an accept is a few microseconds against a request's store round trips, so one loop accepting
// for all is not what limits the server.
//
// Slow and idle clients, and framing (docs/demo.md, "Framing and slow clients"; docs/http.md,
// "A connection loop"):
//   * a connection waits at most read_timeout for the first byte of its next request (idle),
//     and then has read_timeout for the whole request, head and body together: a client sending
//     a byte every few seconds is cut off at the deadline, not kept alive by each byte;
//   * at most max_connections are held. One more makes room by closing the connection idle the
//     longest, else the one that has been reading its request the longest; when every one is
//     being answered, the newcomer is answered 503 and closed;
//   * the head is read as bytes, up to its empty line and no further than header_limit (431),
//     held to idem::http::check_request_head (400 ambiguous framing, a folded line, a bare CR;
//     413 a Content-Length past body_limit; 417; 431 past max_fields; 501 a transfer coding
//     other than chunked), and only then parsed by Beast; then the program's admit(head) may
//     refuse it (its caller, its route), still before the body is read. A refused request's
//     connection is closed, after a short drain of what the client was still sending, so that
//     the close does not reset the refusal away. An Expect: 100-continue is answered 100 only
//     then;
//   * the body is read within body_limit, chunked or not (413);
//   * requests pipelined on one connection are read and answered one after another, in order.
// A request being handled has no timeout here: the route's own (the processor's deadline, the
// store's) bound it.
#pragma once

#include "service.hpp"

#include <idem/http/framing.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace payments {

namespace asio = boost::asio;

/// `fn()` run on `pool`, awaited from the loop: for calls that block (the stores', the
/// processor client's).
template <class F>
asio::awaitable<std::invoke_result_t<F&>> off_loop(asio::any_io_executor pool, F fn) {
  using result = std::invoke_result_t<F&>;
  if constexpr (std::is_void_v<result>) {
    co_await asio::co_spawn(
        pool,
        [fn = std::move(fn)]() mutable -> asio::awaitable<void> {
          fn();
          co_return;
        },
        asio::use_awaitable);
  } else {
    co_return co_await asio::co_spawn(
        pool, [fn = std::move(fn)]() mutable -> asio::awaitable<result> { co_return fn(); },
        asio::use_awaitable);
  }
}
namespace beast = boost::beast;
namespace http = beast::http;

using http_request_message = http::request<http::string_body>;

/// The event loops: `count` io_contexts, each run by a thread of its own once run() is called.
class event_loops {
 public:
  explicit event_loops(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      contexts_.push_back(std::make_unique<asio::io_context>(1));  // one thread runs each
    }
  }
  std::size_t size() const noexcept { return contexts_.size(); }
  asio::io_context& at(std::size_t index) { return *contexts_[index]; }

  /// Runs every loop, the first on the calling thread, until each is out of work.
  void run() {
    std::vector<std::thread> threads;
    for (std::size_t i = 1; i < contexts_.size(); ++i) {
      threads.emplace_back([context = contexts_[i].get()] { run_one(*context); });
    }
    run_one(*contexts_.front());
    for (std::thread& thread : threads)
      thread.join();
  }

 private:
  static void run_one(asio::io_context& context) {
    const auto work = asio::make_work_guard(context);
    context.run();
  }
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
};

struct http_limits {
  /// How long a connection may wait idle for its next request, and then take to send it whole.
  std::chrono::milliseconds read_timeout{10000};
  /// The longest head (request line and fields): 431 past it.
  std::size_t header_limit = 8 * 1024;
  /// The largest body, chunked or not: 413 past it.
  std::size_t body_limit = 64 * 1024;
  /// The most header fields: 431 past them.
  std::size_t max_fields = 100;
  /// The most connections held at once.
  std::size_t max_connections = 10000;

  /// The framing rules (idem/http/framing.hpp) with these limits.
  idem::http::framing_options framing() const {
    idem::http::framing_options options;
    options.max_head_bytes = header_limit;
    options.max_fields = max_fields;
    options.max_body_bytes = body_limit;
    return options;
  }
};

/// Every value of `name` in `head`, as views into it.
inline std::vector<std::string_view> values_of(const http::request_header<>& head,
                                               std::string_view name) {
  std::vector<std::string_view> values;
  const auto [first, last] = head.equal_range(name);
  for (auto it = first; it != last; ++it)
    values.emplace_back(it->value().data(), it->value().size());
  return values;
}

/// The target's path, its query left out.
inline std::string_view path_of(const http::request_header<>& head) {
  const std::string_view target(head.target().data(), head.target().size());
  return target.substr(0, target.find('?'));
}

/// The program's two parts of a request: admit(head) answers a refusal from the head alone (its
/// caller, its route), before the body is read, or std::nullopt to read it; route(loop, request)
/// answers the whole request, on the loop (its index) the connection is on.
using admit_function = std::function<std::optional<reply>(const http::request_header<>& head)>;
using route_function =
    std::function<asio::awaitable<reply>(std::size_t loop, const http_request_message& request)>;

/// Raises this process's soft limit on open files to its hard limit: each connection is one.
inline void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
}

/// One connection: its stream, and what it is doing, for the registry to choose whom to close.
struct connection {
  enum class activity { idle, reading, answering, closing };

  explicit connection(asio::ip::tcp::socket socket) : stream(std::move(socket)) {}

  beast::tcp_stream stream;
  // Guarded by the registry's mutex.
  activity now = activity::idle;
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  std::list<std::shared_ptr<connection>>::iterator place;
};

/// The connections one server holds, over all its loops. A connection's coroutine registers it
/// and says what it is doing; the acceptor asks for room. Each call takes one mutex: three calls
/// a request, and a scan of every connection only when the server is full.
class connection_registry {
 public:
  explicit connection_registry(std::size_t capacity) : capacity_(capacity) {}

  void add(const std::shared_ptr<connection>& held) {
    const std::lock_guard lock(mutex_);
    held->place = held_.insert(held_.end(), held);
    ++open_;
  }
  void remove(const std::shared_ptr<connection>& held) {
    const std::lock_guard lock(mutex_);
    if (held->now != connection::activity::closing) --open_;
    held_.erase(held->place);
  }
  /// Says what `held` does from now on; false when it is being closed to make room.
  bool set(connection& held, connection::activity now) {
    const std::lock_guard lock(mutex_);
    if (held.now == connection::activity::closing) return false;
    held.now = now;
    held.since = std::chrono::steady_clock::now();
    return true;
  }
  /// Room for one more connection: true at once under capacity; else the connection idle the
  /// longest, or failing one the one reading its request the longest, is closed (on its own
  /// loop) and true; false when every connection is being answered.
  bool make_room() {
    std::shared_ptr<connection> victim;
    {
      const std::lock_guard lock(mutex_);
      if (open_ < capacity_) return true;
      for (const auto& held : held_) {
        if (held->now == connection::activity::closing ||
            held->now == connection::activity::answering) {
          continue;
        }
        const bool better = !victim ||
                            (held->now == connection::activity::idle &&
                             victim->now != connection::activity::idle) ||
                            (held->now == victim->now && held->since < victim->since);
        if (better) victim = held;
      }
      if (!victim) return false;
      victim->now = connection::activity::closing;
      --open_;
    }
    asio::post(victim->stream.get_executor(), [victim] {
      beast::error_code ignored;
      victim->stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
      victim->stream.close();
    });
    return true;
  }

 private:
  std::mutex mutex_;
  std::list<std::shared_ptr<connection>> held_;
  std::size_t open_ = 0;  // held and not being closed
  std::size_t capacity_;
};

class http_server {
 public:
  http_server(event_loops& loops, admit_function admit, route_function route, http_limits limits)
      : loops_(loops),
        admit_(std::move(admit)),
        route_(std::move(route)),
        limits_(limits),
        framing_(limits.framing()),
        registry_(limits.max_connections) {}
  /// Every request's head admitted (the program checks nothing before the body).
  http_server(event_loops& loops, route_function route, http_limits limits)
      : http_server(
            loops, [](const http::request_header<>&) { return std::optional<reply>{}; },
            std::move(route), limits) {}

  /// Binds 127.0.0.1:port (0: any free port) on the first loop; the port bound. Throws
  /// boost::system::system_error when it cannot.
  int bind(int port) {
    acceptor_ = std::make_unique<asio::ip::tcp::acceptor>(loops_.at(0));
    const asio::ip::tcp::endpoint where(asio::ip::make_address("127.0.0.1"),
                                        static_cast<unsigned short>(port));
    acceptor_->open(where.protocol());
    acceptor_->set_option(asio::socket_base::reuse_address(true));
    acceptor_->bind(where);
    acceptor_->listen(asio::socket_base::max_listen_connections);
    return acceptor_->local_endpoint().port();
  }

  /// Starts accepting (bind first); the loops' run() serves.
  void start() { asio::co_spawn(loops_.at(0), accept(), asio::detached); }

 private:
  using activity = connection::activity;

  asio::awaitable<void> accept() {
    std::size_t next = 0;
    asio::steady_timer pause(loops_.at(0));
    for (;;) {
      const std::size_t loop = next;
      next = (next + 1) % loops_.size();
      auto [error, socket] =
          co_await acceptor_->async_accept(loops_.at(loop), asio::as_tuple(asio::use_awaitable));
      if (error) {
        // Out of descriptors (EMFILE) or the like: the connections open now keep being served;
        // accepting resumes a moment later.
        std::fprintf(stderr, "payments_server: accept: %s\n", error.message().c_str());
        pause.expires_after(std::chrono::milliseconds{50});
        (void)co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
        continue;
      }
      if (!registry_.make_room()) {
        asio::co_spawn(loops_.at(loop), turn_away(std::move(socket)), asio::detached);
        continue;
      }
      auto held = std::make_shared<connection>(std::move(socket));
      registry_.add(held);
      asio::co_spawn(loops_.at(loop), serve(held, loop), asio::detached);
    }
  }

  // Every connection is being answered: this one is told so, and closed.
  asio::awaitable<void> turn_away(asio::ip::tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    reply busy = error_reply(503, "the server holds as many connections as it may");
    busy.add_header("Retry-After", "1");
    (void)co_await write(stream, busy, false);
    co_await close_gently(stream);
  }

  // One connection: requests one after another (HTTP/1.1 keep-alive, pipelined or not).
  asio::awaitable<void> serve(std::shared_ptr<connection> held, std::size_t loop) {
    beast::tcp_stream& stream = held->stream;
    beast::flat_buffer buffer;
    for (;;) {
      if (!registry_.set(*held, activity::idle)) break;
      if (buffer.size() == 0) {
        // Idle: the next request's first byte within the read timeout.
        stream.expires_after(limits_.read_timeout);
        const auto [error, read] = co_await stream.async_read_some(
            buffer.prepare(read_chunk), asio::as_tuple(asio::use_awaitable));
        // Closed by the client, idle past the timeout (tcp_stream closed it), or closed to make
        // room: nothing to answer.
        if (error) break;
        buffer.commit(read);
      }
      if (!registry_.set(*held, activity::reading)) break;
      // From its first byte, the whole request (head and body) within the read timeout.
      stream.expires_after(limits_.read_timeout);
      const head_read head = co_await read_head(stream, buffer);
      if (head.refusal) {
        co_await refuse(stream, *head.refusal);
        break;
      }
      if (head.size == 0) break;  // the connection failed or timed out mid-head
      const std::string_view head_bytes(static_cast<const char*>(buffer.data().data()), head.size);
      if (const auto refusal = idem::http::check_request_head(head_bytes, framing_)) {
        co_await refuse(stream, *refusal);
        break;
      }
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(framing_.max_head_bytes + 4));
      parser.body_limit(framing_.max_body_bytes);
      beast::error_code parsed;
      parser.put(asio::buffer(head_bytes.data(), head_bytes.size()), parsed);
      buffer.consume(head.size);
      if (parsed || !parser.is_header_done()) {
        co_await refuse(stream, {400, "a request head Beast cannot parse"});
        break;
      }
      if (auto refused = admit_(parser.get())) {
        refused->add_header("Connection", "close");
        (void)co_await write(stream, *refused, false);
        co_await close_gently(stream);
        break;
      }
      if (!parser.is_done()) {
        if (expects_continue(parser.get())) {
          static constexpr std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
          const auto [error, written] =
              co_await asio::async_write(stream, asio::buffer(go_on.data(), go_on.size()),
                                         asio::as_tuple(asio::use_awaitable));
          if (error) break;
        }
        const auto [read_error, read] =
            co_await http::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
        if (read_error) {
          if (read_error == http::error::body_limit) {
            co_await refuse(stream, {413, "the request body is larger than the server reads"});
          } else if (read_error.category() ==
                     http::make_error_code(http::error::bad_chunk).category()) {
            co_await refuse(stream, {400, "a body whose framing Beast cannot parse"});
          }
          break;  // else closed, or past the read timeout (tcp_stream closed it)
        }
      }
      if (!registry_.set(*held, activity::answering)) break;
      stream.expires_never();  // the route's own deadlines bound the handling
      const http_request_message& request = parser.get();
      reply answer;
      try {
        answer = co_await route_(loop, request);
      } catch (...) {
        answer = failure_reply(std::current_exception());
      }
      const bool keep_alive = request.keep_alive();
      if (!co_await write(stream, answer, keep_alive) || !keep_alive) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    registry_.remove(held);
  }

  struct head_read {
    std::size_t size = 0;  // the head's bytes at the buffer's start, the empty line included
    std::optional<idem::http::framing_refusal> refusal;
  };

  // Reads until the buffer holds a whole head (up to its empty line), never more than the head
  // limit; empty lines before it are skipped (RFC 9112 2.2). size 0 when the connection failed.
  asio::awaitable<head_read> read_head(beast::tcp_stream& stream, beast::flat_buffer& buffer) {
    std::size_t scanned = 0;
    for (;;) {
      std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
      while (data.starts_with("\r\n")) {
        buffer.consume(2);
        data.remove_prefix(2);
        scanned = 0;
      }
      // Only the new bytes are searched, and the three before them an end may straddle.
      const std::size_t end = data.find("\r\n\r\n", scanned > 3 ? scanned - 3 : 0);
      if (end != std::string_view::npos) {
        if (end + 4 > framing_.max_head_bytes) break;
        co_return head_read{end + 4, std::nullopt};
      }
      if (data.size() >= framing_.max_head_bytes) break;
      scanned = data.size();
      const std::size_t room = framing_.max_head_bytes + 4 - data.size();
      const auto [error, read] = co_await stream.async_read_some(
          buffer.prepare(std::min(read_chunk, room)), asio::as_tuple(asio::use_awaitable));
      if (error) co_return head_read{};
      buffer.commit(read);
    }
    co_return head_read{
        0, idem::http::framing_refusal{431, "the request's head is larger than the server reads"}};
  }

  static bool expects_continue(const http::request_header<>& head) {
    if (head.version() < 11) return false;  // RFC 9110 10.1.1: ignored from HTTP/1.0
    const auto expect = head[http::field::expect];
    return idem::header_name_equals(std::string_view(expect.data(), expect.size()), "100-continue");
  }

  // Answers a refusal of the request's framing, and closes the connection.
  asio::awaitable<void> refuse(beast::tcp_stream& stream,
                               const idem::http::framing_refusal& refusal) {
    reply answer;
    idem::http::write_framing_refusal(refusal, answer);
    (void)co_await write(stream, answer, false);
    co_await close_gently(stream);
  }

  // Closes a connection whose request was refused unread: the sending side first, then what the
  // client still sends is read and dropped (64 KiB and one second at most), so that closing with
  // unread bytes does not reset the connection and take the refusal with it.
  asio::awaitable<void> close_gently(beast::tcp_stream& stream) {
    beast::error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    stream.expires_after(std::chrono::seconds{1});
    std::array<char, 4096> sink{};
    for (std::size_t drained = 0; drained < 64 * 1024;) {
      const auto [error, read] =
          co_await stream.async_read_some(asio::buffer(sink), asio::as_tuple(asio::use_awaitable));
      if (error) break;
      drained += read;
    }
    stream.close();
  }

  // Writes `answer` within the read timeout; whether it was written.
  asio::awaitable<bool> write(beast::tcp_stream& stream, const reply& answer, bool keep_alive) {
    http::response<http::string_body> response{static_cast<http::status>(answer.status), 11};
    response.set(http::field::server, "payments_server");
    response.set(http::field::content_type, answer.content_type);
    for (const auto& [name, value] : answer.headers)
      response.set(name, value);
    response.keep_alive(keep_alive);
    response.body() = answer.body;
    response.prepare_payload();
    stream.expires_after(limits_.read_timeout);
    const auto [error, written] =
        co_await http::async_write(stream, response, asio::as_tuple(asio::use_awaitable));
    co_return !error;
  }

  static constexpr std::size_t read_chunk = 4096;

  event_loops& loops_;
  admit_function admit_;
  route_function route_;
  http_limits limits_;
  idem::http::framing_options framing_;
  connection_registry registry_;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
};

}  // namespace payments
