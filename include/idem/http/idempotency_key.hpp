// The Idempotency-Key header field's value, read and written as the IETF draft defines it
// (draft-ietf-httpapi-idempotency-key-header, section 2.1: an Item Structured Field, RFC 8941,
// whose value is a String) and as the clients that predate the draft send it (Stripe's: the bare
// key). Standard library only.
//
//   idem::http::parsed_key key = idem::http::parse_key(R"("8e03978e-40d5")");
//   if (key) use(key.value());                       // 8e03978e-40d5, without the quotes
//   else reply(400, key.message());
//
//   request.headers.push_back({"Idempotency-Key", idem::http::format_key(generated)});
//
// parse_key reads one field value:
//   * key_form::any (the default): a value that starts with a double quote is an sf-string
//     (RFC 8941 section 3.3.3: printable ASCII between quotes, with \" and \\ as the only
//     escapes), unwrapped and unescaped, and may carry parameters (section 3.1.2), which are
//     checked and ignored; any other value is the bare key, as it is. So "k-1" and k-1 are one
//     key. Spaces and tabs around the value are not part of it (RFC 9110 section 5.5).
//   * key_form::sf_string: the draft's form only; a bare key is refused (not_a_string).
// A value that is not a well-formed Item (an unterminated string, a bad escape, a character
// outside printable ASCII, anything after the Item but parameters, such as a second key a
// proxy joined to the first with a comma) is refused: the key is never guessed.
// An empty key ("" or nothing) is refused too. Whether the key is acceptable beyond that (its
// length, visible ASCII only) is idempotent's rule (is_valid_key), applied to value().
//
// format_key writes a key for a request: bare by default, as today's servers read it, or as the
// draft's sf-string (key_form::sf_string). A key outside printable ASCII cannot be written as
// an sf-string: std::invalid_argument.
#ifndef IDEM_HTTP_IDEMPOTENCY_KEY_HPP
#define IDEM_HTTP_IDEMPOTENCY_KEY_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace idem::http {

/// The forms of an Idempotency-Key field value a server accepts, or a client writes.
enum class key_form : std::uint8_t {
  any,        ///< reading: the draft's sf-string or a bare key; writing: the bare key
  sf_string,  ///< the draft's form: a quoted sf-string (RFC 8941 section 3.3.3)
};

/// Why a field value is not a key.
enum class key_error : std::uint8_t {
  none,
  missing,         ///< no Idempotency-Key field at all (parse_key_fields)
  empty,           ///< an empty value, or an empty sf-string
  malformed,       ///< not a well-formed Item (RFC 8941 section 4.2)
  not_a_string,    ///< a well-formed value that is not an sf-string, where only one is accepted
  several_fields,  ///< more than one Idempotency-Key field in the request (draft section 2.1)
};

/// A field value read by parse_key: the key, or why there is none.
class parsed_key {
 public:
  parsed_key() = default;

  explicit operator bool() const noexcept { return error_ == key_error::none; }
  key_error error() const noexcept { return error_; }

  /// The key (empty unless this holds one). A view into the parsed field value, or into this
  /// object when the sf-string had escapes: valid while both live.
  std::string_view value() const noexcept { return escaped_ ? std::string_view(unescaped_) : raw_; }

  /// What is wrong, for a problem body; empty when this holds a key.
  std::string_view message() const noexcept {
    switch (error_) {
      case key_error::none:
        return {};
      case key_error::missing:
        return "the request has no Idempotency-Key field";
      case key_error::empty:
        return "the Idempotency-Key field is empty";
      case key_error::malformed:
        return "the Idempotency-Key field is not a well-formed Structured Field Item (RFC 8941): "
               "send the key as a quoted string, \"like-this\"";
      case key_error::not_a_string:
        return "the Idempotency-Key field must be a quoted string (RFC 8941 sf-string), "
               "\"like-this\"";
      case key_error::several_fields:
        return "the request has more than one Idempotency-Key field";
    }
    return {};
  }

  static parsed_key failed(key_error error) noexcept {
    parsed_key result;
    result.error_ = error;
    return result;
  }
  static parsed_key of(std::string_view raw) noexcept {
    parsed_key result;
    result.raw_ = raw;
    return result;
  }
  static parsed_key of_unescaped(std::string text) {
    parsed_key result;
    result.unescaped_ = std::move(text);
    result.escaped_ = true;
    return result;
  }

 private:
  key_error error_ = key_error::none;
  bool escaped_ = false;
  std::string_view raw_;
  std::string unescaped_;
};

