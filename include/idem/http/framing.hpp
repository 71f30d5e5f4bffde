// Strict HTTP/1.1 request framing, whatever the server: what a request's head must be before its
// body is read or a handler runs (RFC 9112). Ambiguous framing is how requests are smuggled: a
// proxy and the server behind it that frame the same bytes differently (Transfer-Encoding beside
// Content-Length, two Content-Lengths, a folded line, a bare CR) let one client's bytes become a
// request of their own, charged under whatever credentials they carry. Such a request is refused,
// never guessed at. Standard library only: the server bindings (httplib.hpp, beast.hpp) and the
// demo's servers use it.
//
//   // the head as it arrived, up to and with its empty line (an event loop that reads bytes):
//   if (auto refusal = idem::http::check_request_head(head, options)) return refuse(*refusal);
//   // the fields a server library parsed (one that keeps no raw head, cpp-httplib):
//   if (auto refusal = idem::http::check_request_fields(fields, options)) return refuse(*refusal);
//
// A refusal is a status and a reason: 400 ambiguous or malformed framing, 411 a chunked body
// where chunked_bodies is off, 413 a Content-Length past max_body_bytes, 417 an expectation other
// than 100-continue, 431 a head or a field count past its limit, 501 a transfer coding other than
// chunked, 505 an HTTP major version other than 1. write_framing_refusal writes it as an RFC 9457
// problem (type about:blank) with Connection: close: after a refusal the connection's remaining
// bytes cannot be framed, so it must be closed.
#ifndef IDEM_HTTP_FRAMING_HPP
#define IDEM_HTTP_FRAMING_HPP

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/core/request.hpp>
#include <idem/http/exchange.hpp>
#include <idem/http/idempotency_key.hpp>
#include <idem/http/problem.hpp>

namespace idem::http {

/// The limits a request's head and body are held to. The defaults are the payments demo's.
struct framing_options {
  /// The longest head: the request line and every field line, with their CRLFs and the empty
  /// line (431 past it).
  std::size_t max_head_bytes = std::size_t{8} * 1024;
  /// The most field lines (431 past it): a head of two thousand one-letter fields fits in a
  /// generous byte limit and costs a parser far more than one long field.
  std::size_t max_fields = 100;
  /// The largest body, checked against Content-Length before the body is read (413 past it);
  /// a chunked body is the reading loop's to count.
  std::uint64_t max_body_bytes = std::uint64_t{64} * 1024;
  /// Whether a chunked body is read (true) or refused with 411 Length Required (false): for a
  /// server whose chunked reader cannot be trusted with a limit or with bad framing (cpp-httplib).
  bool chunked_bodies = true;

  /// The framing rules without the size limits: for a binding that sees a request after the
  /// server read it, whose loop (not the binding) holds the sizes.
  static framing_options framing_only() {
    framing_options options;
    options.max_head_bytes = std::numeric_limits<std::size_t>::max();
    options.max_fields = std::numeric_limits<std::size_t>::max();
    options.max_body_bytes = std::numeric_limits<std::uint64_t>::max();
    return options;
  }
};

/// Why a request is refused before anything reads its body: its status and a reason in words
/// (static text).
struct framing_refusal {
  int status = 400;
  std::string_view reason;
};

namespace detail {

/// RFC 9110 5.6.2: a token, one or more tchar (idempotency_key.hpp's).
constexpr bool is_token(std::string_view text) noexcept {
  if (text.empty()) return false;
  for (const char c : text)
    if (!sf::is_tchar(c)) return false;
  return true;
}

/// RFC 9110 5.5: a field value is visible ASCII, obs-text, spaces and tabs. No CR, LF, NUL or
/// other control character: a CR or LF inside a value is a second field line to whoever
/// reads the value again, and the most common way to smuggle one.
constexpr bool is_field_value(std::string_view text) noexcept {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && byte != '\t') || byte == 0x7f) return false;
  }
  return true;
}

