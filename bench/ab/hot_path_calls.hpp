// What the hot-path drivers (hot_path_calls.cpp, async_hot_path_calls.cpp) share: the calls'
// scope, keys, request and response, and how many calls a phase makes (scripts/hot_path_ab.sh
// divides each phase's instructions by `calls`).
#ifndef IDEM_BENCH_AB_HOT_PATH_CALLS_HPP
#define IDEM_BENCH_AB_HOT_PATH_CALLS_HPP

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace idem_ab {

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

// UUID-shaped (36 characters), distinct, made before counting starts.
inline std::vector<std::string> make_keys(std::size_t count) {
  std::vector<std::string> keys;
  keys.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    char text[40];
    std::snprintf(text, sizeof text, "2f1e6c1c-3b9a-4f0e-9d6f-%012zx", i * 2654435761u);
    keys.emplace_back(text);
  }
  return keys;
}

// The request every call sends: 256 bytes.
inline std::string request_body() {
  std::string body(256, '\0');
  for (std::size_t i = 0; i < body.size(); ++i)
    body[i] = static_cast<char>('a' + (i * 7) % 26);
  return body;
}

}  // namespace idem_ab

#endif  // IDEM_BENCH_AB_HOT_PATH_CALLS_HPP
