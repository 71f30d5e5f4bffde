// JSON canonicalization (RFC 8785, the JSON Canonicalization Scheme) for fingerprinting bodies.
//
// A retried request must fingerprint like the original, and a different request must not. Two
// JSON texts that mean the same — members in another order, other whitespace, `1.0` for `1`,
// `"\u0041"` for `"A"` — canonicalize to the same bytes, so a digest of the canonical form tells
// a retry from a changed body. Members that legitimately change between deliveries (a webhook's
// timestamp or signature) can be left out by JSON Pointer.
//
// Canonical form (RFC 8785 §3.2): no whitespace; object members sorted by name compared as
// UTF-16 code units; strings with only the escapes JSON requires; numbers printed as
// ECMAScript's Number::toString prints them.
//
// Input is strict, because a lenient parser would give two fingerprints (or one) to texts other
// parsers disagree on: RFC 8259 JSON without extensions, limited to I-JSON (RFC 7493) where the
// canonical form needs it — duplicate member names, lone surrogates (escaped or encoded), numbers
// that overflow a double, and invalid UTF-8 are errors. One deliberate leniency: Unicode
// noncharacters (U+FDD0..U+FDEF, U+xxFFFE, U+xxFFFF), which I-JSON forbids, are accepted and kept:
// they are scalar values with one UTF-8 and one UTF-16 form, so their canonical form is defined,
// and refusing them would reject request bodies for no gain. Numbers that underflow to zero are
// zero, as ECMAScript reads them.
#ifndef IDEM_SERVER_FINGERPRINT_CANONICALIZE_JSON_HPP
#define IDEM_SERVER_FINGERPRINT_CANONICALIZE_JSON_HPP

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <idem/detail/lazy.hpp>

namespace idem {

/// The deepest nesting of arrays and objects accepted. Deeper input is refused with json_error
/// rather than allowed to exhaust the stack: the parser and the writer recurse once per level.
inline constexpr std::size_t max_json_depth = 256;

/// Thrown for input that is not valid JSON (RFC 8259) or not canonicalizable I-JSON (RFC 7493).
/// what() says what is wrong and at which byte; offset() is that byte's index in the input: the
/// offending byte or the start of the offending token (the opening quote of an unterminated
/// string, the second of two equal member names), or the input's size where it ends too early.
class json_error : public std::invalid_argument {
 public:
  json_error(std::string what, std::size_t offset)
      : std::invalid_argument(message(std::move(what), offset)), offset_(offset) {}

  std::size_t offset() const noexcept { return offset_; }

 private:
  static std::string message(std::string what, std::size_t offset) {
    return "idem: invalid JSON: " + std::move(what) + " (at byte " + std::to_string(offset) + ')';
  }

  std::size_t offset_;
};

namespace detail {

// ---------------------------------------------------------------------------------------------
// The parsed document: a flat pre-order array of nodes, one allocation for all of them, plus one
// arena that holds every decoded string. Offsets are 32-bit to keep a node at 16 bytes; the
// input is limited to 4 GiB accordingly (far beyond any request body).

enum class json_kind : std::uint8_t {
  null,
  false_literal,
  true_literal,
  number,
  string,
  array,
  object
};

struct json_node {
  json_kind kind;
  // One past the last node of this subtree, so a reader steps from one child to the next
  // without a pointer per child.
  std::uint32_t end;
  // string: the decoded UTF-8 text in the arena (offset, length).
  // number: index into json_document::numbers (first), unused (second).
  // object: the members' name nodes, sorted, in json_document::member_order (offset, count).
  //         The value of a member is the node right after its name.
  std::uint32_t first;
  std::uint32_t second;
};

template <class Lazy = void>
struct json_document {
  std::vector<lazy_t<Lazy, json_node>> nodes;
  std::vector<lazy_t<Lazy, double>> numbers;
  std::vector<lazy_t<Lazy, std::uint32_t>> member_order;
  std::string arena;