namespace detail::sf {

constexpr bool is_sp(char c) noexcept {
  return c == ' ';
}
constexpr bool is_ows(char c) noexcept {
  return c == ' ' || c == '\t';
}
constexpr bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}
constexpr bool is_lcalpha(char c) noexcept {
  return c >= 'a' && c <= 'z';
}
constexpr bool is_alpha(char c) noexcept {
  return is_lcalpha(c) || (c >= 'A' && c <= 'Z');
}
constexpr bool is_printable(char c) noexcept {
  return c >= 0x20 && c <= 0x7e;
}

// RFC 9110 section 5.6.2: tchar, and token's own extras (":" and "/") from RFC 8941 3.3.4.
constexpr bool is_tchar(char c) noexcept {
  if (is_alpha(c) || is_digit(c)) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

// A cursor over the value; every reader advances it past what it read, or answers false.
struct cursor {
  std::string_view text;
  std::size_t at = 0;

  bool done() const noexcept { return at >= text.size(); }
  char peek() const noexcept { return text[at]; }
};

// A character an sf-string holds as it is: printable, and neither the closing quote nor the
// start of an escape.
inline constexpr auto plain_string_chars = [] {
  std::array<bool, 256> table{};
  for (int c = 0x20; c <= 0x7e; ++c)
    table[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return table;
}();
constexpr bool is_plain_string_char(char c) noexcept {
  return plain_string_chars[static_cast<unsigned char>(c)];
}

// RFC 8941 4.2.5: a String, after its opening quote was seen; `out` gets the unescaped text and
// `escaped` says whether it differs from the raw text between the quotes.
inline bool read_string(cursor& in, std::string_view& raw, std::string& out, bool& escaped) {
  ++in.at;  // the opening quote
  const std::size_t start = in.at;
  escaped = false;
  while (!in.done()) {
    const char c = in.peek();
    ++in.at;
    if (c == '\\') {
      if (in.done()) return false;
      const char next = in.peek();
      if (next != '"' && next != '\\') return false;
      if (!escaped) out.assign(in.text.substr(start, in.at - 1 - start));
      escaped = true;
      out.push_back(next);
      ++in.at;
    } else if (c == '"') {
      raw = in.text.substr(start, in.at - 1 - start);
      return true;
    } else if (!is_printable(c)) {
      return false;
    } else if (escaped) {
      out.push_back(c);
    }
  }
  return false;  // no closing quote
}

// RFC 8941 4.2.4: an Integer or Decimal (checked, not kept).
inline bool read_number(cursor& in) {
  if (!in.done() && in.peek() == '-') ++in.at;
  std::size_t integer_digits = 0;
  while (!in.done() && is_digit(in.peek())) {
    ++in.at;
    if (++integer_digits > 15) return false;
  }
  if (integer_digits == 0) return false;
  if (in.done() || in.peek() != '.') return true;
  if (integer_digits > 12) return false;
  ++in.at;
  std::size_t fraction_digits = 0;
  while (!in.done() && is_digit(in.peek())) {
    ++in.at;
    if (++fraction_digits > 3) return false;
  }
  return fraction_digits > 0;
}

// RFC 8941 4.2.7: a Byte Sequence, base64 between colons (checked, not kept).
inline bool read_bytes(cursor& in) {
  ++in.at;  // the opening colon
  while (!in.done()) {
    const char c = in.peek();
    ++in.at;
    if (c == ':') return true;
    if (!(is_alpha(c) || is_digit(c) || c == '+' || c == '/' || c == '=')) return false;
  }
  return false;
}

// RFC 8941 4.2.6: a Token (checked, not kept).
inline bool read_token(cursor& in) {
  if (in.done() || !(is_alpha(in.peek()) || in.peek() == '*')) return false;
  ++in.at;
  while (!in.done() && (is_tchar(in.peek()) || in.peek() == ':' || in.peek() == '/'))
    ++in.at;
  return true;
}

// RFC 8941 4.2.3.1: any Bare Item, checked, not kept (a parameter's value).
inline bool skip_bare_item(cursor& in) {
  if (in.done()) return false;
  const char c = in.peek();
  if (c == '"') {
    std::string_view raw;
    std::string ignored;
    bool escaped = false;
    return read_string(in, raw, ignored, escaped);
  }
  if (c == '-' || is_digit(c)) return read_number(in);
  if (c == ':') return read_bytes(in);
  if (c == '?') {
    ++in.at;
    if (in.done() || (in.peek() != '0' && in.peek() != '1')) return false;
    ++in.at;
    return true;
  }
  return read_token(in);
}

// RFC 8941 4.2.3.2: Parameters, checked and ignored; true when well-formed.
inline bool skip_parameters(cursor& in) {
  while (!in.done() && in.peek() == ';') {
    ++in.at;
    while (!in.done() && is_sp(in.peek()))
      ++in.at;
    // 4.2.3.3: a key is lcalpha or "*", then lcalpha, DIGIT, "_", "-", "." or "*".
    if (in.done() || !(is_lcalpha(in.peek()) || in.peek() == '*')) return false;
    ++in.at;
    while (!in.done()) {
      const char c = in.peek();
      if (!(is_lcalpha(c) || is_digit(c) || c == '_' || c == '-' || c == '.' || c == '*')) break;
      ++in.at;
    }
    if (!in.done() && in.peek() == '=') {
      ++in.at;
      if (!skip_bare_item(in)) return false;
    }
  }
  return true;
}

}  // namespace detail::sf

/// Reads one Idempotency-Key field value (see the top of this header).
inline parsed_key parse_key(std::string_view field, key_form form = key_form::any) {
  using detail::sf::is_ows;
  std::size_t first = 0;
  std::size_t end = field.size();
  while (first < end && is_ows(field[first]))
    ++first;
  while (end > first && is_ows(field[end - 1]))
    --end;
  const std::string_view value = field.substr(first, end - first);
  if (value.empty()) return parsed_key::failed(key_error::empty);
  if (value.front() != '"') {
    if (form == key_form::sf_string) return parsed_key::failed(key_error::not_a_string);
    return parsed_key::of(value);
  }
  // The common case first: a quoted key with no escape and nothing after it, read in one scan
  // of a table (a UUID key: 15 ns, against 33 ns through the general reader below, which
  // reads the same keys; the key_field fuzz target's properties hold through both).
  std::size_t plain = 1;
  while (plain < value.size() && detail::sf::is_plain_string_char(value[plain]))
    ++plain;
  if (plain + 1 == value.size() && value[plain] == '"') {
    if (plain == 1) return parsed_key::failed(key_error::empty);
    return parsed_key::of(value.substr(1, plain - 1));
  }
  detail::sf::cursor in{value};
  std::string_view raw;
  std::string unescaped;
  bool escaped = false;
  if (!detail::sf::read_string(in, raw, unescaped, escaped)) {
    return parsed_key::failed(key_error::malformed);
  }
  if (!detail::sf::skip_parameters(in) || !in.done()) {
    return parsed_key::failed(key_error::malformed);
  }
  if (escaped) {
    if (unescaped.empty()) return parsed_key::failed(key_error::empty);
    return parsed_key::of_unescaped(std::move(unescaped));
  }
  if (raw.empty()) return parsed_key::failed(key_error::empty);
  return parsed_key::of(raw);
}

/// Reads the Idempotency-Key fields of a request, given every value it carried under that name
/// (in any case): none is key_error::missing, two or more are refused (several_fields: the
/// draft's section 2.1 forbids them), one is parse_key's.
template <class Values>
parsed_key parse_key_fields(const Values& values, key_form form = key_form::any) {
  std::size_t count = 0;
  std::string_view only;
  for (const auto& value : values) {
    if (++count > 1) return parsed_key::failed(key_error::several_fields);
    only = value;
  }
  if (count == 0) return parsed_key::failed(key_error::missing);
  return parse_key(only, form);
}

/// A key written for a request's Idempotency-Key field: as it is (key_form::any), or as the
/// draft's sf-string. Throws std::invalid_argument for a key that cannot be an sf-string (a
/// character outside printable ASCII), or, bare, for a key that a server would read otherwise
/// (empty, outside visible ASCII, or starting with a double quote).
inline std::string format_key(std::string_view key, key_form form = key_form::any) {
  if (key.empty()) throw std::invalid_argument("an idempotency key cannot be empty");
  if (form == key_form::any) {
    for (const char c : key) {
      if (c <= 0x20 || c > 0x7e) {
        throw std::invalid_argument(
            "a bare idempotency key must be visible ASCII; write it as an sf-string instead");
      }
    }
    if (key.front() == '"') {
      throw std::invalid_argument(
          "a bare idempotency key cannot start with a double quote: a server reads it as an "
          "sf-string; write it as one instead");
    }
    return std::string(key);
  }
  std::string out;
  out.reserve(key.size() + 2);
  out.push_back('"');
  for (const char c : key) {
    if (!detail::sf::is_printable(c)) {
      throw std::invalid_argument(
          "an idempotency key written as an sf-string must be printable ASCII");
    }
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace idem::http

#endif  // IDEM_HTTP_IDEMPOTENCY_KEY_HPP
