// SHA-256's compression function on the x86 SHA extensions (sha256rnds2, sha256msg1,
// sha256msg2), and the run-time check that the CPU has them.
//
// The function carries its own target attribute, so neither this header nor its user needs
// -msha: the compiler emits the instructions for this function only, and idem calls it only
// after CPUID has said they exist. On other architectures the header declares nothing but
// sha256_sha_extensions_available(), which says no.
#ifndef IDEM_CORE_FINGERPRINT_DETAIL_SHA256_X86_HPP
#define IDEM_CORE_FINGERPRINT_DETAIL_SHA256_X86_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <idem/core/fingerprint/detail/sha256_portable.hpp>

// Written with the compilers' vector extensions and the builtins behind the intrinsics (the
// same names and types in GCC and Clang), which compile to the same instructions, rather than
// with the intrinsics headers: <immintrin.h>, the only one that declares the SHA intrinsics,
// about doubles the compile time of a translation unit that includes idem, and even
// <smmintrin.h> (SSE4.1, SSSE3, SSE2) is parsed by every such unit for the sake of one function.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
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

/// Four 32-bit lanes, the operand type of the SHA and 32-bit shuffle builtins in GCC and Clang;
/// lane 0 is the lowest-addressed word.
using sha256_lanes = int __attribute__((vector_size(16)));
/// Sixteen bytes and eight 16-bit lanes, the operand types of pshufb's and pblendw's builtins.
using sha256_bytes = char __attribute__((vector_size(16)));
using sha256_halves = short __attribute__((vector_size(16)));

[[gnu::target("sse2"), gnu::always_inline]] inline sha256_lanes sha256_load(
    const void* bytes) noexcept {
  sha256_lanes lanes;
  std::memcpy(&lanes, bytes, sizeof lanes);
  return lanes;
}

[[gnu::target("sse2"), gnu::always_inline]] inline void sha256_store(void* bytes,
                                                                     sha256_lanes lanes) noexcept {
  std::memcpy(bytes, &lanes, sizeof lanes);
}

/// pshufd: the lanes rearranged by `order` (two bits a lane, lane 0's lowest).
template <int order>
[[gnu::target("sse2"), gnu::always_inline]] inline sha256_lanes sha256_shuffle(
    sha256_lanes lanes) noexcept {
  return __builtin_ia32_pshufd(lanes, order);
}

/// The two high lanes of `low` then the two low lanes of `high` (palignr by 8 bytes). Written as
/// a generic shuffle: GCC's and Clang's palignr builtins differ in their operands.
[[gnu::target("sse2"), gnu::always_inline]] inline sha256_lanes sha256_middle_lanes(
    sha256_lanes high, sha256_lanes low) noexcept {
  return __builtin_shufflevector(low, high, 2, 3, 4, 5);
}

/// Lanes 1-3 of `low` then lane 0 of `high` (palignr by 4 bytes), the same way.
[[gnu::target("sse2"), gnu::always_inline]] inline sha256_lanes sha256_lanes_from_1(
    sha256_lanes high, sha256_lanes low) noexcept {
  return __builtin_shufflevector(low, high, 1, 2, 3, 4);
}

/// Four message words from big-endian bytes: pshufb reverses the bytes within each lane.
[[gnu::target("ssse3"), gnu::always_inline]] inline sha256_lanes sha256_load_message(
    const unsigned char* bytes) noexcept {
  const sha256_bytes byte_swap = {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12};
  return (sha256_lanes)__builtin_ia32_pshufb128((sha256_bytes)sha256_load(bytes), byte_swap);
}

/// The two low lanes of `low`, the two high lanes of `high` (pblendw with mask 0xf0).
[[gnu::target("sse4.1"), gnu::always_inline]] inline sha256_lanes sha256_blend_low_high(
    sha256_lanes low, sha256_lanes high) noexcept {
  return (sha256_lanes)__builtin_ia32_pblendw128((sha256_halves)low, (sha256_halves)high, 0xf0);
}

/// sha256rnds2: two rounds on the state {cdgh, abef} with the first two lanes of `words`.
[[gnu::target("sha"), gnu::always_inline]] inline sha256_lanes sha256_two_rounds(
    sha256_lanes cdgh, sha256_lanes abef, sha256_lanes words) noexcept {
  return __builtin_ia32_sha256rnds2(cdgh, abef, words);
}

/// sha256msg1: sigma0 of the next four words' W[t-15] added to their W[t-16].
[[gnu::target("sha"), gnu::always_inline]] inline sha256_lanes sha256_message_1(
    sha256_lanes oldest, sha256_lanes older) noexcept {
  return __builtin_ia32_sha256msg1(oldest, older);
}

