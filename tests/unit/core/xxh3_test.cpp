// xxh3_128 is XXH3-128 bit for bit: every answer is checked against the system's libxxhash
// (XXH3_128bits and its streaming API), every long-input kernel against the portable one, and
// the digest against XXH128_canonicalFromHash.
//
// Inputs are bytes from std::mt19937_64 (its output is fixed by the standard, so every platform
// hashes the same bytes), seeded with the constants named below; lengths and splits are drawn
// from the same engine with plain modulo, never a distribution, whose output is not portable.
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <idem/core/fingerprint/xxh3.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace x = idem::detail::xxh3;
using idem::xxh3_128;

constexpr std::uint64_t input_seed = 0x1dE3'0001;
constexpr std::uint64_t lengths_seed = 20240601;
constexpr std::uint64_t splits_seed = 0x5911'75;
constexpr std::uint64_t kernels_seed = 0xAC'C0;
constexpr std::size_t max_input = 64 * 1024;

/// 64 KiB of deterministic pseudo-random bytes, plus 64 so any offset up to 63 still has 64 KiB.
const std::vector<std::uint8_t>& input_bytes() {
  static const std::vector<std::uint8_t> bytes = [] {
    std::vector<std::uint8_t> out(max_input + 64);
    std::mt19937_64 engine{input_seed};
    for (std::uint8_t& byte : out)
      byte = static_cast<std::uint8_t>(engine() >> 56);
    return out;
  }();
  return bytes;
}

XXH128_hash_t reference(const void* data, std::size_t size) {
  return XXH3_128bits(data, size);
}

bool same(const xxh3_128::value& ours, const XXH128_hash_t& theirs) {
  return ours.low64 == theirs.low64 && ours.high64 == theirs.high64;
}

bool same(const x::u128& ours, const XXH128_hash_t& theirs) {
  return ours.low == theirs.low64 && ours.high == theirs.high64;
}

/// libxxhash's streaming state, freed on scope exit.
struct reference_state {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state{XXH3_createState(),
                                                                 &XXH3_freeState};
  reference_state() { XXH3_128bits_reset(state.get()); }
  void update(const void* data, std::size_t size) { XXH3_128bits_update(state.get(), data, size); }
  XXH128_hash_t digest() const { return XXH3_128bits_digest(state.get()); }
};

/// Every kernel but the scalar one, which the others are held to.
constexpr std::array<x::kernel, 2> simd_kernels = {x::kernel::sse2, x::kernel::avx2};

const char* kernel_name(x::kernel path) {
  switch (path) {
    case x::kernel::scalar:
      return "scalar";
    case x::kernel::sse2:
      return "sse2";
    case x::kernel::avx2:
      return "avx2";
  }
  return "?";
}

}  // namespace

TEST_CASE("xxh3_128 is a HashFunction named xxh3_128 with 16-byte digests") {
  STATIC_REQUIRE(idem::HashFunction<xxh3_128>);
  CHECK(xxh3_128::name == "xxh3_128");
  CHECK(xxh3_128::digest_size == 16);
  CHECK(xxh3_128::hash(std::string_view{"abc"}).size() == 16);
}

TEST_CASE("the empty input hashes to the published XXH3-128 value, null pointer or not") {
  const xxh3_128::value expected{0x6001c324468d497fU, 0x99aa06d3014798d8U};
  CHECK(xxh3_128::hash128(nullptr, 0) == expected);
  CHECK(xxh3_128::hash128(input_bytes().data(), 0) == expected);
  CHECK(same(expected, reference(nullptr, 0)));
  CHECK(xxh3_128::hash(std::string_view{}).hex() == "99aa06d3014798d86001c324468d497f");
  xxh3_128::state state;
  state.update(nullptr, 0);
  CHECK(state.finish128() == expected);
}

TEST_CASE("one-shot hashes equal libxxhash's XXH3_128bits for every length from 0 to 256") {
  const auto& bytes = input_bytes();
  for (std::size_t size = 0; size <= 256; ++size) {
    INFO("length " << size);
    CHECK(same(xxh3_128::hash128(bytes.data(), size), reference(bytes.data(), size)));
  }
}

TEST_CASE("one-shot hashes equal libxxhash's XXH3_128bits for 10,000 random lengths to 64 KiB") {
  // Lengths are log-uniform (a random bit width, then a random length of that width), so
  // short and long inputs are both well covered and the test stays fast.
  const auto& bytes = input_bytes();
  std::mt19937_64 engine{lengths_seed};
  for (int i = 0; i < 10'000; ++i) {
    const std::uint64_t bits = engine() % 17;  // 0..16: up to 65535 bytes
    const std::size_t size = static_cast<std::size_t>(engine() & ((std::uint64_t{1} << bits) - 1));
    const std::size_t offset = static_cast<std::size_t>(engine() % 64);
    INFO("length " << size << " at offset " << offset);
    REQUIRE(same(xxh3_128::hash128(bytes.data() + offset, size),
                 reference(bytes.data() + offset, size)));
  }
  CHECK(same(xxh3_128::hash128(bytes.data(), max_input), reference(bytes.data(), max_input)));
}

