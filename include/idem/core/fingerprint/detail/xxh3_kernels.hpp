// XXH3's long-input kernels (the accumulate and scramble loop of "XXH3 Algorithm Description
// (for large inputs)") for SSE2 and AVX2, and the run-time choice between them.
//
// SSE2 is part of x86-64, so it needs no check. AVX2 is compiled through function target
// attributes, so the header needs no compiler flags, and is chosen only when the CPU (and the
// OS's saved register state, which __builtin_cpu_supports also checks) says so. Every kernel
// computes exactly what consume_scalar computes; tests hold each one to it.
//
// There is no AVX-512 kernel: one was written and tested, and on the AMD EPYC (Zen 4, which
// runs 512-bit operations as two 256-bit halves) it was tuned on it was never faster than AVX2:
// 56 vs 57 GB/s at 64 KiB aligned, 43 vs 45 GB/s at the 16-byte alignment malloc gives, where
// every 64-byte load splits a cache line. Parts with full-width 512-bit units might gain, but
// that is unmeasured, and older Intel ones lower the clock for 512-bit multiplies. The kernel
// is in the history (the commit that added this header) for whoever can measure it there.
#ifndef IDEM_CORE_FINGERPRINT_DETAIL_XXH3_KERNELS_HPP
#define IDEM_CORE_FINGERPRINT_DETAIL_XXH3_KERNELS_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <idem/core/fingerprint/detail/xxh3_portable.hpp>

// The kernels are written with the compilers' vector extensions and the builtins behind the few
// intrinsics plain operators cannot express (pmuludq, pshufd; the same names and types in GCC
// and Clang), which compile to the same instructions as the intrinsics. Not the intrinsics
// headers: <immintrin.h>, the only one that declares the AVX2 intrinsics, about doubles the
// compile time of a translation unit that includes idem, and even <emmintrin.h> (SSE2) is
// parsed by every such unit for the sake of one kernel. Compilers without the extensions (MSVC)
// take the scalar kernel.

namespace idem::detail::xxh3 {

/// The long-input kernels, best last. Not every one exists on every platform: see available().
enum class kernel { scalar, sse2, avx2 };

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)

// Step 2-1 per 64-bit lane is acc[i] += lo32(keyed[i]) * hi32(keyed[i]) and acc[i ^ 1] +=
// data[i]. Addition commutes, so each kernel sums a run of stripes' raw words apart and adds
// them, lane-swapped, once at the end of the run: one shuffle a run instead of one a stripe.
// Shuffle immediates: 0x31 moves each word's high half down (the multiplier reads only low
// halves); 0x4e swaps the two words of each 128-bit lane (i ^ 1).

// 128-bit vectors of two 64-bit and four 32-bit lanes, as GCC and Clang spell them. SSE2 is
// part of x86-64, so these need no target attribute.
using sse2_u64x2 = std::uint64_t __attribute__((vector_size(16)));
using sse2_i32x4 = int __attribute__((vector_size(16)));

[[gnu::always_inline]] inline sse2_u64x2 load_sse2(const std::uint8_t* bytes) noexcept {
  sse2_u64x2 words;
  std::memcpy(&words, bytes, sizeof words);
  return words;
}

[[gnu::always_inline]] inline void store_sse2(std::uint8_t* bytes, sse2_u64x2 words) noexcept {
  std::memcpy(bytes, &words, sizeof words);
}

/// pmuludq: each lane's low 32 bits times the other operand's, a full 64-bit product.
[[gnu::always_inline]] inline sse2_u64x2 multiply_low_halves_sse2(sse2_u64x2 a,
                                                                  sse2_u64x2 b) noexcept {
  return (sse2_u64x2)__builtin_ia32_pmuludq128((sse2_i32x4)a, (sse2_i32x4)b);
}

/// pshufd: the four 32-bit lanes rearranged by `order` (two bits a lane).
template <int order>
[[gnu::always_inline]] inline sse2_u64x2 shuffle_sse2(sse2_u64x2 words) noexcept {
  return (sse2_u64x2)__builtin_ia32_pshufd((sse2_i32x4)words, order);
}

