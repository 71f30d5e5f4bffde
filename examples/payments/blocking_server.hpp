// The demo's blocking HTTP server (cpp-httplib) as payments_server sets it up, for it and for the
// floor server of scripts/serve_bench.sh (bench/serve), so that the two serve alike: 32 threads,
// the read timeout, strict framing as far as cpp-httplib lets it be checked, and the caller
// authenticated (auth.hpp), both before the body is read.
#pragma once

#include "auth.hpp"
#include "server_settings.hpp"
#include "service.hpp"

#include <idem/http/httplib.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>
#include <variant>

namespace payments {

/// The caller's account (auth.hpp), or the refusal.
inline std::variant<std::string, reply> caller_of(const api_keys& keys,
                                                  const httplib::Request& req) {
  const auto values = idem::http::field_values_in(req);
  return authenticate(keys, values(authorization_field), values(account_field));
}

/// Sets `server` up as the demo's: a pool of 32 threads, each held by a connection from its
/// accept until it is closed (idle for up to `read_timeout`: docs/demo.md, "Framing and slow
/// clients"); idem/http/httplib.hpp's harden (400, 401, 403, 411 for a chunked body, 413 past
/// 64 KiB, 417, 431 past 100 fields, 501; one request per connection) with the caller's API key
/// checked on the routes that need one.
inline void set_up_blocking_server(httplib::Server& server, std::chrono::milliseconds read_timeout,
                                   const api_keys& keys) {
  server.new_task_queue = [] { return new httplib::ThreadPool(32); };
  const auto seconds = std::max<long long>(1, (read_timeout.count() + 999) / 1000);
  server.set_keep_alive_timeout(static_cast<time_t>(seconds));
  server.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(read_timeout));
  server.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(read_timeout));
  idem::http::framing_options framing;
  framing.max_head_bytes = max_request_header_bytes;
  framing.max_fields = max_request_fields;
  framing.max_body_bytes = max_request_body_bytes;
  idem::http::harden(server, framing, [&keys](const httplib::Request& req, httplib::Response& res) {
    if (!route_needs_caller(req.method, req.path)) return true;
    const auto caller = caller_of(keys, req);
    if (const reply* refusal = std::get_if<reply>(&caller)) {
      send(res, *refusal);
      return false;
    }
    return true;
  });
}

}  // namespace payments