  std::string_view text(const json_node& node) const noexcept {
    return std::string_view(arena).substr(node.first, node.second);
  }
};

// The text of the three literals, as the parser reads them and the writer writes them.
constexpr std::string_view literal_text(json_kind kind) noexcept {
  switch (kind) {
    case json_kind::false_literal:
      return "false";
    case json_kind::true_literal:
      return "true";
    default:
      return "null";
  }
}

// ---------------------------------------------------------------------------------------------
// UTF-8 and UTF-16.

// The length of the well-formed UTF-8 sequence at `at` (Unicode §3.9, table 3-7: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when there is none.
inline std::size_t utf8_sequence_length(std::string_view text, std::size_t at) noexcept {
  const auto byte = [&](std::size_t i) -> unsigned {
    return at + i < text.size() ? static_cast<unsigned char>(text[at + i]) : 0u;
  };
  const auto in = [](unsigned value, unsigned low, unsigned high) {
    return value >= low && value <= high;
  };
  const unsigned lead = byte(0);
  if (lead < 0x80) return 1;
  if (in(lead, 0xc2, 0xdf)) return in(byte(1), 0x80, 0xbf) ? 2 : 0;
  if (in(lead, 0xe0, 0xef)) {
    // E0 needs A0..BF (else overlong); ED needs 80..9F (else a surrogate, U+D800..U+DFFF).
    const unsigned low = lead == 0xe0 ? 0xa0 : 0x80;
    const unsigned high = lead == 0xed ? 0x9f : 0xbf;
    return in(byte(1), low, high) && in(byte(2), 0x80, 0xbf) ? 3 : 0;
  }
  if (in(lead, 0xf0, 0xf4)) {
    // F0 needs 90..BF (else overlong); F4 needs 80..8F (else above U+10FFFF).
    const unsigned low = lead == 0xf0 ? 0x90 : 0x80;
    const unsigned high = lead == 0xf4 ? 0x8f : 0xbf;
    return in(byte(1), low, high) && in(byte(2), 0x80, 0xbf) && in(byte(3), 0x80, 0xbf) ? 4 : 0;
  }
  return 0;
}

// The code point starting at `at` in text already known to be well-formed UTF-8.
inline char32_t decode_utf8(std::string_view text, std::size_t at) noexcept {
  const auto byte = [&](std::size_t i) -> char32_t {
    return static_cast<unsigned char>(text[at + i]);
  };
  const char32_t lead = byte(0);
  if (lead < 0x80) return lead;
  if (lead < 0xe0) return ((lead & 0x1f) << 6) | (byte(1) & 0x3f);
  if (lead < 0xf0) return ((lead & 0x0f) << 12) | ((byte(1) & 0x3f) << 6) | (byte(2) & 0x3f);
  return ((lead & 0x07) << 18) | ((byte(1) & 0x3f) << 12) | ((byte(2) & 0x3f) << 6) |
         (byte(3) & 0x3f);
}

inline void append_utf8(std::string& out, char32_t code_point) {
  const auto unit = [](char32_t bits) {
    return static_cast<char>(static_cast<unsigned char>(bits));
  };
  if (code_point < 0x80) {
    out.push_back(unit(code_point));
  } else if (code_point < 0x800) {
    out.push_back(unit(0xc0 | (code_point >> 6)));
    out.push_back(unit(0x80 | (code_point & 0x3f)));
  } else if (code_point < 0x10000) {
    out.push_back(unit(0xe0 | (code_point >> 12)));
    out.push_back(unit(0x80 | ((code_point >> 6) & 0x3f)));
    out.push_back(unit(0x80 | (code_point & 0x3f)));
  } else {
    out.push_back(unit(0xf0 | (code_point >> 18)));
    out.push_back(unit(0x80 | ((code_point >> 12) & 0x3f)));
    out.push_back(unit(0x80 | ((code_point >> 6) & 0x3f)));
    out.push_back(unit(0x80 | (code_point & 0x3f)));
  }
}

// RFC 8785 §3.2.3 orders names as arrays of UTF-16 code units, which is what ECMAScript sorts
// by. For well-formed UTF-8, byte order is code point order, and that agrees with UTF-16 order
// except where a character above U+FFFF (a surrogate pair, 0xD800..) meets one in
// U+E000..U+FFFF: UTF-16 puts the pair first. So compare bytes, and only at the first differing
// character compare its first UTF-16 code units. Negative, zero or positive as `a` orders
// before `b`, equals it, or orders after it.
inline int utf16_compare(std::string_view a, std::string_view b) noexcept {
  const std::size_t common = std::min(a.size(), b.size());
  std::size_t start = 0;
  while (start < common && a[start] == b[start])
    ++start;
  if (start == common) {  // one is a prefix of the other
    return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
  }
  // Both texts are equal up to here, so the differing characters start at the same place.
  while (start > 0 && (static_cast<unsigned char>(a[start]) & 0xc0) == 0x80)
    --start;
  const char32_t x = decode_utf8(a, start);
  const char32_t y = decode_utf8(b, start);
  const auto first_unit = [](char32_t c) -> char32_t {
    return c < 0x10000 ? c : 0xd800 + ((c - 0x10000) >> 10);
  };
  // With equal first units (both above U+FFFF, same high surrogate) the low surrogates order as
  // the code points do.
  if (first_unit(x) != first_unit(y)) return first_unit(x) < first_unit(y) ? -1 : 1;
  return x < y ? -1 : 1;
}

// ---------------------------------------------------------------------------------------------
// The parser: strict RFC 8259, one pass, recursive descent bounded by max_json_depth.
//
// The parser, exclusion_set and canonical_writer, and canonicalize_json itself, are templates
// whose parameter means nothing (idem/detail/lazy.hpp): a translation unit that includes this
// header (idem/idem.hpp does) and never canonicalizes then compiles none of it, which is about
// an eighth of what idem.hpp adds to a typical unit (docs/performance.md, "Compile cost").
template <class Lazy = void>
class json_parser {
 public:
  json_parser(std::string_view input, json_document<Lazy>& document) noexcept
      : input_(input), document_(document) {}

