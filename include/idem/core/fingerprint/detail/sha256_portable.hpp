// SHA-256's compression function in portable C++ (FIPS 180-4, section 6.2.2), the path every
// platform can take and the reference the x86 SHA-extensions path is tested against.
//
// Message words are read big-endian with shifts, byte by byte, so the result is the same on any
// byte order and any alignment; compilers turn the shifts into one load and a byte swap.
#ifndef IDEM_CORE_FINGERPRINT_DETAIL_SHA256_PORTABLE_HPP
#define IDEM_CORE_FINGERPRINT_DETAIL_SHA256_PORTABLE_HPP

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace idem::detail {

/// The eight 32-bit working words H0..H7 carried from block to block.
using sha256_state_words = std::array<std::uint32_t, 8>;

/// H(0), FIPS 180-4 section 5.3.3: the first 32 bits of the fractional parts of the square
/// roots of the first eight primes.
inline constexpr sha256_state_words sha256_initial_state = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

/// K, FIPS 180-4 section 4.2.2: the first 32 bits of the fractional parts of the cube roots of
/// the first sixty-four primes. Aligned to 16 bytes so the SIMD path loads four at a time
/// straight into an arithmetic instruction's memory operand.
alignas(16) inline constexpr std::array<std::uint32_t, 64> sha256_round_constants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline constexpr std::size_t sha256_block_size = 64;

constexpr std::uint32_t load_big_endian_32(const unsigned char* bytes) noexcept {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

/// The store side writes a whole word with memcpy rather than byte by byte: compilers merge
/// byte-wise loads well, but byte-wise stores of several words at once they tend to turn into
/// long shuffle sequences, which cost more than the rest of hashing a short message.
inline void store_big_endian_32(std::uint32_t word, unsigned char* bytes) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    // Compilers recognise this as one byte-swap instruction.
    word = (word >> 24) | ((word >> 8) & 0x0000ff00u) | ((word << 8) & 0x00ff0000u) | (word << 24);
    std::memcpy(bytes, &word, sizeof word);
  } else if constexpr (std::endian::native == std::endian::big) {
    std::memcpy(bytes, &word, sizeof word);
  } else {
    for (std::size_t i = 0; i < 4; ++i)
      bytes[i] = static_cast<unsigned char>(word >> (24 - 8 * i));
  }
}

inline void store_big_endian_64(std::uint64_t word, unsigned char* bytes) noexcept {
  store_big_endian_32(static_cast<std::uint32_t>(word >> 32), bytes);
  store_big_endian_32(static_cast<std::uint32_t>(word), bytes + 4);
}

/// Runs `block_count` consecutive 64-byte blocks at `blocks` through the compression function,
/// updating `state` in place. `blocks` needs no particular alignment.
constexpr void sha256_compress_portable(sha256_state_words& state, const unsigned char* blocks,
                                        std::size_t block_count) noexcept {
  for (; block_count != 0; --block_count, blocks += sha256_block_size) {
    // The message schedule W0..W63 (section 6.2.2 step 1).
    std::array<std::uint32_t, 64> w;  // every word is written before it is read
    for (std::size_t t = 0; t < 16; ++t)
      w[t] = load_big_endian_32(blocks + 4 * t);
    for (std::size_t t = 16; t < 64; ++t) {
      const std::uint32_t s0 =
          std::rotr(w[t - 15], 7) ^ std::rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const std::uint32_t s1 = std::rotr(w[t - 2], 17) ^ std::rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }

    std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (std::size_t t = 0; t < 64; ++t) {
      const std::uint32_t big_sigma1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
      const std::uint32_t choose = (e & f) ^ (~e & g);
      const std::uint32_t t1 = h + big_sigma1 + choose + sha256_round_constants[t] + w[t];
      const std::uint32_t big_sigma0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
      const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
      const std::uint32_t t2 = big_sigma0 + majority;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
}

}  // namespace idem::detail

#endif  // IDEM_CORE_FINGERPRINT_DETAIL_SHA256_PORTABLE_HPP