TEST_CASE("the digest is the canonical form: high64 then low64, each big-endian") {
  const auto& bytes = input_bytes();
  for (const std::size_t size : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 5000}) {
    INFO("length " << size);
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, reference(bytes.data(), size));
    const idem::digest digest = xxh3_128::hash(std::as_bytes(std::span{bytes.data(), size}));
    REQUIRE(digest.size() == sizeof canonical.digest);
    CHECK(std::memcmp(digest.data(), canonical.digest, sizeof canonical.digest) == 0);
  }
}

TEST_CASE("text and byte overloads hash the same bytes to the same digest") {
  const std::string text = "POST /payments {\"amount\": 100}";
  const idem::digest from_text = xxh3_128::hash(std::string_view{text});
  CHECK(from_text == xxh3_128::hash(std::as_bytes(std::span{text.data(), text.size()})));
  xxh3_128::state state;
  state.update(std::string_view{text});
  CHECK(state.finish() == from_text);
}

TEST_CASE("streaming in random splits equals the one-shot hash and libxxhash's streaming") {
  const auto& bytes = input_bytes();
  std::mt19937_64 engine{splits_seed};
  for (int trial = 0; trial < 300; ++trial) {
    const std::uint64_t bits = engine() % 17;
    const std::size_t size = static_cast<std::size_t>(engine() & ((std::uint64_t{1} << bits) - 1));
    // Small pieces (up to 300 bytes), to cross the buffer often, or large ones.
    const std::uint64_t max_piece = (trial % 2 == 0) ? 300 : size + 1;
    xxh3_128::state ours;
    reference_state theirs;
    std::size_t done = 0;
    while (done < size) {
      const std::size_t piece =
          std::min(size - done, static_cast<std::size_t>(engine() % max_piece + 1));
      ours.update(bytes.data() + done, piece);
      theirs.update(bytes.data() + done, piece);
      done += piece;
    }
    INFO("length " << size << ", trial " << trial);
    REQUIRE(ours.finish128() == xxh3_128::hash128(bytes.data(), size));
    REQUIRE(same(ours.finish128(), theirs.digest()));
  }
}

TEST_CASE(
    "byte-at-a-time streaming matches at every length across the 240, stripe and block "
    "boundaries") {
  // Every prefix up to a little past two 1024-byte blocks: the short/long switch at 240, the
  // 256-byte buffer, every 64-byte stripe edge and the scrambles at 1024 and 2048.
  const auto& bytes = input_bytes();
  xxh3_128::state ours;
  reference_state theirs;
  for (std::size_t size = 1; size <= 2200; ++size) {
    ours.update(bytes.data() + size - 1, 1);
    theirs.update(bytes.data() + size - 1, 1);
    INFO("length " << size);
    REQUIRE(ours.finish128() == xxh3_128::hash128(bytes.data(), size));
    REQUIRE(same(ours.finish128(), theirs.digest()));
  }
}

TEST_CASE("finishing does not end the state: later bytes extend the same input") {
  const auto& bytes = input_bytes();
  xxh3_128::state state;
  state.update(bytes.data(), 100);
  CHECK(state.finish128() == xxh3_128::hash128(bytes.data(), 100));
  state.update(bytes.data() + 100, 3000);
  CHECK(state.finish128() == xxh3_128::hash128(bytes.data(), 3100));
}

TEST_CASE("unaligned input gives the same hash as aligned input, one-shot and streamed") {
  const auto& bytes = input_bytes();
  for (const std::size_t size : {3, 7, 15, 16, 100, 200, 241, 1000, 4099}) {
    // The same bytes copied to every offset of a 64-byte-aligned buffer.
    alignas(64) static std::array<std::uint8_t, 4099 + 64> shifted;
    const XXH128_hash_t expected = reference(bytes.data(), size);
    for (std::size_t offset = 0; offset < 64; ++offset) {
      std::memcpy(shifted.data() + offset, bytes.data(), size);
      INFO("length " << size << " at offset " << offset);
      REQUIRE(same(xxh3_128::hash128(shifted.data() + offset, size), expected));
      xxh3_128::state state;
      state.update(shifted.data() + offset, size / 3);
      state.update(shifted.data() + offset + size / 3, size - size / 3);
      REQUIRE(same(state.finish128(), expected));
    }
  }
}

