// redis_store: the store contract (idem/store/contract.hpp) on Redis, through hiredis.
//
// For services whose shared state already lives in Redis. Every operation is one Lua script run
// atomically by the server, so the store is exactly as atomic per record as the contract asks:
//   claim       one script: reads the record, then creates it (with the claim's recovery
//               bytes), takes it over (fence + 1, its recovery bytes kept), or answers its
//               snapshot; the whole record is written in that one step;
//   complete,   compare-and-set on the fence, in a script each; release keeps the fence as a
//   release,    tombstone until the record expires;
//   checkpoint
//   find        one read-only script.
// Scripts are sent with EVALSHA (loaded at construction) and fall back to EVAL when the server
// answers NOSCRIPT, as it does after a restart.
//
// Time. With `redis_time::server` (the default) every lease and expiry is computed from the
// server's clock (`TIME` inside the scripts) and records carry a Redis TTL ending at their
// expiry, so clients whose clocks disagree still agree on who holds a claim; the `now` the store
// is given is not used (a checkpoint's lease_until is read as "this long from now"). With
// `redis_time::caller` the store honours the `now` it is given, as the contract describes and as
// tests with a manual clock need; the Redis TTL is then the retention plus
// `options::caller_time_margin`, so Redis never drops a record a caller still counts as live.
//
// Keys. Every key of one record carries the hash tag of its scope, so a Redis Cluster would keep
// a record, and its scope's indexes, in one slot; the scope is written in hexadecimal, so any
// bytes are allowed and two scopes' keys never meet (the layout: store/redis/keys.hpp). The set
// P#scopes (P the prefix) names the scopes that may hold records. It spans slots, so it is never
// written inside a record's script: claim adds the scope right after its script (same
// connection, same round trip), and sweep removes a scope only by removing it first and adding
// it back if its index is not empty, so a scope with records is never lost from it, whatever the
// interleaving.
// The store talks to one Redis server (hiredis has no cluster client); the layout is what a
// cluster-aware deployment needs.
//
// Eviction. A store that silently loses records loses exactly-once: construction refuses a
// server whose maxmemory-policy is any allkeys-* or volatile-* policy (the records all carry
// TTLs, so volatile-* would evict them too). Use noeviction: a full server then answers claims
// with `full` and complete/checkpoint with store_error(full). A server that hides CONFIG (renamed,
// or an ACL without it) cannot be checked: construction refuses it too, unless
// `options::verify_eviction_policy` is false, which says the operator vouches for the policy.
//
// Connections. A store is a handle: copies share one pool of at most `pool_size` connections,
// safe to use from many threads. A connection that fails is dropped (with every idle one, when
// the server went away), and a fresh one is made on the next call; a call that failed on a
// reused connection because the server had closed it is sent once more on a fresh one, which is
// safe here (a repeated claim answers `existing`, a repeated complete, release or checkpoint is
// fenced). A call the server does not answer throws store_error(unavailable): never a silent
// loss. SIGPIPE is blocked around each exchange (the libpq way), so a dropped connection cannot
// kill the process (unless the process ignores SIGPIPE when the store is made: then it costs
// nothing; keep it ignored). Sweep and stuck pipeline their per-scope scripts.
//
// Durability is Redis's: see docs/stores/redis.md (appendfsync always vs everysec, failover).
// Needs Redis 7.0 or newer (one script declares the allow-oom flag). Every option and its
// default: docs/stores/redis.md. The parts, in store/redis/: the scripts (scripts.hpp), the keys'
// names and the scripts' arguments (keys.hpp), connecting, the checks at start and the exchanges
// (connection.hpp), the decoding of the scripts' answers (reply.hpp), SIGPIPE (sigpipe.hpp).
#ifndef IDEM_STORE_REDIS_HPP
#define IDEM_STORE_REDIS_HPP

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/server/fingerprint/digest.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/connection.hpp>
#include <idem/store/redis/keys.hpp>
#include <idem/store/redis/reply.hpp>
#include <idem/store/redis/scripts.hpp>