  void parse() {
    if (input_.size() >= std::numeric_limits<std::uint32_t>::max()) {
      throw json_error("documents of 4 GiB or more are not supported", 0);
    }
    // Guesses that spare most regrowth: a value takes at least two bytes ("1,") and strings
    // rarely shrink much when decoded.
    document_.nodes.reserve(input_.size() / 8 + 4);
    document_.arena.reserve(input_.size() / 2);
    if (input_.substr(0, 3) == "\xef\xbb\xbf") fail("a byte order mark is not allowed", 0);
    skip_whitespace();
    if (position_ == input_.size()) fail("the input is empty", position_);
    parse_value(0);
    skip_whitespace();
    if (position_ != input_.size()) {
      fail("unexpected " + describe(position_) + " after the JSON value", position_);
    }
  }

 private:
  [[noreturn]] static void fail(std::string what, std::size_t offset) {
    throw json_error(std::move(what), offset);
  }

  unsigned byte_at(std::size_t offset) const noexcept {
    return static_cast<unsigned char>(input_[offset]);
  }
  bool at_end() const noexcept { return position_ == input_.size(); }
  bool next_is(char c) const noexcept { return !at_end() && input_[position_] == c; }
  bool next_is_digit() const noexcept {
    return !at_end() && input_[position_] >= '0' && input_[position_] <= '9';
  }

  // What the byte at `offset` is, for messages, with a hint for the usual non-JSON habits.
  std::string describe(std::size_t offset) const {
    if (offset >= input_.size()) return "end of input";
    const unsigned c = byte_at(offset);
    if (c == '/') return "'/' (JSON has no comments)";
    if (c == '\'') return "\"'\" (JSON strings take double quotes)";
    if (c > 0x20 && c < 0x7f) return {'\'', static_cast<char>(c), '\''};
    return "byte " + hex_byte(c);
  }

  static std::string hex_byte(unsigned c) {
    static constexpr char digits[] = "0123456789ABCDEF";
    return {'0', 'x', digits[(c >> 4) & 0xf], digits[c & 0xf]};
  }

