// UTF-8 decoding and encoding, and the UTF-16 order RFC 8785 sorts member names in.
#ifndef IDEM_CORE_FINGERPRINT_JSON_DETAIL_UTF8_HPP
#define IDEM_CORE_FINGERPRINT_JSON_DETAIL_UTF8_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace idem {

namespace detail {

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

}  // namespace detail

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_JSON_DETAIL_UTF8_HPP