namespace idem {

/// Whose clock leases and expiry follow.
enum class redis_time : std::uint8_t {
  server,  // the Redis server's (TIME in the scripts): clients with skewed clocks agree
  caller,  // the `now` each operation is given: tests with a manual clock, replays of time
};

class redis_store {
 public:
  /// Records keep no completion time: complete leaves expires_at as the claim set it, so the
  /// guard need not read the clock again for a completion (idem::reads_completion_time).
  static constexpr bool reads_completion_time = false;

  struct options {
    /// Where the server listens. When `unix_socket` is set, host and port are not used.
    std::string host = "127.0.0.1";
    int port = 6379;
    std::string unix_socket;
    /// AUTH, when set (username empty: the default user); SELECT database, when not 0.
    std::string username;
    std::string password;
    int database = 0;
    /// Every key the store writes begins with this (a namespace): several stores can share one
    /// server. It may not contain '{' or '}', which would move the keys' hash tag.
    std::string prefix = "idem:";
    /// Connections the store may open; callers beyond that wait for one to come back.
    std::size_t pool_size = 8;
    std::chrono::milliseconds connect_timeout{2000};
    /// How long one exchange may wait for the server before store_error(unavailable).
    std::chrono::milliseconds command_timeout{5000};
    /// Whose clock leases and expiry follow (see the top of this header).
    redis_time time = redis_time::server;
    /// redis_time::caller only: how long after a record's retention Redis's own TTL drops it,
    /// a margin for callers whose clocks disagree.
    std::chrono::milliseconds caller_time_margin{std::chrono::minutes{10}};
    /// The most records one scope may hold that have not expired (released ones included: they
    /// keep their fence until then); a claim that would add one more answers `full`. Keeps one
    /// tenant from filling a server others share. Unlimited by default.
    std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
    /// Check at construction that the server cannot evict records (maxmemory-policy). Set to
    /// false only when CONFIG is unavailable and you know the policy is noeviction.
    bool verify_eviction_policy = true;
  };

  /// An unconnected handle, for option structs that hold a store before it is configured
  /// (idempotent's options): assign a constructed store before use. Its operations throw
  /// std::logic_error.
  redis_store() = default;
  /// Connects, checks the server (version 7.0+, maxmemory-policy) and loads the scripts.
  /// Throws std::invalid_argument for bad options or a server that could evict records, and
  /// store_error(unavailable) when the server cannot be reached.
  explicit redis_store(options settings)
      : state_(std::make_shared<shared_state>(std::move(settings))) {
    state_->client.start();
  }

