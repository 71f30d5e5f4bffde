// idem on cpp-httplib: a handler for httplib::Server::Post that runs an idempotent wrapper, with
// the protocol of exchange.hpp (the key read as the draft says, replays marked, refusals as
// problem+json with a 409's Retry-After). Needs cpp-httplib (CMake: idem::httplib; Debian:
// libcpp-httplib-dev); not part of idem.hpp.
//
//   auto charges = idem::idempotent{[&](idem::handler_context& ctx,
//                                       const idem::http::httplib_request& req) {
//     return idem::http_response{201, {{"Content-Type", "application/json"}},
//                                charge(req->body, ctx.downstream_key("charge"))};
//   }};
//   server.Post("/v1/charges", idem::http::post_handler(charges,
//       [](const httplib::Request& req) { return authenticated_account(req); }));
//   server.Get("/idempotency", idem::http::specification_handler(
//       idem::http::specification::of(charges)));
//
// cpp-httplib reads requests more loosely than a server behind a proxy may (docs/http.md, "What
// cpp-httplib needs in front"): harden(server) holds it to what its API lets idem check before a
// body is read (check_request_fields of framing.hpp, a chunked body refused, one request per
// connection), and bind_with_backlog (httplib/listen.hpp) listens with a backlog past its fixed 5.
// serve() checks the framing of every request it is given, with or without them.
//
// The wrapper's handler takes the request as an httplib_request (a view of httplib's request,
// fingerprinted in place: method, path, body), or as any request type a `make_request`
// function builds from it (an idem::http_request, say, when the records keep their requests
// for the reconciler: serve(..., request, ...)). Its response is an idem::http_response, or a
// type with the same three members.
#ifndef IDEM_HTTP_HTTPLIB_HPP
#define IDEM_HTTP_HTTPLIB_HPP

#include <httplib.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/core/request.hpp>
#include <idem/http/exchange.hpp>
#include <idem/http/framing.hpp>
#include <idem/http/httplib/listen.hpp>
#include <idem/http/specification.hpp>
#include <idem/http/webhook.hpp>

namespace idem::http {

/// httplib's request as idem fingerprints it, without a copy: method, path and body, and its
/// headers looked up by name. Points at the request, which must outlive it.
class httplib_request {
 public:
  explicit httplib_request(const httplib::Request& request) noexcept : request_(&request) {}

  const httplib::Request& operator*() const noexcept { return *request_; }
  const httplib::Request* operator->() const noexcept { return request_; }

  request_view view() const noexcept {
    return {request_->method, request_->path, request_->body, {}, request_, &header_of};
  }

 private:
  static std::string_view header_of(const void* source, std::string_view name) {
    const auto& headers = static_cast<const httplib::Request*>(source)->headers;
    const auto found = headers.find(std::string(name));  // case-insensitive, as httplib keeps them
    if (found == headers.end()) return {};
    return found->second;
  }

  const httplib::Request* request_;
};

/// Writes an exchange's answer into httplib's response.
class httplib_writer {
 public:
  explicit httplib_writer(httplib::Response& response) noexcept : response_(&response) {}

  void set_status(int status) { response_->status = status; }
  /// Connection is cpp-httplib's to write: it writes "close" itself on the answers after which
  /// it closes, and only then.
  void add_header(std::string_view name, std::string_view value) {
    if (header_name_equals(name, "Connection")) return;
    response_->set_header(std::string(name), std::string(value));
  }
  void set_body(std::string_view content, std::string_view type) {
    if (type.empty()) {
      response_->body.assign(content);  // a response stored without a Content-Type has none
    } else {
      response_->set_content(content.data(), content.size(), std::string(type));
    }
  }