  void skip_whitespace() noexcept {
    while (!at_end()) {
      const char c = input_[position_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++position_;
    }
  }

  std::uint32_t add_node(json_kind kind, std::uint32_t first = 0, std::uint32_t second = 0) {
    const auto index = static_cast<std::uint32_t>(document_.nodes.size());
    document_.nodes.push_back(json_node{kind, index + 1, first, second});
    return index;
  }

  void parse_value(std::size_t depth) {
    if (at_end()) fail("expected a value, found end of input", position_);
    switch (input_[position_]) {
      case '{':
        parse_object(depth);
        return;
      case '[':
        parse_array(depth);
        return;
      case '"': {
        const decoded_string text = parse_string();
        add_node(json_kind::string, text.offset, text.length);
        return;
      }
      case 't':
        parse_literal(json_kind::true_literal);
        return;
      case 'f':
        parse_literal(json_kind::false_literal);
        return;
      case 'n':
        parse_literal(json_kind::null);
        return;
      case 'N':
      case 'I':
        fail("NaN and Infinity are not JSON numbers", position_);
      default:
        if (next_is('-') || next_is_digit()) {
          parse_number();
          return;
        }
        fail("expected a value, found " + describe(position_), position_);
    }
  }

  void parse_literal(json_kind kind) {
    const std::string_view word = literal_text(kind);
    if (input_.substr(position_, word.size()) != word) {
      fail("invalid literal: expected '" + std::string(word) + "'", position_);
    }
    position_ += word.size();
    add_node(kind);
  }

  void enter(std::size_t depth) const {
    if (depth >= max_json_depth) {
      fail("arrays and objects nest deeper than " + std::to_string(max_json_depth) + " levels",
           position_);
    }
  }

  void parse_array(std::size_t depth) {
    enter(depth);
    const std::uint32_t array = add_node(json_kind::array);
    ++position_;  // '['
    skip_whitespace();
    if (next_is(']')) {
      ++position_;
    } else {
      for (;;) {
        skip_whitespace();
        parse_value(depth + 1);
        skip_whitespace();
        if (next_is(']')) {
          ++position_;
          break;
        }
        if (!next_is(',')) {
          fail("expected ',' or ']' after an array element, found " + describe(position_),
               position_);
        }
        const std::size_t comma = position_++;
        skip_whitespace();
        if (next_is(']')) fail("trailing comma before ']'", comma);
      }
    }
    document_.nodes[array].end = static_cast<std::uint32_t>(document_.nodes.size());
  }

  void parse_object(std::size_t depth) {
    enter(depth);
    const std::uint32_t object = add_node(json_kind::object);
    const std::size_t members_begin = open_members_.size();
    ++position_;  // '{'
    skip_whitespace();
    if (next_is('}')) {
      ++position_;
    } else {
      for (;;) {
        skip_whitespace();
        if (!next_is('"')) {
          fail("expected a member name in double quotes, found " + describe(position_), position_);
        }
        const auto name_offset = static_cast<std::uint32_t>(position_);
        const decoded_string name = parse_string();
        open_members_.push_back(
            {add_node(json_kind::string, name.offset, name.length), name_offset});
        skip_whitespace();
        if (!next_is(':')) {
          fail("expected ':' after a member name, found " + describe(position_), position_);
        }
        ++position_;
        skip_whitespace();
        parse_value(depth + 1);
        skip_whitespace();
        if (next_is('}')) {
          ++position_;
          break;
        }
        if (!next_is(',')) {
          fail("expected ',' or '}' after an object member, found " + describe(position_),
               position_);
        }
        const std::size_t comma = position_++;
        skip_whitespace();
        if (next_is('}')) fail("trailing comma before '}'", comma);
      }
    }
    close_object(object, members_begin);
  }

  // Sorts the object's members once, here, so that duplicates are found (and reported) while
  // parsing, whatever is later excluded, and so the writer only walks the order.
  void close_object(std::uint32_t object, std::size_t members_begin) {
    open_member* const members = open_members_.data() + members_begin;
    const std::size_t count = open_members_.size() - members_begin;
    const auto name = [this](const open_member& member) {
      return document_.text(document_.nodes[member.name_node]);
    };
    // Equal names fall back to input order, so the duplicate reported is the later one. (The
    // order is total, so that the sort is not stable changes nothing.)
    std::sort(members, members + count, [&](const open_member& a, const open_member& b) {
      const int order = utf16_compare(name(a), name(b));
      return order != 0 ? order < 0 : a.input_offset < b.input_offset;
    });
    for (std::size_t i = 1; i < count; ++i) {
      if (name(members[i - 1]) == name(members[i])) {
        fail("duplicate member name \"" + std::string(name(members[i]).substr(0, 64)) + "\"",
             members[i].input_offset);
      }
    }
    json_node& node = document_.nodes[object];
    node.first = static_cast<std::uint32_t>(document_.member_order.size());
    node.second = static_cast<std::uint32_t>(count);
    node.end = static_cast<std::uint32_t>(document_.nodes.size());
    for (std::size_t i = 0; i < count; ++i)
      document_.member_order.push_back(members[i].name_node);
    open_members_.resize(members_begin);
  }

  // Where a decoded string is in the arena.
  struct decoded_string {
    std::uint32_t offset;
    std::uint32_t length;
  };

  // Decodes the string whose opening quote is at position_ into the arena.
  decoded_string parse_string() {
    const std::size_t open_quote = position_++;
    std::string& arena = document_.arena;
    const std::size_t begin = arena.size();
    for (;;) {
      // Copy the longest run that needs no decoding in one append.
      std::size_t run_end = position_;
      while (run_end < input_.size()) {
        const unsigned c = byte_at(run_end);
        if (c >= 0x80) {
          const std::size_t length = utf8_sequence_length(input_, run_end);
          if (length == 0) fail("invalid UTF-8 (" + hex_byte(c) + ") in a string", run_end);
          run_end += length;
        } else if (c >= 0x20 && c != '"' && c != '\\') {
          ++run_end;
        } else {
          break;
        }
      }
      arena.append(input_.data() + position_, run_end - position_);
      position_ = run_end;
      if (at_end()) fail("unterminated string", open_quote);
      const unsigned c = byte_at(position_);
      if (c == '"') {
        ++position_;
        break;
      }
      if (c == '\\') {
        if (position_ + 1 == input_.size()) fail("unterminated string", open_quote);
        parse_escape();
      } else {
        fail("unescaped control character " + hex_byte(c) + " in a string", position_);
      }
    }
    return {static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(arena.size() - begin)};
  }

  void parse_escape() {
    const std::size_t backslash = position_;
    const char kind = input_[backslash + 1];
    char decoded = 0;
    switch (kind) {
      case '"':
      case '\\':
      case '/':
        decoded = kind;
        break;
      case 'b':
        decoded = '\b';
        break;
      case 'f':
        decoded = '\f';
        break;
      case 'n':
        decoded = '\n';
        break;
      case 'r':
        decoded = '\r';
        break;
      case 't':
        decoded = '\t';
        break;
      case 'u':
        parse_unicode_escape();
        return;
      default:
        fail(
            "invalid escape sequence; JSON has only \\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\u with "
            "four hex digits",
            backslash);
    }
    document_.arena.push_back(decoded);
    position_ += 2;
  }

  // The four hex digits of a \u escape whose backslash is at `backslash`.
  char32_t hex4(std::size_t backslash) const {
    char32_t value = 0;
    for (std::size_t i = backslash + 2; i < backslash + 6; ++i) {
      const char c = i < input_.size() ? input_[i] : '\0';
      char32_t digit = 0;
      if (c >= '0' && c <= '9') {
        digit = static_cast<char32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<char32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<char32_t>(c - 'A' + 10);
      } else {
        fail("\\u must be followed by four hex digits", backslash);
      }
      value = value * 16 + digit;
    }
    return value;
  }

  // Characters above U+FFFF arrive as a surrogate pair of escapes. A surrogate without its
  // partner encodes no character (I-JSON, RFC 7493 §2.1), so it has no canonical form.
  void parse_unicode_escape() {
    const std::size_t backslash = position_;
    char32_t code_point = hex4(backslash);
    position_ += 6;
    if (code_point >= 0xdc00 && code_point <= 0xdfff) {
      fail("lone surrogate: a low surrogate escape without a high one before it", backslash);
    }
    if (code_point >= 0xd800 && code_point <= 0xdbff) {
      if (input_.substr(position_, 2) != "\\u") {
        fail("lone surrogate: a high surrogate escape must be followed by a low one", backslash);
      }
      const char32_t low = hex4(position_);
      if (low < 0xdc00 || low > 0xdfff) {
        fail("lone surrogate: a high surrogate escape must be followed by a low one", backslash);
      }
      code_point = 0x10000 + ((code_point - 0xd800) << 10) + (low - 0xdc00);
      position_ += 6;
    }
    append_utf8(document_.arena, code_point);
  }

  void skip_digits() noexcept {
    while (next_is_digit())
      ++position_;
  }

  void parse_number() {
    const std::size_t start = position_;
    if (next_is('-')) ++position_;
    if (next_is('I')) fail("NaN and Infinity are not JSON numbers", start);
    if (!next_is_digit()) fail("expected a digit after '-'", position_);
    if (next_is('0')) {
      ++position_;
      if (next_is_digit()) fail("a number must not have a leading zero", start);
    } else {
      skip_digits();
    }
    if (next_is('.')) {
      ++position_;
      if (!next_is_digit()) fail("expected a digit after the decimal point", position_);
      skip_digits();
    }
    if (next_is('e') || next_is('E')) {
      ++position_;
      if (next_is('+') || next_is('-')) ++position_;
      if (!next_is_digit()) fail("expected a digit in the exponent", position_);
      skip_digits();
    }
    const std::string_view text = input_.substr(start, position_ - start);
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error == std::errc::result_out_of_range) {
      // from_chars says "out of range" both for too large and for too small. Too small reads as
      // zero in ECMAScript (and prints as "0", whatever its sign); too large has no finite value.
      if (overflows(text)) {
        fail("number " + std::string(text.substr(0, 40)) + " is too large for a double", start);
      }
      value = 0;
    } else if (error != std::errc{} || end != text.data() + text.size()) {
      fail("invalid number", start);  // unreachable: the grammar above is what from_chars reads
    }
    add_node(json_kind::number, static_cast<std::uint32_t>(document_.numbers.size()));
    document_.numbers.push_back(value);
  }

