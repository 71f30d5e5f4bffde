// idem::sha256 is SHA-256 exactly as FIPS 180-4 defines it: the standard's own examples, every
// short length and many long ones against OpenSSL, the same digest however the bytes are
// streamed or aligned, and the same digest from the portable and the SHA-extensions paths.
#include <openssl/sha.h>
#include <catch2/catch.hpp>

#include <idem/core/fingerprint/sha256.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

std::string hex_of(std::span<const std::uint8_t> bytes) {
  return idem::digest(bytes).hex();
}

std::string openssl_hex(const void* data, std::size_t size) {
  std::array<std::uint8_t, SHA256_DIGEST_LENGTH> out{};
  SHA256(static_cast<const unsigned char*>(data), size, out.data());
  return hex_of(out);
}

std::string idem_hex(const void* data, std::size_t size) {
  return hex_of(idem::sha256::hash_bytes(data, size));
}

/// Deterministic test data: std::mt19937_64's output is fixed by the standard, and we draw
/// from it directly rather than through a distribution, whose output is not.
class seeded_bytes {
 public:
  explicit seeded_bytes(std::uint64_t seed) : engine_(seed) {}
  std::size_t below(std::size_t bound) { return static_cast<std::size_t>(engine_() % bound); }
  std::vector<unsigned char> bytes(std::size_t size) {
    std::vector<unsigned char> out(size);
    for (auto& byte : out)
      byte = static_cast<unsigned char>(engine_());
    return out;
  }
  std::uint32_t word() { return static_cast<std::uint32_t>(engine_()); }

 private:
  std::mt19937_64 engine_;
};

/// The digest of `message` fed to a state in pieces of the given sizes (the last piece takes
/// whatever is left).
std::string streamed_hex(std::span<const unsigned char> message,
                         const std::vector<std::size_t>& piece_sizes) {
  idem::sha256::state state;
  std::size_t at = 0;
  for (std::size_t piece : piece_sizes) {
    piece = std::min(piece, message.size() - at);
    state.update(message.data() + at, piece);
    at += piece;
  }
  state.update(message.data() + at, message.size() - at);
  return state.finish().hex();
}

}  // namespace

