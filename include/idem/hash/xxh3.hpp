// xxh3_128: XXH3's 128-bit hash (seed 0, default secret) as an idem::HashFunction, for request
// fingerprints that are fast to compute and stable across platforms and versions.
//
// The output is bit for bit that of the reference library's XXH3_128bits(), one-shot or
// streamed in any split, and the digest bytes are its canonical form (XXH128_canonicalFromHash:
// big-endian, high half first), so fingerprints can be checked against any other XXH3 tool.
// It is not a cryptographic hash: use it to recognise a retried request, not to stop a forger.
//
// Inputs up to 240 bytes take short, inlined paths; longer ones run the best kernel this CPU has
// (AVX2 or SSE2 on x86-64, portable C++ elsewhere), chosen once per process.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include <idem/detail/xxh3_kernels.hpp>
#include <idem/detail/xxh3_portable.hpp>
#include <idem/digest.hpp>

namespace idem {

namespace detail::xxh3 {

inline u128 hash(const std::uint8_t* input, std::size_t size) noexcept {
  if (size <= 16) return hash_0to16(input, size);
  if (size <= 128) return hash_17to128(input, size);
  if (size <= midsize_max) return hash_129to240(input, size);
  return selected_functions().hash_long(input, size);
}

/// The long-input algorithm with a chosen kernel, so tests can hold each to the scalar one.
/// `path` must be available(); `size` must be over 240.
inline u128 hash_long_with(kernel path, const void* data, std::size_t size) noexcept {
  return hash_long(kernel_function(path), static_cast<const std::uint8_t*>(data), size);
}

}  // namespace detail::xxh3

struct xxh3_128 {
  static constexpr std::string_view name = "xxh3_128";
  static constexpr std::size_t digest_size = 16;

  /// The hash as two 64-bit halves, laid out as XXH128_hash_t.
  struct value {
    std::uint64_t low64;
    std::uint64_t high64;
    friend constexpr bool operator==(const value&, const value&) noexcept = default;
  };

  /// The same value as XXH3_128bits(data, size). `data` may be null when `size` is 0.
  static value hash128(const void* data, std::size_t size) noexcept {
    const detail::xxh3::u128 result =
        detail::xxh3::hash(static_cast<const std::uint8_t*>(data), size);
    return {result.low, result.high};
  }

  /// The canonical 16 bytes: high64 then low64, each big-endian.
  static digest to_digest(value hash) noexcept {
    std::array<std::uint64_t, 2> words = {hash.high64, hash.low64};
    if constexpr (std::endian::native == std::endian::little) {
      for (std::uint64_t& word : words)
        word = detail::xxh3::byteswap64(word);
    }
    std::array<std::uint8_t, digest_size> bytes;
    std::memcpy(bytes.data(), words.data(), digest_size);
    return digest{bytes};
  }

  static digest hash(std::span<const std::byte> bytes) noexcept {
    return to_digest(hash128(bytes.data(), bytes.size()));
  }
  static digest hash(std::string_view text) noexcept {
    return to_digest(hash128(text.data(), text.size()));
  }

  /// Incremental hashing: the same value as hash128 of all bytes given to update(), however
  /// they were split. Holds at most 256 unprocessed bytes; finishing does not end the state, so
  /// more bytes may follow and a later finish covers them too.
  class state {
   public:
    void update(std::span<const std::byte> bytes) noexcept { update(bytes.data(), bytes.size()); }
    void update(std::string_view text) noexcept { update(text.data(), text.size()); }

    void update(const void* data, std::size_t size) noexcept {
      if (size == 0) return;  // data may be null then, and memcpy must never see a null pointer
      namespace x = detail::xxh3;
      const auto* input = static_cast<const std::uint8_t*>(data);
      total_size_ += size;
      // Never more than buffer_size, but the compiler cannot know that once acc_ has been
      // handed to a kernel, and GCC's -Warray-bounds would then flag the copy below.
      const std::size_t buffered = buffered_ < buffer_size ? buffered_ : buffer_size;
      if (size <= buffer_size - buffered) {
        std::memcpy(buffer_.data() + buffered, input, size);
        buffered_ = buffered + size;
        return;
      }
      consume_and_buffer(input, size, buffered);
    }

