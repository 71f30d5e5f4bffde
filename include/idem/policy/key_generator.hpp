// Key generators: where a logical operation's idempotency key comes from.
//
// retrying calls its generator once per operation, before the first attempt, and hands the same
// key to every attempt; so a retry can never be sent under a new key. UUIDs are the usual choice
// (RFC 9562): version 4 is 122 random bits; version 7 puts the Unix time in milliseconds first, so
// keys sort by creation time and index well in B-tree stores.
#pragma once

#include <bit>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <idem/key.hpp>
#include <idem/policy/clock.hpp>
#include <idem/policy/random.hpp>

namespace idem {

/// What a `key_generator` policy must provide: a fresh key from the operation's random source
/// and the clock.
template <class G, class R, class C>
concept KeyGenerator = RandomSource<R> && Clock<C> &&
    requires(const G& generator, R& rng, C& clock) {
  { generator.generate(rng, clock) } -> std::same_as<key_buffer>;
};

namespace detail {

/// Eight lowercase hex digits of `value`, most significant first, written as one 64-bit word:
/// each nibble is spread into its own byte, then turned into '0'-'9' or 'a'-'f' all at once.
inline std::uint64_t hex_digits(std::uint32_t value) noexcept {
  std::uint64_t v = value;
  v = (v | (v << 16)) & 0x0000ffff0000ffffULL;
  v = (v | (v << 8)) & 0x00ff00ff00ff00ffULL;
  v = (v | (v << 4)) & 0x0f0f0f0f0f0f0f0fULL;
  // The highest nibble is now in the highest byte; on a little-endian machine memory starts at
  // the lowest, so reverse the bytes (compilers turn this into one bswap).
  if constexpr (std::endian::native == std::endian::little) {
    v = ((v & 0x00000000ffffffffULL) << 32) | (v >> 32);
    v = ((v & 0x0000ffff0000ffffULL) << 16) | ((v >> 16) & 0x0000ffff0000ffffULL);
    v = ((v & 0x00ff00ff00ff00ffULL) << 8) | ((v >> 8) & 0x00ff00ff00ff00ffULL);
  }
  // A byte holding 10..15 gets 'a' - '0' - 10 = 39 more than one holding 0..9.
  const std::uint64_t letters = ((v + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
  return v + 0x3030303030303030ULL + letters * 39;
}

/// Writes 16 bytes as the 36-character 8-4-4-4-12 lowercase hex form of RFC 9562.
inline key_buffer format_uuid(std::uint64_t high, std::uint64_t low) noexcept {
  char digits[32];
  const std::uint32_t parts[4] = {
      static_cast<std::uint32_t>(high >> 32), static_cast<std::uint32_t>(high),
      static_cast<std::uint32_t>(low >> 32), static_cast<std::uint32_t>(low)};
  for (std::size_t i = 0; i < 4; ++i) {
    const std::uint64_t word = hex_digits(parts[i]);
    std::memcpy(digits + 8 * i, &word, 8);
  }
  key_buffer key;
  char* out = key.data();
  std::memcpy(out, digits, 8);
  out[8] = '-';
  std::memcpy(out + 9, digits + 8, 4);
  out[13] = '-';
  std::memcpy(out + 14, digits + 12, 4);
  out[18] = '-';
  std::memcpy(out + 19, digits + 16, 4);
  out[23] = '-';
  std::memcpy(out + 24, digits + 20, 12);
  key.set_length(36);
  return key;
}

// The variant field (RFC 9562 section 4.1): the two top bits of octet 8 are 1 0.
inline constexpr std::uint64_t variant_mask = 0x3fffffffffffffffULL;
inline constexpr std::uint64_t variant_bits = 0x8000000000000000ULL;

}  // namespace detail

/// UUID version 4: 122 random bits (RFC 9562 section 5.4). The default.
struct uuid_v4 {
  template <RandomSource R, Clock C>
  key_buffer generate(R& rng, C&) const noexcept {
    const std::uint64_t high = (rng() & ~std::uint64_t{0xf000}) | 0x4000;  // version 4
    const std::uint64_t low = (rng() & detail::variant_mask) | detail::variant_bits;
    return detail::format_uuid(high, low);
  }
};

/// UUID version 7: 48 bits of Unix time in milliseconds, then 74 random bits (RFC 9562 section
/// 5.7). Keys from one process sort by creation time to the millisecond; within one millisecond
/// they are random, not counted (the RFC's optional monotonic counter is left out: the keys only
/// need to be unique).
struct uuid_v7 {
  template <RandomSource R, Clock C>
  key_buffer generate(R& rng, C& clock) const {
    const auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock.wall_now().time_since_epoch())
            .count();
    const std::uint64_t unix_ms = static_cast<std::uint64_t>(millis) & 0xffffffffffffULL;
    const std::uint64_t high = (unix_ms << 16) | 0x7000 | (rng() & 0x0fff);  // version 7
    const std::uint64_t low = (rng() & detail::variant_mask) | detail::variant_bits;
    return detail::format_uuid(high, low);
  }
};

}  // namespace idem
