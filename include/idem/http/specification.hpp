// The idempotency specification a resource publishes (draft-ietf-httpapi-idempotency-key-header,
// section 2.5: the resource server "MUST publish idempotency related specification", including
// its expiration policy, section 2.3), as a document a server serves: HTML for people, with an
// anchor for every problem type (problem.hpp types refusals as this page's address '#' the
// type), and JSON for programs. Standard library only.
//
//   auto spec = idem::http::specification::of(payments, "/idempotency");
//   server.Get("/idempotency", [spec](auto&, auto& res) {
//     res.set_content(idem::http::specification_html(spec), "text/html");
//   });
#ifndef IDEM_HTTP_SPECIFICATION_HPP
#define IDEM_HTTP_SPECIFICATION_HPP

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include <idem/core/key.hpp>
#include <idem/http/idempotency_key.hpp>
#include <idem/http/problem.hpp>

namespace idem::http {

/// What a client must know to use a resource's idempotency keys, and where it is published.
struct specification {
  /// Where the document is served; problem types are this address '#' their fragment.
  std::string uri = "/idempotency";
  /// The request field that carries the key.
  std::string key_field{idempotency_key_field};
  /// Whether a request without a key is refused (400) or run without the guarantee.
  bool key_required = true;
  /// The key forms read: the draft's sf-string and the bare key, or the sf-string only.
  key_form accepted = key_form::any;
  /// The longest key, in bytes, of visible ASCII.
  std::size_t max_key_length = idem::max_key_length;
  /// How long a completed request's response is kept: a repeat within it is answered with it,
  /// a repeat after it runs again (section 2.3, the expiration policy).
  std::chrono::nanoseconds retention = std::chrono::hours{24};
  /// How long a request being processed holds its key: a repeat meanwhile gets 409, with a
  /// Retry-After of what is left; an attempt that stops answering loses it after this.
  std::chrono::nanoseconds lease = std::chrono::seconds{30};
  /// What makes a repeat the same request (the fingerprint, section 2.4), in words.
  std::string fingerprint = "the method, the target and the body, byte for byte";
  /// The request field that carries the caller's deadline, in milliseconds left
  /// (idem/http/deadline.hpp); empty when the server does not read one.
  std::string deadline_field{"Request-Timeout-Ms"};