   private:
    // Out of line: the common small update stays a copy into the buffer, and GCC, which would
    // otherwise inline this with a caller's constant size, cannot flag copies on paths that
    // size never reaches (-Warray-bounds, -Wstringop-overread at -O1).
    [[gnu::noinline]] void consume_and_buffer(const std::uint8_t* input, std::size_t size,
                                              std::size_t buffered) noexcept {
      namespace x = detail::xxh3;
      // A stripe is consumed only once some byte follows it, as the one-shot algorithm does:
      // the input's final stripe is not an ordinary stripe (step 3 of the long algorithm).
      const x::consume_function consume = x::selected_functions().consume;
      if (buffered > 0) {
        const std::size_t fill = buffer_size - buffered;
        std::memcpy(buffer_.data() + buffered, input, fill);
        input += fill;
        size -= fill;
        consume_stripes(consume, buffer_.data(), buffer_stripes);
        std::memcpy(previous_stripe_.data(), buffer_.data() + buffer_size - x::stripe_size,
                    x::stripe_size);
      }
      if (size > buffer_size) {
        const std::size_t stripes = (size - 1) / x::stripe_size;
        consume_stripes(consume, input, stripes);
        input += stripes * x::stripe_size;
        size -= stripes * x::stripe_size;
        std::memcpy(previous_stripe_.data(), input - x::stripe_size, x::stripe_size);
      }
      std::memcpy(buffer_.data(), input, size);
      buffered_ = size;
    }

   public:
    value finish128() const noexcept {
      namespace x = detail::xxh3;
      // Nothing is consumed before 256 bytes, so a short input is still whole in the buffer;
      // past that, update() always leaves 1 to 256 bytes buffered.
      if (total_size_ <= x::midsize_max) return hash128(buffer_.data(), buffered_);
      std::array<std::uint64_t, x::lanes> acc = acc_;
      std::array<std::uint8_t, x::stripe_size> last_stripe;
      const std::uint8_t* last = last_stripe.data();
      if (buffered_ >= x::stripe_size) {
        last = buffer_.data() + buffered_ - x::stripe_size;
      } else {
        // The final 64 input bytes straddle the last consumed stripe and the buffer.
        const std::size_t earlier = x::stripe_size - buffered_;
        std::memcpy(last_stripe.data(), previous_stripe_.data() + buffered_, earlier);
        std::memcpy(last_stripe.data() + earlier, buffer_.data(), buffered_);
      }
      x::selected_functions().consume(acc.data(), buffer_.data(), (buffered_ - 1) / x::stripe_size,
                                      stripe_in_block_, last);
      const x::u128 result = x::finish_long(acc.data(), total_size_);
      return {result.low, result.high};
    }

    digest finish() const noexcept { return to_digest(finish128()); }

   private:
    static constexpr std::size_t buffer_size = 256;
    static constexpr std::size_t buffer_stripes = buffer_size / detail::xxh3::stripe_size;
    static_assert(buffer_size >= detail::xxh3::midsize_max && buffer_size % 64 == 0,
                  "The buffer must hold any input short enough for the one-shot short paths, "
                  "in whole stripes.");

    void consume_stripes(detail::xxh3::consume_function consume, const std::uint8_t* input,
                         std::size_t stripes) noexcept {
      consume(acc_.data(), input, stripes, stripe_in_block_, nullptr);
      stripe_in_block_ = (stripe_in_block_ + stripes) % detail::xxh3::stripes_per_block;
    }

    alignas(64) std::array<std::uint64_t, detail::xxh3::lanes> acc_ =
        detail::xxh3::initial_accumulators;
    alignas(64) std::array<std::uint8_t, buffer_size> buffer_{};
    /// The last 64 bytes consumed, for a last stripe that reaches back before the buffer.
    std::array<std::uint8_t, detail::xxh3::stripe_size> previous_stripe_{};
    std::uint64_t total_size_ = 0;
    std::size_t buffered_ = 0;
    std::size_t stripe_in_block_ = 0;
  };
};

static_assert(HashFunction<xxh3_128>);

}  // namespace idem
