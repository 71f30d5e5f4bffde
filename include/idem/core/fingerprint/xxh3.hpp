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
#ifndef IDEM_CORE_FINGERPRINT_XXH3_HPP
#define IDEM_CORE_FINGERPRINT_XXH3_HPP

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include <idem/core/fingerprint/detail/xxh3_kernels.hpp>
#include <idem/core/fingerprint/detail/xxh3_portable.hpp>
#include <idem/core/fingerprint/digest.hpp>

namespace idem {

namespace detail::xxh3 {

inline u128 hash(const std::uint8_t* input, std::size_t size) noexcept {
  if (size <= 16) return hash_0to16(input, size);
  if (size <= 128) return hash_17to128(input, size);
  if (size <= midsize_max) return hash_129to240(input, size);
  return selected_functions().hash_long(input, size);
}

/// The hash of `head` followed by `tail`, read where they lie: only the stripe that holds bytes
/// of both is put together, and the last stripe when it reaches back into head (a short input is
/// put together whole). A caller that frames a body behind a small header hashes the body in
/// place, without copying it after the header first. Any kernel.
///
/// `room`, when not null, is `head` itself, writable, with `room_size` bytes: where the stripe
/// across the join (or a short input) fits, tail's first bytes are copied behind head there,
/// and head's bytes are not copied again.
inline u128 hash_joined(const kernel_functions& functions, const std::uint8_t* head,
                        std::size_t head_size, const std::uint8_t* tail, std::size_t tail_size,
                        std::uint8_t* room = nullptr, std::size_t room_size = 0) noexcept {
  const std::size_t size = head_size + tail_size;
  // Puts the joined bytes [at, at + count) together at `out`; when `out` is head's own place for
  // them (in room), only tail's part is copied.
  const auto gather = [&](std::uint8_t* out, std::size_t at, std::size_t count) {
    if (at < head_size) {
      const std::size_t from_head = head_size - at < count ? head_size - at : count;
      if (out != head + at) std::memcpy(out, head + at, from_head);
      out += from_head;
      count -= from_head;
      at = head_size;
    }
    if (count != 0) std::memcpy(out, tail + (at - head_size), count);
  };
  const auto in_room = [&](std::size_t at, std::size_t count) {
    return room != nullptr && at + count <= room_size ? room + at : nullptr;
  };
  if (size <= midsize_max) {
    std::uint8_t joined[midsize_max];
    std::uint8_t* out = in_room(0, size);
    if (out == nullptr) out = joined;
    gather(out, 0, size);
    return hash(out, size);
  }
  const std::size_t stripes = (size - 1) / stripe_size;  // before the last stripe
  alignas(16) std::uint8_t last[stripe_size];
  const std::uint8_t* last_stripe = last;
  if (tail_size >= stripe_size) {
    last_stripe = tail + (tail_size - stripe_size);
  } else {
    gather(last, size - stripe_size, stripe_size);
  }
  alignas(64) std::array<std::uint64_t, lanes> acc = initial_accumulators;
  // The stripes wholly in head are read from head.
  const std::size_t in_head = head_size / stripe_size < stripes ? head_size / stripe_size : stripes;
  const bool has_across = in_head < stripes && head_size % stripe_size != 0;
  if (stripes < stripes_per_block) {
    // Within one block, no scramble: every stripe goes to the kernel in one call, by address,
    // so the accumulators stay in registers. Measured on the default fingerprint of a 256-byte
    // body (AMD EPYC), the three calls below, one per run, took 26.5 ns against 24.5 ns.
    alignas(16) std::uint8_t joined[stripe_size];
    const std::uint8_t* at[stripes_per_block];
    std::size_t next = 0;
    for (; next < in_head; ++next)
      at[next] = head + next * stripe_size;
    if (has_across) {
      std::uint8_t* across_bytes = in_room(next * stripe_size, stripe_size);
      if (across_bytes != nullptr && tail_size >= stripe_size &&
          head_size + stripe_size <= room_size) {
        // A whole stripe's worth of tail, more than the join needs: a copy of a fixed size is
        // a few wide moves, where the exact count would be a call to memcpy.
        std::memcpy(room + head_size, tail, stripe_size);
      } else {
        if (across_bytes == nullptr) across_bytes = joined;
        gather(across_bytes, next * stripe_size, stripe_size);
      }
      at[next++] = across_bytes;
    }
    for (; next < stripes; ++next)
      at[next] = tail + (next * stripe_size - head_size);
    functions.consume_listed(acc.data(), at, stripes, last_stripe);
    return finish_long(acc.data(), size);
  }
  const consume_function consume = functions.consume;
  if (in_head != 0) consume(acc.data(), head, in_head, 0, nullptr);
  const auto tail_stripes = [&](std::size_t from) {  // stripe `from`, wholly in tail
    return tail + (from * stripe_size - head_size);
  };
  if (!has_across) {
    consume(acc.data(), in_head < stripes ? tail_stripes(in_head) : tail, stripes - in_head,
            in_head % stripes_per_block, last_stripe);
    return finish_long(acc.data(), size);
  }
  // Stripe `across` holds the end of head and the start of tail, put together here. Within a
  // block a stripe only adds to the accumulators, so it is consumed after the tail's stripes of
  // its block that come before the block's last: by then the stores that put it together have
  // reached the cache, and the kernel's wide loads do not wait on them.
  const std::size_t across = in_head;
  alignas(16) std::uint8_t joined[stripe_size];
  std::uint8_t* across_bytes = in_room(across * stripe_size, stripe_size);
  if (across_bytes == nullptr) across_bytes = joined;
  gather(across_bytes, across * stripe_size, stripe_size);
  const std::size_t block_last = across - across % stripes_per_block + stripes_per_block - 1;
  const std::size_t early_end = stripes < block_last ? stripes : block_last;
  std::size_t next = across + 1;
  if (next < early_end) {
    consume(acc.data(), tail_stripes(next), early_end - next, next % stripes_per_block, nullptr);
    next = early_end;
  }
  consume(acc.data(), across_bytes, 1, across % stripes_per_block, nullptr);
  consume(acc.data(), next < stripes ? tail_stripes(next) : tail, stripes - next,
          next % stripes_per_block, last_stripe);
  return finish_long(acc.data(), size);
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

  /// The digest of `head` followed by `tail`, as hash() of the two joined, without joining
  /// them: `tail` is read in place (see detail::xxh3::hash_joined).
  static digest hash(std::string_view head, std::string_view tail) noexcept {
    return to_digest(joined(bytes_of(head), head.size(), tail, nullptr, 0));
  }

  /// The same for a head written into `buffer` (its first `head_size` bytes), whose bytes after
  /// the head may be overwritten: with 64 bytes to spare there, even the stripe that joins the
  /// two is put together without copying the head.
  static digest hash(std::span<char> buffer, std::size_t head_size,
                     std::string_view tail) noexcept {
    auto* room = reinterpret_cast<std::uint8_t*>(buffer.data());
    return to_digest(joined(room, head_size, tail, room, buffer.size()));
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

 private:
  static const std::uint8_t* bytes_of(std::string_view text) noexcept {
    return reinterpret_cast<const std::uint8_t*>(text.data());
  }
  static value joined(const std::uint8_t* head, std::size_t head_size, std::string_view tail,
                      std::uint8_t* room, std::size_t room_size) noexcept {
    namespace x = detail::xxh3;
    const x::u128 result = x::hash_joined(x::selected_functions(), head, head_size, bytes_of(tail),
                                          tail.size(), room, room_size);
    return {result.low, result.high};
  }
};

static_assert(HashFunction<xxh3_128>);

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_XXH3_HPP
