// The hot paths whose instruction counts an A/B of a code change compares (scripts/hot_path_ab.sh):
// the same calls as the benchmarks idempotent_first/idem, idempotent_replay/idem and
// retrying_success/idem, a fixed number of times each, between callgrind client requests, so
// that callgrind counts each phase alone. Instructions are stable where times are not: the
// count does not move with the machine's load or its CPU.
//
// Built against whichever include/ the script puts first on the path, so it uses only the API
// that every version since 4e7a105 has: <idem/idem.hpp>, the default policies.
#include <idem/idem.hpp>

#include <valgrind/callgrind.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "hot_path_calls.hpp"

namespace {

using idem_ab::calls;
using idem_ab::keep;
using idem_ab::replay_keys;
using idem_ab::response_text;
using idem_ab::scope;

std::string handle(const std::string& body) {
  keep(body);
  return std::string(response_text);
}

struct response {
  int status;
};

[[gnu::noinline]] response deliver(std::string_view key) {
  keep(key);
  return {200};
}

}  // namespace

int main() {
  const std::string body = idem_ab::request_body();
  const auto keys = idem_ab::make_keys(calls);

  idem::idempotent<std::string (*)(const std::string&)> payments{&handle};
  CALLGRIND_ZERO_STATS;
  for (const auto& key : keys) {
    auto outcome = payments(scope, key, body);
    keep(outcome);
  }
  CALLGRIND_DUMP_STATS_AT("idempotent_first");

  for (std::size_t i = 0; i < calls; ++i) {
    auto outcome = payments(scope, keys[i % replay_keys], body);
    keep(outcome);
  }
  CALLGRIND_DUMP_STATS_AT("idempotent_replay");

  idem::retrying call{[](const idem::attempt_context& attempt) { return deliver(attempt.key()); }};
  for (std::size_t i = 0; i < calls; ++i) {
    auto outcome = call();
    keep(outcome);
  }
  CALLGRIND_DUMP_STATS_AT("retrying_success");
  std::printf("%zu calls per phase\n", calls);
}
