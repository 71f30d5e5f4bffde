// Idempotency keys: the generators write RFC 9562 UUID text (version 4 random, version 7 time
// first), unique and reproducible from a seed; key_buffer accepts exactly the keys is_valid_key
// calls valid: 1 to 255 bytes of visible ASCII.
#include <catch2/catch.hpp>
#include <idem/idem.hpp>

#include "support/scripted_words.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace std::chrono_literals;

/// The 8-4-4-4-12 form in lowercase hex, with the given version digit and the RFC 9562 variant.
bool is_uuid_text(std::string_view key, char version) {
  if (key.size() != 36) return false;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  const char variant = key[19];
  return key[14] == version &&
         (variant == '8' || variant == '9' || variant == 'a' || variant == 'b');
}

using idem_test::scripted_words;

template <class Generator>
std::string generate_with_words(std::uint64_t first, std::uint64_t second,
                                idem::manual_clock clock = idem::manual_clock{}) {
  scripted_words rng{0};
  rng.words = {first, second};
  return std::string{Generator{}.generate(rng, clock).view()};
}

template <class Generator>
std::vector<std::string> keys_from_seed(std::uint64_t seed, std::size_t count) {
  idem::xoshiro256ss rng{seed};
  idem::manual_clock clock;
  std::vector<std::string> keys;
  keys.reserve(count);
  for (std::size_t i = 0; i < count; ++i)
    keys.emplace_back(Generator{}.generate(rng, clock).view());
  return keys;
}

/// The first 48 bits of a UUID's text: its first 12 hex digits, around the first dash.
std::string first_48_bits(std::string_view key) {
  return std::string{key.substr(0, 8)} + std::string{key.substr(9, 4)};
}

