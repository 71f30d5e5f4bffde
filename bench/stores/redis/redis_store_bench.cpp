// idem::redis_store beside the same work written by hand on hiredis.
//
// Both sides send the same commands with the same scripts (idem::detail::redis_scripts, loaded
// with SCRIPT LOAD and called with EVALSHA), build the same key names, and take the same answer
// apart into the same values, over one loopback connection to the server that
// scripts/servers/redis.sh starts (IDEM_TEST_REDIS_HOST/PORT), on the server's clock:
//   redis_cycle    a new key each iteration: claim (one round trip: the claim script and the
//                  scope registry's SADD script, pipelined), then complete with a 64-byte
//                  response under the fence it got (a second round trip);
//   redis_replay   one completed key, claimed again each iteration: answers existing, and the
//                  record's fields and 1 KiB response are copied out.
// What idem adds over the hand-written client is its own: a connection pool (a mutex and a
// vector), SIGPIPE blocked around each exchange (two pthread_sigmask calls), the fence and
// state checks and an idem::record built from the answer. The raw client leaves SIGPIPE alone,
// as a hand-written one usually does (and dies if its server goes away over a unix socket).
// Each benchmark runs on one thread: the round trip, not the client, is what a thread waits for.
#include <benchmark/benchmark.h>

#include <hiredis/hiredis.h>

#include <idem/store/redis.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "redis_bench_server.hpp"

namespace {

using idem_bench::redis::bench_server;
using idem_bench::redis::forget;
using idem_bench::redis::no_server;
using idem_bench::redis::server_address;
using idem_bench::redis::unique_prefix;

using namespace std::chrono_literals;

const idem::digest fingerprint = [] {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return idem::digest{bytes};
}();

// --- the hand-written client --------------------------------------------------------------------

class raw_client {
 public:
  raw_client(const server_address& where, std::string prefix) : prefix_(std::move(prefix)) {
    timeval limit{2, 0};
    context_ = redisConnectWithTimeout(where.host.c_str(), where.port, limit);
    if (context_ == nullptr || context_->err != 0) throw std::runtime_error("cannot connect");
    claim_sha_ = load(idem::detail::redis_scripts::claim);
    enroll_sha_ = load(idem::detail::redis_scripts::enroll);
    complete_sha_ = load(idem::detail::redis_scripts::complete);
    registry_ = prefix_ + "#scopes";
  }
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;
  ~raw_client() { redisFree(context_); }

  struct claimed {
    long long status = -1;
    std::uint64_t fence = 0;
    idem::record existing;
  };

