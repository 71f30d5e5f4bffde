// redacted_key: an idempotency key as telemetry may show it, never the key itself.
//
// A key is a bearer token of sorts: whoever holds it (with the scope) can have the response
// replayed, and it may be built from what a client considers private. So nothing idem hands to an
// observer or writes into an error message carries a key as it is: observers get a redacted_key,
// whose text is "key:" and 16 hex digits of SHA-256 over a fixed prefix and the key. The same key
// gives the same text in every process and run, so log lines of one operation still correlate;
// 64 bits of a one-way hash do not give the key back. A short key from a small set could still be
// found by hashing every candidate: generate keys with enough entropy (uuid_v4, the default).
//
// Free to pass around: it holds a view of the key and hashes only when str() is asked for, so an
// observer that never prints the key costs nothing. Valid as long as the event it came with.
#ifndef IDEM_CLIENT_REDACTED_KEY_HPP
#define IDEM_CLIENT_REDACTED_KEY_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <idem/core/fingerprint/sha256.hpp>

namespace idem {

class redacted_key {
 public:
  constexpr explicit redacted_key(std::string_view key) noexcept : key_(key) {}

  /// "key:" and 16 hex digits; "key:-" for an operation without a key.
  std::string str() const {
    if (key_.empty()) return "key:-";
    sha256::state hash;
    hash.update(std::string_view{"idem redacted key v1"});
    hash.update(key_);
    const std::array<std::uint8_t, 32> bytes = hash.finish_bytes();
    static constexpr std::string_view digits = "0123456789abcdef";
    std::string out = "key:";
    for (std::size_t i = 0; i < 8; ++i) {
      out.push_back(digits[bytes[i] >> 4]);
      out.push_back(digits[bytes[i] & 15]);
    }
    return out;
  }
  /// Whether the operation had no key.
  constexpr bool empty() const noexcept { return key_.empty(); }

  /// Two events of the same operation carry equal redacted keys.
  friend constexpr bool operator==(const redacted_key& a, const redacted_key& b) noexcept {
    return a.key_ == b.key_;
  }

 private:
  std::string_view key_;
};

}  // namespace idem

#endif  // IDEM_CLIENT_REDACTED_KEY_HPP
