// idem::sha256: SHA-256 (FIPS 180-4) as an idem::HashFunction, for request fingerprints that
// are stored and compared across processes, machines and versions, so they must be bit-exact
// with the standard (and with OpenSSL, which the tests check against).
//
// Standard C++ only, no flags needed: on x86 the SHA extensions are used when CPUID reports
// them, chosen at run time; everywhere else, and on x86 CPUs without them, a portable
// compression function gives the same digests.
//
//   idem::digest d = idem::sha256::hash(body);                   // one shot
//   idem::sha256::state s; s.update(method); s.update(body);     // streaming: the same digest
//   idem::digest same = s.finish();                              // as hashing the concatenation
//
// A state is a plain value: copy it to hash several inputs with a common prefix. Different
// states may be used on different threads at once; one state is not for concurrent updates.
#ifndef IDEM_CORE_FINGERPRINT_SHA256_HPP
#define IDEM_CORE_FINGERPRINT_SHA256_HPP

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include <idem/core/fingerprint/detail/sha256_portable.hpp>
#include <idem/core/fingerprint/detail/sha256_x86.hpp>
#include <idem/core/fingerprint/digest.hpp>

namespace idem {

namespace detail {

/// The compression function this process uses: the SHA extensions where the CPU has them.
inline void sha256_compress(sha256_state_words& state, const unsigned char* blocks,
                            std::size_t block_count) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (sha256_sha_extensions_available()) {
    sha256_compress_sha_extensions(state, blocks, block_count);
    return;
  }
#endif
  sha256_compress_portable(state, blocks, block_count);
}

/// Pads the last `tail_size` (< 64) bytes of a message of `message_size` bytes and compresses
/// them (FIPS 180-4 section 5.1.1): a 1 bit, zeros up to 56 bytes mod 64, then the message
/// length in bits as a big-endian 64-bit number. The length is taken mod 2^64 bits, which the
/// standard's limit of 2^64 - 1 bits makes exact for every message it defines.
template <class Compress>
void sha256_pad_and_compress(Compress compress, sha256_state_words& state,
                             const unsigned char* tail, std::size_t tail_size,
                             std::uint64_t message_size) noexcept {
  // Eight bytes of length must fit after the 1 bit, or the padding spills into a second block.
  const std::size_t blocks = tail_size < sha256_block_size - 8 ? 1 : 2;
  // Zeroed a block at a time with fixed-size memsets, which compile to a few vector stores;
  // zeroing all 128 bytes at once became `rep stos`, slower to start than hashing a block.
  alignas(16) std::array<unsigned char, 2 * sha256_block_size> last;
  std::memset(last.data(), 0, sha256_block_size);
  if (blocks == 2) std::memset(last.data() + sha256_block_size, 0, sha256_block_size);
  if (tail_size != 0) std::memcpy(last.data(), tail, tail_size);
  last[tail_size] = 0x80;
  store_big_endian_64(message_size * 8, last.data() + blocks * sha256_block_size - 8);
  compress(state, last.data(), blocks);
}

inline std::array<std::uint8_t, 32> sha256_digest_bytes(const sha256_state_words& state) noexcept {
  std::array<std::uint8_t, 32> out;
  for (std::size_t i = 0; i < state.size(); ++i)
    store_big_endian_32(state[i], &out[4 * i]);
  return out;
}

/// SHA-256 of `size` bytes at `data` with a chosen compression function, so that tests can
/// check each path end to end; idem::sha256 passes sha256_compress.
template <class Compress>
std::array<std::uint8_t, 32> sha256_hash_with(Compress compress, const void* data,
                                              std::size_t size) noexcept {
  sha256_state_words state = sha256_initial_state;
  const auto* bytes = static_cast<const unsigned char*>(data);
  const std::size_t whole_blocks = size / sha256_block_size;
  // Whole blocks straight from the caller's memory, all in one call, so the SIMD path keeps
  // the state in registers across them.
  if (whole_blocks != 0) compress(state, bytes, whole_blocks);
  const std::size_t consumed = whole_blocks * sha256_block_size;
  sha256_pad_and_compress(compress, state, bytes + consumed, size - consumed, size);
  return sha256_digest_bytes(state);
}

}  // namespace detail

struct sha256 {
  static constexpr std::string_view name = "sha256";
  static constexpr std::size_t digest_size = 32;

  /// The 32 digest bytes of `size` bytes at `data` (which may be null when size is 0).
  static std::array<std::uint8_t, 32> hash_bytes(const void* data, std::size_t size) noexcept {
    return detail::sha256_hash_with(&detail::sha256_compress, data, size);
  }
  static digest hash(std::span<const std::byte> bytes) noexcept {
    return digest(hash_bytes(bytes.data(), bytes.size()));
  }
  static digest hash(std::string_view text) noexcept {
    return digest(hash_bytes(text.data(), text.size()));
  }

  /// Incremental hashing: any split of the same bytes across update() calls gives the same
  /// digest as hash() of all of them. finish() leaves the state as it was, so it may be called
  /// more than once, and update() after it continues the same message (finish() then answers
  /// for everything given so far).
  class state {
   public:
    void update(std::span<const std::byte> bytes) noexcept { update(bytes.data(), bytes.size()); }
    void update(std::string_view text) noexcept { update(text.data(), text.size()); }
    void update(const void* data, std::size_t size) noexcept {
      if (size == 0) return;
      const auto* bytes = static_cast<const unsigned char*>(data);
      message_size_ += size;
      if (pending_size_ != 0) {
        const std::size_t taken = std::min(size, detail::sha256_block_size - pending_size_);
        std::memcpy(pending_.data() + pending_size_, bytes, taken);
        pending_size_ += taken;
        bytes += taken;
        size -= taken;
        if (pending_size_ < detail::sha256_block_size) return;
        detail::sha256_compress(words_, pending_.data(), 1);
        pending_size_ = 0;
      }
      const std::size_t whole_blocks = size / detail::sha256_block_size;
      if (whole_blocks != 0) detail::sha256_compress(words_, bytes, whole_blocks);
      const std::size_t consumed = whole_blocks * detail::sha256_block_size;
      pending_size_ = size - consumed;
      if (pending_size_ != 0) std::memcpy(pending_.data(), bytes + consumed, pending_size_);
    }

    /// The digest of every byte given to update() so far.
    digest finish() const noexcept { return digest(finish_bytes()); }
    std::array<std::uint8_t, 32> finish_bytes() const noexcept {
      detail::sha256_state_words words = words_;
      detail::sha256_pad_and_compress(&detail::sha256_compress, words, pending_.data(),
                                      pending_size_, message_size_);
      return detail::sha256_digest_bytes(words);
    }

   private:
    detail::sha256_state_words words_ = detail::sha256_initial_state;
    // Bytes of an unfinished block, waiting for the rest of it (always fewer than 64).
    std::array<unsigned char, detail::sha256_block_size> pending_{};
    std::size_t pending_size_ = 0;
    // Bytes given so far, mod 2^64 (FIPS 180-4 defines SHA-256 only below 2^64 bits).
    std::uint64_t message_size_ = 0;
  };
};

static_assert(HashFunction<sha256>, "idem::sha256 must model idem::HashFunction.");

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_SHA256_HPP