std::string hex12(std::int64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "%012llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

// --- uuid_v4 -------------------------------------------------------------------------------

TEST_CASE("a uuid_v4 key is RFC 9562 text: 8-4-4-4-12 lowercase hex, version 4, variant 10") {
  const auto keys = keys_from_seed<idem::uuid_v4>(1, 10'000);
  const auto malformed = std::count_if(keys.begin(), keys.end(),
                                       [](const std::string& k) { return !is_uuid_text(k, '4'); });
  CHECK(malformed == 0);
  const auto invalid = std::count_if(keys.begin(), keys.end(),
                                     [](const std::string& k) { return !idem::is_valid_key(k); });
  CHECK(invalid == 0);
  CHECK(keys.front().size() == 36);
  CHECK(keys.front()[14] == '4');
}

TEST_CASE("a uuid_v4 key is the engine's 128 bits with only the version and variant bits set") {
  // Every hex digit appears, so the text of each nibble is checked.
  CHECK(generate_with_words<idem::uuid_v4>(0x0123456789abcdefULL, 0xfedcba9876543210ULL) ==
        "01234567-89ab-4def-bedc-ba9876543210");
  CHECK(generate_with_words<idem::uuid_v4>(0, 0) == "00000000-0000-4000-8000-000000000000");
  CHECK(generate_with_words<idem::uuid_v4>(~0ULL, ~0ULL) == "ffffffff-ffff-4fff-bfff-ffffffffffff");
}

TEST_CASE("a uuid_v4 key's digits are printf's for 100,000 engine outputs, every digit in place") {
  // The digits are made 16 at a time in vector registers; printf's %x is the reference, and
  // 100,000 random words put every nibble value at every position many times over.
  idem::xoshiro256ss words{11};
  std::size_t wrong = 0;
  std::string first_wrong;
  for (int i = 0; i < 100'000; ++i) {
    const std::uint64_t high = (words() & ~std::uint64_t{0xf000}) | 0x4000;
    const std::uint64_t low = (words() & (~std::uint64_t{0} >> 2)) | (std::uint64_t{1} << 63);
    char expected[40];
    std::snprintf(expected, sizeof expected, "%08llx-%04llx-%04llx-%04llx-%012llx",
                  static_cast<unsigned long long>(high >> 32),
                  static_cast<unsigned long long>((high >> 16) & 0xffff),
                  static_cast<unsigned long long>(high & 0xffff),
                  static_cast<unsigned long long>(low >> 48),
                  static_cast<unsigned long long>(low & 0xffffffffffffULL));
    const std::string made = generate_with_words<idem::uuid_v4>(high, low);
    if (made != expected && wrong++ == 0) first_wrong = made + " for " + expected;
  }
  INFO(first_wrong);
  CHECK(wrong == 0);
}

TEST_CASE("a uuid_v4 variant digit takes all four values 8, 9, a and b") {
  const auto keys = keys_from_seed<idem::uuid_v4>(2, 1000);
  std::string seen;
  for (const auto& key : keys)
    if (seen.find(key[19]) == std::string::npos) seen += key[19];
  std::sort(seen.begin(), seen.end());
  CHECK(seen == "89ab");
}

TEST_CASE("100,000 uuid_v4 keys from one seeded engine are all distinct") {
  auto keys = keys_from_seed<idem::uuid_v4>(3, 100'000);
  std::sort(keys.begin(), keys.end());
  CHECK(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
}

TEST_CASE("the same seed gives the same uuid_v4 keys, and another seed other keys") {
  const auto first = keys_from_seed<idem::uuid_v4>(42, 1000);
  CHECK(keys_from_seed<idem::uuid_v4>(42, 1000) == first);
  const auto other = keys_from_seed<idem::uuid_v4>(43, 1000);
  std::size_t same = 0;
  for (std::size_t i = 0; i < first.size(); ++i)
    same += first[i] == other[i] ? 1 : 0;
  CHECK(same == 0);
}

// --- uuid_v7 -------------------------------------------------------------------------------

TEST_CASE("a uuid_v7 key is RFC 9562 text with version 7 and variant 10") {
  const auto keys = keys_from_seed<idem::uuid_v7>(4, 10'000);
  const auto malformed = std::count_if(keys.begin(), keys.end(),
                                       [](const std::string& k) { return !is_uuid_text(k, '7'); });
  CHECK(malformed == 0);
  CHECK(generate_with_words<idem::uuid_v7>(0xfedcba9876543210ULL, 0x0123456789abcdefULL,
                                           idem::manual_clock{std::chrono::system_clock::time_point{
                                               std::chrono::milliseconds{0x0123456789ab}}}) ==
        "01234567-89ab-7210-8123-456789abcdef");
}

TEST_CASE("a uuid_v7 key starts with the clock's wall time in Unix milliseconds") {
  const std::chrono::system_clock::time_point start{1767225600s + 123ms};
  idem::manual_clock clock{start};
  idem::xoshiro256ss rng{5};
  const std::chrono::nanoseconds steps[] = {0ns, 1ms, 999us, 1s, 1h, 24h * 365};
  for (auto step : steps) {
    clock.advance(step);
    const auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock.wall_now().time_since_epoch())
            .count();
    CAPTURE(millis);
    const auto key = idem::uuid_v7{}.generate(rng, clock);
    CHECK(first_48_bits(key.view()) == hex12(millis));
  }
  // The fixed start: 1767225600123 ms is 0x019b76daa87b.
  idem::manual_clock fresh{start};
  CHECK(first_48_bits(idem::uuid_v7{}.generate(rng, fresh).view()) == "019b76daa87b");
}

TEST_CASE("uuid_v7 keys made at increasing times sort in time order") {
  idem::manual_clock clock{std::chrono::system_clock::time_point{1767225600s}};
  idem::xoshiro256ss rng{6};
  std::vector<std::string> keys;
  // Steps from 1 ms doubling to 2^35 ms (a year), about 87 years in all, so that every time digit
  // but the slowest changes along the way.
  std::chrono::nanoseconds step = 1ms;
  for (int i = 0; i < 36 * 40; ++i) {
    keys.emplace_back(idem::uuid_v7{}.generate(rng, clock).view());
    clock.advance(step);
    if (i % 40 == 39) step *= 2;
  }
  CHECK(std::is_sorted(keys.begin(), keys.end()));
  CHECK(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
  CHECK(first_48_bits(keys.front()) != first_48_bits(keys.back()));
}

// --- key_buffer and is_valid_key -----------------------------------------------------------

TEST_CASE("key_buffer rejects an empty key") {
  CHECK_THROWS_AS(idem::key_buffer{std::string_view{}}, std::invalid_argument);
  CHECK_THROWS_AS(idem::key_buffer{""}, std::invalid_argument);
  CHECK_FALSE(idem::is_valid_key(""));
}

TEST_CASE("key_buffer accepts 255 bytes and rejects 256") {
  const std::string longest(255, 'k');
  const idem::key_buffer key{longest};
  CHECK(key.view() == longest);
  CHECK(key.size() == 255);
  const std::string too_long(256, 'k');
  CHECK_THROWS_AS(idem::key_buffer{too_long}, std::invalid_argument);
  CHECK_THROWS_WITH(idem::key_buffer{too_long}, Catch::Contains("255"));
  CHECK_FALSE(idem::is_valid_key(too_long));
}

TEST_CASE("key_buffer rejects anything but visible ASCII") {
  const std::string rejected[] = {
      "has space", "tab\there",   "new\nline", std::string("nul\0byte", 8),
      "del\x7f",   "caf\xc3\xa9",  // UTF-8 for "café"
      "\x80",      "\xff",
  };
  for (const auto& text : rejected) {
    CAPTURE(text);
    CHECK_THROWS_AS(idem::key_buffer{text}, std::invalid_argument);
    CHECK_FALSE(idem::is_valid_key(text));
  }
  // The edges of the visible range, 0x21 '!' and 0x7e '~', are accepted.
  CHECK(idem::key_buffer{"!"}.view() == "!");
  CHECK(idem::key_buffer{"~"}.view() == "~");
  CHECK(idem::key_buffer{"order-42:retry_1/ABC~!"}.view() == "order-42:retry_1/ABC~!");
}

TEST_CASE("copies of a key_buffer hold the same key and compare equal") {
  const idem::key_buffer original{"payment-7f3a"};
  const idem::key_buffer copy = original;
  CHECK(copy == original);
  CHECK(copy.view() == "payment-7f3a");
  idem::key_buffer assigned{"something-else-entirely"};
  CHECK_FALSE(assigned == original);
  assigned = original;
  CHECK(assigned == original);
  CHECK(assigned.size() == original.size());
  CHECK_FALSE(idem::key_buffer{"payment-7f3b"} == original);
  CHECK_FALSE(idem::key_buffer{"payment-7f3"} == original);
}

TEST_CASE("is_valid_key honours a custom maximum length") {
  CHECK(idem::is_valid_key("abcde", 5));
  CHECK_FALSE(idem::is_valid_key("abcdef", 5));
  CHECK(idem::is_valid_key("a", 1));
  CHECK_FALSE(idem::is_valid_key("a", 0));
  const std::string long_key(1000, 'x');
  CHECK(idem::is_valid_key(long_key, 1000));
  CHECK_FALSE(idem::is_valid_key(long_key));
  CHECK_FALSE(idem::is_valid_key("two words", 1000));
}

TEST_CASE("is_valid_key tests every byte of every length, each byte value at each place") {
  // is_valid_key reads eight bytes at a time, the last word overlapping and a short key padded:
  // every one of the 256 byte values, at every position of keys 1 to 40 bytes long (every word
  // boundary and tail length), must be judged as the byte-by-byte rule judges it.
  auto rule = [](std::string_view key) {
    return std::all_of(key.begin(), key.end(), [](char c) { return c >= 0x21 && c <= 0x7e; });
  };
  std::size_t disagreements = 0;
  std::size_t checked = 0;
  for (std::size_t length = 1; length <= 40; ++length) {
    for (std::size_t at = 0; at < length; ++at) {
      for (int value = 0; value < 256; ++value) {
        std::string key(length, 'k');
        key[at] = static_cast<char>(value);
        ++checked;
        if (idem::is_valid_key(key) != rule(key)) ++disagreements;
      }
    }
  }
  CHECK(checked == 256 * (40 * 41 / 2));
  CHECK(disagreements == 0);
  // The edges themselves, at the end of a key whose length is not a multiple of eight.
  CHECK(idem::is_valid_key("abcdefghi!"));
  CHECK(idem::is_valid_key("abcdefghi~"));
  CHECK_FALSE(idem::is_valid_key("abcdefghi "));
  CHECK_FALSE(idem::is_valid_key("abcdefghi\x7f"));
  CHECK_FALSE(idem::is_valid_key(std::string_view{"abcdefghi\0", 10}));
  static_assert(idem::is_valid_key("usable-in-constant-expressions"));
}
