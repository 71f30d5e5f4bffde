// UUID-shaped idempotency keys for the benchmarks, the same in every run: idempotency keys are
// usually UUIDs, and a key's length and spread decide what hashing and comparing it cost.
#pragma once

#include <cstdint>
#include <string>

namespace idem_bench {

constexpr std::uint64_t split_mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

/// Key `index`: 32 hex digits from two SplitMix64 draws, dashed as 8-4-4-4-12 (36 characters).
/// `salt` picks the second draw, so two benchmark files can keep their own key sets.
inline std::string uuid_shaped_key(std::uint64_t index, std::uint64_t salt = 0x5851f42d4c957f2d) {
  static constexpr char digits[] = "0123456789abcdef";
  const std::uint64_t high = split_mix(index);
  const std::uint64_t low = split_mix(index ^ salt);
  std::string text;
  text.reserve(36);
  for (int nibble = 0; nibble < 32; ++nibble) {
    if (nibble == 8 || nibble == 12 || nibble == 16 || nibble == 20) text.push_back('-');
    const std::uint64_t word = nibble < 16 ? high : low;
    text.push_back(digits[(word >> (4 * (15 - nibble % 16))) & 0xf]);
  }
  return text;
}

}  // namespace idem_bench
