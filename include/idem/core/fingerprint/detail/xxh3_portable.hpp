// XXH3-128 (seed 0, default secret) in portable C++: the constants, the short- and medium-input
// paths, and the scalar long-input kernel that every platform can run and that the SIMD kernels
// of xxh3_x86.hpp are tested against. Section names below are those of the XXH3 part of the
// xxHash specification (doc/xxhash_spec.md in the xxHash repository).
//
// Input and secret words are read little-endian through memcpy, so the result is the same on any
// byte order and any alignment. Only seed 0 is supported, so every seed term of the
// specification is dropped rather than carried as a zero.
#ifndef IDEM_CORE_FINGERPRINT_DETAIL_XXH3_PORTABLE_HPP
#define IDEM_CORE_FINGERPRINT_DETAIL_XXH3_PORTABLE_HPP

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace idem::detail::xxh3 {

/// "XXH3 Algorithm Overview": the XXH32/XXH64 primes and the two XXH3 mixing multipliers.
inline constexpr std::uint64_t prime32_1 = 0x9E3779B1U;
inline constexpr std::uint64_t prime32_2 = 0x85EBCA77U;
inline constexpr std::uint64_t prime32_3 = 0xC2B2AE3DU;
inline constexpr std::uint64_t prime64_1 = 0x9E3779B185EBCA87U;
inline constexpr std::uint64_t prime64_2 = 0xC2B2AE3D27D4EB4FU;
inline constexpr std::uint64_t prime64_3 = 0x165667B19E3779F9U;
inline constexpr std::uint64_t prime64_4 = 0x85EBCA77C2B2AE63U;
inline constexpr std::uint64_t prime64_5 = 0x27D4EB2F165667C5U;
inline constexpr std::uint64_t prime_mx1 = 0x165667919E3779F9U;
inline constexpr std::uint64_t prime_mx2 = 0x9FB21C651E98DF25U;

/// "Seed and Secret": the 192-byte default secret. Aligned to 64 bytes so a SIMD kernel's
/// secret loads never split a cache line more than the input's do.
alignas(64) inline constexpr std::array<std::uint8_t, 192> default_secret = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};
inline constexpr std::size_t secret_size = default_secret.size();

/// "XXH3 Algorithm Description (for large inputs)": a stripe is eight 64-bit lanes; each stripe
/// of a block uses the secret 8 bytes further on, so a 192-byte secret gives 16 stripes a block.
inline constexpr std::size_t stripe_size = 64;
inline constexpr std::size_t lanes = 8;
inline constexpr std::size_t secret_consume_rate = 8;
inline constexpr std::size_t stripes_per_block = (secret_size - stripe_size) / secret_consume_rate;
inline constexpr std::size_t block_size = stripe_size * stripes_per_block;
/// Step 2-2: the scramble uses the last 64 bytes of the secret.
inline constexpr std::size_t scramble_secret_offset = secret_size - stripe_size;
/// Step 3: the last stripe is accumulated with the secret 7 bytes short of the scramble's.
inline constexpr std::size_t last_stripe_secret_offset = secret_size - stripe_size - 7;
/// Step 4: the two final merges, low and high half.
inline constexpr std::size_t merge_low_secret_offset = 11;
inline constexpr std::size_t merge_high_secret_offset = secret_size - stripe_size - 11;
/// "for medium inputs", 129-240 bytes: chunks past the first 128 bytes start 3 bytes into the
/// secret; the final chunk pair uses the secret at 136 - 17 - 16 (136 is the minimum secret size).
inline constexpr std::size_t midsize_start_offset = 3;
inline constexpr std::size_t midsize_last_offset = 136 - 17 - 16;
/// Inputs up to this length never touch the long-input kernels.
inline constexpr std::size_t midsize_max = 240;

/// Step 1 of the large-input algorithm: the accumulators' starting values.
inline constexpr std::array<std::uint64_t, lanes> initial_accumulators = {
    prime32_3, prime64_1, prime64_2, prime64_3, prime64_4, prime32_2, prime64_5, prime32_1};

/// Two 64-bit halves of a 128-bit value, low first, as XXH128_hash_t lays them out.
struct u128 {
  std::uint64_t low;
  std::uint64_t high;
};

constexpr std::uint32_t byteswap32(std::uint32_t x) noexcept {
  return (x << 24) | ((x << 8) & 0x00ff0000U) | ((x >> 8) & 0x0000ff00U) | (x >> 24);
}

constexpr std::uint64_t byteswap64(std::uint64_t x) noexcept {
  return (std::uint64_t{byteswap32(static_cast<std::uint32_t>(x))} << 32) |
         byteswap32(static_cast<std::uint32_t>(x >> 32));
}

