// The reconciler's pass on Redis, beside a pass that reads every record
// (bench/reconciler_bench.hpp says what both sides do and how they are named).
//
//   reconciler_pass/idem/redis/records:N       idem::reconciler over idem::redis_store
//                                              (time_source::caller: the manual clock)
//   reconciler_pass/full_scan/redis/records:N  SCAN over the scope's record keys (COUNT 1000),
//                                              each batch's state, lease and expiry read with
//                                              pipelined HMGETs, the in-progress records past
//                                              their lease kept; then the same takeovers
//                                              through the store
//
// Filled with the store's own claim and complete scripts (idem::detail::redis_scripts, EVALSHA),
// pipelined 1,000 records at a time on a connection of its own, so the records and both indexes
// are exactly what the store writes. One pooled connection; appendfsync everysec while the
// fixture lives (below); the server is the one
// scripts/servers/redis.sh starts (IDEM_TEST_REDIS_HOST/PORT). The keys, under a prefix of their
// own, are deleted when the next size is filled and at exit.
#include <benchmark/benchmark.h>

#include <hiredis/hiredis.h>

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/redis.hpp>

#include "reconciler_bench.hpp"

namespace {

namespace bench = idem_bench::reconciler;

// Benchmarks run one at a time on the main thread, and nothing sets the environment.
const char* server_host() {
  return std::getenv("IDEM_TEST_REDIS_HOST");
}  // NOLINT
const char* server_port() {
  return std::getenv("IDEM_TEST_REDIS_PORT");
}  // NOLINT

// A reply, freed when it goes.
struct reply_ptr {
  redisReply* reply = nullptr;
  explicit reply_ptr(void* raw) : reply(static_cast<redisReply*>(raw)) {
    if (reply == nullptr) throw std::runtime_error("the Redis connection was lost");
    if (reply->type == REDIS_REPLY_ERROR) {
      const std::string what(reply->str, reply->len);
      freeReplyObject(reply);
      throw std::runtime_error(what);
    }
  }
  reply_ptr(const reply_ptr&) = delete;
  reply_ptr& operator=(const reply_ptr&) = delete;
  ~reply_ptr() { freeReplyObject(reply); }
  redisReply* operator->() const { return reply; }
};

std::string_view text(const redisReply* reply) {
  return {reply->str, reply->len};
}

std::int64_t number(const redisReply* reply) {
  std::int64_t value = 0;
  if (reply->type != REDIS_REPLY_STRING ||
      std::from_chars(reply->str, reply->str + reply->len, value).ec != std::errc{}) {
    return -1;
  }
  return value;
}

class connection {
 public:
  connection() {
    timeval limit{5, 0};
    context_ = redisConnectWithTimeout(server_host(), std::atoi(server_port()), limit);
    if (context_ == nullptr || context_->err != 0) throw std::runtime_error("cannot connect");
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() { redisFree(context_); }

  reply_ptr command(const std::vector<std::string>& args) {
    append(args);
    return next();
  }
  void append(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const std::string& each : args) {
      argv.push_back(each.data());
      lengths.push_back(each.size());
    }
    redisAppendCommandArgv(context_, static_cast<int>(args.size()), argv.data(), lengths.data());
  }
  reply_ptr next() {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK) throw std::runtime_error("connection lost");
    return reply_ptr(raw);
  }

  // SCAN over the keys matching `pattern`, a batch of names at a time.
  template <class Each>
  void scan(const std::string& pattern, Each&& each) {
    std::string cursor = "0";
    do {
      const reply_ptr page = command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      cursor = std::string(text(page->element[0]));
      std::vector<std::string> names;
      const redisReply* found = page->element[1];
      names.reserve(found->elements);
      for (std::size_t i = 0; i < found->elements; ++i)
        names.emplace_back(text(found->element[i]));
      if (!names.empty()) each(names);
    } while (cursor != "0");
  }

 private:
  redisContext* context_ = nullptr;
};

struct redis_fixture : bench::filled<idem::redis_store> {
  std::string prefix;
  std::string appendfsync = "always";
  idem::detail::redis_scope_keys keys;
  connection raw;