  // For a number from_chars found out of range: whether it is too large rather than too small.
  // Its decimal magnitude is far above 0 or far below it, so the sign of (position of the first
  // significant digit + exponent) decides, even with the exponent clamped.
  static bool overflows(std::string_view number) noexcept {
    std::size_t i = number.front() == '-' ? 1 : 0;
    long magnitude = 0;
    if (number[i] == '0') {  // 0.000ddd: the magnitude is minus the leading zeros, minus one
      i += 2;
      magnitude = -1;
      while (i < number.size() && number[i] == '0') {
        --magnitude;
        ++i;
      }
    } else {
      while (i < number.size() && number[i] >= '0' && number[i] <= '9') {
        ++magnitude;
        ++i;
      }
      --magnitude;
    }
    const std::size_t e = number.find_first_of("eE");
    long exponent = 0;
    if (e != std::string_view::npos) {
      std::size_t j = e + 1;
      const bool negative = number[j] == '-';
      if (number[j] == '-' || number[j] == '+') ++j;
      for (; j < number.size(); ++j) {
        exponent = std::min(exponent * 10 + (number[j] - '0'), 100'000'000L);
      }
      if (negative) exponent = -exponent;
    }
    return magnitude + exponent > 0;
  }

  struct open_member {
    std::uint32_t name_node;
    std::uint32_t input_offset;  // of the name's opening quote, for the duplicate message
  };

