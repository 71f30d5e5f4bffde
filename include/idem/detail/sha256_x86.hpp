// SHA-256's compression function on the x86 SHA extensions (sha256rnds2, sha256msg1,
// sha256msg2), and the run-time check that the CPU has them.
//
// The function carries its own target attribute, so neither this header nor its user needs
// -msha: the compiler emits the instructions for this function only, and idem calls it only
// after CPUID has said they exist. On other architectures the header declares nothing but
// sha256_sha_extensions_available(), which says no.
#pragma once

#include <cstddef>
#include <cstdint>

#include <idem/detail/sha256_portable.hpp>

// <smmintrin.h> (SSE4.1, and through it SSSE3 and SSE2) costs a build almost nothing;
// <immintrin.h>, the only header that declares the SHA intrinsics, about doubles the compile time
// of a translation unit that includes idem. The three SHA instructions are therefore reached
// through the builtins behind _mm_sha256rnds2_epu32, _mm_sha256msg1_epu32 and
// _mm_sha256msg2_epu32 (the same names and types in GCC and Clang).
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <smmintrin.h>
#endif

namespace idem::detail {

#if defined(__x86_64__) || defined(__i386__)

/// Whether this CPU can run sha256_compress_sha_extensions. Asked of CPUID once per process;
/// the function-local static makes the first call thread-safe and every later one a plain load.
inline bool sha256_sha_extensions_available() noexcept {
  static const bool available = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    // Leaf 1, ECX: bit 9 SSSE3 (the byte shuffle), bit 19 SSE4.1 (the blend). Every CPU with
    // SHA has both, but a hypervisor may mask features one by one.
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    const bool has_ssse3 = (ecx & (1u << 9)) != 0;
    const bool has_sse41 = (ecx & (1u << 19)) != 0;
    // Leaf 7, sub-leaf 0, EBX bit 29: SHA. The instructions use only XMM registers, whose
    // state every x86 operating system saves, so no XGETBV check is needed (unlike AVX).
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    const bool has_sha = (ebx & (1u << 29)) != 0;
    return has_ssse3 && has_sse41 && has_sha;
  }();
  return available;
}

/// Four 32-bit lanes, the operand type of the SHA builtins in GCC and Clang.
using sha256_lanes = int __attribute__((vector_size(16)));

/// sha256rnds2: two rounds on the state {cdgh, abef} with the first two lanes of `words`.
__attribute__((target("sha"), always_inline)) inline __m128i sha256_two_rounds(
    __m128i cdgh, __m128i abef, __m128i words) noexcept {
  return (__m128i)__builtin_ia32_sha256rnds2((sha256_lanes)cdgh, (sha256_lanes)abef,
                                             (sha256_lanes)words);
}

/// sha256msg1: sigma0 of the next four words' W[t-15] added to their W[t-16].
__attribute__((target("sha"), always_inline)) inline __m128i sha256_message_1(
    __m128i oldest, __m128i older) noexcept {
  return (__m128i)__builtin_ia32_sha256msg1((sha256_lanes)oldest, (sha256_lanes)older);
}

/// sha256msg2: sigma1 of W[t-2] added, the last two lanes from the first two.
__attribute__((target("sha"), always_inline)) inline __m128i sha256_message_2(
    __m128i partial, __m128i newest) noexcept {
  return (__m128i)__builtin_ia32_sha256msg2((sha256_lanes)partial, (sha256_lanes)newest);
}

// The state is kept as two vectors in the layout sha256rnds2 wants: ABEF (A in the highest
// lane) and CDGH (C in the highest lane). Each sha256rnds2 does two rounds and leaves the new
// ABEF in its first operand, and the old ABEF is then exactly the new CDGH, so two calls with
// the operands swapped do four rounds with no moves between them.
__attribute__((target("sha,sse4.1,ssse3"), always_inline)) inline void sha256_four_rounds(
    __m128i& abef, __m128i& cdgh, __m128i words, std::size_t first_round) noexcept {
  const __m128i words_plus_constants = _mm_add_epi32(
      words,
      _mm_load_si128(reinterpret_cast<const __m128i*>(&sha256_round_constants[first_round])));
  cdgh = sha256_two_rounds(cdgh, abef, words_plus_constants);
  // sha256rnds2 reads only the low two lanes; the high two go down for the next pair.
  abef = sha256_two_rounds(abef, cdgh, _mm_shuffle_epi32(words_plus_constants, 0x0e));
}