  explicit redis_fixture(std::size_t n)
      : prefix("idem-bench:reconciler:" +
               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ":"),
        keys(idem::detail::redis_scope_keys_of(prefix, idem::detail::redis_tag_of(bench::scope))) {
    records = n;
    idem::redis_store::options options;
    options.host = server_host();
    options.port = std::atoi(server_port());
    options.prefix = prefix;
    options.pool_size = 1;
    options.clock = idem::time_source::caller;
    store = idem::redis_store{options};
    // The takeovers do not wait for the append-only file's fsync: scripts/servers/redis.sh runs
    // with appendfsync always, and 1,000 takeovers each waiting for this machine's disk (about
    // 3 ms), the same on both sides, hide the listing this measures (docs/performance.md, "The
    // reconciler"). Put back as it was when the fixture goes.
    {
      const reply_ptr was = raw.command({"CONFIG", "GET", "appendfsync"});
      if (was->elements == 2) appendfsync = std::string(text(was->element[1]));
      (void)raw.command({"CONFIG", "SET", "appendfsync", "everysec"});
    }

    const std::string claim_sha = load(idem::detail::redis_scripts::claim);
    const std::string complete_sha = load(idem::detail::redis_scripts::complete);
    raw.command({"SADD", idem::detail::redis_registry_of(prefix),
                 idem::detail::redis_tag_of(bench::scope)});
    const std::string now = idem::detail::redis_time_argument(clock.wall_now());
    const std::string lease = std::to_string(bench::lease.count());
    const std::string retention = std::to_string(bench::retention.count());
    const std::string margin = std::to_string(options.caller_time_margin.count());
    const idem::digest print = bench::fingerprint();
    const std::string fingerprint(reinterpret_cast<const char*>(print.data()), print.size());
    std::size_t pending = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string key = bench::key_of(i);
      const std::string record = keys.record_prefix + key;
      raw.append({"EVALSHA", claim_sha, "3", record, keys.expiry, keys.lease, now, lease, retention,
                  fingerprint, key, margin, "", ""});
      ++pending;
      if (!bench::is_stuck(i, n)) {
        raw.append({"EVALSHA", complete_sha, "2", record, keys.lease, "1", bench::response(), key});
        ++pending;
      }
      if (pending >= 1000 || i + 1 == n) {
        for (; pending > 0; --pending)
          (void)raw.next();
      }
    }
  }
  redis_fixture(const redis_fixture&) = delete;
  redis_fixture& operator=(const redis_fixture&) = delete;
  ~redis_fixture() {
    try {
      raw.scan(prefix + "*", [&](const std::vector<std::string>& names) {
        std::vector<std::string> unlink{"UNLINK"};
        unlink.insert(unlink.end(), names.begin(), names.end());
        (void)raw.command(unlink);
      });
      (void)raw.command({"CONFIG", "SET", "appendfsync", appendfsync});
    } catch (const std::exception&) {
      // The server is a private one that goes with the run.
    }
  }

  std::string load(const char* script) {
    const reply_ptr sha = raw.command({"SCRIPT", "LOAD", script});
    return std::string(text(sha.reply));
  }

  // The hand-written pass's read: every record of the scope.
  std::vector<std::string> stuck(idem::store_time now) {
    const auto at = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch());
    std::vector<std::string> out;
    raw.scan(keys.record_prefix + "*", [&](const std::vector<std::string>& names) {
      for (const std::string& name : names)
        raw.append({"HMGET", name, "s", "l", "e"});
      for (const std::string& name : names) {
        const reply_ptr held = raw.next();
        if (held->elements == 3 && held->element[0]->type == REDIS_REPLY_STRING &&
            text(held->element[0]) == "p" && number(held->element[1]) <= at.count() &&
            number(held->element[2]) > at.count()) {
          out.push_back(name.substr(keys.record_prefix.size()));
        }
      }
    });
    return out;
  }
};

bool have_server(benchmark::State& state) {
  if (server_host() != nullptr && server_port() != nullptr) return true;
  state.SkipWithError(
      "IDEM_TEST_REDIS_HOST/PORT not set: run scripts/servers/redis.sh start DIR and source "
      "DIR/redis.env first");
  return false;
}

void reconciler_pass_idem_redis(benchmark::State& state, std::int64_t records) {
  if (!have_server(state)) return;
  auto& fixture = bench::fixture_cache<redis_fixture>(static_cast<std::size_t>(records));
  bench::run_idem(state, fixture);
}

void reconciler_pass_full_scan_redis(benchmark::State& state, std::int64_t records) {
  if (!have_server(state)) return;
  auto& fixture = bench::fixture_cache<redis_fixture>(static_cast<std::size_t>(records));
  bench::run_full_scan(state, fixture, [&](idem::store_time now) { return fixture.stuck(now); });
}

[[maybe_unused]] const bool registered =
    (bench::register_pair("redis", reconciler_pass_idem_redis, reconciler_pass_full_scan_redis),
     true);

}  // namespace
