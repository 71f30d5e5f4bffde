// A store's list_records cursor (idem/store/inspect.hpp) as text: the bytes of the last record's
// position, in hex, so that a cursor passes through a command line or JSON unharmed. Standard
// library only.
#ifndef IDEM_STORE_DETAIL_CURSOR_HPP
#define IDEM_STORE_DETAIL_CURSOR_HPP

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace idem::detail {

inline std::string cursor_of(std::string_view position) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(position.size() * 2);
  for (const char c : position) {
    const auto byte = static_cast<unsigned char>(c);
    out.push_back(digits[byte >> 4]);
    out.push_back(digits[byte & 0xf]);
  }
  return out;
}

/// The position a cursor names; std::invalid_argument for text no cursor_of made. `who` names
/// the store in the message.
inline std::string position_of(std::string_view cursor, const char* who) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  bool valid = cursor.size() % 2 == 0;
  for (std::size_t i = 0; valid && i < cursor.size(); i += 2) {
    const int high = nibble(cursor[i]);
    const int low = nibble(cursor[i + 1]);
    valid = high >= 0 && low >= 0;
    if (valid) out.push_back(static_cast<char>(high << 4 | low));
  }
  if (!valid) {
    throw std::invalid_argument(std::string(who) +
                                ": the cursor is not one this store made (lowercase hex)");
  }
  return out;
}

}  // namespace idem::detail

#endif  // IDEM_STORE_DETAIL_CURSOR_HPP
