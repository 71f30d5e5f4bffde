// Digests: the fixed-size values a hash function produces, and what a hash function must provide.
//
// A digest is stored in every record as the request's fingerprint, so it is a plain value of at
// most 32 bytes (SHA-256's size), compared byte for byte, independent of which hash made it:
// two configurations with different hash functions still share one record type. Bytes past
// size() are always zero, so equality can compare the whole array.
#ifndef IDEM_CORE_FINGERPRINT_DIGEST_HPP
#define IDEM_CORE_FINGERPRINT_DIGEST_HPP

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace idem {

class digest {
 public:
  static constexpr std::size_t max_size = 32;

  constexpr digest() noexcept = default;
  /// The first `bytes.size()` bytes (at most max_size; the rest is ignored).
  constexpr explicit digest(std::span<const std::uint8_t> bytes) noexcept {
    // The count lives in a local: a loop bounded by size_ would re-read it after every byte
    // stored, since a uint8_t store may alias it (8 ns of a 12 ns fingerprint at 64 bytes).
    const std::size_t count = bytes.size() < max_size ? bytes.size() : max_size;
    const std::uint8_t* from = bytes.data();
    if (std::is_constant_evaluated()) {
      for (std::size_t i = 0; i < count; ++i)
        bytes_[i] = from[i];
    } else if (count == 16 || count == 32) {
      // The common sizes (XXH3-128, SHA-256) in 16-byte moves: a digest is often copied on at
      // once, in 16-byte loads, and those would wait on narrower stores (measured: the copy of
      // a memory store record's fingerprint on a replay, about 5 ns).
      std::memcpy(bytes_.data(), from, 16);
      if (count == 32) std::memcpy(bytes_.data() + 16, from + 16, 16);
    } else if (count != 0) {  // an empty span's data() may be null, which memcpy must not see
      std::memcpy(bytes_.data(), from, count);
    }
    size_ = static_cast<std::uint8_t>(count);
  }

  constexpr std::size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr const std::uint8_t* data() const noexcept { return bytes_.data(); }
  constexpr std::span<const std::uint8_t> bytes() const noexcept { return {bytes_.data(), size_}; }

  /// Lower-case hexadecimal, two characters a byte.
  std::string hex() const {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(std::size_t{2} * size_, '\0');
    for (std::size_t i = 0; i < size_; ++i) {
      out[2 * i] = digits[bytes_[i] >> 4];
      out[2 * i + 1] = digits[bytes_[i] & 0xf];
    }
    return out;
  }

  friend constexpr bool operator==(const digest&, const digest&) noexcept = default;

 private:
  std::array<std::uint8_t, max_size> bytes_{};
  std::uint8_t size_ = 0;
};

/// What a hash function (xxh3_128, sha256, one of your own) must provide: a name, a one-shot
/// `hash`, and an incremental `state` that gives the same digest for the same bytes however
/// they are split across update() calls.
template <class H>
concept HashFunction = std::default_initializable<typename H::state> &&
    requires(typename H::state& state, const typename H::state& const_state,
             std::span<const std::byte> bytes, std::string_view text) {
  { H::name } -> std::convertible_to<std::string_view>;
  { H::digest_size } -> std::convertible_to<std::size_t>;
  { H::hash(bytes) } -> std::same_as<digest>;
  { H::hash(text) } -> std::same_as<digest>;
  state.update(bytes);
  state.update(text);
  { const_state.finish() } -> std::same_as<digest>;
};

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_DIGEST_HPP
