// The names of redis_store's keys, and how its scripts' arguments are written: decimal integers
// and times as nanoseconds since the epoch. Free functions, so that the layout is tested without
// a server (tests/stores/redis/redis_keys_test.cpp).
//
// Every key of one record carries the hash tag of its scope, `{s<hex of the scope>}`, so a Redis
// Cluster would keep a record, and its scope's indexes, in one slot. The scope is written in
// hexadecimal, so any bytes (NUL, ':', '{', '}') are allowed and ("a:b", "c") never meets
// ("a", "b:c"); the 's' keeps the tag non-empty for the empty scope. With prefix P:
//   P{sHEX}:KEY      hash: the record (n fence, s state, f fingerprint, c created, l lease, e
//                    expiry, v response, r recovery; times in nanoseconds since the epoch)
//   P{sHEX}#expiry   sorted set: every record of the scope by expiry (what sweep reads)
//   P{sHEX}#lease    sorted set: in-progress records by lease deadline (what stuck reads)
//   P#scopes         set: the tags of the scopes that may hold records (how redis_store keeps
//                    it: the top of idem/store/redis.hpp)
//   P#scopes{N}      redis_cluster_store's registries instead: one per hash slot, N a tag in
//                    that slot, each naming the scopes whose keys are in it
#ifndef IDEM_STORE_REDIS_DETAIL_KEYS_HPP
#define IDEM_STORE_REDIS_DETAIL_KEYS_HPP

#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/store/contract.hpp>

namespace idem::detail {

// The names of one record's keys.
struct redis_keys {
  std::string tag;
  std::string record;
  std::string expiry;
  std::string lease;
};

// The names of one scope's keys: its records' names are record_prefix + key.
struct redis_scope_keys {
  std::string record_prefix;
  std::string expiry;
  std::string lease;
};

inline std::string redis_tag_of(std::string_view scope) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string tag;
  tag.reserve(1 + 2 * scope.size());
  tag.push_back('s');
  for (const char c : scope) {
    const auto byte = static_cast<unsigned char>(c);
    tag.push_back(digits[byte >> 4]);
    tag.push_back(digits[byte & 0xf]);
  }
  return tag;
}

// The scope a tag of redis_tag_of names (the empty scope for any other text).
inline std::string redis_scope_of_tag(std::string_view tag) {
  std::string scope;
  if (tag.empty() || tag[0] != 's' || tag.size() % 2 != 1) return scope;
  scope.reserve(tag.size() / 2);
  const auto nibble = [](char c) {
    return static_cast<unsigned>(c <= '9' ? c - '0' : c - 'a' + 10);
  };
  for (std::size_t i = 1; i + 1 < tag.size(); i += 2) {
    scope.push_back(static_cast<char>((nibble(tag[i]) << 4) | nibble(tag[i + 1])));
  }
  return scope;
}

inline redis_scope_keys redis_scope_keys_of(std::string_view prefix, std::string_view tag) {
  std::string base(prefix);
  base.push_back('{');
  base.append(tag);
  base.push_back('}');
  return redis_scope_keys{base + ":", base + "#expiry", base + "#lease"};
}

inline redis_keys redis_keys_of(std::string_view prefix, std::string_view scope,
                                std::string_view key) {
  redis_keys names;
  names.tag = redis_tag_of(scope);
  std::string base;
  base.reserve(prefix.size() + names.tag.size() + 2);
  base.append(prefix);
  base.push_back('{');
  base.append(names.tag);
  base.push_back('}');
  names.record.reserve(base.size() + 1 + key.size());
  names.record.append(base);
  names.record.push_back(':');
  names.record.append(key);
  names.expiry = base + "#expiry";
  names.lease = base + "#lease";
  return names;
}

// The set of every scope's tag; it spans slots, so no script writes it.
inline std::string redis_registry_of(std::string_view prefix) {
  return std::string(prefix) + "#scopes";
}

// Redis Cluster's slots, for redis_cluster_store: the slot of a key is the CRC16 of its hash
// tag, modulo 16384, so every key of one scope is in the slot of the scope's tag.
inline constexpr std::size_t redis_slot_count = 16384;

// CRC16 as Redis Cluster computes it (CCITT, XMODEM: polynomial 0x1021, initial value 0).
inline std::uint16_t redis_crc16(std::string_view bytes) noexcept {
  static constexpr std::array<std::uint16_t, 256> table = [] {
    std::array<std::uint16_t, 256> made{};
    for (std::size_t byte = 0; byte < 256; ++byte) {
      auto crc = static_cast<std::uint16_t>(byte << 8);
      for (int bit = 0; bit < 8; ++bit) {
        crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
      }
      made[byte] = crc;
    }
    return made;
  }();
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    const auto index = static_cast<std::uint8_t>((crc >> 8) ^ static_cast<std::uint8_t>(c));
    crc = static_cast<std::uint16_t>((crc << 8) ^ table[index]);
  }
  return crc;
}

// The slot of a key: of the bytes between its first '{' and the first '}' after it, when there
// are any; of the whole key otherwise.
inline std::uint16_t redis_key_slot(std::string_view key) noexcept {
  const std::size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close != open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<std::uint16_t>(redis_crc16(key) % redis_slot_count);
}

// The slot of a scope's tag (keys.hpp: every key of the scope carries `{tag}`).
inline std::uint16_t redis_tag_slot(std::string_view tag) noexcept {
  return static_cast<std::uint16_t>(redis_crc16(tag) % redis_slot_count);
}

// A short tag whose keys fall in `slot`: the smallest decimal number whose CRC16 lands there
// (at most six digits; the table is made once, from about 170,000 CRCs of short strings).
inline std::string_view redis_slot_tag(std::uint16_t slot) {
  struct table {
    std::array<std::array<char, 8>, redis_slot_count> names{};
    table() {
      std::size_t filled = 0;
      for (std::uint32_t n = 0; filled < redis_slot_count; ++n) {
        std::array<char, 8> digits{};
        const auto written = std::to_chars(digits.data(), digits.data() + 7, n);
        const auto at = redis_key_slot(std::string_view(digits.data(), written.ptr));
        if (names[at][0] != '\0') continue;
        names[at] = digits;
        ++filled;
      }
    }
  };
  static const table made;
  return std::string_view(made.names.at(slot).data());
}

// The name of the scope registry of `slot` (what sweep and stuck read there): `P#scopes{N}`,
// with N a tag in that slot.
inline std::string redis_slot_registry(std::string_view prefix, std::uint16_t slot) {
  std::string name(prefix);
  name.append("#scopes{").append(redis_slot_tag(slot)).push_back('}');
  return name;
}

template <class Integer>
std::string redis_decimal(Integer value) {
  char digits[24];
  const auto written = std::to_chars(digits, digits + sizeof digits, value);
  return std::string(digits, written.ptr);
}

// A time as the scripts read it: decimal nanoseconds since the epoch.
inline std::string redis_time_argument(store_time when) {
  const auto since = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch());
  if (since.count() < 0) {
    throw std::invalid_argument("idem::redis_store: times before 1970 cannot be stored");
  }
  return redis_decimal(since.count());
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_KEYS_HPP
