// Idempotency keys: the text that names one logical operation across all its attempts.
//
// A key is held inline (no heap), so generating one on every call costs no allocation. Keys are
// at most max_key_length bytes of visible ASCII (RFC 5234 VCHAR, 0x21-0x7E): what survives being
// sent as an HTTP header value, logged, and stored as a database key without quoting surprises.
#ifndef IDEM_CORE_KEY_HPP
#define IDEM_CORE_KEY_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <type_traits>

namespace idem {

/// The longest key accepted, in bytes (Stripe's limit for idempotency keys is 255 too).
inline constexpr std::size_t max_key_length = 255;

/// The request field that carries a key: the IETF draft's name, and what every default says
/// (Policies::key_header, http::key_field, the published specification).
inline constexpr std::string_view idempotency_key_field = "Idempotency-Key";

/// True when `key` is non-empty, at most `max_length` bytes, and visible ASCII only.
constexpr bool is_valid_key(std::string_view key,
                            std::size_t max_length = max_key_length) noexcept {
  if (key.empty() || key.size() > max_length) return false;
  if (std::is_constant_evaluated()) {
    for (const char c : key) {
      if (c < 0x21 || c > 0x7e) return false;
    }
    return true;
  }
  // Eight bytes at a time (a key is on every request's path): a word holds a byte below 0x21
  // when subtracting 0x21 from every byte borrows into a byte whose top bit was clear, and a
  // byte above 0x7e when adding 1 sets a top bit or one was set already. Both tests are exact
  // for whether any byte of the word fails, which is all that is asked. A key whose length is
  // not a multiple of 8 is finished by the word that ends it (overlapping the one before), a
  // key shorter than a word by a word padded with a valid byte.
  constexpr std::uint64_t ones = 0x0101010101010101ULL;
  constexpr std::uint64_t tops = 0x8080808080808080ULL;
  auto failing = [](std::uint64_t word) {
    const std::uint64_t below = (word - ones * 0x21) & ~word & tops;
    const std::uint64_t above = ((word + ones * (0x7f - 0x7e)) | word) & tops;
    return below | above;
  };
  std::uint64_t failed = 0;
  std::uint64_t word = ones * 'a';
  if (key.size() < 8) {
    for (std::size_t i = 0; i < key.size(); ++i) {
      const unsigned shift = 8 * static_cast<unsigned>(i);
      word = (word & ~(std::uint64_t{0xff} << shift)) |
             (std::uint64_t{static_cast<unsigned char>(key[i])} << shift);
    }
    return failing(word) == 0;
  }
  for (std::size_t at = 0; at + 8 <= key.size(); at += 8) {
    std::memcpy(&word, key.data() + at, 8);
    failed |= failing(word);
  }
  std::memcpy(&word, key.data() + key.size() - 8, 8);
  failed |= failing(word);
  return failed == 0;
}

/// A key's text, stored inline.
class key_buffer {
 public:
  constexpr key_buffer() noexcept = default;
  constexpr key_buffer(const key_buffer& other) noexcept : length_(other.length_) {
    std::copy_n(other.text_, length_, text_);
  }
  constexpr key_buffer& operator=(const key_buffer& other) noexcept {
    if (this != &other) {
      length_ = other.length_;
      std::copy_n(other.text_, length_, text_);
    }
    return *this;
  }

  /// Copies `text`; throws std::invalid_argument unless it is a valid key.
  explicit key_buffer(std::string_view text) {
    if (!is_valid_key(text)) {
      throw std::invalid_argument(
          "idem::key_buffer: a key must be 1 to 255 bytes of visible ASCII (0x21-0x7E)");
    }
    assign_unchecked(text);
  }

  /// For generators that build the text in place: fills `length` bytes through `data()`.
  /// Precondition: length <= max_key_length.
  constexpr char* data() noexcept { return text_; }
  constexpr void set_length(std::size_t length) noexcept {
    length_ = static_cast<unsigned char>(length);
  }

  constexpr std::string_view view() const noexcept { return {text_, length_}; }
  constexpr operator std::string_view() const noexcept { return view(); }
  constexpr std::size_t size() const noexcept { return length_; }
  constexpr bool empty() const noexcept { return length_ == 0; }

  friend constexpr bool operator==(const key_buffer& a, const key_buffer& b) noexcept {
    return a.view() == b.view();
  }

 private:
  constexpr void assign_unchecked(std::string_view text) noexcept {
    std::copy_n(text.data(), text.size(), text_);
    length_ = static_cast<unsigned char>(text.size());
  }

  // Only the first length_ bytes are ever read; the rest is left unwritten on purpose, so that
  // making a key does not clear 255 bytes.
  char text_[max_key_length];
  unsigned char length_ = 0;
};

}  // namespace idem

#endif  // IDEM_CORE_KEY_HPP