  /// The specification an idempotent (or async_idempotent) wrapper keeps: its key rule, lease
  /// and retention, published at `uri`.
  template <class Wrapper>
  static specification of(const Wrapper& wrapper, std::string uri = "/idempotency") {
    const auto& settings = wrapper.settings();
    specification spec;
    spec.uri = std::move(uri);
    spec.key_field = settings.key_header;
    spec.key_required = settings.require_key;
    spec.max_key_length = settings.max_key_length;
    spec.retention = settings.retention;
    spec.lease = settings.lease;
    return spec;
  }
};

namespace detail {

/// A duration in words for the document: whole seconds, or milliseconds under one second.
inline std::string duration_words(std::chrono::nanoseconds d) {
  using std::chrono::duration_cast;
  if (d < std::chrono::seconds{1}) {
    return std::to_string(duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
  }
  return std::to_string(std::chrono::ceil<std::chrono::seconds>(d).count()) + " s";
}

/// `text` escaped for HTML text and attribute values.
inline void append_html(std::string& out, std::string_view text) {
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
}

inline std::string_view accepted_words(key_form form) {
  return form == key_form::sf_string
             ? "a String Structured Field (RFC 8941), quoted: \"8e03978e-40d5\""
             : "a String Structured Field (RFC 8941), quoted, or the bare key: \"8e03978e-40d5\" "
               "and 8e03978e-40d5 are the same key";
}

}  // namespace detail

/// The specification as JSON (application/json): the key's rules, the expiration policy, and
/// every problem type with its status and title.
inline std::string specification_json(const specification& spec) {
  using detail::append_json_string;
  std::string out = "{\"key_field\":";
  append_json_string(out, spec.key_field);
  out += ",\"key_required\":";
  out += spec.key_required ? "true" : "false";
  out += ",\"key_format\":";
  append_json_string(out, spec.accepted == key_form::sf_string ? "sf-string" : "sf-string or bare");
  out += ",\"max_key_length\":" + std::to_string(spec.max_key_length);
  out += ",\"retention_seconds\":" +
         std::to_string(std::chrono::ceil<std::chrono::seconds>(spec.retention).count());
  out += ",\"lease_seconds\":" +
         std::to_string(std::chrono::ceil<std::chrono::seconds>(spec.lease).count());
  out += ",\"fingerprint\":";
  append_json_string(out, spec.fingerprint);
  if (!spec.deadline_field.empty()) {
    out += ",\"deadline_field\":";
    append_json_string(out, spec.deadline_field);
  }
  out += ",\"problems\":[";
  bool first = true;
  for (const problem_kind kind : all_problem_kinds) {
    const problem_type type = type_of(kind);
    if (!first) out += ',';
    first = false;
    out += "{\"type\":";
    append_json_string(out, spec.uri + "#" + std::string(type.fragment));
    out += ",\"status\":" + std::to_string(type.status) + ",\"title\":";
    append_json_string(out, type.title);
    out += '}';
  }
  out += "]}";
  return out;
}

/// The specification as an HTML page (text/html), with an element whose id is each problem
/// type's fragment, so that a problem's type leads to its explanation.
inline std::string specification_html(const specification& spec) {
  using detail::append_html;
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>Idempotency</title></head><body>\n<h1>Idempotency</h1>\n<p>Repeat a request under "
      "the same key and it takes effect once: a repeat is answered with the first response, "
      "byte for byte, marked <code>Idempotent-Replayed: true</code>.</p>\n<h2>The key</h2>\n<ul>"
      "<li>Send it in the <code>";
  append_html(out, spec.key_field);
  out += "</code> field, once; ";
  out += spec.key_required ? "a request without one is refused."
                           : "a request without one runs without this guarantee.";
  out += "</li><li>Format: ";
  append_html(out, detail::accepted_words(spec.accepted));
  out += ".</li><li>1 to " + std::to_string(spec.max_key_length) +
         " bytes of visible ASCII. Use a UUID or another random value: one key per operation, "
         "never reused for another request.</li><li>A repeat is the same request when ";
  append_html(out, spec.fingerprint);
  out += " match.</li>";
  if (!spec.deadline_field.empty()) {
    out += "<li>A deadline may be sent in <code>";
    append_html(out, spec.deadline_field);
    out +=
        "</code>: the milliseconds the caller still waits; work that cannot start in time is "
        "refused.</li>";
  }
  out += "</ul>\n<h2>Expiration</h2>\n<p>A completed request's response is kept for " +
         detail::duration_words(spec.retention) +
         "; a repeat after that runs as a new request. A request being processed holds its key "
         "for up to " +
         detail::duration_words(spec.lease) +
         " without progress; a repeat meanwhile is answered 409 with a Retry-After.</p>\n"
         "<h2>Problems</h2>\n<p>Refusals are <code>application/problem+json</code> (RFC 9457), "
         "typed by this page's address and one of these anchors.</p>\n<dl>\n";
  for (const problem_kind kind : all_problem_kinds) {
    const problem_type type = type_of(kind);
    out += "<dt id=\"";
    append_html(out, type.fragment);
    out += "\">" + std::to_string(type.status) + " ";
    append_html(out, type.title);
    out += "</dt><dd><code>";
    append_html(out, spec.uri);
    out += '#';
    append_html(out, type.fragment);
    out += "</code></dd>\n";
  }
  out += "</dl>\n</body></html>\n";
  return out;
}

}  // namespace idem::http

#endif  // IDEM_HTTP_SPECIFICATION_HPP