TEST_CASE("sha256 of the FIPS 180-4 one-block example \"abc\" is ba7816bf...f20015ad") {
  CHECK(idem::sha256::hash("abc").hex() ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("sha256 of the FIPS 180-4 448-bit two-block example is 248d6a61...19db06c1") {
  // 56 bytes: the length no longer fits in the first block, so padding takes a second.
  CHECK(idem::sha256::hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq").hex() ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("sha256 of one million 'a' is cdc76e5c...c7112cd0, one-shot and streamed") {
  const std::string million(1'000'000, 'a');
  const std::string expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  CHECK(idem::sha256::hash(million).hex() == expected);

  idem::sha256::state state;
  for (std::size_t at = 0; at < million.size(); at += 1000)
    state.update(std::string_view(million).substr(at, 1000));
  CHECK(state.finish().hex() == expected);
}

TEST_CASE("sha256 of the empty message is e3b0c442...7852b855, however it is asked for") {
  const std::string expected = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  CHECK(idem::sha256::hash(std::string_view{}).hex() == expected);
  CHECK(idem::sha256::hash(std::span<const std::byte>{}).hex() == expected);
  CHECK(hex_of(idem::sha256::hash_bytes(nullptr, 0)) == expected);
  CHECK(idem::sha256::state{}.finish().hex() == expected);
}

TEST_CASE("sha256 names itself and gives 32-byte digests") {
  STATIC_REQUIRE(idem::HashFunction<idem::sha256>);
  STATIC_REQUIRE(idem::sha256::name == "sha256");
  STATIC_REQUIRE(idem::sha256::digest_size == 32);
  CHECK(idem::sha256::hash("x").size() == 32);
}

TEST_CASE("sha256 of text, of bytes and of a raw pointer give the same digest") {
  const std::string_view text = "POST /payments {\"amount\": 100}";
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(text.data()),
                                         text.size());
  const idem::digest from_text = idem::sha256::hash(text);
  CHECK(idem::sha256::hash(bytes) == from_text);
  CHECK(hex_of(idem::sha256::hash_bytes(text.data(), text.size())) == from_text.hex());
}

TEST_CASE("sha256 matches OpenSSL for every length from 0 to 300 bytes") {
  seeded_bytes random(0x5a256001);
  const auto message = random.bytes(300);
  for (std::size_t size = 0; size <= message.size(); ++size) {
    INFO("length " << size);
    CHECK(idem_hex(message.data(), size) == openssl_hex(message.data(), size));
  }
}

TEST_CASE("sha256 matches OpenSSL for 2,000 random lengths up to 64 KiB") {
  seeded_bytes random(0x5a256002);
  const auto message = random.bytes(64 * 1024);
  for (int trial = 0; trial < 2000; ++trial) {
    // Half the lengths uniform over the whole range, half below 2 KiB, where a padding
    // mistake is as likely and a check is cheaper.
    const std::size_t size =
        trial % 2 == 0 ? random.below(message.size() + 1) : random.below(2048 + 1);
    const std::size_t start = random.below(message.size() - size + 1);
    INFO("length " << size << " at offset " << start);
    CHECK(idem_hex(message.data() + start, size) == openssl_hex(message.data() + start, size));
  }
}

TEST_CASE("sha256 streamed in random pieces gives the one-shot digest") {
  seeded_bytes random(0x5a256003);
  const auto message = random.bytes(5000);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t size = random.below(message.size() + 1);
    const std::span<const unsigned char> prefix(message.data(), size);
    std::vector<std::size_t> pieces;
    // Mostly short pieces, which straddle block boundaries, now and then a long one.
    for (std::size_t total = 0; total < size;) {
      const std::size_t piece = random.below(8) == 0 ? random.below(700) : random.below(70);
      pieces.push_back(piece);
      total += piece;
    }
    INFO("length " << size << " in " << pieces.size() << " pieces");
    CHECK(streamed_hex(prefix, pieces) == idem_hex(prefix.data(), prefix.size()));
  }
}

TEST_CASE("sha256 streamed a byte at a time across the 55/56/64-byte padding boundaries") {
  // 55 bytes is the longest tail whose padding fits in one block; 56 to 63 need two; 64 is a
  // whole block plus a padding block. Each is checked one byte per update(), and as a 1-byte
  // update after an unfinished block.
  seeded_bytes random(0x5a256004);
  const auto message = random.bytes(200);
  for (std::size_t size : {0, 1, 54, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 183, 184}) {
    INFO("length " << size);
    const std::span<const unsigned char> prefix(message.data(), size);
    const std::string expected = openssl_hex(prefix.data(), prefix.size());
    CHECK(streamed_hex(prefix, std::vector<std::size_t>(size, 1)) == expected);
    if (size > 0) CHECK(streamed_hex(prefix, {size - 1}) == expected);
  }
}

TEST_CASE("sha256 finish() may be called twice and leaves the state as it was") {
  idem::sha256::state state;
  state.update("The quick brown fox jumps over the lazy dog");
  const idem::digest first = state.finish();
  CHECK(state.finish() == first);
  CHECK(first.hex() == "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592");
}

TEST_CASE("sha256 update() after finish() continues the same message") {
  const std::string message(150, 'q');
  idem::sha256::state state;
  state.update(std::string_view(message).substr(0, 70));
  (void)state.finish();
  state.update(std::string_view(message).substr(70));
  CHECK(state.finish().hex() == openssl_hex(message.data(), message.size()));
}

TEST_CASE("a copied sha256 state hashes on independently of the original") {
  idem::sha256::state common;
  common.update("POST /payments\n");
  idem::sha256::state other = common;
  common.update("body one");
  other.update("body two");
  CHECK(common.finish() == idem::sha256::hash("POST /payments\nbody one"));
  CHECK(other.finish() == idem::sha256::hash("POST /payments\nbody two"));
}

TEST_CASE("sha256 gives the same digest for input at every alignment") {
  seeded_bytes random(0x5a256005);
  // Room for the longest message at offset 63 from a 64-byte boundary.
  alignas(64) std::array<unsigned char, 4096 + 64> buffer{};
  const auto message = random.bytes(4096);
  for (std::size_t size : {1, 31, 55, 64, 100, 1000, 4096}) {
    const std::string expected = openssl_hex(message.data(), size);
    for (std::size_t offset = 0; offset < 64; ++offset) {
      INFO("length " << size << " at offset " << offset << " from a 64-byte boundary");
      std::copy_n(message.begin(), size, buffer.begin() + static_cast<std::ptrdiff_t>(offset));
      CHECK(idem_hex(buffer.data() + offset, size) == expected);
      CHECK(streamed_hex({buffer.data() + offset, size}, {offset % 7 + 1}) == expected);
    }
  }
}

TEST_CASE("sha256's portable path alone matches OpenSSL for every length from 0 to 300 bytes") {
  seeded_bytes random(0x5a256006);
  const auto message = random.bytes(300);
  for (std::size_t size = 0; size <= message.size(); ++size) {
    INFO("length " << size);
    const auto digest = idem::detail::sha256_hash_with(&idem::detail::sha256_compress_portable,
                                                       message.data(), size);
    CHECK(hex_of(digest) == openssl_hex(message.data(), size));
  }
}

#if defined(__x86_64__) || defined(__i386__)

TEST_CASE("sha256's SHA-extensions path alone matches OpenSSL for every length from 0 to 300") {
  if (!idem::detail::sha256_sha_extensions_available()) {
    WARN("This CPU lacks the SHA extensions; their path is not tested here.");
    return;
  }
  seeded_bytes random(0x5a256007);
  const auto message = random.bytes(300);
  for (std::size_t size = 0; size <= message.size(); ++size) {
    INFO("length " << size);
    const auto digest = idem::detail::sha256_hash_with(
        &idem::detail::sha256_compress_sha_extensions, message.data(), size);
    CHECK(hex_of(digest) == openssl_hex(message.data(), size));
  }
}

TEST_CASE("sha256's portable and SHA-extensions compression agree from random states") {
  if (!idem::detail::sha256_sha_extensions_available()) {
    WARN("This CPU lacks the SHA extensions; their path is not tested here.");
    return;
  }
  // Random chaining values reach states no real message prefix is likely to, and several
  // blocks per call check that the SIMD path carries its state from block to block.
  seeded_bytes random(0x5a256008);
  for (int trial = 0; trial < 200; ++trial) {
    idem::detail::sha256_state_words start;
    for (auto& word : start)
      word = random.word();
    const std::size_t blocks = 1 + random.below(8);
    const auto message = random.bytes(blocks * idem::detail::sha256_block_size + 1);
    const std::size_t offset = random.below(2);  // odd addresses too

    auto portable = start;
    idem::detail::sha256_compress_portable(portable, message.data() + offset, blocks);
    auto extensions = start;
    idem::detail::sha256_compress_sha_extensions(extensions, message.data() + offset, blocks);
    INFO("trial " << trial << ", " << blocks << " blocks");
    CHECK(extensions == portable);
  }
}

#endif

TEST_CASE(
    "sha256 from many threads at once, from first use on, gives every thread the same "
    "digests",
    "[concurrency]") {
  // The first call picks the compression function and caches the choice; under
  // ThreadSanitizer this checks that the cache is published without a data race.
  seeded_bytes random(0x5a256009);
  const auto message = random.bytes(3000);
  const std::array<std::size_t, 4> sizes = {0, 55, 64, 3000};
  std::array<std::string, sizes.size()> expected;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    expected[i] = openssl_hex(message.data(), sizes[i]);

  constexpr int thread_count = 8;
  std::atomic<int> ready{0};
  std::vector<std::array<std::string, sizes.size()>> seen(thread_count);
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      // Start together, so that several threads make their first call at the same moment.
      ready.fetch_add(1);
      while (ready.load() < thread_count)
        std::this_thread::yield();
      for (std::size_t i = 0; i < sizes.size(); ++i)
        seen[static_cast<std::size_t>(t)][i] = idem_hex(message.data(), sizes[i]);
    });
  }
  for (auto& thread : threads)
    thread.join();
  for (const auto& digests : seen)
    CHECK(digests == expected);
}
