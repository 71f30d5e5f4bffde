// A store's list_records cursor (idem/store/inspect.hpp) as text: the bytes of the last record's
// position, in hex, so that a cursor passes through a command line or JSON unharmed; for the
// stores whose position is the record's (scope, key), that pair, its scope's length first (8
// bytes, big-endian), as locked_store orders its records. Standard library only.
#ifndef IDEM_STORE_DETAIL_CURSOR_HPP
#define IDEM_STORE_DETAIL_CURSOR_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

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

/// The cursor after the record (scope, key).
inline std::string record_cursor(std::string_view scope, std::string_view key) {
  std::string position;
  position.reserve(8 + scope.size() + key.size());
  const std::uint64_t length = scope.size();
  for (int shift = 56; shift >= 0; shift -= 8)
    position.push_back(static_cast<char>((length >> shift) & 0xff));
  position.append(scope);
  position.append(key);
  return cursor_of(position);
}

/// The (scope, key) a record_cursor names; std::invalid_argument for any other text.
inline std::pair<std::string, std::string> record_at_cursor(std::string_view cursor,
                                                            const char* who) {
  const std::string position = position_of(cursor, who);
  std::uint64_t length = 0;
  bool valid = position.size() >= 8;
  for (std::size_t i = 0; valid && i < 8; ++i)
    length = length << 8 | static_cast<unsigned char>(position[i]);
  valid = valid && length <= position.size() - 8;
  if (!valid) {
    throw std::invalid_argument(std::string(who) + ": the cursor is not one this store made");
  }
  return {position.substr(8, static_cast<std::size_t>(length)),
          position.substr(8 + static_cast<std::size_t>(length))};
}

}  // namespace idem::detail

#endif  // IDEM_STORE_DETAIL_CURSOR_HPP