constexpr std::string_view trim_whitespace(std::string_view text) noexcept {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

/// RFC 9112 6.3: Content-Length is one decimal number. A list ("5, 5"), a sign, spaces inside
/// or a number past 2^64 - 1 are refused rather than reconciled.
constexpr std::optional<std::uint64_t> parse_content_length(std::string_view text) noexcept {
  text = trim_whitespace(text);
  if (text.empty() || text.size() > 19) return std::nullopt;  // 19 digits always fit
  std::uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

constexpr std::optional<framing_refusal> refuse(int status, std::string_view reason) noexcept {
  return framing_refusal{status, reason};
}

}  // namespace detail

/// Checks a request's fields as a server parsed them: `fields` is a range of (name, value)
/// pairs whose members convert to std::string_view, every field line once (a multimap, a vector
/// of pairs). The framing rules of RFC 9112: names are tokens; values have no control
/// characters; at most one Host; Transfer-Encoding never with Content-Length; one Content-Length,
/// one decimal number, within max_body_bytes; the only transfer coding chunked, once; an Expect
/// only of 100-continue. std::nullopt when the request may be read on.
template <class Fields>
std::optional<framing_refusal> check_request_fields(const Fields& fields,
                                                    const framing_options& options = {}) {
  using detail::refuse;
  std::size_t count = 0, hosts = 0, lengths = 0, encodings = 0, expectations = 0;
  std::string_view length, expectation;
  std::size_t chunked = 0;
  bool other_coding = false, empty_coding = false;
  for (const auto& field : fields) {
    const std::string_view name(field.first);
    const std::string_view value(field.second);
    if (++count > options.max_fields) {
      return refuse(431, "more header fields than the server reads");
    }
    if (!detail::is_token(name)) {
      return refuse(400,
                    "a field name that is not a token (a folded line, or space before the colon)");
    }
    if (!detail::is_field_value(value)) {
      return refuse(400, "a control character (CR, LF, NUL) in a field value");
    }
    if (header_name_equals(name, "Host")) {
      ++hosts;
    } else if (header_name_equals(name, "Content-Length")) {
      ++lengths;
      length = value;
    } else if (header_name_equals(name, "Expect")) {
      ++expectations;
      expectation = value;
    } else if (header_name_equals(name, "Transfer-Encoding")) {
      ++encodings;
      // The codings of every Transfer-Encoding field, in order, are one list (RFC 9110 5.3).
      std::string_view rest = value;
      bool any = false;
      for (;;) {
        const std::size_t comma = rest.find(',');
        const std::string_view coding = detail::trim_whitespace(rest.substr(0, comma));
        if (!coding.empty()) {
          any = true;
          if (header_name_equals(coding, "chunked")) {
            ++chunked;
          } else {
            other_coding = true;
          }
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
      if (!any) empty_coding = true;
    }
  }
  if (hosts > 1) return refuse(400, "more than one Host field");
  if (encodings > 0 && lengths > 0) {
    // RFC 9112 6.1: a server MAY reject it, and should then close: which of the two a proxy in
    // front believed is exactly what a smuggler counts on.
    return refuse(400,
                  "Transfer-Encoding and Content-Length together: the body's end is ambiguous");
  }
  if (lengths > 1) return refuse(400, "more than one Content-Length field");
  if (lengths == 1) {
    const std::optional<std::uint64_t> bytes = detail::parse_content_length(length);
    if (!bytes) return refuse(400, "a Content-Length that is not one decimal number");
    if (*bytes > options.max_body_bytes) {
      return refuse(413, "the request body is larger than the server reads");
    }
  }
  if (empty_coding) return refuse(400, "an empty Transfer-Encoding field");
  // RFC 9112 6.1: a coding the server does not know is a 501; chunked must come last and once.
  if (other_coding) return refuse(501, "a transfer coding other than chunked");
  if (chunked > 1) return refuse(400, "chunked applied more than once");
  if (chunked == 1 && !options.chunked_bodies) {
    return refuse(411, "a chunked body: this server reads a body with a Content-Length only");
  }
  if (expectations > 1 ||
      (expectations == 1 &&
       !header_name_equals(detail::trim_whitespace(expectation), "100-continue"))) {
    return refuse(417, "an expectation other than 100-continue");
  }
  return std::nullopt;
}

/// Checks a request's head as it arrived, byte for byte: `head` runs from the request line to
/// the empty line that ends the fields, both CRLFs included (empty lines before the request
/// line, which RFC 9112 2.2 lets a server skip, already skipped). Beside check_request_fields:
/// every line ends in CRLF, with no CR or LF alone anywhere; the request line is a method, a
/// target of visible ASCII and HTTP/1.x; no field line is folded (RFC 9112 5.2: obs-fold is
/// refused, never joined); no space or tab before a field's colon (5.1); max_head_bytes.
inline std::optional<framing_refusal> check_request_head(std::string_view head,
                                                         const framing_options& options = {}) {
  using detail::refuse;
  if (head.size() > options.max_head_bytes) {
    return refuse(431, "the request's head is larger than the server reads");
  }
  if (!head.ends_with("\r\n\r\n")) return refuse(400, "the head does not end with an empty line");
  // One CR for each LF, always together: a bare CR or LF is a line end to some parsers and not to
  // others.
  for (std::size_t i = 0; i < head.size(); ++i) {
    if (head[i] == '\r' && (i + 1 == head.size() || head[i + 1] != '\n')) {
      return refuse(400, "a CR not followed by LF");
    }
    if (head[i] == '\n' && (i == 0 || head[i - 1] != '\r')) {
      return refuse(400, "an LF not preceded by CR");
    }
  }
  std::size_t line_end = head.find("\r\n");
  const std::string_view request_line = head.substr(0, line_end);
  {
    const std::size_t first_space = request_line.find(' ');
    const std::size_t last_space = request_line.rfind(' ');
    if (first_space == std::string_view::npos || first_space == last_space) {
      return refuse(400, "a request line that is not method, target and version");
    }
    const std::string_view method = request_line.substr(0, first_space);
    const std::string_view target =
        request_line.substr(first_space + 1, last_space - first_space - 1);
    const std::string_view version = request_line.substr(last_space + 1);
    if (!detail::is_token(method)) return refuse(400, "a method that is not a token");
    if (target.empty()) return refuse(400, "an empty request target");
    for (const char c : target) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte <= 0x20 || byte >= 0x7f) {
        return refuse(400, "a request target with a space, a control character or non-ASCII");
      }
    }
    const bool versioned = version.size() == 8 && version.starts_with("HTTP/") &&
                           version[5] >= '0' && version[5] <= '9' && version[6] == '.' &&
                           version[7] >= '0' && version[7] <= '9';
    if (!versioned) return refuse(400, "a version that is not HTTP/1.x");
    if (version[5] != '1') return refuse(505, "an HTTP version other than 1.x");
  }
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  for (std::size_t start = line_end + 2;;) {
    line_end = head.find("\r\n", start);
    const std::string_view line = head.substr(start, line_end - start);
    if (line.empty()) break;  // the empty line that ends the head
    start = line_end + 2;
    if (line.front() == ' ' || line.front() == '\t') {
      return refuse(400, "a folded field line (obs-fold)");
    }
    if (fields.size() == options.max_fields) {
      return refuse(431, "more header fields than the server reads");
    }
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return refuse(400, "a field line without a colon");
    fields.emplace_back(line.substr(0, colon), detail::trim_whitespace(line.substr(colon + 1)));
  }
  return check_request_fields(fields, options);
}

/// The reason phrase of a status a framing refusal has.
constexpr std::string_view framing_status_title(int status) noexcept {
  switch (status) {
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Bad Request";
  }
}

/// A refusal as an RFC 9457 problem: type about:blank (the status says it all), the status's
/// title, and the reason as its detail.
inline std::string framing_problem_json(const framing_refusal& refusal) {
  std::string out = "{\"type\":\"about:blank\",\"title\":";
  detail::append_json_string(out, framing_status_title(refusal.status));
  out += ",\"status\":" + std::to_string(refusal.status) + ",\"detail\":";
  detail::append_json_string(out, refusal.reason);
  out += '}';
  return out;
}

/// Writes a refusal: its status, Connection: close (the rest of the connection's bytes cannot be
/// framed: close it once this is written), and the problem.
template <reply_writer Writer>
void write_framing_refusal(const framing_refusal& refusal, Writer& out) {
  out.set_status(refusal.status);
  out.add_header("Connection", "close");
  out.add_header("Content-Language", "en");
  out.set_body(framing_problem_json(refusal), problem_media_type);
}

}  // namespace idem::http

#endif  // IDEM_HTTP_FRAMING_HPP
