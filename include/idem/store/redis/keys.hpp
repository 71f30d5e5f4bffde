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
#ifndef IDEM_STORE_REDIS_KEYS_HPP
#define IDEM_STORE_REDIS_KEYS_HPP

#include <charconv>
#include <chrono>
#include <cstddef>
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

#endif  // IDEM_STORE_REDIS_KEYS_HPP
