// How a cpp-httplib server listens: with a real backlog. Needs cpp-httplib (CMake: idem::httplib);
// included by idem/http/httplib.hpp, and usable alone by a program whose translation unit also
// sees the Boost.Beast binding (whose handlers have the same names as httplib.hpp's).
//
//   httplib::Server server;
//   const int port = idem::http::bind_with_backlog(server, "0.0.0.0", 8080);
//   server.listen_after_bind();
#ifndef IDEM_HTTP_HTTPLIB_LISTEN_HPP
#define IDEM_HTTP_HTTPLIB_LISTEN_HPP

#include <httplib.h>

#include <memory>
#include <string>

namespace idem::http {

/// Binds `server` to host:port (0: any free port) and listens with a backlog of `backlog`
/// connections waiting to be accepted, instead of the 5 cpp-httplib passes to listen() (its
/// CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's library): a burst past 5 is otherwise left
/// half-connected, the client believing it is connected while the server never accepted it. The
/// socket gets SO_REUSEADDR (cpp-httplib's default SO_REUSEPORT would let a second server share
/// the port unnoticed). The port bound, or -1; then listen_after_bind() serves.
inline int bind_with_backlog(httplib::Server& server, const std::string& host, int port,
                             int backlog = SOMAXCONN) {
  const auto socket = std::make_shared<::socket_t>(INVALID_SOCKET);
  server.set_socket_options([socket](::socket_t created) {
    int yes = 1;
    (void)setsockopt(created, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const char*>(&yes),
                     sizeof yes);
    *socket = created;
  });
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0 || *socket == INVALID_SOCKET) return -1;
  // Linux, the BSDs and Windows take a second listen() on a listening socket as a new backlog.
  if (::listen(*socket, backlog) != 0) return -1;
  return bound;
}

}  // namespace idem::http

#endif  // IDEM_HTTP_HTTPLIB_LISTEN_HPP
