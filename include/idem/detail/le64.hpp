// Eight bytes, little-endian: how lengths are framed into hash inputs, and words read from them.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace idem::detail {

/// Writes `value` to out[0..8) least significant byte first, on any host; one store on a
/// little-endian one (a byte loop here was a tenth of a replay's fingerprint).
inline void write_le64(char* out, std::uint64_t value) noexcept {
  if constexpr (std::endian::native != std::endian::little) {
    std::uint64_t swapped = 0;
    for (int i = 0; i < 8; ++i)
      swapped = (swapped << 8) | ((value >> (8 * i)) & 0xff);
    value = swapped;
  }
  std::memcpy(out, &value, sizeof value);
}

/// The eight bytes at `in`, least significant first, on any host.
inline std::uint64_t read_le64(const char* in) noexcept {
  std::uint64_t value;
  std::memcpy(&value, in, sizeof value);
  if constexpr (std::endian::native != std::endian::little) {
    std::uint64_t swapped = 0;
    for (int i = 0; i < 8; ++i)
      swapped = (swapped << 8) | ((value >> (8 * i)) & 0xff);
    value = swapped;
  }
  return value;
}

}  // namespace idem::detail