  claim_result claim(const claim_request& request) {
    if (request.lease <= std::chrono::nanoseconds::zero() ||
        request.retention <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument("idem::redis_store: lease and retention must be positive");
    }
    const keys names = keys_of(request.scope, request.key);
    const std::string now = now_argument(request.now);
    const std::string lease = detail::redis_decimal(request.lease.count());
    const std::string retention = detail::redis_decimal(request.retention.count());
    const std::string extra = detail::redis_decimal(extra_ttl_ms());
    const std::string cap = scope_cap();
    const std::string_view fingerprint{reinterpret_cast<const char*>(request.fingerprint.data()),
                                       request.fingerprint.size()};
    const command commands[] = {
        command{script::claim,
                {names.record, names.expiry, names.lease},
                {now, lease, retention, fingerprint, request.key, extra, cap, request.recovery}},
        command{script::enroll, {state().registry}, {names.tag}},
    };
    const auto replies = state().client.exchange(commands, "claim");
    const redisReply* answer = replies[0].get();
    if (is_error(answer)) {
      if (is_out_of_memory(answer)) return {claim_status::full, 0, {}};
      throw failure("claim", answer);
    }
    if (answer->type != REDIS_REPLY_ARRAY || answer->elements < 2 ||
        answer->element[0]->type != REDIS_REPLY_INTEGER) {
      throw malformed("claim");
    }
    const long long status = answer->element[0]->integer;
    // The registry's answer matters only when this claim made a new record: any other answer
    // found its scope enrolled already.
    if (status == 0 && is_error(replies[1].get())) {
      throw failure(
          "claim (registering the scope; the record was written but may be missed "
          "by sweep and stuck until claimed again)",
          replies[1].get());
    }
    claim_result result;
    switch (status) {
      case 0:
        result.status = claim_status::claimed;
        result.fence = detail::redis_fence_of(answer->element[1]);
        return result;
      case 1: {
        if (answer->elements < 7) throw malformed("claim");
        result.status = claim_status::taken_over;
        result.fence = detail::redis_fence_of(answer->element[1]);
        record& taken = result.existing;
        taken.fingerprint = detail::redis_digest_of(answer->element[2]);
        taken.state = record_state::in_progress;
        taken.fence = result.fence;
        taken.created_at = detail::redis_time_of(answer->element[3]);
        taken.lease_until = detail::redis_time_of(answer->element[4]);
        taken.expires_at = detail::redis_time_of(answer->element[5]);
        taken.recovery = detail::reply_text(answer->element[6]);
        return result;
      }
      case 2:
        if (answer->elements < 9) throw malformed("claim");
        result.status = claim_status::existing;
        result.existing = detail::redis_record_of(std::span(answer->element + 1, 8));
        return result;
      case 3:
        result.status = claim_status::full;
        return result;
      default:
        throw malformed("claim");
    }
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    const keys names = keys_of(held.scope, held.key);
    const std::string fence = detail::redis_decimal(held.fence);
    const command commands[] = {
        command{script::complete, {names.record, names.lease}, {fence, response, held.key}}};
    return applied(state().client.exchange(commands, "complete"), "complete");
  }

  bool release(const fenced_key& held) {
    const keys names = keys_of(held.scope, held.key);
    const std::string fence = detail::redis_decimal(held.fence);
    const command commands[] = {
        command{script::release, {names.record, names.lease}, {fence, held.key}}};
    return applied(state().client.exchange(commands, "release"), "release");
  }

  /// With redis_time::server, `lease_until` is read as a duration from this machine's clock
  /// (lease_until - system_clock::now()) and added to the server's time.
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    const keys names = keys_of(held.scope, held.key);
    const std::string fence = detail::redis_decimal(held.fence);
    std::string until;
    std::string extension = "0";
    if (state().settings.time == redis_time::caller) {
      until = detail::redis_time_argument(lease_until);
    } else {
      const auto ahead = std::chrono::duration_cast<std::chrono::nanoseconds>(
          lease_until - std::chrono::system_clock::now());
      extension = detail::redis_decimal(std::max<std::int64_t>(ahead.count(), 0));
    }
    const command commands[] = {command{script::checkpoint,
                                        {names.record, names.lease},
                                        {fence, recovery, until, extension, held.key}}};
    return applied(state().client.exchange(commands, "checkpoint"), "checkpoint");
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    const keys names = keys_of(scope, key);
    const std::string when = now_argument(now);
    const command commands[] = {command{script::find, {names.record}, {when}}};
    const auto replies = state().client.exchange(commands, "find");
    const redisReply* answer = replies[0].get();
    if (is_error(answer)) throw failure("find", answer);
    if (answer->type == REDIS_REPLY_NIL) return std::nullopt;
    if (answer->type != REDIS_REPLY_ARRAY || answer->elements < 8) throw malformed("find");
    record found = detail::redis_record_of(std::span(answer->element, 8));
    found.scope = scope;
    found.key = key;
    return found;
  }

