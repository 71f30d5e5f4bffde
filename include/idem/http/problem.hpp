// Refusals as RFC 9457 problem details (application/problem+json), one stable problem type per
// way idem refuses a request. Standard library only.
//
//   idem::http::problem p = idem::http::problem_of(outcome.verdict(), outcome.message(),
//   "/idempotency"); reply(p.status, idem::http::problem_media_type, p.json());
//
// A problem type is a URI: the page where the server publishes its idempotency specification
// (the draft, section 2.5: the resource "MUST publish idempotency related specification"), with
// a fragment naming the problem, "/idempotency#key-reused". The fragments are part of idem's
// interface and never change (docs/http.md lists them); the page is the server's own, so a type
// leads to the server's documentation, as the draft's examples do (section 2.7), and RFC 9457
// section 3.1.1 asks of a type that is a locator. specification.hpp writes that page with an
// anchor for each fragment.
#ifndef IDEM_HTTP_PROBLEM_HPP
#define IDEM_HTTP_PROBLEM_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <idem/http/idempotency_key.hpp>
#include <idem/server/outcome.hpp>

namespace idem::http {

inline constexpr std::string_view problem_media_type = "application/problem+json";

/// The ways a request is refused, each a problem type of its own.
enum class problem_kind : std::uint8_t {
  missing_key,           ///< 400: no Idempotency-Key where one is required
  invalid_key,           ///< 400: a key that is malformed, empty, too long or not visible ASCII
  several_keys,          ///< 400: more than one Idempotency-Key field (the draft, section 2.1)
  key_reused,            ///< 422: the key was used with another request (section 2.7)
  request_outstanding,   ///< 409: a request with the key is still being processed (section 2.7)
  invalid_request,       ///< 400: the request cannot be fingerprinted
  body_too_large,        ///< 413: the body is longer than the server accepts
  store_unavailable,     ///< 503: the key store cannot answer; nothing ran
  store_full,            ///< 503: the key store has no room; nothing ran
  response_too_large,    ///< 500: the first response was too large to keep for repeats
  cancelled,             ///< 503: the server stopped working on the request; a retry runs it
  deadline_exceeded,     ///< 504: too little of the caller's deadline is left to start the work
  invalid_deadline,      ///< 400: a deadline field that is not a number of milliseconds
  precondition_failed,   ///< 412: If-Match names no current version of the resource
  invalid_precondition,  ///< 400: an If-Match field that is not "*" or a list of entity-tags
  invalid_signature,     ///< 400: a webhook delivery unsigned, or signed by no accepted secret
  stale_webhook,         ///< 400: a webhook delivery signed too long ago (or ahead) to accept
  missing_event_id,      ///< 400: a webhook delivery without a usable event id
  event_failed,          ///< 500: a webhook's handler failed; the event runs again on redelivery
};

/// A problem type: the fragment that names it, its status, its title (RFC 9457 section 3.1.3:
/// the same for every occurrence of the type).
struct problem_type {
  std::string_view fragment;
  int status;
  std::string_view title;
};

constexpr problem_type type_of(problem_kind kind) noexcept {
  switch (kind) {
    case problem_kind::missing_key:
      return {"missing-key", 400, "Idempotency-Key is missing"};
    case problem_kind::invalid_key:
      return {"invalid-key", 400, "Idempotency-Key is not valid"};
    case problem_kind::several_keys:
      return {"several-keys", 400, "More than one Idempotency-Key field"};
    case problem_kind::key_reused:
      return {"key-reused", 422, "Idempotency-Key is already used"};
    case problem_kind::request_outstanding:
      return {"request-outstanding", 409, "A request is outstanding for this Idempotency-Key"};
    case problem_kind::invalid_request:
      return {"invalid-request", 400, "The request cannot be fingerprinted"};
    case problem_kind::body_too_large:
      return {"body-too-large", 413, "The request body is too large"};
    case problem_kind::store_unavailable:
      return {"store-unavailable", 503, "The idempotency key store is unavailable"};
    case problem_kind::store_full:
      return {"store-full", 503, "The idempotency key store is full"};
    case problem_kind::response_too_large:
      return {"response-too-large", 500, "The response to this key was too large to keep"};
    case problem_kind::cancelled:
      return {"cancelled", 503, "The request was cancelled before it completed"};
    case problem_kind::deadline_exceeded:
      return {"deadline-exceeded", 504, "Too little time is left to process the request"};
    case problem_kind::invalid_deadline:
      return {"invalid-deadline", 400, "The request's deadline is not valid"};
    case problem_kind::precondition_failed:
      return {"precondition-failed", 412, "The resource is not in the expected version"};
    case problem_kind::invalid_precondition:
      return {"invalid-precondition", 400, "The If-Match field is not valid"};
    case problem_kind::invalid_signature:
      return {"invalid-signature", 400, "The webhook's signature is not valid"};
    case problem_kind::stale_webhook:
      return {"stale-webhook", 400, "The webhook was signed outside the accepted time window"};
    case problem_kind::missing_event_id:
      return {"missing-event-id", 400, "The webhook has no usable event id"};
    case problem_kind::event_failed:
      return {"event-failed", 500, "The webhook's handler failed"};
  }
  return {"unknown", 500, "Unknown problem"};
}

/// Every problem kind, for documents and tests that list them.
inline constexpr problem_kind all_problem_kinds[] = {
    problem_kind::missing_key,
    problem_kind::invalid_key,
    problem_kind::several_keys,
    problem_kind::key_reused,
    problem_kind::request_outstanding,
    problem_kind::invalid_request,
    problem_kind::body_too_large,
    problem_kind::store_unavailable,
    problem_kind::store_full,
    problem_kind::response_too_large,
    problem_kind::cancelled,
    problem_kind::deadline_exceeded,
    problem_kind::invalid_deadline,
    problem_kind::precondition_failed,
    problem_kind::invalid_precondition,
    problem_kind::invalid_signature,
    problem_kind::stale_webhook,
    problem_kind::missing_event_id,
    problem_kind::event_failed,
};

/// The problem a verdict without a response is; std::nullopt for executed and replayed.
constexpr std::optional<problem_kind> problem_for(verdict v) noexcept {
  switch (v) {
    case verdict::executed:
    case verdict::replayed:
      return std::nullopt;
    case verdict::in_progress:
      return problem_kind::request_outstanding;
    case verdict::mismatch:
      return problem_kind::key_reused;
    case verdict::missing_key:
      return problem_kind::missing_key;
    case verdict::invalid_key:
      return problem_kind::invalid_key;
    case verdict::invalid_request:
      return problem_kind::invalid_request;
    case verdict::body_too_large:
      return problem_kind::body_too_large;
    case verdict::store_unavailable:
      return problem_kind::store_unavailable;
    case verdict::store_full:
      return problem_kind::store_full;
    case verdict::response_too_large:
      return problem_kind::response_too_large;
    case verdict::cancelled:
      return problem_kind::cancelled;
    case verdict::deadline_exceeded:
      return problem_kind::deadline_exceeded;
  }
  return problem_kind::store_unavailable;
}

/// The problem a field value that is not a key is (parse_key, parse_key_fields).
constexpr problem_kind problem_for(key_error error) noexcept {
  switch (error) {
    case key_error::missing:
      return problem_kind::missing_key;
    case key_error::several_fields:
      return problem_kind::several_keys;
    case key_error::none:
    case key_error::empty:
    case key_error::malformed:
    case key_error::not_a_string:
      break;
  }
  return problem_kind::invalid_key;
}

namespace detail {

/// `text` as the contents of a JSON string (RFC 8259 section 7): quotes, backslashes and
/// control characters escaped, UTF-8 passed through, and a byte that does not begin or continue
/// a well-formed UTF-8 sequence written as U+FFFD, so that the body is always valid JSON.
inline void append_json_string(std::string& out, std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20 || c == 0x7f) {
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 0xf];
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // The length of the sequence c begins, and the range its second byte must fall in
    // (RFC 3629 section 4: no overlong forms, no surrogates, nothing past U+10FFFF).
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      length = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      length = 3;
      if (c == 0xe0) low = 0xa0;
      if (c == 0xed) high = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      length = 4;
      if (c == 0xf0) low = 0x90;
      if (c == 0xf4) high = 0x8f;
    }
    bool whole = length != 0 && i + length <= text.size();
    for (std::size_t k = 1; whole && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      whole = k == 1 ? (next >= low && next <= high) : (next >= 0x80 && next <= 0xbf);
    }
    if (whole) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out += '"';
}

}  // namespace detail

