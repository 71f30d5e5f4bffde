// Eight bytes, little-endian: how lengths are framed into hash inputs, and words read from them.
#ifndef IDEM_CORE_DETAIL_LE64_HPP
#define IDEM_CORE_DETAIL_LE64_HPP

#include <bit>
#include <cstdint>
#include <cstring>

namespace idem::detail {

/// `value` with its bytes in little-endian order: itself on a little-endian host.
constexpr std::uint64_t little_endian(std::uint64_t value) noexcept {
  if constexpr (std::endian::native != std::endian::little) {
    std::uint64_t swapped = 0;
    for (int i = 0; i < 8; ++i)
      swapped = (swapped << 8) | ((value >> (8 * i)) & 0xff);
    value = swapped;
  }
  return value;
}

/// Writes `value` to out[0..8) least significant byte first, on any host.
inline void write_le64(char* out, std::uint64_t value) noexcept {
  value = little_endian(value);
  std::memcpy(out, &value, sizeof value);
}

/// The eight bytes at `in`, least significant first, on any host.
inline std::uint64_t read_le64(const void* in) noexcept {
  std::uint64_t value;
  std::memcpy(&value, in, sizeof value);
  return little_endian(value);
}

}  // namespace idem::detail

#endif  // IDEM_CORE_DETAIL_LE64_HPP