  std::string_view input_;
  json_document<Lazy>& document_;
  std::size_t position_ = 0;
  // The members of every object still open, innermost last; an object sorts its own on close.
  std::vector<open_member> open_members_;
};

// ---------------------------------------------------------------------------------------------
// Serialization.

// ECMAScript's Number::toString(x) (ECMA-262, "Number::toString"): the shortest decimal digits
// that read back as x (nearest to x on a tie), printed in positional notation when the decimal
// point falls within 21 digits left of them or 6 zeros right of the point, in exponent notation
// otherwise. std::to_chars gives the same shortest digits; only the layout is ECMAScript's.
inline void append_number(std::string& out, double value) {
  if (value == 0) {  // both zeros: ECMAScript prints -0 as "0"
    out.push_back('0');
    return;
  }
  char buffer[32];  // "-d.dddddddddddddddde-308" is the longest
  const auto printed =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific).ptr;
  const char* p = buffer;
  if (*p == '-') {
    out.push_back('-');
    ++p;
  }
  char digits[17];  // a double never needs more than 17 significant digits
  int digit_count = 0;
  for (; *p != 'e'; ++p) {
    if (*p != '.') digits[digit_count++] = *p;
  }
  ++p;  // 'e'
  const bool negative_exponent = *p++ == '-';
  int exponent = 0;
  for (; p != printed; ++p)
    exponent = exponent * 10 + (*p - '0');
  if (negative_exponent) exponent = -exponent;

  // The value is 0.d1d2...dk × 10^n, in ECMAScript's terms.
  const int k = digit_count;
  const int n = exponent + 1;
  const std::string_view all(digits, static_cast<std::size_t>(k));
  if (k <= n && n <= 21) {  // an integer: the digits, then zeros
    out.append(all);
    out.append(static_cast<std::size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {  // the point falls inside the digits
    out.append(all.substr(0, static_cast<std::size_t>(n)));
    out.push_back('.');
    out.append(all.substr(static_cast<std::size_t>(n)));
  } else if (-6 < n && n <= 0) {  // a small fraction: up to six zeros after the point
    out.push_back('0');
    out.push_back('.');
    out.append(static_cast<std::size_t>(-n), '0');
    out.append(all);
  } else {  // exponent notation: d[.ddd]e±x
    out.push_back(digits[0]);
    if (k > 1) {
      out.push_back('.');
      out.append(all.substr(1));
    }
    out.push_back('e');
    out.push_back(n - 1 < 0 ? '-' : '+');
    out.append(std::to_string(n - 1 < 0 ? 1 - n : n - 1));
  }
}

// RFC 8785 §3.2.2.2: the two characters JSON needs escaped and the controls below U+0020; the
// five controls with a short form use it, the others \u00xx in lower case; all else as is.
inline void append_string(std::string& out, std::string_view text) {
  out.push_back('"');
  std::size_t run = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(text.substr(run, i - run));
    run = i + 1;
    out.push_back('\\');
    switch (c) {
      case '"':
        out.push_back('"');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\b':
        out.push_back('b');
        break;
      case '\t':
        out.push_back('t');
        break;
      case '\n':
        out.push_back('n');
        break;
      case '\f':
        out.push_back('f');
        break;
      case '\r':
        out.push_back('r');
        break;
      default: {
        static constexpr char hex[] = "0123456789abcdef";
        out.push_back('u');
        out.push_back('0');
        out.push_back('0');
        out.push_back(hex[c >> 4]);
        out.push_back(hex[c & 0xf]);
      }
    }
  }
  out.append(text.substr(run));
  out.push_back('"');
}

// ---------------------------------------------------------------------------------------------
// Exclusion: the excluded JSON Pointers (RFC 6901), split into unescaped reference tokens.

template <class Lazy = void>
class exclusion_set {
 public:
  struct token {
    std::uint32_t offset;  // into text_
    std::uint32_t length;
    bool wildcard;
    std::uint64_t array_index;  // not_an_index unless the token is an RFC 6901 array index
  };
  static constexpr std::uint64_t not_an_index = std::numeric_limits<std::uint64_t>::max();

