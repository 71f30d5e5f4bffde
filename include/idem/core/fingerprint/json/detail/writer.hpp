// The canonical form written out (RFC 8785 §3.2): numbers as ECMAScript prints them, strings with
// only the escapes JSON requires, members in UTF-16 order, excluded members left out.
#ifndef IDEM_CORE_FINGERPRINT_JSON_DETAIL_WRITER_HPP
#define IDEM_CORE_FINGERPRINT_JSON_DETAIL_WRITER_HPP

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/core/fingerprint/json/detail/exclusions.hpp>
#include <idem/core/fingerprint/json/detail/utf8.hpp>
#include <idem/core/fingerprint/json/document.hpp>

namespace idem {

namespace detail {

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
  // idem/core/detail/lazy.hpp).
  using pointer_index = typename exclusion_set<Lazy>::pointer_index;

  const json_document<Lazy>& document_;
  const exclusion_set<Lazy>& exclusions_;
  std::string& out_;
  std::vector<pointer_index> active_;
};

}  // namespace detail

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_JSON_DETAIL_WRITER_HPP