  claimed claim(std::string_view scope, std::string_view key) {
    const names keys = names_of(scope, key);
    const std::string lease = std::to_string(std::chrono::nanoseconds(30s).count());
    const std::string retention = std::to_string(std::chrono::nanoseconds(10min).count());
    const std::string_view print{reinterpret_cast<const char*>(fingerprint.data()),
                                 fingerprint.size()};
    const char* claim_argv[] = {
        "EVALSHA",
        claim_sha_.c_str(),
        "3",
        keys.record.c_str(),
        keys.expiry.c_str(),
        keys.lease.c_str(),
        "",
        lease.c_str(),
        retention.c_str(),
        print.data(),
        key.data(),
        "0",
        "",   // no per-scope cap, as redis_store passes it (max_records_per_scope unset)
        ""};  // no recovery bytes for the new record, as redis_store passes none
    const std::size_t claim_lengths[] = {7,
                                         claim_sha_.size(),
                                         1,
                                         keys.record.size(),
                                         keys.expiry.size(),
                                         keys.lease.size(),
                                         0,
                                         lease.size(),
                                         retention.size(),
                                         print.size(),
                                         key.size(),
                                         1,
                                         0,
                                         0};
    redisAppendCommandArgv(context_, 14, claim_argv, claim_lengths);
    const char* enroll_argv[] = {"EVALSHA", enroll_sha_.c_str(), "1", registry_.c_str(),
                                 keys.tag.c_str()};
    const std::size_t enroll_lengths[] = {7, enroll_sha_.size(), 1, registry_.size(),
                                          keys.tag.size()};
    redisAppendCommandArgv(context_, 5, enroll_argv, enroll_lengths);
    redisReply* answer = next();
    redisReply* enrolled = next();
    if (answer->type != REDIS_REPLY_ARRAY || answer->elements < 2) {
      // The store's claim script changed its arguments or its answer: say so, rather than
      // read past the reply.
      const std::string what = answer->type == REDIS_REPLY_ERROR
                                   ? std::string(answer->str, answer->len)
                                   : "an unexpected reply";
      freeReplyObject(answer);
      freeReplyObject(enrolled);
      throw std::runtime_error("raw claim: " + what);
    }
    claimed out;
    out.status = answer->element[0]->integer;
    if (out.status == 0) {
      out.fence = static_cast<std::uint64_t>(answer->element[1]->integer);
    } else if (out.status == 2) {
      redisReply** f = answer->element + 1;
      idem::record& r = out.existing;
      r.fence = number<std::uint64_t>(f[0]);
      r.state = text(f[1]) == "c" ? idem::record_state::completed : idem::record_state::in_progress;
      const std::string_view bytes = text(f[2]);
      r.fingerprint = idem::digest{
          std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size())};
      r.created_at = idem::store_time{std::chrono::nanoseconds{number<std::int64_t>(f[3])}};
      r.lease_until = idem::store_time{std::chrono::nanoseconds{number<std::int64_t>(f[4])}};
      r.expires_at = idem::store_time{std::chrono::nanoseconds{number<std::int64_t>(f[5])}};
      r.response = text(f[6]);
      r.recovery = text(f[7]);
    }
    freeReplyObject(answer);
    freeReplyObject(enrolled);
    return out;
  }

  bool complete(std::string_view scope, std::string_view key, std::uint64_t fence,
                std::string_view response) {
    const names keys = names_of(scope, key);
    const std::string fence_text = std::to_string(fence);
    const char* argv[] = {"EVALSHA",
                          complete_sha_.c_str(),
                          "2",
                          keys.record.c_str(),
                          keys.lease.c_str(),
                          fence_text.c_str(),
                          response.data(),
                          key.data()};
    const std::size_t lengths[] = {7,
                                   complete_sha_.size(),
                                   1,
                                   keys.record.size(),
                                   keys.lease.size(),
                                   fence_text.size(),
                                   response.size(),
                                   key.size()};
    auto* reply = static_cast<redisReply*>(redisCommandArgv(context_, 8, argv, lengths));
    if (reply == nullptr) throw std::runtime_error("connection lost");
    const bool applied = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
    freeReplyObject(reply);
    return applied;
  }

 private:
  struct names {
    std::string tag, record, expiry, lease;
  };

  names names_of(std::string_view scope, std::string_view key) const {
    static constexpr char digits[] = "0123456789abcdef";
    names out;
    out.tag.push_back('s');
    for (const char c : scope) {
      out.tag.push_back(digits[static_cast<unsigned char>(c) >> 4]);
      out.tag.push_back(digits[static_cast<unsigned char>(c) & 0xf]);
    }
    const std::string base = prefix_ + "{" + out.tag + "}";
    out.record = base + ":";
    out.record.append(key);
    out.expiry = base + "#expiry";
    out.lease = base + "#lease";
    return out;
  }

  std::string load(const char* script) {
    auto* reply = static_cast<redisReply*>(redisCommand(context_, "SCRIPT LOAD %s", script));
    if (reply == nullptr || reply->type != REDIS_REPLY_STRING) throw std::runtime_error("load");
    std::string sha(reply->str, reply->len);
    freeReplyObject(reply);
    return sha;
  }

  redisReply* next() {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK) throw std::runtime_error("connection lost");
    return static_cast<redisReply*>(raw);
  }

  static std::string_view text(const redisReply* reply) { return {reply->str, reply->len}; }
  template <class Integer>
  static Integer number(const redisReply* reply) {
    Integer value = 0;
    std::from_chars(reply->str, reply->str + reply->len, value);
    return value;
  }

  redisContext* context_ = nullptr;
  std::string prefix_;
  std::string registry_;
  std::string claim_sha_, enroll_sha_, complete_sha_;
};

