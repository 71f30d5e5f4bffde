// How the demo's cpp-httplib servers (payments_server without --async, payments_processor) listen:
// idem's cpp-httplib binding, which the event-loop server's translation unit must not see (its
// Beast binding declares handlers of the same names).
#pragma once

#include "common.hpp"

#include <idem/http/httplib.hpp>

#include <cstdio>

namespace payments {

/// Binds `server` to 127.0.0.1:port (0: any free port) with a listen backlog of `backlog`
/// (cpp-httplib's own is 5: a burst of connections past it is left half-connected), prints
/// "listening on PORT" (what the scripts and tests wait for) and serves until stopped.
inline int listen_and_serve(httplib::Server& server, const char* name, int port,
                            int backlog = SOMAXCONN) {
  const int bound = idem::http::bind_with_backlog(server, "127.0.0.1", port, backlog);
  if (bound <= 0) {
    std::fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d\n", name, port);
    return 1;
  }
  std::printf("%s: listening on %d\n", name, bound);
  std::fflush(stdout);
  return server.listen_after_bind() ? 0 : 1;
}

}  // namespace payments
