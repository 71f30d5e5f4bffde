// What a request fingerprint costs: SHA-256 of a 64-byte, 1 KiB and 64 KiB body.
//
//   fingerprint_sha256/idem/N     idem::sha256::hash_bytes (SHA extensions where the CPU has them)
//   fingerprint_sha256/openssl/N  OpenSSL's one-shot SHA256(), libcrypto's own assembly
//   fingerprint_sha256/openssl_context/N  OpenSSL's fastest non-deprecated way: the algorithm
//                                 fetched once and one EVP_MD_CTX reused for every digest
//
// For OpenSSL we time SHA256() rather than EVP_Digest(..., EVP_sha256(), nullptr): both are the
// one-shot calls a user reaches for, both run the same assembly, and SHA256() skips EVP's
// per-call context and provider lookup. Both still look the algorithm up on every call (about
// 270 ns on OpenSSL 3.0), so openssl_context is the peer to beat for small inputs.
#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <idem/core/fingerprint/sha256.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

std::vector<unsigned char> body_of(benchmark::State& state) {
  std::vector<unsigned char> body(static_cast<std::size_t>(state.range(0)));
  for (std::size_t i = 0; i < body.size(); ++i)
    body[i] = static_cast<unsigned char>(i * 131 + 7);
  return body;
}

void fingerprint_sha256_idem(benchmark::State& state) {
  const auto body = body_of(state);
  for (auto _ : state) {
    auto digest = idem::sha256::hash_bytes(body.data(), body.size());
    benchmark::DoNotOptimize(digest);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void fingerprint_sha256_openssl(benchmark::State& state) {
  const auto body = body_of(state);
  for (auto _ : state) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(body.data(), body.size(), digest);
    benchmark::DoNotOptimize(digest);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void fingerprint_sha256_openssl_context(benchmark::State& state) {
  const auto body = body_of(state);
  EVP_MD* sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  if (sha256 == nullptr || context == nullptr) {
    state.SkipWithError("OpenSSL could not fetch SHA256");
  } else {
    for (auto _ : state) {
      unsigned char digest[SHA256_DIGEST_LENGTH];
      unsigned int size = 0;
      EVP_DigestInit_ex2(context, sha256, nullptr);
      EVP_DigestUpdate(context, body.data(), body.size());
      EVP_DigestFinal_ex(context, digest, &size);
      benchmark::DoNotOptimize(digest);
    }
  }
  EVP_MD_CTX_free(context);
  EVP_MD_free(sha256);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

}  // namespace

BENCHMARK(fingerprint_sha256_idem)->Name("fingerprint_sha256/idem")->Arg(64)->Arg(1024)->Arg(65536);
BENCHMARK(fingerprint_sha256_openssl)
    ->Name("fingerprint_sha256/openssl")
    ->Arg(64)
    ->Arg(1024)
    ->Arg(65536);
BENCHMARK(fingerprint_sha256_openssl_context)
    ->Name("fingerprint_sha256/openssl_context")
    ->Arg(64)
    ->Arg(1024)
    ->Arg(65536);