TEST_CASE("every long-input kernel this CPU has hashes exactly as the scalar kernel does") {
  const auto& bytes = input_bytes();
  std::vector<std::size_t> sizes;
  for (std::size_t size = 241; size <= 2100; ++size)
    sizes.push_back(size);
  for (const std::size_t size : {4095, 4096, 4097, 16383, 16384, 16385, 65535, 65536})
    sizes.push_back(size);
  REQUIRE(x::available(x::kernel::scalar));
  for (const x::kernel path : simd_kernels) {
    if (!x::available(path)) {
      WARN("skipped: this CPU or build has no " << kernel_name(path) << " kernel");
      continue;
    }
    for (const std::size_t size : sizes) {
      INFO(kernel_name(path) << " kernel, length " << size);
      const x::u128 scalar = x::hash_long_with(x::kernel::scalar, bytes.data() + 1, size);
      REQUIRE(same(scalar, reference(bytes.data() + 1, size)));
      const x::u128 simd = x::hash_long_with(path, bytes.data() + 1, size);
      REQUIRE((simd.low == scalar.low && simd.high == scalar.high));
    }
  }
}

TEST_CASE("every kernel consumes any run of stripes from any place in a block as scalar does") {
  // What streaming relies on: runs that start mid-block and cross one or more scrambles,
  // with or without a last stripe.
  const auto& bytes = input_bytes();
  std::mt19937_64 engine{kernels_seed};
  for (const x::kernel path : simd_kernels) {
    if (!x::available(path)) {
      WARN("skipped: this CPU or build has no " << kernel_name(path) << " kernel");
      continue;
    }
    const x::consume_function simd = x::kernel_function(path);
    for (int trial = 0; trial < 200; ++trial) {
      std::array<std::uint64_t, x::lanes> start;
      for (std::uint64_t& word : start)
        word = engine();
      const std::size_t stripes = static_cast<std::size_t>(engine() % 40);
      const std::size_t stripe_in_block = static_cast<std::size_t>(engine() % 16);
      const std::size_t offset = static_cast<std::size_t>(engine() % 64);
      const std::uint8_t* last = (engine() % 2 == 0) ? nullptr : bytes.data() + 7;
      std::array<std::uint64_t, x::lanes> expected = start;
      std::array<std::uint64_t, x::lanes> actual = start;
      x::consume_scalar(expected.data(), bytes.data() + offset, stripes, stripe_in_block, last);
      simd(actual.data(), bytes.data() + offset, stripes, stripe_in_block, last);
      INFO(kernel_name(path) << ": " << stripes << " stripes from stripe " << stripe_in_block
                             << (last != nullptr ? ", with a last stripe" : ""));
      REQUIRE(actual == expected);
    }
  }
}

TEST_CASE("every kernel consumes stripes listed by address as scalar consumes them in a row") {
  // What hash_joined's one-call path relies on: stripe i of a first block read from wherever
  // stripes[i] points (here, in reverse order through the input), then the last stripe.
  const auto& bytes = input_bytes();
  std::mt19937_64 engine{kernels_seed + 1};
  std::vector<x::kernel> paths{x::kernel::scalar};
  for (const x::kernel path : simd_kernels) {
    if (x::available(path)) {
      paths.push_back(path);
    } else {
      WARN("skipped: this CPU or build has no " << kernel_name(path) << " kernel");
    }
  }
  for (std::size_t count = 0; count < x::stripes_per_block; ++count) {
    std::array<std::uint64_t, x::lanes> start;
    for (std::uint64_t& word : start)
      word = engine();
    // The stripes in a row, for consume_scalar; the same stripes again, scattered.
    const std::size_t offset = static_cast<std::size_t>(engine() % 64);
    std::vector<std::uint8_t> row(
        bytes.begin() + static_cast<std::ptrdiff_t>(offset),
        bytes.begin() + static_cast<std::ptrdiff_t>(offset + (count + 1) * x::stripe_size));
    std::vector<std::uint8_t> scattered(row.size() + 7);
    std::vector<const std::uint8_t*> at(count);
    for (std::size_t i = 0; i < count; ++i) {
      std::uint8_t* place = scattered.data() + 7 + (count - 1 - i) * x::stripe_size;
      std::memcpy(place, row.data() + i * x::stripe_size, x::stripe_size);
      at[i] = place;
    }
    const std::uint8_t* last = row.data() + count * x::stripe_size;
    std::array<std::uint64_t, x::lanes> expected = start;
    x::consume_scalar(expected.data(), row.data(), count, 0, last);
    for (const x::kernel path : paths) {
      INFO(kernel_name(path) << " kernel, " << count << " stripes");
      std::array<std::uint64_t, x::lanes> actual = start;
      x::kernel_functions_of(path).consume_listed(actual.data(), at.data(), count, last);
      REQUIRE(actual == expected);
    }
  }
}