  /// Removes the records that expired by `now` (with redis_time::server, by the server's
  /// clock), and answers how many: those it deleted, and those Redis's TTL had already dropped
  /// whose index entries it removed. Costs one pipelined script per scope that holds records,
  /// plus what it removes.
  std::size_t sweep(store_time now) {
    const std::string when = now_argument(now);
    std::size_t removed = 0;
    for_each_scope_page([&](const std::vector<std::string>& tags) {
      std::vector<std::string> empty;
      std::vector<scope_keys> empty_keys;
      // One pipelined round for the page, then any scope with more due is followed alone.
      std::vector<scope_keys> scopes;
      scopes.reserve(tags.size());
      for (const std::string& tag : tags)
        scopes.push_back(scope_keys_of(tag));
      std::vector<command> round;
      round.reserve(scopes.size());
      const std::string batch = detail::redis_decimal(sweep_batch);
      const std::string zero = "0";
      for (const scope_keys& scope : scopes) {
        round.push_back(command{
            script::sweep, {scope.expiry, scope.lease}, {when, batch, zero, scope.record_prefix}});
      }
      const auto replies = state().client.exchange(round, "sweep");
      for (std::size_t i = 0; i < scopes.size(); ++i) {
        sweep_answer answer = sweep_answer_of(replies[i].get());
        removed += answer.removed;
        std::size_t offset = answer.kept;
        while (answer.seen == sweep_batch) {
          const std::string from = detail::redis_decimal(offset);
          const command more[] = {command{script::sweep,
                                          {scopes[i].expiry, scopes[i].lease},
                                          {when, batch, from, scopes[i].record_prefix}}};
          answer = sweep_answer_of(state().client.exchange(more, "sweep")[0].get());
          removed += answer.removed;
          offset += answer.kept;
        }
        if (answer.left == 0) {
          empty.push_back(tags[i]);
          empty_keys.push_back(scopes[i]);
        }
      }
      forget_empty_scopes(empty, empty_keys);
    });
    return removed;
  }

  /// Live in-progress records whose lease ended by `now`, at most `limit` of them. Reads only.
  std::vector<record> stuck(store_time now, std::size_t limit) const {
    std::vector<record> out;
    if (limit == 0) return out;
    const std::string when = now_argument(now);
    const std::string batch = detail::redis_decimal(stuck_batch);
    for_each_scope_page([&](const std::vector<std::string>& tags) {
      if (out.size() >= limit) return;
      std::vector<scope_keys> scopes;
      scopes.reserve(tags.size());
      for (const std::string& tag : tags)
        scopes.push_back(scope_keys_of(tag));
      std::vector<command> round;
      round.reserve(scopes.size());
      const std::string zero = "0";
      for (const scope_keys& scope : scopes) {
        round.push_back(
            command{script::stuck, {scope.lease}, {when, batch, zero, scope.record_prefix}});
      }
      const auto replies = state().client.exchange(round, "stuck");
      for (std::size_t i = 0; i < scopes.size() && out.size() < limit; ++i) {
        const std::string scope = detail::redis_scope_of_tag(tags[i]);
        std::size_t seen = take_stuck(replies[i].get(), scope, limit, out);
        std::size_t offset = seen;
        while (seen == stuck_batch && out.size() < limit) {
          const std::string from = detail::redis_decimal(offset);
          const command more[] = {command{
              script::stuck, {scopes[i].lease}, {when, batch, from, scopes[i].record_prefix}}};
          seen = take_stuck(state().client.exchange(more, "stuck")[0].get(), scope, limit, out);
          offset += seen;
        }
      }
    });
    return out;
  }

  const options& settings() const { return state().settings; }

 private:
  static constexpr std::size_t sweep_batch = 512;
  static constexpr std::size_t stuck_batch = 256;

  using script = detail::redis_script;
  using command = detail::redis_command;
  using keys = detail::redis_keys;
  using scope_keys = detail::redis_scope_keys;

