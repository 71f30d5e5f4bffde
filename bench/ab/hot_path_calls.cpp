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
#include <vector>

namespace {

constexpr std::string_view scope = "payments";
constexpr std::size_t calls = 20'000;
constexpr std::size_t replay_keys = 1024;
constexpr std::string_view response_text =
    R"({"id":"ch_3MmlLrLkdIwHu7ix0snN0B1","status":"succeeded","amt":9})";

// Keeps the optimiser from dropping a value it sees unused.
template <class T>
void keep(T& value) {
  asm volatile("" : : "r"(&value) : "memory");
}

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

// UUID-shaped (36 characters), distinct, made before counting starts.
std::vector<std::string> make_keys(std::size_t count) {
  std::vector<std::string> keys;
  keys.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    char text[40];
    std::snprintf(text, sizeof text, "2f1e6c1c-3b9a-4f0e-9d6f-%012zx", i * 2654435761u);
    keys.emplace_back(text);
  }
  return keys;
}

}  // namespace

int main() {
  std::string body(256, '\0');
  for (std::size_t i = 0; i < body.size(); ++i)
    body[i] = static_cast<char>('a' + (i * 7) % 26);
  const auto keys = make_keys(calls);

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