TEST_CASE("hashing head then tail where they lie equals hashing them joined, with every kernel") {
  // hash_joined reads the stripes wholly in either part in place and puts together only the
  // one across the join and a last stripe that reaches back into head. Each part is an exact
  // heap copy, so a read past either end is an error under AddressSanitizer.
  const auto& bytes = input_bytes();
  std::mt19937_64 engine{splits_seed + 1};
  std::vector<std::size_t> totals;
  for (std::size_t total = 0; total <= 600; ++total)
    totals.push_back(total);
  // Around block ends (1,024 bytes of stripes): the join in a block's last stripe, runs that
  // cross a scramble, a head of more than one block.
  for (const std::size_t total :
       {1023, 1024, 1025, 1087, 1088, 1089, 1100, 2047, 2048, 2113, 3000, 4096, 4161, 16384, 16449})
    totals.push_back(total);
  for (int i = 0; i < 200; ++i)
    totals.push_back(static_cast<std::size_t>(engine() % 8192));
  std::vector<x::kernel> paths{x::kernel::scalar};
  for (const x::kernel path : simd_kernels) {
    if (x::available(path)) {
      paths.push_back(path);
    } else {
      WARN("skipped: this CPU or build has no " << kernel_name(path) << " kernel");
    }
  }
  std::size_t checked = 0;
  for (const std::size_t total : totals) {
    std::vector<std::size_t> heads = {0,   1,   7,   8,   9,    43,   63,   64,   65,
                                      127, 128, 129, 960, 1000, 1023, 1024, 1025, 1100};
    for (const std::size_t from_end : {0, 1, 63, 64, 65})
      heads.push_back(total >= from_end ? total - from_end : 0);
    for (int i = 0; i < 4; ++i)
      heads.push_back(static_cast<std::size_t>(engine() % (total + 1)));
    const XXH128_hash_t expected = reference(bytes.data(), total);
    for (const std::size_t head_size : heads) {
      if (head_size > total) continue;
      const std::vector<std::uint8_t> head(bytes.begin(), bytes.begin() + head_size);
      const std::vector<std::uint8_t> tail(bytes.begin() + head_size, bytes.begin() + total);
      for (const x::kernel path : paths) {
        INFO(kernel_name(path) << " kernel, " << head_size << " + " << (total - head_size)
                               << " bytes");
        const x::u128 joined = x::hash_joined(x::kernel_functions_of(path), head.data(),
                                              head.size(), tail.data(), tail.size());
        REQUIRE(same(joined, expected));
        ++checked;
      }
    }
  }
  CHECK(checked > 10'000);
  const std::string_view text{reinterpret_cast<const char*>(bytes.data()), 3000};
  CHECK(xxh3_128::hash(text.substr(0, 55), text.substr(55)) == xxh3_128::hash(text));
  CHECK(xxh3_128::hash(std::string_view{}, std::string_view{}) == xxh3_128::hash(""));
}

TEST_CASE("the process-wide kernel is the best one available") {
  const x::kernel chosen = x::selected_kernel();
  CHECK(x::available(chosen));
  for (const x::kernel path : simd_kernels) {
    if (path > chosen) CHECK_FALSE(x::available(path));
  }
}

TEST_CASE("threads hashing at once from the first call agree on every value", "[concurrency]") {
  // Run alone (as ctest runs each case), this is the process's first long hash, so the threads
  // race to choose the kernel; ThreadSanitizer checks that the choice is published safely.
  const auto& bytes = input_bytes();
  constexpr std::size_t thread_count = 4;
  std::array<xxh3_128::value, thread_count> one_shot{};
  std::array<xxh3_128::value, thread_count> streamed{};
  {
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < thread_count; ++t) {
      threads.emplace_back([&bytes, &one_shot, &streamed, t] {
        one_shot[t] = xxh3_128::hash128(bytes.data(), max_input);
        xxh3_128::state state;
        state.update(bytes.data(), 1000);
        state.update(bytes.data() + 1000, max_input - 1000);
        streamed[t] = state.finish128();
      });
    }
    for (std::thread& thread : threads)
      thread.join();
  }
  const XXH128_hash_t expected = reference(bytes.data(), max_input);
  for (std::size_t t = 0; t < thread_count; ++t) {
    CHECK(same(one_shot[t], expected));
    CHECK(same(streamed[t], expected));
  }
}
