// The canonicalizer's JSON parser: strict RFC 8259 and I-JSON, one pass into a json_document.
#ifndef IDEM_CORE_FINGERPRINT_JSON_DETAIL_PARSER_HPP
#define IDEM_CORE_FINGERPRINT_JSON_DETAIL_PARSER_HPP

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/core/fingerprint/json/detail/utf8.hpp>
#include <idem/core/fingerprint/json/document.hpp>

namespace idem {

namespace detail {

// ---------------------------------------------------------------------------------------------
// The parser: strict RFC 8259, one pass, recursive descent bounded by max_json_depth.
//
// The parser, exclusion_set and canonical_writer, and canonicalize_json itself, are templates
// whose parameter means nothing (idem/core/detail/lazy.hpp): a translation unit that includes this
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

}  // namespace detail

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_JSON_DETAIL_PARSER_HPP
