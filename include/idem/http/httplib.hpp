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
//       [](const httplib::Request& req) { return req.get_header_value("X-Account"); }));
//   server.Get("/idempotency", idem::http::specification_handler(
//       idem::http::specification::of(charges)));
//
// The wrapper's handler takes the request as an httplib_request (a view of httplib's request,
// fingerprinted in place: method, path, body), or as any request type a `make_request`
// function builds from it (an idem::http_request, say, when the records keep their requests
// for the reconciler: serve(..., request, ...)). Its response is an idem::http_response, or a
// type with the same three members.
#ifndef IDEM_HTTP_HTTPLIB_HPP
#define IDEM_HTTP_HTTPLIB_HPP

#include <httplib.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/core/request.hpp>
#include <idem/http/exchange.hpp>
#include <idem/http/specification.hpp>

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
  void add_header(std::string_view name, std::string_view value) {
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

/// Runs `guarded` for `req` under `scope`, with `request` as the handler's request, and writes
/// the answer into `res`: exchange.hpp's exchange, the key and the deadline read from `req`.
template <class Guarded, class Request>
void serve(Guarded& guarded, std::string_view scope, const httplib::Request& req,
           const Request& request, httplib::Response& res, const specification& spec) {
  httplib_writer out{res};
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

}  // namespace idem::http

#endif  // IDEM_HTTP_HTTPLIB_HPP