  // The index of a pointer, in the order given.
  using pointer_index = std::uint32_t;

  explicit exclusion_set(std::span<const std::string> pointers) {
    // By index: a range-for would instantiate span's iterators wherever this header is included.
    for (std::size_t i = 0; i < pointers.size(); ++i)
      add(pointers[i]);
  }

  std::size_t size() const noexcept { return pointers_.size(); }
  std::size_t length(pointer_index pointer) const noexcept {
    return pointers_[pointer].token_count;
  }
  const token& token_at(pointer_index pointer, std::size_t depth) const noexcept {
    return tokens_[pointers_[pointer].first_token + depth];
  }
  bool matches_member(const token& t, std::string_view name) const noexcept {
    return t.wildcard || std::string_view(text_).substr(t.offset, t.length) == name;
  }
  static bool matches_element(const token& t, std::size_t index) noexcept {
    return t.wildcard || t.array_index == index;
  }

 private:
  [[noreturn]] static void reject(const std::string& pointer, const char* why) {
    throw std::invalid_argument("idem::canonicalize_json: excluded pointer \"" + pointer + "\" " +
                                why);
  }

  void add(const std::string& pointer) {
    if (pointer.empty()) {
      reject(pointer, "names the whole document, which cannot be left out");
    }
    if (pointer.front() != '/') {
      reject(pointer, "must start with '/' (RFC 6901; the URI fragment form is not accepted)");
    }
    const auto first = static_cast<std::uint32_t>(tokens_.size());
    std::size_t i = 1;
    for (;;) {
      const std::size_t begin = text_.size();
      bool escaped = false;
      for (; i < pointer.size() && pointer[i] != '/'; ++i) {
        if (pointer[i] != '~') {
          text_.push_back(pointer[i]);
          continue;
        }
        const char next = i + 1 < pointer.size() ? pointer[i + 1] : '\0';
        if (next != '0' && next != '1') reject(pointer, "has a '~' not followed by '0' or '1'");
        text_.push_back(next == '0' ? '~' : '/');
        escaped = true;
        ++i;
      }
      const std::string_view name = std::string_view(text_).substr(begin);
      tokens_.push_back(token{static_cast<std::uint32_t>(begin),
                              static_cast<std::uint32_t>(name.size()), !escaped && name == "*",
                              array_index(name)});
      if (i == pointer.size()) break;
      ++i;  // '/'
    }
    pointers_.push_back(
        tokens_of_pointer{first, static_cast<std::uint32_t>(tokens_.size() - first)});
  }

  // RFC 6901 §4: "0", or digits without a leading zero. ("-", the element after the last, never
  // names an existing one.)
  static std::uint64_t array_index(std::string_view name) noexcept {
    if (name.empty() || name.size() > 18 || (name.size() > 1 && name.front() == '0')) {
      return not_an_index;
    }
    std::uint64_t index = 0;
    for (const char c : name) {
      if (c < '0' || c > '9') return not_an_index;
      index = index * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return index;
  }

  struct tokens_of_pointer {
    std::uint32_t first_token;  // in tokens_
    std::uint32_t token_count;
  };

  std::string text_;
  std::vector<token> tokens_;
  std::vector<tokens_of_pointer> pointers_;
};

// Writes a parsed document canonically, leaving out excluded members. While it descends, it
// keeps the pointers whose tokens so far match the path (a stack of ranges in active_), so a
// member is checked only against pointers that can still reach it, and not at all when none
// is excluded.
template <class Lazy = void>
class canonical_writer {
 public:
  canonical_writer(const json_document<Lazy>& document, const exclusion_set<Lazy>& exclusions,
                   std::string& out)
      : document_(document), exclusions_(exclusions), out_(out) {}

  void write() {
    for (pointer_index p = 0; p < exclusions_.size(); ++p)
      active_.push_back(p);
    write_value(0, 0, 0);
  }

 private:
  // Writes node `index`, `depth` containers below the root; active_[active_begin..] are the
  // pointers whose first `depth` tokens lead here.
  void write_value(std::uint32_t index, std::size_t depth, std::size_t active_begin) {
    const json_node& node = document_.nodes[index];
    switch (node.kind) {
      case json_kind::null:
      case json_kind::false_literal:
      case json_kind::true_literal:
        out_.append(literal_text(node.kind));
        return;
      case json_kind::number:
        append_number(out_, document_.numbers[node.first]);
        return;
      case json_kind::string:
        append_string(out_, document_.text(node));
        return;
      case json_kind::array:
        write_array(index, depth, active_begin);
        return;
      case json_kind::object:
        write_object(node, depth, active_begin);
        return;
    }
  }

