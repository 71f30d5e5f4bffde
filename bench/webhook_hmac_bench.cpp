// What a webhook signature costs to check: HMAC-SHA-256 of "<timestamp>.<body>" for a 256-byte
// and a 4 KiB body (a small event and a large one), idem's beside OpenSSL's.
//
//   webhook_hmac/idem/N              idem::hmac_sha256::sign (idem's SHA-256, SHA extensions
//                                    where the CPU has them), the timestamp and body passed as
//                                    parts, nothing copied
//   webhook_hmac/openssl/N           OpenSSL's one-shot HMAC(EVP_sha256(), ...), over the same
//                                    text joined first, as a receiver written with it does
//   webhook_hmac/openssl_context/N   OpenSSL's fastest way: one EVP_MAC fetched and one context
//                                    made once, EVP_MAC_init with the key and the digest named
//                                    every call, the two parts given as updates
//   webhook_check/idem/N             webhook_receiver::check whole: the field parsed, the HMAC,
//                                    the constant-time comparison, the tolerance, the event id
//                                    read from the JSON body
#include <benchmark/benchmark.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include <idem/core/fingerprint/hmac.hpp>
#include <idem/http/webhook.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view key = "whsec_4eC39HqLyjWDarjtT1zdp7dc";
constexpr std::string_view stamp = "1733580000";

std::string body_of(const benchmark::State& state) {
  std::string body = R"({"id":"evt_1","data":")";
  body.resize(static_cast<std::size_t>(state.range(0)) - 2, 'x');
  return body + "\"}";
}

void webhook_hmac_idem(benchmark::State& state) {
  const std::string body = body_of(state);
  for (auto _ : state) {
    auto tag = idem::hmac_sha256::sign(key, {stamp, ".", body});
    benchmark::DoNotOptimize(tag);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void webhook_hmac_openssl(benchmark::State& state) {
  const std::string body = body_of(state);
  for (auto _ : state) {
    const std::string text = std::string(stamp) + "." + body;
    unsigned char tag[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
         reinterpret_cast<const unsigned char*>(text.data()), text.size(), tag, &size);
    benchmark::DoNotOptimize(tag);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void webhook_hmac_openssl_context(benchmark::State& state) {
  const std::string body = body_of(state);
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* context = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  if (context == nullptr) {
    state.SkipWithError("OpenSSL could not fetch HMAC");
  } else {
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                 OSSL_PARAM_END};
    for (auto _ : state) {
      unsigned char tag[EVP_MAX_MD_SIZE];
      std::size_t size = 0;
      EVP_MAC_init(context, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params);
      EVP_MAC_update(context, reinterpret_cast<const unsigned char*>(stamp.data()), stamp.size());
      EVP_MAC_update(context, reinterpret_cast<const unsigned char*>("."), 1);
      EVP_MAC_update(context, reinterpret_cast<const unsigned char*>(body.data()), body.size());
      EVP_MAC_final(context, tag, &size, sizeof tag);
      benchmark::DoNotOptimize(tag);
    }
  }
  EVP_MAC_CTX_free(context);
  EVP_MAC_free(mac);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void webhook_check_idem(benchmark::State& state) {
  const std::string body = body_of(state);
  idem::http::webhook_sender sender;
  sender.name = "provider";
  sender.secrets = {std::string(key)};
  const idem::http::webhook_receiver receiver{sender};
  const auto now = std::chrono::system_clock::now();
  const std::string signature =
      idem::http::sign_webhook(key, std::chrono::time_point_cast<std::chrono::seconds>(now), body);
  const auto fields = [&signature](std::string_view name) {
    std::vector<std::string_view> values;
    if (idem::header_name_equals(name, idem::http::webhook_signature_field))
      values.emplace_back(signature);
    return values;
  };
  for (auto _ : state) {
    auto checked = receiver.check(fields, body, now);
    if (!checked) {
      state.SkipWithError("the check refused a signed delivery");
      break;
    }
    benchmark::DoNotOptimize(checked);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

}  // namespace

BENCHMARK(webhook_hmac_idem)->Name("webhook_hmac/idem")->Arg(256)->Arg(4096);
BENCHMARK(webhook_hmac_openssl)->Name("webhook_hmac/openssl")->Arg(256)->Arg(4096);
BENCHMARK(webhook_hmac_openssl_context)->Name("webhook_hmac/openssl_context")->Arg(256)->Arg(4096);
BENCHMARK(webhook_check_idem)->Name("webhook_check/idem")->Arg(256)->Arg(4096);