inline std::uint64_t read64(const std::uint8_t* bytes) noexcept {
  std::uint64_t word;
  std::memcpy(&word, bytes, sizeof word);
  if constexpr (std::endian::native == std::endian::big) word = byteswap64(word);
  return word;
}

inline std::uint32_t read32(const std::uint8_t* bytes) noexcept {
  std::uint32_t word;
  std::memcpy(&word, bytes, sizeof word);
  if constexpr (std::endian::native == std::endian::big) word = byteswap32(word);
  return word;
}

/// A secret word at compile time, where memcpy is not allowed; only for constants below.
constexpr std::uint64_t secret64(std::size_t offset) noexcept {
  std::uint64_t word = 0;
  for (std::size_t i = 0; i < 8; ++i)
    word |= std::uint64_t{default_secret[offset + i]} << (8 * i);
  return word;
}

constexpr std::uint32_t secret32(std::size_t offset) noexcept {
  return static_cast<std::uint32_t>(secret64(offset));
}

constexpr u128 multiply_64_to_128(std::uint64_t a, std::uint64_t b) noexcept {
#if defined(__SIZEOF_INT128__)
  __extension__ using uint128 = unsigned __int128;
  const uint128 product = static_cast<uint128>(a) * b;
  return {static_cast<std::uint64_t>(product), static_cast<std::uint64_t>(product >> 64)};
#else
  // Schoolbook on 32-bit halves; the cross terms cannot overflow once split as below.
  const std::uint64_t lo_lo = (a & 0xffffffffU) * (b & 0xffffffffU);
  const std::uint64_t hi_lo = (a >> 32) * (b & 0xffffffffU);
  const std::uint64_t lo_hi = (a & 0xffffffffU) * (b >> 32);
  const std::uint64_t hi_hi = (a >> 32) * (b >> 32);
  const std::uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffU) + lo_hi;
  return {(cross << 32) | (lo_lo & 0xffffffffU), (hi_lo >> 32) + (cross >> 32) + hi_hi};
#endif
}

/// The 128-bit product folded to 64 bits, the mixing primitive of mixStep and finalMerge.
constexpr std::uint64_t multiply_fold(std::uint64_t a, std::uint64_t b) noexcept {
#if defined(__SIZEOF_INT128__)
  // Folded straight from the 128-bit product: through u128, GCC 12 spills it to the stack.
  __extension__ using uint128 = unsigned __int128;
  const uint128 product = static_cast<uint128>(a) * b;
  return static_cast<std::uint64_t>(product) ^ static_cast<std::uint64_t>(product >> 64);
#else
  const u128 product = multiply_64_to_128(a, b);
  return product.low ^ product.high;
#endif
}

/// "Final Mixing Step": avalanche().
constexpr std::uint64_t avalanche(std::uint64_t x) noexcept {
  x ^= x >> 37;
  x *= prime_mx1;
  return x ^ (x >> 32);
}

/// "Final Mixing Step": avalanche_XXH64().
constexpr std::uint64_t avalanche_xxh64(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= prime64_2;
  x ^= x >> 29;
  x *= prime64_3;
  return x ^ (x >> 32);
}

// ---------------------------------------------------------------------------------------------
// "for small inputs": 0 to 16 bytes.

inline u128 hash_1to3(const std::uint8_t* input, std::size_t size) noexcept {
  constexpr std::uint64_t low_key = secret32(0) ^ secret32(4);
  constexpr std::uint64_t high_key = secret32(8) ^ secret32(12);
  const std::uint32_t combined =
      (std::uint32_t{input[0]} << 16) | (std::uint32_t{input[size >> 1]} << 24) |
      std::uint32_t{input[size - 1]} | (static_cast<std::uint32_t>(size) << 8);
  const std::uint32_t high_combined = std::rotl(byteswap32(combined), 13);
  return {avalanche_xxh64(combined ^ low_key), avalanche_xxh64(high_combined ^ high_key)};
}

inline u128 hash_4to8(const std::uint8_t* input, std::size_t size) noexcept {
  constexpr std::uint64_t key = secret64(16) ^ secret64(24);
  const std::uint64_t combined =
      std::uint64_t{read32(input)} | (std::uint64_t{read32(input + size - 4)} << 32);
  u128 product = multiply_64_to_128(combined ^ key, prime64_1 + (std::uint64_t{size} << 2));
  product.high += product.low << 1;
  product.low ^= product.high >> 3;
  product.low ^= product.low >> 35;
  product.low *= prime_mx2;
  product.low ^= product.low >> 28;
  return {product.low, avalanche(product.high)};
}