inline void accumulate_products_sse2(sse2_u64x2 (&acc)[4], sse2_u64x2 (&sums)[4],
                                     const std::uint8_t* input,
                                     const std::uint8_t* secret) noexcept {
  for (std::size_t i = 0; i < 4; ++i) {
    const sse2_u64x2 data = load_sse2(input + 16 * i);
    const sse2_u64x2 keyed = data ^ load_sse2(secret + 16 * i);
    acc[i] += multiply_low_halves_sse2(keyed, shuffle_sse2<0x31>(keyed));
    sums[i] += data;
  }
}

inline void add_swapped_sums_sse2(sse2_u64x2 (&acc)[4], const sse2_u64x2 (&sums)[4]) noexcept {
  for (int i = 0; i < 4; ++i)
    acc[i] += shuffle_sse2<0x4e>(sums[i]);
}

inline void scramble_sse2(sse2_u64x2 (&acc)[4]) noexcept {
  const auto* secret = default_secret.data() + scramble_secret_offset;
  const sse2_u64x2 prime = {prime32_1, prime32_1};
  for (std::size_t i = 0; i < 4; ++i) {
    const sse2_u64x2 mixed = acc[i] ^ (acc[i] >> 47) ^ load_sse2(secret + 16 * i);
    // A 64-bit multiply by a 32-bit prime from two 32x32 products.
    const sse2_u64x2 low = multiply_low_halves_sse2(mixed, prime);
    const sse2_u64x2 high = multiply_low_halves_sse2(mixed >> 32, prime);
    acc[i] = low + (high << 32);
  }
}

inline void consume_sse2(std::uint64_t* acc_words, const std::uint8_t* input, std::size_t stripes,
                         std::size_t stripe_in_block, const std::uint8_t* last_stripe) noexcept {
  auto* acc_bytes = reinterpret_cast<std::uint8_t*>(acc_words);
  sse2_u64x2 acc[4];
  for (std::size_t i = 0; i < 4; ++i)
    acc[i] = load_sse2(acc_bytes + 16 * i);
  while (stripes > 0) {
    const std::size_t room = stripes_per_block - stripe_in_block;
    const std::size_t count = stripes < room ? stripes : room;
    const std::uint8_t* secret = default_secret.data() + stripe_in_block * secret_consume_rate;
    sse2_u64x2 sums[4] = {};
    for (std::size_t i = 0; i < count; ++i) {
      accumulate_products_sse2(acc, sums, input, secret);
      input += stripe_size;
      secret += secret_consume_rate;
    }
    add_swapped_sums_sse2(acc, sums);
    stripes -= count;
    stripe_in_block += count;
    if (stripe_in_block == stripes_per_block) {
      scramble_sse2(acc);
      stripe_in_block = 0;
    }
  }
  if (last_stripe != nullptr) {
    sse2_u64x2 sums[4] = {};
    accumulate_products_sse2(acc, sums, last_stripe,
                             default_secret.data() + last_stripe_secret_offset);
    add_swapped_sums_sse2(acc, sums);
  }
  for (std::size_t i = 0; i < 4; ++i)
    store_sse2(acc_bytes + 16 * i, acc[i]);
}

inline void consume_listed_sse2(std::uint64_t* acc_words, const std::uint8_t* const* stripes,
                                std::size_t count, const std::uint8_t* last_stripe) noexcept {
  auto* acc_bytes = reinterpret_cast<std::uint8_t*>(acc_words);
  sse2_u64x2 acc[4];
  for (std::size_t i = 0; i < 4; ++i)
    acc[i] = load_sse2(acc_bytes + 16 * i);
  sse2_u64x2 sums[4] = {};
  for (std::size_t i = 0; i < count; ++i) {
    accumulate_products_sse2(acc, sums, stripes[i],
                             default_secret.data() + i * secret_consume_rate);
  }
  add_swapped_sums_sse2(acc, sums);
  sse2_u64x2 last_sums[4] = {};
  accumulate_products_sse2(acc, last_sums, last_stripe,
                           default_secret.data() + last_stripe_secret_offset);
  add_swapped_sums_sse2(acc, last_sums);
  for (std::size_t i = 0; i < 4; ++i)
    store_sse2(acc_bytes + 16 * i, acc[i]);
}

// 256-bit vectors of four 64-bit and eight 32-bit lanes, as GCC and Clang spell them.
using avx2_u64x4 = std::uint64_t __attribute__((vector_size(32)));
using avx2_i32x8 = int __attribute__((vector_size(32)));

