// What the HTTP protocol layer (idem/http.hpp) costs per request, beside the glue the payments
// demo wrote by hand before it (examples/payments/service.hpp, up to issue #32): the key read
// from its field, the outcome mapped to a status, its headers and its body written.
//
//   http_layer_replay/idem     parse_key of a quoted key, write_outcome of a replayed response
//                              (201, two headers, 64-byte body) into an idem::http::reply.
//   http_layer_replay/hand     the demo's glue: the raw field taken as the key, the response's
//                              headers copied, Idempotent-Replayed added, into the same reply.
//   http_layer_refusal/idem    parse_key, write_outcome of an in_progress outcome: a 409
//                              problem+json body (type, title, status, detail), Content-Language
//                              and Retry-After.
//   http_layer_refusal/hand    the demo's glue: a 409 whose body is {"error": message}, written
//                              by nlohmann::json, as the demo wrote it.
//
// The outcomes are made before the clock starts: what is measured is the layer, not the call.
// The hand glue does less (it unquotes no key, sends no Retry-After or problem type): the ratio
// is what the protocol the draft and RFC 9457 ask for costs over it.
#include <benchmark/benchmark.h>

#include <idem/core/request.hpp>
#include <idem/http.hpp>
#include <idem/server/outcome.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace {

using outcome_type = idem::idempotent_outcome<idem::http_response>;

const idem::http::specification& spec() {
  static const idem::http::specification published;
  return published;
}

outcome_type replayed_outcome() {
  return outcome_type::replayed(idem::http_response{
      201,
      {{"Content-Type", "application/json"}, {"Location", "/v1/payments/pay_0123456789"}},
      R"({"id":"pay_0123456789","amount":1250,"currency":"EUR","charge":"ch_1"})"});
}

outcome_type refused_outcome() {
  return outcome_type{idem::verdict::in_progress,
                      "a request with this key is still being processed",
                      std::chrono::milliseconds{12'300}};
}

constexpr std::string_view quoted_key = R"("8e03978e-40d5-43e8-bc93-6894a57f9324")";
constexpr std::string_view bare_key = "8e03978e-40d5-43e8-bc93-6894a57f9324";

// --- the demo's glue, as it was --------------------------------------------------------------

idem::http::reply hand_error_reply(int status, std::string_view message) {
  return {status, {}, "application/json", nlohmann::json{{"error", message}}.dump()};
}

idem::http::reply hand_outcome_reply(const outcome_type& outcome) {
  if (!outcome) return hand_error_reply(outcome.http_status(), outcome.message());
  idem::http::reply answer{
      outcome->status, {}, std::string(outcome->header("Content-Type")), outcome->body};
  for (const auto& [name, value] : outcome->headers)
    if (name != "Content-Type") answer.headers.emplace_back(name, value);
  if (outcome.verdict() == idem::verdict::replayed) {
    answer.headers.emplace_back("Idempotent-Replayed", "true");
  }
  return answer;
}

// --- the layer --------------------------------------------------------------------------------

idem::http::reply layer_reply(std::string_view field, const outcome_type& outcome) {
  const idem::http::parsed_key key = idem::http::parse_key(field);
  benchmark::DoNotOptimize(key.value().data());
  idem::http::reply answer;
  idem::http::write_outcome(outcome, spec(), answer);
  return answer;
}

void http_layer_replay_idem(benchmark::State& state) {
  const outcome_type outcome = replayed_outcome();
  for (auto _ : state) {
    idem::http::reply answer = layer_reply(quoted_key, outcome);
    benchmark::DoNotOptimize(answer);
  }
}

void http_layer_replay_hand(benchmark::State& state) {
  const outcome_type outcome = replayed_outcome();
  for (auto _ : state) {
    const std::string_view key = bare_key;
    benchmark::DoNotOptimize(key.data());
    idem::http::reply answer = hand_outcome_reply(outcome);
    benchmark::DoNotOptimize(answer);
  }
}

void http_layer_refusal_idem(benchmark::State& state) {
  const outcome_type outcome = refused_outcome();
  for (auto _ : state) {
    idem::http::reply answer = layer_reply(quoted_key, outcome);
    benchmark::DoNotOptimize(answer);
  }
}

void http_layer_refusal_hand(benchmark::State& state) {
  const outcome_type outcome = refused_outcome();
  for (auto _ : state) {
    const std::string_view key = bare_key;
    benchmark::DoNotOptimize(key.data());
    idem::http::reply answer = hand_outcome_reply(outcome);
    benchmark::DoNotOptimize(answer);
  }
}

}  // namespace

BENCHMARK(http_layer_replay_idem)->Name("http_layer_replay/idem");
BENCHMARK(http_layer_replay_hand)->Name("http_layer_replay/hand");
BENCHMARK(http_layer_refusal_idem)->Name("http_layer_refusal/idem");
BENCHMARK(http_layer_refusal_hand)->Name("http_layer_refusal/hand");