// W[t..t+3] from the previous sixteen words, held four to a vector, oldest first:
// W[t] = sigma1(W[t-2]) + W[t-7] + sigma0(W[t-15]) + W[t-16]. sha256msg1 adds sigma0 to W[t-16..],
// the alignr supplies W[t-7..t-4], and sha256msg2 adds sigma1 (which needs W[t] and W[t+1] for
// lanes 2 and 3, so it must be done in the instruction, not by us).
__attribute__((target("sha,sse4.1,ssse3"), always_inline)) inline __m128i sha256_next_words(
    __m128i oldest, __m128i older, __m128i newer, __m128i newest) noexcept {
  const __m128i with_sigma0 = sha256_message_1(oldest, older);
  const __m128i with_w_minus_7 = _mm_add_epi32(with_sigma0, _mm_alignr_epi8(newest, newer, 4));
  return sha256_message_2(with_w_minus_7, newest);
}

/// The same contract as sha256_compress_portable; only call it when
/// sha256_sha_extensions_available() is true.
__attribute__((target("sha,sse4.1,ssse3"))) inline void sha256_compress_sha_extensions(
    sha256_state_words& state, const unsigned char* blocks, std::size_t block_count) noexcept {
  // Message words are big-endian: reverse the bytes within each 32-bit lane.
  const __m128i byte_swap = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);

  // Lanes are listed from lane 0 up. The state words {A B C D}{E F G H} become ABEF =
  // {F E B A} and CDGH = {H G D C}.
  const __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state.data()));
  const __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state.data() + 4));
  const __m128i badc = _mm_shuffle_epi32(abcd, 0xb1);
  const __m128i hgfe = _mm_shuffle_epi32(efgh, 0x1b);
  __m128i abef = _mm_alignr_epi8(badc, hgfe, 8);     // {F E} from hgfe, {B A} from badc
  __m128i cdgh = _mm_blend_epi16(hgfe, badc, 0xf0);  // {H G} from hgfe, {D C} from badc

  for (; block_count != 0; --block_count, blocks += sha256_block_size) {
    const __m128i abef_before = abef;
    const __m128i cdgh_before = cdgh;
    const auto* block = reinterpret_cast<const __m128i*>(blocks);

    __m128i w0 = _mm_shuffle_epi8(_mm_loadu_si128(block + 0), byte_swap);
    __m128i w1 = _mm_shuffle_epi8(_mm_loadu_si128(block + 1), byte_swap);
    __m128i w2 = _mm_shuffle_epi8(_mm_loadu_si128(block + 2), byte_swap);
    __m128i w3 = _mm_shuffle_epi8(_mm_loadu_si128(block + 3), byte_swap);

    // Rounds 0-15 use the message itself; each later group of four first extends the schedule
    // into the vector whose words it no longer needs (four vectors hold the sixteen live words).
    sha256_four_rounds(abef, cdgh, w0, 0);
    sha256_four_rounds(abef, cdgh, w1, 4);
    sha256_four_rounds(abef, cdgh, w2, 8);
    sha256_four_rounds(abef, cdgh, w3, 12);
    for (std::size_t round = 16; round < 64; round += 16) {
      w0 = sha256_next_words(w0, w1, w2, w3);
      sha256_four_rounds(abef, cdgh, w0, round);
      w1 = sha256_next_words(w1, w2, w3, w0);
      sha256_four_rounds(abef, cdgh, w1, round + 4);
      w2 = sha256_next_words(w2, w3, w0, w1);
      sha256_four_rounds(abef, cdgh, w2, round + 8);
      w3 = sha256_next_words(w3, w0, w1, w2);
      sha256_four_rounds(abef, cdgh, w3, round + 12);
    }

    abef = _mm_add_epi32(abef, abef_before);
    cdgh = _mm_add_epi32(cdgh, cdgh_before);
  }

  // And back: {F E B A}{H G D C} -> {A B C D}{E F G H}.
  const __m128i abef_lane0_first = _mm_shuffle_epi32(abef, 0x1b);  // {A B E F}
  const __m128i ghcd = _mm_shuffle_epi32(cdgh, 0xb1);              // {G H C D}
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state.data()),
                   _mm_blend_epi16(abef_lane0_first, ghcd, 0xf0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state.data() + 4),
                   _mm_alignr_epi8(ghcd, abef_lane0_first, 8));
}

#else

constexpr bool sha256_sha_extensions_available() noexcept {
  return false;
}

#endif

}  // namespace idem::detail
