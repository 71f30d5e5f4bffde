// The Redis server the store benchmarks run against (scripts/bench.sh starts it and exports
// IDEM_TEST_REDIS_HOST/PORT), a key prefix per run, and the clean-up after one: shared by the
// blocking store's benchmarks and the asynchronous store's.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>

namespace idem_bench::redis {

struct server_address {
  std::string host;
  int port = 0;
};

// Benchmarks run one at a time on the main thread, and nothing sets the environment.
inline std::optional<server_address> bench_server() {
  const char* host = std::getenv("IDEM_TEST_REDIS_HOST");  // NOLINT(concurrency-mt-unsafe)
  const char* port = std::getenv("IDEM_TEST_REDIS_PORT");  // NOLINT(concurrency-mt-unsafe)
  if (host == nullptr || port == nullptr) return std::nullopt;
  return server_address{host, std::atoi(port)};
}

inline constexpr const char* no_server =
    "IDEM_TEST_REDIS_HOST/PORT not set: run scripts/servers/redis.sh start DIR and source "
    "DIR/redis.env first";

// A prefix no earlier run used.
inline std::string unique_prefix(const char* name) {
  return std::string("idem-bench:") + name + ":" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ":";
}

// Deletes what a run wrote under `prefix` (outside the timed loop).
inline void forget(const server_address& where, const std::string& prefix) {
  timeval limit{2, 0};
  redisContext* context = redisConnectWithTimeout(where.host.c_str(), where.port, limit);
  if (context == nullptr) return;
  std::string cursor = "0";
  do {
    auto* page = static_cast<redisReply*>(
        redisCommand(context, "SCAN %s MATCH %s* COUNT 10000", cursor.c_str(), prefix.c_str()));
    if (page == nullptr || page->type != REDIS_REPLY_ARRAY) {
      freeReplyObject(page);
      break;
    }
    cursor.assign(page->element[0]->str, page->element[0]->len);
    for (std::size_t i = 0; i < page->element[1]->elements; ++i) {
      const redisReply* key = page->element[1]->element[i];
      freeReplyObject(redisCommand(context, "UNLINK %b", key->str, key->len));
    }
    freeReplyObject(page);
  } while (cursor != "0");
  redisFree(context);
}

}  // namespace idem_bench::redis