  // The shared part of every copy: the options, and the client that holds the connections.
  struct shared_state {
    explicit shared_state(options given)
        : settings(with_prefix(std::move(given))), client(client_settings(settings)) {
      if (settings.caller_time_margin < std::chrono::milliseconds::zero()) {
        throw std::invalid_argument("idem::redis_store: caller_time_margin cannot be negative");
      }
    }
    shared_state(const shared_state&) = delete;
    shared_state& operator=(const shared_state&) = delete;
    ~shared_state() = default;

    options settings;
    std::string registry = detail::redis_registry_of(settings.prefix);
    detail::redis_client client;

    // Checked first: the options are checked in the order users meet them.
    static options with_prefix(options given) {
      if (given.prefix.find_first_of("{}") != std::string::npos) {
        throw std::invalid_argument(
            "idem::redis_store: the key prefix may not contain '{' or '}': they would move the "
            "hash tag that keeps a record's keys in one cluster slot");
      }
      return given;
    }

    static detail::redis_settings client_settings(const options& given) {
      return {.host = given.host,
              .port = given.port,
              .unix_socket = given.unix_socket,
              .username = given.username,
              .password = given.password,
              .database = given.database,
              .pool_size = given.pool_size,
              .connect_timeout = given.connect_timeout,
              .command_timeout = given.command_timeout,
              .verify_eviction_policy = given.verify_eviction_policy};
    }
  };

  keys keys_of(std::string_view scope, std::string_view key) const {
    return detail::redis_keys_of(state().settings.prefix, scope, key);
  }
  scope_keys scope_keys_of(std::string_view tag) const {
    return detail::redis_scope_keys_of(state().settings.prefix, tag);
  }

  std::string now_argument(store_time now) const {
    if (state().settings.time == redis_time::server) return {};
    return detail::redis_time_argument(now);
  }

  std::string scope_cap() const {
    const std::size_t cap = state().settings.max_records_per_scope;
    return cap == std::numeric_limits<std::size_t>::max() ? std::string()
                                                          : detail::redis_decimal(cap);
  }

  std::int64_t extra_ttl_ms() const {
    return state().settings.time == redis_time::caller ? state().settings.caller_time_margin.count()
                                                       : 0;
  }

  static bool is_error(const redisReply* reply) noexcept {
    return reply->type == REDIS_REPLY_ERROR;
  }
  static bool is_out_of_memory(const redisReply* reply) noexcept {
    return detail::reply_text(reply).starts_with("OOM");
  }

  store_error failure(const char* operation, const redisReply* reply) const {
    const std::string text(detail::reply_text(reply));
    return store_error(is_out_of_memory(reply) ? store_failure::full : store_failure::unavailable,
                       std::string("idem::redis_store: ") + operation + " failed: the server at " +
                           state().client.where() + " answered: " + text);
  }
  store_error malformed(const char* operation) const {
    return store_error(store_failure::unavailable, std::string("idem::redis_store: ") + operation +
                                                       ": unexpected answer from " +
                                                       state().client.where());
  }

  bool applied(const std::vector<detail::redis_reply>& replies, const char* operation) const {
    const redisReply* answer = replies[0].get();
    if (is_error(answer)) throw failure(operation, answer);
    if (answer->type != REDIS_REPLY_INTEGER) throw malformed(operation);
    return answer->integer == 1;
  }

  struct sweep_answer {
    std::size_t removed = 0;
    std::size_t seen = 0;
    std::size_t kept = 0;
    std::size_t left = 0;
  };

