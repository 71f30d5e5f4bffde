// idem::hmac_sha256: HMAC-SHA-256 (RFC 2104 over idem::sha256), its tag as hex and back, and a
// comparison of two tags whose time does not depend on where they differ. What a webhook
// signature (idem/http/webhook.hpp) and a signed credential are made and checked with. Standard
// library only.
//
//   const auto tag = idem::hmac_sha256::sign(secret, {timestamp, ".", body});
//   header = "v1=" + idem::hmac_sha256::hex(tag);
//   const auto given = idem::hmac_sha256::from_hex(text);
//   const bool valid = given && idem::hmac_sha256::equal(*given, tag);
#ifndef IDEM_CORE_FINGERPRINT_HMAC_HPP
#define IDEM_CORE_FINGERPRINT_HMAC_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <idem/core/fingerprint/sha256.hpp>

namespace idem {

struct hmac_sha256 {
  using tag = std::array<std::uint8_t, 32>;

  /// The HMAC of the concatenation of `parts` under `key` (a key longer than SHA-256's 64-byte
  /// block is hashed first, a shorter one padded with zeros, as RFC 2104 says).
  static tag sign(std::string_view key, std::initializer_list<std::string_view> parts) noexcept {
    constexpr std::size_t block = 64;
    std::array<std::uint8_t, block> padded{};
    if (key.size() > block) {
      const auto hashed = sha256::hash_bytes(key.data(), key.size());
      for (std::size_t i = 0; i < hashed.size(); ++i)
        padded[i] = hashed[i];
    } else {
      for (std::size_t i = 0; i < key.size(); ++i)
        padded[i] = static_cast<std::uint8_t>(key[i]);
    }
    std::array<std::uint8_t, block> pad{};
    for (std::size_t i = 0; i < block; ++i)
      pad[i] = static_cast<std::uint8_t>(padded[i] ^ 0x36U);
    sha256::state inner;
    inner.update(pad.data(), pad.size());
    for (const std::string_view part : parts)
      inner.update(part);
    const auto inner_digest = inner.finish_bytes();
    for (std::size_t i = 0; i < block; ++i)
      pad[i] = static_cast<std::uint8_t>(padded[i] ^ 0x5cU);
    sha256::state outer;
    outer.update(pad.data(), pad.size());
    outer.update(inner_digest.data(), inner_digest.size());
    return outer.finish_bytes();
  }

  /// `t` as 64 lowercase hex digits.
  static std::string hex(const tag& t) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(t.size() * 2, '0');
    for (std::size_t i = 0; i < t.size(); ++i) {
      out[2 * i] = digits[t[i] >> 4];
      out[2 * i + 1] = digits[t[i] & 0xf];
    }
    return out;
  }

  /// 64 hex digits (either case) as a tag; std::nullopt for anything else.
  static std::optional<tag> from_hex(std::string_view text) noexcept {
    tag t{};
    if (text.size() != t.size() * 2) return std::nullopt;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const int high = nibble(text[2 * i]);
      const int low = nibble(text[2 * i + 1]);
      if (high < 0 || low < 0) return std::nullopt;
      t[i] = static_cast<std::uint8_t>(high << 4 | low);
    }
    return t;
  }

  /// Whether two tags are equal, every byte read whatever the first difference: a comparison
  /// that stops early tells an attacker, by its time, how much of a forged tag is right.
  static bool equal(const tag& a, const tag& b) noexcept {
    unsigned difference = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      difference |= static_cast<unsigned>(a[i] ^ b[i]);
    // Read through a volatile, so that the loop is kept whole.
    const volatile unsigned seen = difference;
    return seen == 0;
  }

 private:
  static constexpr int nibble(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
};

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_HMAC_HPP
