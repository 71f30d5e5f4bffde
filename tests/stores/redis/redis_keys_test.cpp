// The names of redis_store's keys and the encoding of its scripts' arguments
// (idem/store/redis/detail/keys.hpp), without a server: scopes of any bytes round-trip through
// their hash tag, two scopes' keys never meet, and times are decimal nanoseconds since 1970.
// redis_store_test.cpp checks on a server that the store writes exactly these names.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/store/redis/detail/keys.hpp>

using idem::detail::redis_keys_of;
using idem::detail::redis_scope_keys_of;
using idem::detail::redis_scope_of_tag;
using idem::detail::redis_tag_of;

namespace {

// Scopes that a naive layout would confuse: empty, braces that would move the hash tag,
// separators, NUL and high bytes, and every byte value once.
std::vector<std::string> awkward_scopes() {
  std::vector<std::string> scopes = {"",
                                     "tenant",
                                     "{",
                                     "}",
                                     "{x}",
                                     "}{",
                                     "a:b",
                                     "a",
                                     "#expiry",
                                     std::string("t\0x", 3),
                                     std::string(1, '\0'),
                                     std::string(2, '\0'),
                                     "\xff\xfe\x80",
                                     "s"};
  std::string every_byte;
  for (int byte = 0; byte < 256; ++byte)
    every_byte.push_back(static_cast<char>(byte));
  scopes.push_back(every_byte);
  return scopes;
}

}  // namespace

TEST_CASE("a scope's tag is 's' and its bytes in lowercase hexadecimal", "[redis][keys]") {
  CHECK(redis_tag_of("") == "s");
  CHECK(redis_tag_of("a:b") == "s613a62");
  CHECK(redis_tag_of("{x}") == "s7b787d");
  CHECK(redis_tag_of(std::string("\0\xff", 2)) == "s00ff");
}

TEST_CASE("every scope comes back from its tag, whatever bytes it holds", "[redis][keys]") {
  for (const std::string& scope : awkward_scopes()) {
    INFO("a scope of " << scope.size() << " bytes");
    const std::string tag = redis_tag_of(scope);
    // A tag has no brace, so it never moves the hash tag that holds it.
    CHECK(tag.find_first_of("{}") == std::string::npos);
    CHECK(redis_scope_of_tag(tag) == scope);
  }
}

TEST_CASE("text that is no scope's tag names the empty scope", "[redis][keys]") {
  for (const char* text : {"", "x61", "s6", "s616"}) {
    INFO(text);
    CHECK(redis_scope_of_tag(text).empty());
  }
}

TEST_CASE("the keys of two scopes, or of two keys, never meet", "[redis][keys]") {
  const std::vector<std::string> scopes = awkward_scopes();
  const std::vector<std::string> keys = {"", "k", "b:c", "c", ":", "#expiry", "}"};
  std::set<std::string> records;
  std::set<std::string> indexes;
  std::set<std::string> tags;
  for (const std::string& scope : scopes) {
    for (const std::string& key : keys) {
      const auto names = redis_keys_of("idem:", scope, key);
      CHECK(records.insert(names.record).second);
      tags.insert(names.tag);
      indexes.insert(names.expiry);
      indexes.insert(names.lease);
    }
  }
  CHECK(tags.size() == scopes.size());
  CHECK(indexes.size() == 2 * scopes.size());
  // No record is named as any index is, nor as the registry.
  for (const std::string& index : indexes)
    CHECK(records.count(index) == 0);
  CHECK(records.count(idem::detail::redis_registry_of("idem:")) == 0);
  // ("a:b", "c") and ("a", "b:c"): the scope's hexadecimal keeps the ':' out of its name.
  CHECK(redis_keys_of("idem:", "a:b", "c").record != redis_keys_of("idem:", "a", "b:c").record);
}

TEST_CASE("a record's keys carry its scope's hash tag after the prefix", "[redis][keys]") {
  const auto names = redis_keys_of("app:", "{x}", "order-1");
  CHECK(names.tag == "s7b787d");
  CHECK(names.record == "app:{s7b787d}:order-1");
  CHECK(names.expiry == "app:{s7b787d}#expiry");
  CHECK(names.lease == "app:{s7b787d}#lease");
  CHECK(idem::detail::redis_registry_of("app:") == "app:#scopes");
}

TEST_CASE("a scope's keys, from its tag, are those of its records", "[redis][keys]") {
  // sweep and stuck find records by the scope's tag alone: the names must agree with claim's.
  for (const std::string& scope : awkward_scopes()) {
    INFO("a scope of " << scope.size() << " bytes");
    const auto record = redis_keys_of("idem:", scope, "key");
    const auto whole = redis_scope_keys_of("idem:", record.tag);
    CHECK(whole.record_prefix + "key" == record.record);
    CHECK(whole.expiry == record.expiry);
    CHECK(whole.lease == record.lease);
  }
}

TEST_CASE("integers are written in decimal, exactly", "[redis][keys]") {
  using idem::detail::redis_decimal;
  CHECK(redis_decimal(0) == "0");
  CHECK(redis_decimal(std::int64_t{-42}) == "-42");
  CHECK(redis_decimal(std::numeric_limits<std::int64_t>::max()) == "9223372036854775807");
  CHECK(redis_decimal(std::numeric_limits<std::int64_t>::min()) == "-9223372036854775808");
  CHECK(redis_decimal(std::numeric_limits<std::uint64_t>::max()) == "18446744073709551615");
}

TEST_CASE("a time is written as nanoseconds since 1970, and an earlier one is refused",
          "[redis][keys]") {
  using idem::detail::redis_time_argument;
  const idem::store_time epoch{};
  CHECK(redis_time_argument(epoch) == "0");
  const idem::store_time in_2026{std::chrono::seconds{1767225600}};
  CHECK(redis_time_argument(in_2026) == "1767225600000000000");
  CHECK(redis_time_argument(in_2026 + std::chrono::microseconds{1}) == "1767225600000001000");
  CHECK_THROWS_AS(redis_time_argument(epoch - std::chrono::seconds{1}), std::invalid_argument);
}