inline u128 hash_9to16(const std::uint8_t* input, std::size_t size) noexcept {
  constexpr std::uint64_t low_key = secret64(32) ^ secret64(40);
  constexpr std::uint64_t high_key = secret64(48) ^ secret64(56);
  const std::uint64_t first = read64(input);
  const std::uint64_t last = read64(input + size - 8);
  u128 product = multiply_64_to_128(first ^ last ^ low_key, prime64_1);
  product.low += std::uint64_t{size - 1} << 54;
  const std::uint64_t keyed_last = last ^ high_key;
  // The spec's higherHalf(val2) << 32 + lowerHalf(val2) * PRIME32_2, with one multiply fewer.
  product.high += keyed_last + (keyed_last & 0xffffffffU) * (prime32_2 - 1);
  product.low ^= byteswap64(product.high);
  // {low, high} * PRIME64_2 as a 128-by-64-bit multiply.
  u128 result = multiply_64_to_128(product.low, prime64_2);
  result.high += product.high * prime64_2;
  return {avalanche(result.low), avalanche(result.high)};
}

inline u128 hash_0to16(const std::uint8_t* input, std::size_t size) noexcept {
  if (size > 8) return hash_9to16(input, size);
  if (size >= 4) return hash_4to8(input, size);
  if (size > 0) return hash_1to3(input, size);
  constexpr u128 empty = {avalanche_xxh64(secret64(64) ^ secret64(72)),
                          avalanche_xxh64(secret64(80) ^ secret64(88))};
  return empty;
}

// ---------------------------------------------------------------------------------------------
// "for medium inputs": 17 to 240 bytes.

inline std::uint64_t mix_16(const std::uint8_t* input, const std::uint8_t* secret) noexcept {
  return multiply_fold(read64(input) ^ read64(secret), read64(input + 8) ^ read64(secret + 8));
}

/// mixTwoChunks: each half of the accumulator takes one chunk's mix and the other chunk's sum,
/// so neither chunk can cancel itself out.
inline void mix_32(u128& acc, const std::uint8_t* first, const std::uint8_t* second,
                   const std::uint8_t* secret) noexcept {
  acc.low += mix_16(first, secret);
  acc.low ^= read64(second) + read64(second + 8);
  acc.high += mix_16(second, secret + 16);
  acc.high ^= read64(first) + read64(first + 8);
}

inline u128 finish_midsize(u128 acc, std::size_t size) noexcept {
  const std::uint64_t low = acc.low + acc.high;
  const std::uint64_t high =
      acc.low * prime64_1 + acc.high * prime64_4 + std::uint64_t{size} * prime64_2;
  return {avalanche(low), std::uint64_t{0} - avalanche(high)};
}

inline u128 hash_17to128(const std::uint8_t* input, std::size_t size) noexcept {
  const std::uint8_t* secret = default_secret.data();
  u128 acc = {std::uint64_t{size} * prime64_1, 0};
  // Chunk pairs from the outside in, outermost first: the order is part of the result.
  if (size > 32) {
    if (size > 64) {
      if (size > 96) mix_32(acc, input + 48, input + size - 64, secret + 96);
      mix_32(acc, input + 32, input + size - 48, secret + 64);
    }
    mix_32(acc, input + 16, input + size - 32, secret + 32);
  }
  mix_32(acc, input, input + size - 16, secret);
  return finish_midsize(acc, size);
}

inline u128 hash_129to240(const std::uint8_t* input, std::size_t size) noexcept {
  const std::uint8_t* secret = default_secret.data();
  u128 acc = {std::uint64_t{size} * prime64_1, 0};
  for (std::size_t i = 0; i < 4; ++i) {
    mix_32(acc, input + 32 * i, input + 32 * i + 16, secret + 32 * i);
  }
  acc = {avalanche(acc.low), avalanche(acc.high)};
  const std::size_t rounds = size / 32;
  for (std::size_t i = 4; i < rounds; ++i) {
    mix_32(acc, input + 32 * i, input + 32 * i + 16, secret + midsize_start_offset + 32 * (i - 4));
  }
  // The last 32 bytes again, halves swapped, so a tail shorter than a chunk is still mixed.
  mix_32(acc, input + size - 16, input + size - 32, secret + midsize_last_offset);
  return finish_midsize(acc, size);
}

// ---------------------------------------------------------------------------------------------
// "for large inputs": more than 240 bytes, in stripes of 64 bytes and blocks of 16 stripes.