idem::redis_store make_store(const server_address& where, const char* name) {
  idem::redis_store::options options;
  options.host = where.host;
  options.port = where.port;
  options.prefix = unique_prefix(name);
  options.pool_size = 1;
  return idem::redis_store(options);
}

const std::string response_64(64, 'r');
const std::string response_1k(1024, 'R');

void redis_cycle_idem(benchmark::State& state) {
  const auto where = bench_server();
  if (!where) return state.SkipWithError(no_server);
  idem::redis_store store = make_store(*where, "cycle-idem");
  std::uint64_t counter = 0;
  std::size_t wrong = 0;
  const auto now = std::chrono::system_clock::now();
  for (auto _ : state) {
    const std::string key = "key-" + std::to_string(counter++);
    const idem::claim_result claimed =
        store.claim(idem::claim_request{"tenant", key, fingerprint, now, 30s, 10min});
    if (claimed.status != idem::claim_status::claimed ||
        !store.complete({"tenant", key, claimed.fence}, response_64, now)) {
      ++wrong;
    }
  }
  forget(*where, store.settings().prefix);
  if (wrong != 0) state.SkipWithError("a cycle did not claim and complete");
}

void redis_cycle_raw(benchmark::State& state) {
  const auto where = bench_server();
  if (!where) return state.SkipWithError(no_server);
  const std::string prefix = unique_prefix("cycle-raw");
  raw_client client(*where, prefix);
  std::uint64_t counter = 0;
  std::size_t wrong = 0;
  for (auto _ : state) {
    const std::string key = "key-" + std::to_string(counter++);
    const auto claimed = client.claim("tenant", key);
    if (claimed.status != 0 || !client.complete("tenant", key, claimed.fence, response_64)) {
      ++wrong;
    }
  }
  forget(*where, prefix);
  if (wrong != 0) state.SkipWithError("a cycle did not claim and complete");
}

void redis_replay_idem(benchmark::State& state) {
  const auto where = bench_server();
  if (!where) return state.SkipWithError(no_server);
  idem::redis_store store = make_store(*where, "replay-idem");
  const auto now = std::chrono::system_clock::now();
  const idem::claim_request request{"tenant", "replayed", fingerprint, now, 30s, 10min};
  const auto first = store.claim(request);
  (void)store.complete({"tenant", "replayed", first.fence}, response_1k, now);
  std::size_t wrong = 0;
  for (auto _ : state) {
    const idem::claim_result again = store.claim(request);
    if (again.status != idem::claim_status::existing || again.existing.response.size() != 1024) {
      ++wrong;
    }
    benchmark::DoNotOptimize(again);
  }
  forget(*where, store.settings().prefix);
  if (wrong != 0) state.SkipWithError("a replay did not answer existing with the response");
}

void redis_replay_raw(benchmark::State& state) {
  const auto where = bench_server();
  if (!where) return state.SkipWithError(no_server);
  const std::string prefix = unique_prefix("replay-raw");
  raw_client client(*where, prefix);
  const auto first = client.claim("tenant", "replayed");
  (void)client.complete("tenant", "replayed", first.fence, response_1k);
  std::size_t wrong = 0;
  for (auto _ : state) {
    const auto again = client.claim("tenant", "replayed");
    if (again.status != 2 || again.existing.response.size() != 1024) ++wrong;
    benchmark::DoNotOptimize(again);
  }
  forget(*where, prefix);
  if (wrong != 0) state.SkipWithError("a replay did not answer existing with the response");
}

}  // namespace

BENCHMARK(redis_cycle_idem)->Name("redis_cycle/idem")->UseRealTime();
BENCHMARK(redis_cycle_raw)->Name("redis_cycle/raw")->UseRealTime();
BENCHMARK(redis_replay_idem)->Name("redis_replay/idem")->UseRealTime();
BENCHMARK(redis_replay_raw)->Name("redis_replay/raw")->UseRealTime();