  sweep_answer sweep_answer_of(const redisReply* reply) const {
    if (is_error(reply)) throw failure("sweep", reply);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4) throw malformed("sweep");
    return sweep_answer{static_cast<std::size_t>(reply->element[0]->integer),
                        static_cast<std::size_t>(reply->element[1]->integer),
                        static_cast<std::size_t>(reply->element[2]->integer),
                        static_cast<std::size_t>(reply->element[3]->integer)};
  }

  // Adds the stuck records of one script answer to `out` (up to `limit`); answers how many
  // index entries the script looked at.
  std::size_t take_stuck(const redisReply* reply, const std::string& scope, std::size_t limit,
                         std::vector<record>& out) const {
    if (is_error(reply)) throw failure("stuck", reply);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 || (reply->elements - 1) % 7 != 0) {
      throw malformed("stuck");
    }
    for (std::size_t at = 1; at + 7 <= reply->elements && out.size() < limit; at += 7) {
      record found;
      found.scope = scope;
      found.key = detail::reply_text(reply->element[at]);
      found.fence = detail::redis_fence_of(reply->element[at + 1]);
      found.state = record_state::in_progress;
      found.fingerprint = detail::redis_digest_of(reply->element[at + 2]);
      found.created_at = detail::redis_time_of(reply->element[at + 3]);
      found.lease_until = detail::redis_time_of(reply->element[at + 4]);
      found.expires_at = detail::redis_time_of(reply->element[at + 5]);
      found.recovery = detail::reply_text(reply->element[at + 6]);
      out.push_back(std::move(found));
    }
    return static_cast<std::size_t>(reply->element[0]->integer);
  }

  // Runs `visit(tags)` for each page of the scope registry (SSCAN: a scope may come twice).
  template <class Visit>
  void for_each_scope_page(Visit&& visit) const {
    std::string cursor = "0";
    do {
      const std::vector<std::string_view> scan[] = {
          {"SSCAN", state().registry, cursor, "COUNT", "256"}};
      const auto replies = state().client.plain(scan, "listing scopes");
      const redisReply* page = replies[0].get();
      if (is_error(page)) throw failure("listing scopes", page);
      if (page->type != REDIS_REPLY_ARRAY || page->elements != 2 ||
          page->element[1]->type != REDIS_REPLY_ARRAY) {
        throw malformed("listing scopes");
      }
      cursor = detail::reply_text(page->element[0]);
      std::vector<std::string> tags;
      tags.reserve(page->element[1]->elements);
      for (std::size_t i = 0; i < page->element[1]->elements; ++i) {
        tags.emplace_back(detail::reply_text(page->element[1]->element[i]));
      }
      if (!tags.empty()) visit(tags);
    } while (cursor != "0");
  }

  // A scope whose index was empty leaves the registry, unless a claim wrote into it meanwhile:
  // removed first, then its index counted (both in one round trip, in that order), then put
  // back if not empty. A claim enrolls its scope after writing its record, so however the two
  // interleave, a scope with a record ends up enrolled.
  void forget_empty_scopes(const std::vector<std::string>& tags,
                           const std::vector<scope_keys>& scopes) {
    if (tags.empty()) return;
    std::vector<std::vector<std::string_view>> round;
    round.reserve(2 * tags.size());
    for (std::size_t i = 0; i < tags.size(); ++i) {
      round.push_back({"SREM", state().registry, tags[i]});
      round.push_back({"ZCARD", scopes[i].expiry});
    }
    const auto replies = state().client.plain(round, "sweep");
    std::vector<std::vector<std::string_view>> back;
    for (std::size_t i = 0; i < tags.size(); ++i) {
      const redisReply* left = replies[2 * i + 1].get();
      if (is_error(left)) throw failure("sweep", left);
      if (left->type == REDIS_REPLY_INTEGER && left->integer == 0) continue;
      back.push_back({"SADD", state().registry, tags[i]});
    }
    if (back.empty()) return;
    for (const auto& reply : state().client.plain(back, "sweep")) {
      if (is_error(reply.get())) throw failure("sweep", reply.get());
    }
  }

  shared_state& state() const {
    if (!state_) {
      throw std::logic_error(
          "idem::redis_store: a default-constructed store has no server; assign one made with "
          "redis_store(options) first");
    }
    return *state_;
  }

  std::shared_ptr<shared_state> state_;
};

}  // namespace idem

#endif  // IDEM_STORE_REDIS_HPP