[[gnu::target("avx2"), gnu::always_inline]] inline avx2_u64x4 load_avx2(
    const std::uint8_t* bytes) noexcept {
  avx2_u64x4 words;
  std::memcpy(&words, bytes, sizeof words);
  return words;
}

[[gnu::target("avx2"), gnu::always_inline]] inline void store_avx2(std::uint8_t* bytes,
                                                                   avx2_u64x4 words) noexcept {
  std::memcpy(bytes, &words, sizeof words);
}

/// vpmuludq: each lane's low 32 bits times the other operand's, a full 64-bit product.
[[gnu::target("avx2"), gnu::always_inline]] inline avx2_u64x4 multiply_low_halves_avx2(
    avx2_u64x4 a, avx2_u64x4 b) noexcept {
  return (avx2_u64x4)__builtin_ia32_pmuludq256((avx2_i32x8)a, (avx2_i32x8)b);
}

/// vpshufd: the 32-bit lanes of each 128-bit half rearranged by `order` (two bits a lane).
template <int order>
[[gnu::target("avx2"), gnu::always_inline]] inline avx2_u64x4 shuffle_avx2(
    avx2_u64x4 words) noexcept {
  return (avx2_u64x4)__builtin_ia32_pshufd256((avx2_i32x8)words, order);
}

[[gnu::target("avx2"), gnu::always_inline]] inline void accumulate_products_avx2(
    avx2_u64x4 (&acc)[2], avx2_u64x4 (&sums)[2], const std::uint8_t* input,
    const std::uint8_t* secret) noexcept {
  for (std::size_t i = 0; i < 2; ++i) {
    const avx2_u64x4 data = load_avx2(input + 32 * i);
    const avx2_u64x4 keyed = data ^ load_avx2(secret + 32 * i);
    acc[i] += multiply_low_halves_avx2(keyed, shuffle_avx2<0x31>(keyed));
    sums[i] += data;
  }
}

[[gnu::target("avx2"), gnu::always_inline]] inline void add_swapped_sums_avx2(
    avx2_u64x4 (&acc)[2], const avx2_u64x4 (&sums)[2]) noexcept {
  for (int i = 0; i < 2; ++i) {
    acc[i] += shuffle_avx2<0x4e>(sums[i]);
  }
}

[[gnu::target("avx2"), gnu::always_inline]] inline void scramble_avx2(
    avx2_u64x4 (&acc)[2]) noexcept {
  const auto* secret = default_secret.data() + scramble_secret_offset;
  const avx2_u64x4 prime = {prime32_1, prime32_1, prime32_1, prime32_1};
  for (std::size_t i = 0; i < 2; ++i) {
    const avx2_u64x4 mixed = acc[i] ^ (acc[i] >> 47) ^ load_avx2(secret + 32 * i);
    const avx2_u64x4 low = multiply_low_halves_avx2(mixed, prime);
    const avx2_u64x4 high = multiply_low_halves_avx2(mixed >> 32, prime);
    acc[i] = low + (high << 32);
  }
}

[[gnu::target("avx2")]] inline void consume_avx2(std::uint64_t* acc_words,
                                                 const std::uint8_t* input, std::size_t stripes,
                                                 std::size_t stripe_in_block,
                                                 const std::uint8_t* last_stripe) noexcept {
  auto* acc_bytes = reinterpret_cast<std::uint8_t*>(acc_words);
  avx2_u64x4 acc[2] = {load_avx2(acc_bytes), load_avx2(acc_bytes + 32)};
  while (stripes > 0) {
    const std::size_t room = stripes_per_block - stripe_in_block;
    const std::size_t count = stripes < room ? stripes : room;
    const std::uint8_t* secret = default_secret.data() + stripe_in_block * secret_consume_rate;
    avx2_u64x4 sums[2] = {};
    for (std::size_t i = 0; i < count; ++i) {
      accumulate_products_avx2(acc, sums, input, secret);
      input += stripe_size;
      secret += secret_consume_rate;
    }
    add_swapped_sums_avx2(acc, sums);
    stripes -= count;
    stripe_in_block += count;
    if (stripe_in_block == stripes_per_block) {
      scramble_avx2(acc);
      stripe_in_block = 0;
    }
  }
  if (last_stripe != nullptr) {
    avx2_u64x4 sums[2] = {};
    accumulate_products_avx2(acc, sums, last_stripe,
                             default_secret.data() + last_stripe_secret_offset);
    add_swapped_sums_avx2(acc, sums);
  }
  store_avx2(acc_bytes, acc[0]);
  store_avx2(acc_bytes + 32, acc[1]);
}

