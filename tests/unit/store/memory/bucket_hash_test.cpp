// The memory store's bucket hash: SipHash-1-3 of an unambiguous encoding of (scope, key), and
// which of its bits choose the shard and the hint.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/bucket_hash.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

TEST_CASE("the bucket hash is SipHash-1-3 of scope and key padded to words, then both lengths",
          "[memory_store]") {
  // The encoding is what makes distinct (scope, key) pairs distinct messages: each part padded
  // with zeros to a whole word, then the two lengths as 16-bit little-endian numbers.
  // SipHash-1-3 itself, against an independent implementation: CPython's hash of bytes is
  // SipHash-1-3 under its hash secret, which PYTHONHASHSEED=0 makes the zero key
  // (PYTHONHASHSEED=0 python3 -c "print(hex(hash(b'abc') & (2**64 - 1)))").
  CHECK(idem::detail::siphash13::hash({0, 0}, "abc", 3) == 0xc03bc3a0042630f2ULL);
  CHECK(idem::detail::siphash13::hash({0, 0}, "hello world, 20 byte", 20) == 0x32d20752fc1f70f1ULL);
  const idem::detail::siphash_key key{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  const auto encoded = [](std::string_view scope, std::string_view id) {
    std::string message;
    for (const std::string_view part : {scope, id}) {
      message.append(part);
      message.append((8 - part.size() % 8) % 8, '\0');
    }
    for (const std::size_t size : {scope.size(), id.size()}) {
      message.push_back(static_cast<char>(size & 0xff));
      message.push_back(static_cast<char>(size >> 8));
    }
    return message;
  };
  std::string text;
  for (int i = 0; i < 300; ++i)
    text.push_back(static_cast<char>('A' + (i * 37) % 61));
  std::size_t checked = 0;
  for (std::size_t scope_size = 0; scope_size <= 20; ++scope_size) {
    for (const std::size_t id_size : {0, 1, 7, 8, 9, 15, 16, 17, 36, 255, 257}) {
      const std::string_view scope = std::string_view(text).substr(0, scope_size);
      const std::string_view id = std::string_view(text).substr(40, id_size);
      const std::string message = encoded(scope, id);
      REQUIRE(idem::detail::memory::bucket_hash(key, scope, id) ==
              idem::detail::siphash13::hash(key, message.data(), message.size()));
      ++checked;
    }
  }
  CHECK(checked == 21 * 11);
  // Moving bytes between scope and key, or padding zeros into either, changes the hash.
  CHECK(idem::detail::memory::bucket_hash(key, "ab", "c") !=
        idem::detail::memory::bucket_hash(key, "a", "bc"));
  CHECK(idem::detail::memory::bucket_hash(key, "a", "") !=
        idem::detail::memory::bucket_hash(key, std::string_view("a\0", 2), ""));
  CHECK(idem::detail::memory::bucket_hash(key, "", "a") !=
        idem::detail::memory::bucket_hash(key, "", std::string_view("a\0", 2)));
}

TEST_CASE("the hint is the 16 bits of the bucket hash just below the shard's", "[memory_store]") {
  using idem::detail::memory::hint_of;
  using idem::detail::memory::shard_shift;
  CHECK(hint_of(0) == 0);
  CHECK(hint_of(std::uint64_t{0xffff} << 42) == 0xffff);
  CHECK(hint_of(std::uint64_t{0x1234} << 42) == 0x1234);
  // Neither the shard's bits above nor the bucket's below reach it.
  CHECK(hint_of(~std::uint64_t{0} << shard_shift) == 0);
  CHECK(hint_of((std::uint64_t{1} << 42) - 1) == 0);
  CHECK((~std::uint64_t{0} >> shard_shift) == 63);  // 64 shards
}
