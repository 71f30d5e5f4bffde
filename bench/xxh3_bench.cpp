// What a fast request fingerprint costs: XXH3-128 of a 64-byte, 1 KiB and 64 KiB body.
//
//   fingerprint_xxh3_128/idem/N       idem::xxh3_128::hash: the idem::digest a record stores
//   fingerprint_xxh3_128/libxxhash/N  the same idem::digest from the system's libxxhash:
//                                     XXH3_128bits, XXH128_canonicalFromHash, idem::digest
//   xxh3_128_value/idem/N             idem::xxh3_128::hash128: the two 64-bit halves only
//   xxh3_128_value/libxxhash/N        XXH3_128bits
//
// Both fingerprint rows build the same idem::digest, so they differ only in the hashing; the
// value rows show the hashing alone. idem's short paths are inlined here and libxxhash is a
// shared-library call, so the body's address and size pass through DoNotOptimize on every
// iteration: otherwise the compiler could hash once and hoist that out of the loop.
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include <idem/core/fingerprint/xxh3.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace {

std::vector<std::byte> body_of(benchmark::State& state) {
  std::vector<std::byte> body(static_cast<std::size_t>(state.range(0)));
  for (std::size_t i = 0; i < body.size(); ++i)
    body[i] = static_cast<std::byte>(i * 131 + 7);
  return body;
}

/// The body as the loop sees it: opaque to the optimiser on every iteration.
std::span<const std::byte> opaque(const std::vector<std::byte>& body) {
  const std::byte* data = body.data();
  std::size_t size = body.size();
  benchmark::DoNotOptimize(data);
  benchmark::DoNotOptimize(size);
  return {data, size};
}

void set_bytes_processed(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void fingerprint_xxh3_128_idem(benchmark::State& state) {
  const auto body = body_of(state);
  for (auto _ : state) {
    auto digest = idem::xxh3_128::hash(opaque(body));
    benchmark::DoNotOptimize(digest);
  }
  set_bytes_processed(state);
}

void fingerprint_xxh3_128_libxxhash(benchmark::State& state) {
  const auto body = body_of(state);
  for (auto _ : state) {
    const auto bytes = opaque(body);
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes.data(), bytes.size()));
    auto digest = idem::digest{canonical.digest};
    benchmark::DoNotOptimize(digest);
  }
  set_bytes_processed(state);
}

void xxh3_128_value_idem(benchmark::State& state) {
  const auto body = body_of(state);
  for (auto _ : state) {
    const auto bytes = opaque(body);
    auto value = idem::xxh3_128::hash128(bytes.data(), bytes.size());
    benchmark::DoNotOptimize(value);
  }
  set_bytes_processed(state);
}

void xxh3_128_value_libxxhash(benchmark::State& state) {
  const auto body = body_of(state);
  for (auto _ : state) {
    const auto bytes = opaque(body);
    auto value = XXH3_128bits(bytes.data(), bytes.size());
    benchmark::DoNotOptimize(value);
  }
  set_bytes_processed(state);
}

}  // namespace

BENCHMARK(fingerprint_xxh3_128_idem)
    ->Name("fingerprint_xxh3_128/idem")
    ->Arg(64)
    ->Arg(1024)
    ->Arg(65536);
BENCHMARK(fingerprint_xxh3_128_libxxhash)
    ->Name("fingerprint_xxh3_128/libxxhash")
    ->Arg(64)
    ->Arg(1024)
    ->Arg(65536);
BENCHMARK(xxh3_128_value_idem)->Name("xxh3_128_value/idem")->Arg(64)->Arg(1024)->Arg(65536);
BENCHMARK(xxh3_128_value_libxxhash)
    ->Name("xxh3_128_value/libxxhash")
    ->Arg(64)
    ->Arg(1024)
    ->Arg(65536);
