// One HTTP exchange through an idempotent wrapper, whatever the server: the Idempotency-Key
// and deadline fields read (idempotency_key.hpp, deadline.hpp), the guarded call made, and its
// outcome written as the draft and RFC 9457 say (the response, a replay marked Idempotent-Replayed:
// true, or a problem with its status, and a 409's Retry-After). The server bindings (httplib.hpp,
// beast.hpp) are this plus the reading and writing of their own request and response types.
// Standard library only.
//
//   idem::http::reply answer;
//   idem::http::exchange(payments, account, idem::http::field_values_in(request), request, spec,
//                        answer);
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

#include <idem/core/request.hpp>
#include <idem/http/conditional.hpp>
#include <idem/http/deadline.hpp>
#include <idem/http/idempotency_key.hpp>
#include <idem/http/problem.hpp>
#include <idem/http/specification.hpp>
#include <idem/server/deadline.hpp>
#include <idem/server/outcome.hpp>

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

/// Writes `response` as it was stored (its Content-Type given as the body's), marked
/// Idempotent-Replayed: true when it is a replay.
template <http_response_like Response, reply_writer Writer>
void write_response(const Response& response, bool replayed, Writer& out) {
  out.set_status(static_cast<int>(response.status));
  std::string_view content_type;
  for (const auto& [name, value] : response.headers) {
    if (idem::header_name_equals(name, "Content-Type")) {
      content_type = value;
    } else {
      out.add_header(name, value);
    }
  }
  if (replayed) out.add_header(replayed_field, "true");
  out.set_body(response.body, content_type);
}

/// Writes the response of an outcome that has one, as it was stored (its Content-Type given as
/// the body's), a replay marked Idempotent-Replayed: true; else the outcome's problem.
template <http_response_like Response, reply_writer Writer>
void write_outcome(const idempotent_outcome<Response>& outcome, const specification& spec,
                   Writer& out) {
  if (!outcome) return write_problem(problem_of(outcome, spec.uri), out);
  write_response(*outcome, outcome.verdict() == verdict::replayed, out);
}

/// What a request's fields say about the call: its key (Idempotency-Key, read as the
/// specification accepts it) and its deadline (the specification's deadline field), or the
/// refusal a wrong one gets (400: two keys, a malformed key, a deadline that is not a number of
/// milliseconds). `field_values(name)` answers every value the request carries under `name`, as
/// string views into the request. Views into the request, or into this object: keep both while
/// the key is used.
class call_fields {
 public:
  template <class FieldValues>
  call_fields(const FieldValues& field_values, const specification& spec)
      : key_(parse_key_fields(field_values(spec.key_field), spec.accepted)) {
    if (!key_ && key_.error() != key_error::missing) {
      refusal_.emplace(make_problem(problem_for(key_.error()), key_.message(), spec.uri));
      return;
    }
    if (spec.deadline_field.empty()) return;
    const parsed_deadline deadline = parse_deadline_fields(field_values(spec.deadline_field));
    if (!deadline) {
      refusal_.emplace(make_problem(problem_kind::invalid_deadline, deadline.message(), spec.uri));
      return;
    }
    deadline_ = deadline.deadline();
  }
  call_fields(const call_fields&) = delete;
  call_fields& operator=(const call_fields&) = delete;

  /// The problem to answer instead of calling: a key or deadline field that is wrong.
  const std::optional<problem>& refusal() const noexcept { return refusal_; }
  /// The key; std::nullopt when the request has none (the wrapper decides: 400, or unguarded).
  std::optional<std::string_view> key() const noexcept {
    if (!key_) return std::nullopt;
    return key_.value();
  }
  /// The caller's deadline; std::nullopt when the request has none.
  const std::optional<caller_deadline>& deadline() const noexcept { return deadline_; }

 private:
  parsed_key key_;
  std::optional<caller_deadline> deadline_;
  std::optional<problem> refusal_;
};

/// field_values for an http_request: every value of a header, by name (case-insensitive).
inline auto field_values_in(const http_request& request) {
  return [&request](std::string_view name) {
    std::vector<std::string_view> values;
    for (const auto& [field, value] : request.headers)
      if (idem::header_name_equals(field, name)) values.emplace_back(value);
    return values;
  };
}

/// One exchange: the call's fields read (call_fields), the guarded call made under `scope` with
/// the key and the caller's deadline, the answer written. A field that is wrong is refused (400)
/// before anything is claimed; no key at all is the wrapper's missing key (400, or run unguarded
/// where keys are optional); a deadline too short to start the work is the wrapper's
/// deadline_exceeded (504), nothing claimed either.
template <class Guarded, class Request, class FieldValues, reply_writer Writer>
void exchange(Guarded& guarded, std::string_view scope, const FieldValues& field_values,
              const Request& request, const specification& spec, Writer& out) {
  const call_fields fields(field_values, spec);
  if (fields.refusal()) return write_problem(*fields.refusal(), out);
  write_outcome(guarded(scope, fields.key(), request, fields.deadline()), spec, out);
}

/// exchange for a request that changes a resource under a condition (If-Match, conditional.hpp):
/// `current_tag()` answers the resource's current entity-tag (its opaque part), or std::nullopt
/// when there is no such resource. A malformed If-Match is refused with 400, one that does not
/// hold with 412, both before anything is claimed or run; a request without If-Match goes on as
/// exchange's. The condition is checked before the key: a repeat of a keyed request whose first
/// attempt changed the version is answered 412, which tells its client the change was made
/// (docs/natural_idempotence.md).
template <class Guarded, class Request, class FieldValues, reply_writer Writer, class CurrentTag>
void conditional_exchange(Guarded& guarded, std::string_view scope, const FieldValues& field_values,
                          const Request& request, const specification& spec, Writer& out,
                          CurrentTag&& current_tag) {
  const parsed_if_match condition = parse_if_match_fields(field_values(if_match_field));
  if (!condition) {
    return write_problem(
        make_problem(problem_kind::invalid_precondition, condition.message(), spec.uri), out);
  }
  if (condition.present()) {
    const std::optional<std::string> current{current_tag()};
    if (!if_match_holds(condition, current)) {
      return write_problem(
          make_problem(problem_kind::precondition_failed,
                       current ? "the resource is at another version than If-Match names"
                               : "the resource does not exist, and If-Match asks for a version "
                                 "of it",
                       spec.uri),
          out);
    }
  }
  exchange(guarded, scope, field_values, request, spec, out);
}

}  // namespace idem::http

#endif  // IDEM_HTTP_EXCHANGE_HPP