/// sha256msg2: sigma1 of W[t-2] added, the last two lanes from the first two.
[[gnu::target("sha"), gnu::always_inline]] inline sha256_lanes sha256_message_2(
    sha256_lanes partial, sha256_lanes newest) noexcept {
  return __builtin_ia32_sha256msg2(partial, newest);
}

// The state is kept as two vectors in the layout sha256rnds2 wants: ABEF (A in the highest
// lane) and CDGH (C in the highest lane). Each sha256rnds2 does two rounds and leaves the new
// ABEF in its first operand, and the old ABEF is then exactly the new CDGH, so two calls with
// the operands swapped do four rounds with no moves between them.
[[gnu::target("sha,sse4.1,ssse3"), gnu::always_inline]] inline void sha256_four_rounds(
    sha256_lanes& abef, sha256_lanes& cdgh, sha256_lanes words, std::size_t first_round) noexcept {
  const sha256_lanes words_plus_constants =
      words + sha256_load(&sha256_round_constants[first_round]);
  cdgh = sha256_two_rounds(cdgh, abef, words_plus_constants);
  // sha256rnds2 reads only the low two lanes; the high two go down for the next pair.
  abef = sha256_two_rounds(abef, cdgh, sha256_shuffle<0x0e>(words_plus_constants));
}

// W[t..t+3] from the previous sixteen words, held four to a vector, oldest first:
// W[t] = sigma1(W[t-2]) + W[t-7] + sigma0(W[t-15]) + W[t-16]. sha256msg1 adds sigma0 to W[t-16..],
// the lanes from `newer` and `newest` supply W[t-7..t-4], and sha256msg2 adds sigma1 (which needs
// W[t] and W[t+1] for lanes 2 and 3, so it must be done in the instruction, not by us).
[[gnu::target("sha,sse4.1,ssse3"), gnu::always_inline]] inline sha256_lanes sha256_next_words(
    sha256_lanes oldest, sha256_lanes older, sha256_lanes newer, sha256_lanes newest) noexcept {
  const sha256_lanes with_sigma0 = sha256_message_1(oldest, older);
  const sha256_lanes with_w_minus_7 = with_sigma0 + sha256_lanes_from_1(newest, newer);
  return sha256_message_2(with_w_minus_7, newest);
}

/// The same contract as sha256_compress_portable; only call it when
/// sha256_sha_extensions_available() is true.
[[gnu::target("sha,sse4.1,ssse3")]] inline void sha256_compress_sha_extensions(
    sha256_state_words& state, const unsigned char* blocks, std::size_t block_count) noexcept {
  // Message words are big-endian: reverse the bytes within each 32-bit lane.
  // Lanes are listed from lane 0 up. The state words {A B C D}{E F G H} become ABEF =
  // {F E B A} and CDGH = {H G D C}.
  const sha256_lanes abcd = sha256_load(state.data());
  const sha256_lanes efgh = sha256_load(state.data() + 4);
  const sha256_lanes badc = sha256_shuffle<0xb1>(abcd);
  const sha256_lanes hgfe = sha256_shuffle<0x1b>(efgh);
  sha256_lanes abef = sha256_middle_lanes(badc, hgfe);    // {F E} from hgfe, {B A} from badc
  sha256_lanes cdgh = sha256_blend_low_high(hgfe, badc);  // {H G} from hgfe, {D C} from badc

  for (; block_count != 0; --block_count, blocks += sha256_block_size) {
    const sha256_lanes abef_before = abef;
    const sha256_lanes cdgh_before = cdgh;

    sha256_lanes w0 = sha256_load_message(blocks + 0);
    sha256_lanes w1 = sha256_load_message(blocks + 16);
    sha256_lanes w2 = sha256_load_message(blocks + 32);
    sha256_lanes w3 = sha256_load_message(blocks + 48);

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

    abef += abef_before;
    cdgh += cdgh_before;
  }

  // And back: {F E B A}{H G D C} -> {A B C D}{E F G H}.
  const sha256_lanes abef_lane0_first = sha256_shuffle<0x1b>(abef);  // {A B E F}
  const sha256_lanes ghcd = sha256_shuffle<0xb1>(cdgh);              // {G H C D}
  sha256_store(state.data(), sha256_blend_low_high(abef_lane0_first, ghcd));
  sha256_store(state.data() + 4, sha256_middle_lanes(ghcd, abef_lane0_first));
}

#else

constexpr bool sha256_sha_extensions_available() noexcept {
  return false;
}

#endif

}  // namespace idem::detail

#endif  // IDEM_CORE_FINGERPRINT_DETAIL_SHA256_X86_HPP
