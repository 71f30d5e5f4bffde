// One HTTP exchange through an idempotent wrapper, whatever the server: the Idempotency-Key
// fields read (idempotency_key.hpp), the guarded call made, and its outcome written as the draft
// and RFC 9457 say (the response, a replay marked Idempotent-Replayed: true, or a problem with
// its status, and a 409's Retry-After). The server bindings (httplib.hpp, beast.hpp) are this
// plus the reading and writing of their own request and response types. Standard library only.
//
//   idem::http::reply answer;
//   idem::http::exchange(payments, account, key_fields, request, spec, answer);
//   send(answer.status, answer.headers, answer.content_type, answer.body);
//
// A writer is anything with set_status(int), add_header(name, value) and
// set_body(content, content_type); reply is one that keeps what it is given.
#ifndef IDEM_HTTP_EXCHANGE_HPP
#define IDEM_HTTP_EXCHANGE_HPP

#include <concepts>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/http/idempotency_key.hpp>
#include <idem/http/problem.hpp>
#include <idem/http/specification.hpp>
#include <idem/server/outcome.hpp>
#include <idem/server/request.hpp>

namespace idem::http {

/// Marks a response that is a repeat's replay (the demo and Stripe's clients read it).
inline constexpr std::string_view replayed_field = "Idempotent-Replayed";

/// What an exchange writes its answer into.
template <class Writer>
concept reply_writer = requires(Writer& out, int status, std::string_view text) {
  out.set_status(status);
  out.add_header(text, text);
  out.set_body(text, text);
};

/// A response an exchange can write: a status, headers as (name, value) pairs, a body
/// (http_response is one).
template <class Response>
concept http_response_like = requires(const Response& response) {
  static_cast<int>(response.status);
  std::string_view(response.body);
  std::string_view(response.headers.begin()->first);
  std::string_view(response.headers.begin()->second);
};

/// An answer as an exchange wrote it, for servers without a response type of their own and for
/// tests.
struct reply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // Content-Type aside
  std::string content_type;
  std::string body;

  void set_status(int code) { status = code; }
  void add_header(std::string_view name, std::string_view value) {
    headers.emplace_back(std::string(name), std::string(value));
  }
  void set_body(std::string_view content, std::string_view type) {
    body.assign(content);
    content_type.assign(type);
  }
  /// The first value of `name` (case-insensitive); a null view when absent.
  std::string_view header(std::string_view name) const noexcept {
    return idem::detail::find_header_in(headers, name);
  }
};

/// Writes a refusal: its status, Content-Language (the titles are English), Retry-After when it
/// has one, and the problem body.
template <reply_writer Writer>
void write_problem(const problem& refusal, Writer& out) {
  out.set_status(refusal.status);
  out.add_header("Content-Language", "en");
  if (refusal.retry_after)
    out.add_header("Retry-After", std::to_string(refusal.retry_after->count()));
  out.set_body(refusal.json(), problem_media_type);
}

/// Writes the response of an outcome that has one, as it was stored (its Content-Type given as
/// the body's), a replay marked Idempotent-Replayed: true; else the outcome's problem.
template <http_response_like Response, reply_writer Writer>
void write_outcome(const idempotent_outcome<Response>& outcome, const specification& spec,
                   Writer& out) {
  if (!outcome) return write_problem(problem_of(outcome, spec.uri), out);
  const Response& response = *outcome;
  out.set_status(static_cast<int>(response.status));
  std::string_view content_type;
  for (const auto& [name, value] : response.headers) {
    if (idem::header_name_equals(name, "Content-Type")) {
      content_type = value;
    } else {
      out.add_header(name, value);
    }
  }
  if (outcome.verdict() == verdict::replayed) out.add_header(replayed_field, "true");
  out.set_body(response.body, content_type);
}

/// One exchange: the key read from every value of the request's key field (`key_fields`), the
/// guarded call made under `scope`, the answer written. A key field that is not a key (two
/// fields, a malformed sf-string, an empty one) is refused with 400 before anything is claimed;
/// no field at all is the wrapper's missing key (400, or run unguarded where keys are optional).
template <class Guarded, class Request, class Fields, reply_writer Writer>
void exchange(Guarded& guarded, std::string_view scope, const Fields& key_fields,
              const Request& request, const specification& spec, Writer& out) {
  const parsed_key key = parse_key_fields(key_fields, spec.accepted);
  if (key) return write_outcome(guarded(scope, key.value(), request), spec, out);
  if (key.error() == key_error::missing) {
    return write_outcome(guarded(scope, std::nullopt, request), spec, out);
  }
  write_problem(make_problem(problem_for(key.error()), key.message(), spec.uri), out);
}

}  // namespace idem::http

#endif  // IDEM_HTTP_EXCHANGE_HPP