  void write_array(std::uint32_t index, std::size_t depth, std::size_t active_begin) {
    const std::size_t active_end = active_.size();
    out_.push_back('[');
    std::size_t position = 0;
    for (std::uint32_t child = index + 1; child < document_.nodes[index].end;
         child = document_.nodes[child].end, ++position) {
      if (position != 0) out_.push_back(',');
      // A pointer that ends on an element removes nothing (only members are left out); one
      // that goes on through it stays active.
      for (std::size_t a = active_begin; a < active_end; ++a) {
        const pointer_index p = active_[a];
        if (exclusions_.length(p) > depth + 1 &&
            exclusion_set<Lazy>::matches_element(exclusions_.token_at(p, depth), position)) {
          active_.push_back(p);
        }
      }
      write_value(child, depth + 1, active_end);
      active_.resize(active_end);
    }
    out_.push_back(']');
  }

  void write_object(const json_node& node, std::size_t depth, std::size_t active_begin) {
    const std::size_t active_end = active_.size();
    out_.push_back('{');
    bool first = true;
    for (std::uint32_t m = node.first; m < node.first + node.second; ++m) {
      const std::uint32_t name_node = document_.member_order[m];
      const std::string_view name = document_.text(document_.nodes[name_node]);
      bool excluded = false;
      for (std::size_t a = active_begin; a < active_end && !excluded; ++a) {
        const pointer_index p = active_[a];
        if (!exclusions_.matches_member(exclusions_.token_at(p, depth), name)) continue;
        if (exclusions_.length(p) == depth + 1) {
          excluded = true;
        } else {
          active_.push_back(p);
        }
      }
      if (!excluded) {
        if (!first) out_.push_back(',');
        first = false;
        append_string(out_, name);
        out_.push_back(':');
        write_value(name_node + 1, depth + 1, active_end);
      }
      active_.resize(active_end);
    }
    out_.push_back('}');
  }

  // Named through exclusion_set<Lazy> so that active_'s type depends on Lazy (see
  // idem/detail/lazy.hpp).
  using pointer_index = typename exclusion_set<Lazy>::pointer_index;

  const json_document<Lazy>& document_;
  const exclusion_set<Lazy>& exclusions_;
  std::string& out_;
  std::vector<pointer_index> active_;
};

}  // namespace detail

/// Appends the RFC 8785 canonical form of `json` to `out`.
///
/// `excluded` are JSON Pointers (RFC 6901, the plain string form: "/meta/timestamp",
/// "/a~1b" for the member "a/b", "/m~0n" for "m~n") of object members to leave out, with their
/// values, wherever they occur:
///  * A pointer's last token names an object member. A member it names that is absent removes
///    nothing; a path that runs into a scalar, or into a container of the other kind, removes
///    nothing either. Names are compared after the document's escapes are decoded.
///  * Tokens before the last step into members by name and into array elements by index
///    ("/items/0/id"). A pointer whose last token lands on an array element removes nothing:
///    dropping an element would shift the ones after it and change what the array says, so
///    elements are never left out (leave out the member that holds the array instead).
///  * The token "*" matches every member of an object and every element of an array
///    ("/items/*/timestamp"). RFC 6901 has no escape for '*', so a member literally named "*"
///    can be excluded only together with its siblings.
/// Exclusion never hides invalid input: the whole document is checked first.
///
/// Throws json_error for invalid input and std::invalid_argument (json_error's base) for an
/// invalid pointer, including "" (the whole document). Either way `out` is left as it was.
template <class Lazy = void>
inline void canonicalize_json(std::string_view json, std::string& out,
                              std::span<const std::string> excluded = {}) {
  const detail::exclusion_set<Lazy> exclusions(excluded);
  detail::json_document<Lazy> document;
  detail::json_parser<Lazy>(json, document).parse();
  out.reserve(out.size() + json.size());
  detail::canonical_writer<Lazy>(document, exclusions, out).write();
}

/// The RFC 8785 canonical form of `json`; see the overload above.
template <class Lazy = void>
inline std::string canonicalize_json(std::string_view json,
                                     std::span<const std::string> excluded = {}) {
  std::string out;
  canonicalize_json<Lazy>(json, out, excluded);
  return out;
}

}  // namespace idem

#endif  // IDEM_SERVER_FINGERPRINT_CANONICALIZE_JSON_HPP