/// One problem: what a refusal's body says (RFC 9457 section 3.1) and the Retry-After it carries.
struct problem {
  problem_kind kind = problem_kind::store_unavailable;
  int status = 503;
  std::string type;        ///< the specification's address, '#', the type's fragment
  std::string_view title;  ///< the type's title
  std::string detail;      ///< this occurrence, in words
  /// Retry-After, in whole seconds (409: the holder's lease left, rounded up); none when unset.
  std::optional<std::chrono::seconds> retry_after;

  /// The body, application/problem+json: type, title, status and detail (RFC 9457 section 3.1).
  std::string json() const {
    std::string out;
    out.reserve(64 + type.size() + title.size() + detail.size());
    out += "{\"type\":";
    detail::append_json_string(out, type);
    out += ",\"title\":";
    detail::append_json_string(out, title);
    out += ",\"status\":";
    out += std::to_string(status);
    out += ",\"detail\":";
    detail::append_json_string(out, this->detail);
    out += '}';
    return out;
  }
};

/// The problem of `kind`, typed under the specification published at `specification_uri`.
inline problem make_problem(problem_kind kind, std::string_view detail,
                            std::string_view specification_uri) {
  const problem_type type = type_of(kind);
  problem p;
  p.kind = kind;
  p.status = type.status;
  p.type.reserve(specification_uri.size() + 1 + type.fragment.size());
  p.type.append(specification_uri).append(1, '#').append(type.fragment);
  p.title = type.title;
  p.detail = std::string(detail.empty() ? type.title : detail);
  return p;
}

/// Whole seconds to wait for `left` to pass: rounded up, so that a retry after it finds the
/// lease over (RFC 9110 section 10.2.3: Retry-After is a non-negative number of seconds).
constexpr std::chrono::seconds whole_seconds_after(std::chrono::nanoseconds left) noexcept {
  if (left <= std::chrono::nanoseconds::zero()) return std::chrono::seconds::zero();
  return std::chrono::ceil<std::chrono::seconds>(left);
}

/// The problem a refused outcome is: its verdict's type, its message as the detail, and for
/// in_progress a Retry-After of the holder's lease left. Only for outcomes without a response.
template <class Response>
problem problem_of(const idempotent_outcome<Response>& outcome,
                   std::string_view specification_uri) {
  const std::optional<problem_kind> kind = problem_for(outcome.verdict());
  problem p = make_problem(kind.value_or(problem_kind::store_unavailable), outcome.message(),
                           specification_uri);
  if (outcome.verdict() == verdict::in_progress &&
      outcome.lease_left() > std::chrono::nanoseconds::zero()) {
    p.retry_after = whole_seconds_after(outcome.lease_left());
  }
  return p;
}

}  // namespace idem::http

#endif  // IDEM_HTTP_PROBLEM_HPP