/// Accumulates `stripes` whole stripes from `input`, the first being stripe number
/// `stripe_in_block` of its block, scrambling at every block end; then, if `last_stripe` is not
/// null, accumulates those 64 bytes with the last-stripe secret (step 3). Every kernel (scalar
/// here, SIMD in xxh3_x86.hpp) has this signature, so one-shot and streaming hashing share it.
using consume_function = void (*)(std::uint64_t* acc, const std::uint8_t* input,
                                  std::size_t stripes, std::size_t stripe_in_block,
                                  const std::uint8_t* last_stripe) noexcept;

inline void accumulate_stripe_scalar(std::uint64_t* acc, const std::uint8_t* input,
                                     const std::uint8_t* secret) noexcept {
  for (std::size_t i = 0; i < lanes; ++i) {
    const std::uint64_t word = read64(input + 8 * i);
    const std::uint64_t keyed = word ^ read64(secret + 8 * i);
    acc[i ^ 1] += word;
    acc[i] += (keyed & 0xffffffffU) * (keyed >> 32);
  }
}

inline void scramble_scalar(std::uint64_t* acc) noexcept {
  const std::uint8_t* secret = default_secret.data() + scramble_secret_offset;
  for (std::size_t i = 0; i < lanes; ++i) {
    std::uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= read64(secret + 8 * i);
    acc[i] = a * prime32_1;
  }
}

inline void consume_scalar(std::uint64_t* acc, const std::uint8_t* input, std::size_t stripes,
                           std::size_t stripe_in_block, const std::uint8_t* last_stripe) noexcept {
  while (stripes > 0) {
    const std::size_t room = stripes_per_block - stripe_in_block;
    const std::size_t count = stripes < room ? stripes : room;
    for (std::size_t i = 0; i < count; ++i) {
      accumulate_stripe_scalar(acc, input,
                               default_secret.data() + (stripe_in_block + i) * secret_consume_rate);
      input += stripe_size;
    }
    stripes -= count;
    stripe_in_block += count;
    if (stripe_in_block == stripes_per_block) {
      scramble_scalar(acc);
      stripe_in_block = 0;
    }
  }
  if (last_stripe != nullptr) {
    accumulate_stripe_scalar(acc, last_stripe, default_secret.data() + last_stripe_secret_offset);
  }
}

/// Accumulates the stripes of a first block that stays short of a scramble, stripe i read at
/// `stripes[i]`, wherever it lies, then `last_stripe`: a caller whose input is in two parts
/// (hash_joined) hands a kernel every stripe in one call, and the accumulators stay in
/// registers throughout. `count` must be below stripes_per_block.
using consume_listed_function = void (*)(std::uint64_t* acc, const std::uint8_t* const* stripes,
                                         std::size_t count,
                                         const std::uint8_t* last_stripe) noexcept;

inline void consume_listed_scalar(std::uint64_t* acc, const std::uint8_t* const* stripes,
                                  std::size_t count, const std::uint8_t* last_stripe) noexcept {
  for (std::size_t i = 0; i < count; ++i)
    accumulate_stripe_scalar(acc, stripes[i], default_secret.data() + i * secret_consume_rate);
  accumulate_stripe_scalar(acc, last_stripe, default_secret.data() + last_stripe_secret_offset);
}

/// finalMerge: four 128-bit products of accumulator pairs, folded into one word.
inline std::uint64_t merge_accumulators(const std::uint64_t* acc, const std::uint8_t* secret,
                                        std::uint64_t start) noexcept {
  std::uint64_t result = start;
  for (std::size_t i = 0; i < lanes; i += 2) {
    result +=
        multiply_fold(acc[i] ^ read64(secret + 8 * i), acc[i + 1] ^ read64(secret + 8 * i + 8));
  }
  return avalanche(result);
}

inline u128 finish_long(const std::uint64_t* acc, std::uint64_t total_size) noexcept {
  const std::uint8_t* secret = default_secret.data();
  return {merge_accumulators(acc, secret + merge_low_secret_offset, total_size * prime64_1),
          merge_accumulators(acc, secret + merge_high_secret_offset, ~(total_size * prime64_2))};
}

/// The whole long-input algorithm with one kernel: every stripe that has input after it is an
/// ordinary stripe, then the last 64 bytes (which may overlap them) are the last stripe.
inline u128 hash_long(consume_function consume, const std::uint8_t* input,
                      std::size_t size) noexcept {
  alignas(64) std::array<std::uint64_t, lanes> acc = initial_accumulators;
  consume(acc.data(), input, (size - 1) / stripe_size, 0, input + size - stripe_size);
  return finish_long(acc.data(), size);
}

}  // namespace idem::detail::xxh3

#endif  // IDEM_CORE_FINGERPRINT_DETAIL_XXH3_PORTABLE_HPP