 private:
  httplib::Response* response_;
};

/// field_values for httplib's request: every value of a header, by name (case-insensitive, as
/// httplib keeps them), as views into the request.
inline auto field_values_in(const httplib::Request& request) {
  return [&request](std::string_view name) {
    std::vector<std::string_view> values;
    const auto [first, last] = request.headers.equal_range(std::string(name));
    for (auto it = first; it != last; ++it)
      values.emplace_back(it->second);
    return values;
  };
}

/// The fields of `req` the client sent, checked by check_request_fields (framing.hpp). cpp-httplib
/// adds four of its own after parsing (REMOTE_ADDR, REMOTE_PORT, LOCAL_ADDR, LOCAL_PORT): the last
/// of each of those names is its, and left out.
inline std::optional<framing_refusal> check_framing(
    const httplib::Request& req, const framing_options& options = framing_options::framing_only()) {
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  fields.reserve(req.headers.size());
  for (auto it = req.headers.begin(); it != req.headers.end(); ++it) {
    const std::string_view name = it->first;
    const bool added =
        header_name_equals(name, "REMOTE_ADDR") || header_name_equals(name, "REMOTE_PORT") ||
        header_name_equals(name, "LOCAL_ADDR") || header_name_equals(name, "LOCAL_PORT");
    // Equal names are adjacent in the multimap, in the order they were added.
    const auto next = std::next(it);
    if (added && (next == req.headers.end() || !header_name_equals(next->first, name))) continue;
    fields.emplace_back(name, it->second);
  }
  return check_request_fields(fields, options);
}

/// Runs `guarded` for `req` under `scope`, with `request` as the handler's request, and writes
/// the answer into `res`: exchange.hpp's exchange, the key and the deadline read from `req`. A
/// request whose framing is ambiguous (check_framing) is refused first, with Connection: close.
template <class Guarded, class Request>
void serve(Guarded& guarded, std::string_view scope, const httplib::Request& req,
           const Request& request, httplib::Response& res, const specification& spec) {
  httplib_writer out{res};
  if (const auto refusal = check_framing(req)) return write_framing_refusal(*refusal, out);
  exchange(guarded, scope, field_values_in(req), request, spec, out);
}

/// serve for a request that changes a resource under a condition (If-Match):
/// conditional_exchange, with `current_tag()` answering the resource's current entity-tag (its
/// opaque part) or std::nullopt when it does not exist.
template <class Guarded, class Request, class CurrentTag>
void serve_conditional(Guarded& guarded, std::string_view scope, const httplib::Request& req,
                       const Request& request, httplib::Response& res, const specification& spec,
                       CurrentTag&& current_tag) {
  httplib_writer out{res};
  if (const auto refusal = check_framing(req)) return write_framing_refusal(*refusal, out);
  conditional_exchange(guarded, scope, field_values_in(req), request, spec, out,
                       std::forward<CurrentTag>(current_tag));
}

/// The same, the handler's request being an httplib_request.
template <class Guarded>
void serve(Guarded& guarded, std::string_view scope, const httplib::Request& req,
           httplib::Response& res, const specification& spec) {
  serve(guarded, scope, req, httplib_request{req}, res, spec);
}

/// A handler for Server::Post and its kin: `scope_of(req)` names the scope (the account, the
/// tenant) the key belongs to. `guarded` must outlive the server's use of the handler.
template <class Guarded, class ScopeOf>
httplib::Server::Handler post_handler(Guarded& guarded, ScopeOf scope_of, specification spec) {
  return [&guarded, scope_of = std::move(scope_of), spec = std::move(spec)](
             const httplib::Request& req, httplib::Response& res) {
    const std::string scope{scope_of(req)};
    serve(guarded, scope, req, res, spec);
  };
}

/// The same, with the specification the wrapper keeps, published at "/idempotency".
template <class Guarded, class ScopeOf>
httplib::Server::Handler post_handler(Guarded& guarded, ScopeOf scope_of) {
  return post_handler(guarded, std::move(scope_of), specification::of(guarded));
}

/// A handler for Server::Post that receives `receiver`'s webhooks through `events` (an
/// idem::inbox), as receive_webhook does (webhook.hpp): the framing checked, the signature and
/// timestamp, the event id read, `handler(const webhook_event&)` (or with a TransactionalStore
/// `handler(const webhook_event&, Store::transaction&)`) run once per event. `handler` is called
/// from the server's threads at once: it must be safe to. `events` must outlive the server's use
/// of the handler.
template <class Inbox, class Handler>
httplib::Server::Handler webhook_handler(Inbox& events, webhook_receiver receiver,
                                         Handler handler) {
  return [&events, receiver = std::move(receiver), handler = std::move(handler)](
             const httplib::Request& req, httplib::Response& res) mutable {
    httplib_writer out{res};
    if (const auto refusal = check_framing(req)) return write_framing_refusal(*refusal, out);
    receive_webhook(events, receiver, field_values_in(req), req.body, handler, out);
  };
}

/// A handler for Server::Get that serves the specification: HTML, or JSON to a request that
/// accepts application/json and not text/html.
inline httplib::Server::Handler specification_handler(const specification& spec) {
  return [html = specification_html(spec), json = specification_json(spec)](
             const httplib::Request& req, httplib::Response& res) {
    const std::string accept = req.get_header_value("Accept");
    const bool wants_json = accept.find("application/json") != std::string::npos &&
                            accept.find("text/html") == std::string::npos;
    if (wants_json) {
      res.set_content(json, "application/json");
    } else {
      res.set_content(html, "text/html; charset=utf-8");
    }
  };
}

/// Holds `server` to strict framing as far as cpp-httplib's API lets, before any request's body is
/// read: its fields checked (check_framing with `options`: 400, 413, 417, 431, 501 with
/// Connection: close), a chunked body refused with 411 whatever options.chunked_bodies says
/// (cpp-httplib reads one with no limit, and past a chunk without its CRLF), the body limit set
/// (413 for a longer Content-Length), an `Expect: 100-continue` answered 100 only once the head
/// passed, else with the refusal and the body unread; and one request per connection:
/// cpp-httplib loses the second of two pipelined requests, so each answer closes its connection
/// instead, and the client knows to send the next on a new one. `admit(req, res)` is the
/// service's own check of the head (a credential, say), run at the same points: false when it
/// wrote a refusal into `res`. What it cannot check (a folded line without a colon, which
/// cpp-httplib drops unseen; the head's size) needs a proxy in front: docs/http.md.
template <class Admit>
void harden(httplib::Server& server, framing_options options, Admit admit) {
  options.chunked_bodies = false;
  server.set_payload_max_length(static_cast<std::size_t>(options.max_body_bytes));
  server.set_keep_alive_max_count(1);
  auto refused = [options, admit = std::move(admit)](const httplib::Request& req,
                                                     httplib::Response& res) {
    if (const auto refusal = check_framing(req, options)) {
      httplib_writer out{res};
      write_framing_refusal(*refusal, out);
      return true;
    }
    return !admit(req, res);
  };
  server.set_expect_100_continue_handler(
      [refused](const httplib::Request& req, httplib::Response& res) {
        if (!refused(req, res)) return 100;
        // Anything but 100 (or 417) is answered as the final response, the body never read, on
        // a path of cpp-httplib's that does not count the body's length itself.
        res.set_header("Content-Length", std::to_string(res.body.size()));
        return res.status;
      });
  server.set_pre_routing_handler([refused](const httplib::Request& req, httplib::Response& res) {
    return refused(req, res) ? httplib::Server::HandlerResponse::Handled
                             : httplib::Server::HandlerResponse::Unhandled;
  });
}

/// The same, with no check of the service's own.
inline void harden(httplib::Server& server, const framing_options& options = {}) {
  harden(server, options, [](const httplib::Request&, httplib::Response&) { return true; });
}

}  // namespace idem::http

#endif  // IDEM_HTTP_HTTPLIB_HPP