[[gnu::target("avx2")]] inline void consume_listed_avx2(std::uint64_t* acc_words,
                                                        const std::uint8_t* const* stripes,
                                                        std::size_t count,
                                                        const std::uint8_t* last_stripe) noexcept {
  auto* acc_bytes = reinterpret_cast<std::uint8_t*>(acc_words);
  avx2_u64x4 acc[2] = {load_avx2(acc_bytes), load_avx2(acc_bytes + 32)};
  avx2_u64x4 sums[2] = {};
  for (std::size_t i = 0; i < count; ++i) {
    accumulate_products_avx2(acc, sums, stripes[i],
                             default_secret.data() + i * secret_consume_rate);
  }
  avx2_u64x4 last_sums[2] = {};
  accumulate_products_avx2(acc, last_sums, last_stripe,
                           default_secret.data() + last_stripe_secret_offset);
  sums[0] += last_sums[0];
  sums[1] += last_sums[1];
  add_swapped_sums_avx2(acc, sums);
  store_avx2(acc_bytes, acc[0]);
  store_avx2(acc_bytes + 32, acc[1]);
}

#endif  // (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)

/// One-shot long-input hashing with one kernel. A kernel's own instantiation, so the kernel
/// call inside is direct (and inlined where the instruction sets allow).
using long_hash_function = u128 (*)(const std::uint8_t* input, std::size_t size) noexcept;

template <consume_function consume>
u128 hash_long_using(const std::uint8_t* input, std::size_t size) noexcept {
  return hash_long(consume, input, size);
}

/// What streaming and one-shot hashing need from a kernel.
struct kernel_functions {
  consume_function consume = nullptr;
  long_hash_function hash_long = nullptr;
  consume_listed_function consume_listed = nullptr;
};

template <consume_function consume, consume_listed_function listed>
inline constexpr kernel_functions functions_of = {consume, &hash_long_using<consume>, listed};

/// The functions for `path` if this build has them, else nulls.
inline kernel_functions compiled_kernel(kernel path) noexcept {
  switch (path) {
    case kernel::scalar:
      return functions_of<&consume_scalar, &consume_listed_scalar>;
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
    case kernel::sse2:
      return functions_of<&consume_sse2, &consume_listed_sse2>;
    case kernel::avx2:
      return functions_of<&consume_avx2, &consume_listed_avx2>;
#endif
    default:
      return {};
  }
}

/// Whether the CPU (and the OS, which must save the wider registers) can run `path`'s
/// instructions; SSE2 is part of x86-64 itself.
inline bool cpu_supports(kernel path) noexcept {
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
  if (path == kernel::avx2) return __builtin_cpu_supports("avx2") != 0;
#endif
  return path == kernel::scalar || path == kernel::sse2;
}

/// Whether `path` is compiled in and the CPU running this can execute it.
inline bool available(kernel path) noexcept {
  return compiled_kernel(path).consume != nullptr && cpu_supports(path);
}

/// The kernel function for `path`, or null where available(path) is false.
inline consume_function kernel_function(kernel path) noexcept {
  return available(path) ? compiled_kernel(path).consume : nullptr;
}

/// All of `path`'s functions, or nulls where available(path) is false.
inline kernel_functions kernel_functions_of(kernel path) noexcept {
  return available(path) ? compiled_kernel(path) : kernel_functions{};
}

/// The best available kernel, decided once per process: a function-local static, so the CPU
/// is asked once and every later call is a load and an indirect call.
inline kernel selected_kernel() noexcept {
  static const kernel chosen = [] {
    constexpr kernel best_first[] = {kernel::avx2, kernel::sse2};
    for (const kernel path : best_first) {
      if (available(path)) return path;
    }
    return kernel::scalar;
  }();
  return chosen;
}

/// The selected kernel's functions. Called through a pointer the compiler cannot see through,
/// the long path also stays out of line at every call site of the inlined short paths.
inline const kernel_functions& selected_functions() noexcept {
  static const kernel_functions chosen = compiled_kernel(selected_kernel());
  return chosen;
}

}  // namespace idem::detail::xxh3

#endif  // IDEM_CORE_FINGERPRINT_DETAIL_XXH3_KERNELS_HPP
