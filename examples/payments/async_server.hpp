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
// Slow and idle clients: each connection reads one whole request within read_timeout (the
// request line, the headers and the body together), and waits at most as long for the next one;
// past it the connection is closed with no answer. A request head past header_limit is answered
// 431 and a body past body_limit 413, both unread, and the connection closed; a request that is
// not HTTP is answered 400. A request being handled has no timeout here: the route's own
// (the processor's deadline, the store's) bound it.
#pragma once

#include "service.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace payments {

namespace asio = boost::asio;
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
  std::chrono::milliseconds read_timeout{10000};
  std::size_t header_limit = 8 * 1024;
  std::size_t body_limit = 64 * 1024;
};

/// route(loop, request): the reply to one request, on the loop (its index) the connection is on.
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

class http_server {
 public:
  http_server(event_loops& loops, route_function route, http_limits limits)
      : loops_(loops), route_(std::move(route)), limits_(limits) {}

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
      asio::co_spawn(loops_.at(loop), serve(std::move(socket), loop), asio::detached);
    }
  }

  // One connection: requests one after another (HTTP/1.1 keep-alive), each read within the
  // read timeout.
  asio::awaitable<void> serve(asio::ip::tcp::socket socket, std::size_t loop) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(limits_.header_limit));
      parser.body_limit(limits_.body_limit);
      stream.expires_after(limits_.read_timeout);
      const auto [read_error, read] =
          co_await http::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
      if (read_error) {
        // Closed by the client, or idle or dribbling past the read timeout (tcp_stream closed
        // it already): nothing to answer.
        if (read_error == http::error::end_of_stream || read_error == beast::error::timeout) break;
        const reply refusal = refusal_for(read_error);
        if (refusal.status == 0) break;  // a broken connection
        co_await write(stream, refusal, false);
        break;
      }
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
  }

  // The answer to a request that could not be read, or status 0 for none.
  static reply refusal_for(const beast::error_code& error) {
    if (error == http::error::body_limit) {
      return error_reply(413, "the request body is larger than the server reads");
    }
    if (error == http::error::header_limit) {
      return error_reply(431, "the request's headers are larger than the server reads");
    }
    if (error.category() == http::make_error_code(http::error::bad_method).category()) {
      return error_reply(400, "the request is not HTTP/1.1: " + error.message());
    }
    return {0, {}, {}, {}};
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

  event_loops& loops_;
  route_function route_;
  http_limits limits_;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
};

}  // namespace payments
