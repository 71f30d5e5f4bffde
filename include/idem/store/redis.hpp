// redis_store: the store contract (idem/store/contract.hpp) on Redis, through hiredis.
//
// For services whose shared state already lives in Redis. Every operation is one Lua script run
// atomically by the server, so the store is exactly as atomic per record as the contract asks:
//   claim       one script: reads the record, then creates it, takes it over (fence + 1), or
//               answers its snapshot; the whole record is written in that one step;
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
// Keys. Every key of one record carries the hash tag of its scope, `{s<hex of the scope>}`, so a
// Redis Cluster would keep a record, and its scope's indexes, in one slot. The scope is written
// in hexadecimal, so any bytes (NUL, ':', '{', '}') are allowed and ("a:b", "c") never meets
// ("a", "b:c"); the 's' keeps the tag non-empty for the empty scope. With prefix P:
//   P{sHEX}:KEY      hash: the record (n fence, s state, f fingerprint, c created, l lease, e
//                    expiry, v response, r recovery; times in nanoseconds since the epoch)
//   P{sHEX}#expiry   sorted set: every record of the scope by expiry (what sweep reads)
//   P{sHEX}#lease    sorted set: in-progress records by lease deadline (what stuck reads)
//   P#scopes         set: the scopes that may hold records. It spans slots, so it is never
//                    written inside a record's script: claim adds the scope right after its
//                    script (same connection, same round trip), and sweep removes a scope only
//                    by removing it first and adding it back if its index is not empty, so a
//                    scope with records is never lost from it, whatever the interleaving.
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
// default: docs/stores/redis.md. The scripts are in store/redis/scripts.hpp, the decoding of
// their answers in store/redis/reply.hpp.
#ifndef IDEM_STORE_REDIS_HPP
#define IDEM_STORE_REDIS_HPP

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <initializer_list>
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
#include <idem/store/detail/connection_pool.hpp>
#include <idem/store/redis/reply.hpp>
#include <idem/store/redis/scripts.hpp>
#include <idem/store/redis/sigpipe.hpp>

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
  explicit redis_store(options settings) : pool_(std::make_shared<pool>(std::move(settings))) {
    pool_->start();
  }

  claim_result claim(const claim_request& request) {
    if (request.lease <= std::chrono::nanoseconds::zero() ||
        request.retention <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument("idem::redis_store: lease and retention must be positive");
    }
    const keys names = keys_of(request.scope, request.key);
    const std::string now = now_argument(request.now);
    const std::string lease = decimal(request.lease.count());
    const std::string retention = decimal(request.retention.count());
    const std::string extra = decimal(extra_ttl_ms());
    const std::string cap = scope_cap();
    const std::string_view fingerprint{reinterpret_cast<const char*>(request.fingerprint.data()),
                                       request.fingerprint.size()};
    const command commands[] = {
        command{script::claim,
                {names.record, names.expiry, names.lease},
                {now, lease, retention, fingerprint, request.key, extra, cap}},
        command{script::enroll, {state().registry}, {names.tag}},
    };
    const auto replies = state().exchange(commands, "claim");
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
    const std::string fence = decimal(held.fence);
    const command commands[] = {
        command{script::complete, {names.record, names.lease}, {fence, response, held.key}}};
    return applied(state().exchange(commands, "complete"), "complete");
  }

  bool release(const fenced_key& held) {
    const keys names = keys_of(held.scope, held.key);
    const std::string fence = decimal(held.fence);
    const command commands[] = {
        command{script::release, {names.record, names.lease}, {fence, held.key}}};
    return applied(state().exchange(commands, "release"), "release");
  }

  /// With redis_time::server, `lease_until` is read as a duration from this machine's clock
  /// (lease_until - system_clock::now()) and added to the server's time.
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    const keys names = keys_of(held.scope, held.key);
    const std::string fence = decimal(held.fence);
    std::string until;
    std::string extension = "0";
    if (state().settings.time == redis_time::caller) {
      until = time_argument(lease_until);
    } else {
      const auto ahead = std::chrono::duration_cast<std::chrono::nanoseconds>(
          lease_until - std::chrono::system_clock::now());
      extension = decimal(std::max<std::int64_t>(ahead.count(), 0));
    }
    const command commands[] = {command{script::checkpoint,
                                        {names.record, names.lease},
                                        {fence, recovery, until, extension, held.key}}};
    return applied(state().exchange(commands, "checkpoint"), "checkpoint");
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    const keys names = keys_of(scope, key);
    const std::string when = now_argument(now);
    const command commands[] = {command{script::find, {names.record}, {when}}};
    const auto replies = state().exchange(commands, "find");
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
      const std::string batch = decimal(sweep_batch);
      const std::string zero = "0";
      for (const scope_keys& scope : scopes) {
        round.push_back(command{
            script::sweep, {scope.expiry, scope.lease}, {when, batch, zero, scope.record_prefix}});
      }
      const auto replies = state().exchange(round, "sweep");
      for (std::size_t i = 0; i < scopes.size(); ++i) {
        sweep_answer answer = sweep_answer_of(replies[i].get());
        removed += answer.removed;
        std::size_t offset = answer.kept;
        while (answer.seen == sweep_batch) {
          const std::string from = decimal(offset);
          const command more[] = {command{script::sweep,
                                          {scopes[i].expiry, scopes[i].lease},
                                          {when, batch, from, scopes[i].record_prefix}}};
          answer = sweep_answer_of(state().exchange(more, "sweep")[0].get());
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
    const std::string batch = decimal(stuck_batch);
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
      const auto replies = state().exchange(round, "stuck");
      for (std::size_t i = 0; i < scopes.size() && out.size() < limit; ++i) {
        const std::string scope = scope_of_tag(tags[i]);
        std::size_t seen = take_stuck(replies[i].get(), scope, limit, out);
        std::size_t offset = seen;
        while (seen == stuck_batch && out.size() < limit) {
          const std::string from = decimal(offset);
          const command more[] = {command{
              script::stuck, {scopes[i].lease}, {when, batch, from, scopes[i].record_prefix}}};
          seen = take_stuck(state().exchange(more, "stuck")[0].get(), scope, limit, out);
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

  enum class script : std::uint8_t {
    claim,
    enroll,
    complete,
    release,
    checkpoint,
    find,
    sweep,
    stuck
  };
  static constexpr std::size_t script_count = 8;

  static const char* script_text(script which) noexcept {
    switch (which) {
      case script::claim:
        return detail::redis_scripts::claim;
      case script::enroll:
        return detail::redis_scripts::enroll;
      case script::complete:
        return detail::redis_scripts::complete;
      case script::release:
        return detail::redis_scripts::release;
      case script::checkpoint:
        return detail::redis_scripts::checkpoint;
      case script::find:
        return detail::redis_scripts::find;
      case script::sweep:
        return detail::redis_scripts::sweep;
      case script::stuck:
        return detail::redis_scripts::stuck;
    }
    return "";
  }

  // One script call: EVALSHA sha numkeys keys... args... (EVAL with the text after NOSCRIPT).
  // The views point into strings that outlive the exchange.
  struct command {
    static constexpr std::size_t max_keys = 3;
    static constexpr std::size_t max_args = 7;
    command(script which, std::initializer_list<std::string_view> key_list,
            std::initializer_list<std::string_view> arg_list)
        : name(which) {
      for (const std::string_view key : key_list)
        keys[key_count++] = key;
      for (const std::string_view arg : arg_list)
        args[arg_count++] = arg;
    }
    script name;
    std::string_view keys[max_keys];
    std::string_view args[max_args];
    std::size_t key_count = 0;
    std::size_t arg_count = 0;
  };

  // The shared part of every copy: settings, script digests and the connection pool.
  struct pool {
    explicit pool(options given) : settings(with_pool(std::move(given))) {
      if (settings.unix_socket.empty() && (settings.port <= 0 || settings.port > 65535)) {
        throw std::invalid_argument("idem::redis_store: port " + std::to_string(settings.port) +
                                    " is not a TCP port");
      }
      if (settings.connect_timeout <= std::chrono::milliseconds::zero() ||
          settings.command_timeout <= std::chrono::milliseconds::zero()) {
        throw std::invalid_argument("idem::redis_store: timeouts must be positive");
      }
      if (settings.caller_time_margin < std::chrono::milliseconds::zero()) {
        throw std::invalid_argument("idem::redis_store: caller_time_margin cannot be negative");
      }
      registry = settings.prefix + "#scopes";
      where = settings.unix_socket.empty() ? settings.host + ":" + std::to_string(settings.port)
                                           : settings.unix_socket;
    }
    pool(const pool&) = delete;
    pool& operator=(const pool&) = delete;
    ~pool() = default;

    options settings;
    std::string registry;
    std::string where;
    std::string digests[script_count];  // SHA1s from SCRIPT LOAD, read-only after start()
    // Whether exchanges block SIGPIPE: not when the process ignored it at construction.
    bool guard_sigpipe = !detail::sigpipe_blocked::ignored();

    detail::connection_pool<detail::redis_connection> connections{
        settings.pool_size, {.open = [this] { return connect(); }, .reusable = {}, .alive = {}}};

    // Checked before the connection pool is made from it, in the order users meet them.
    static options with_pool(options given) {
      if (given.prefix.find_first_of("{}") != std::string::npos) {
        throw std::invalid_argument(
            "idem::redis_store: the key prefix may not contain '{' or '}': they would move the "
            "hash tag that keeps a record's keys in one cluster slot");
      }
      if (given.pool_size == 0) {
        throw std::invalid_argument("idem::redis_store: pool_size must be at least 1");
      }
      return given;
    }

    // The first connection: checks the server and loads the scripts, then joins the pool.
    void start() {
      auto first = connections.acquire();
      redisContext* context = first.get().get();
      check_server(context);
      std::vector<detail::redis_reply> loaded;
      {
        const detail::sigpipe_blocked blocked(guard_sigpipe);
        for (std::size_t i = 0; i < script_count; ++i) {
          const char* text = script_text(static_cast<script>(i));
          const char* argv[] = {"SCRIPT", "LOAD", text};
          const std::size_t lengths[] = {6, 4, std::char_traits<char>::length(text)};
          if (redisAppendCommandArgv(context, 3, argv, lengths) != REDIS_OK) {
            throw lost(context, "loading its scripts");
          }
        }
        for (std::size_t i = 0; i < script_count; ++i) {
          void* raw = nullptr;
          if (redisGetReply(context, &raw) != REDIS_OK) {
            blocked.consume_pending();
            throw lost(context, "loading its scripts");
          }
          loaded.emplace_back(static_cast<redisReply*>(raw));
        }
      }
      for (std::size_t i = 0; i < script_count; ++i) {
        const redisReply* reply = loaded[i].get();
        if (reply->type != REDIS_REPLY_STRING) {
          throw std::invalid_argument(
              "idem::redis_store: the server at " + where +
              " refused a script: " + std::string(detail::reply_text(reply)));
        }
        digests[i] = detail::reply_text(reply);
      }
      first.give_back();
    }

    void check_server(redisContext* context) const {
      const detail::redis_reply info = ask(context, {"INFO", "server"});
      const std::string_view text = detail::reply_text(info.get());
      const std::size_t at = text.find("redis_version:");
      int major = 0;
      if (info->type == REDIS_REPLY_STRING && at != std::string_view::npos) {
        const char* digits = text.data() + at + 14;
        std::from_chars(digits, text.data() + text.size(), major);
      }
      if (major < 7) {
        throw std::invalid_argument(
            "idem::redis_store: the server at " + where +
            " is not Redis 7.0 or newer (INFO says: " + std::string(text.substr(0, 200)) + ")");
      }
      if (!settings.verify_eviction_policy) return;
      const detail::redis_reply policy = ask(context, {"CONFIG", "GET", "maxmemory-policy"});
      if (policy->type != REDIS_REPLY_ARRAY || policy->elements != 2) {
        throw std::invalid_argument(
            "idem::redis_store: cannot read the maxmemory-policy of the server at " + where +
            " (CONFIG GET answered: " + std::string(detail::reply_text(policy.get())) +
            "), so cannot tell whether it may evict records. Configure maxmemory-policy "
            "noeviction and, if CONFIG is disabled, set options::verify_eviction_policy = false");
      }
      const std::string_view value = detail::reply_text(policy->element[1]);
      if (value.starts_with("allkeys-") || value.starts_with("volatile-")) {
        throw std::invalid_argument(
            "idem::redis_store: the server at " + where + " has maxmemory-policy " +
            std::string(value) +
            ", which may evict records and with them the guarantee that each request runs "
            "once; set maxmemory-policy noeviction");
      }
    }

    detail::redis_reply ask(redisContext* context, std::initializer_list<const char*> words) const {
      const char* argv[4];
      std::size_t lengths[4];
      int count = 0;
      for (const char* word : words) {
        argv[count] = word;
        lengths[count] = std::char_traits<char>::length(word);
        ++count;
      }
      const detail::sigpipe_blocked blocked(guard_sigpipe);
      void* raw = redisCommandArgv(context, count, argv, lengths);
      if (raw == nullptr) {
        blocked.consume_pending();
        throw lost(context, std::string("asking ") + argv[0]);
      }
      return detail::redis_reply(static_cast<redisReply*>(raw));
    }

    store_error lost(const redisContext* context, const std::string& doing) const {
      return store_error(store_failure::unavailable, "idem::redis_store: the server at " + where +
                                                         " did not answer " + doing + ": " +
                                                         std::string(context->errstr));
    }

    detail::redis_connection connect() const {
      timeval limit{};
      limit.tv_sec = static_cast<time_t>(settings.connect_timeout.count() / 1000);
      limit.tv_usec = static_cast<suseconds_t>((settings.connect_timeout.count() % 1000) * 1000);
      detail::redis_connection made(
          settings.unix_socket.empty()
              ? redisConnectWithTimeout(settings.host.c_str(), settings.port, limit)
              : redisConnectUnixWithTimeout(settings.unix_socket.c_str(), limit));
      if (!made) {
        throw store_error(store_failure::unavailable,
                          "idem::redis_store: cannot connect to " + where + ": out of memory");
      }
      if (made->err != 0) {
        throw store_error(store_failure::unavailable,
                          "idem::redis_store: cannot connect to " + where + ": " + made->errstr);
      }
      timeval each{};
      each.tv_sec = static_cast<time_t>(settings.command_timeout.count() / 1000);
      each.tv_usec = static_cast<suseconds_t>((settings.command_timeout.count() % 1000) * 1000);
      redisSetTimeout(made.get(), each);
      if (settings.unix_socket.empty()) redisEnableKeepAlive(made.get());
      if (!settings.password.empty()) {
        const detail::redis_reply reply =
            settings.username.empty()
                ? ask(made.get(), {"AUTH", settings.password.c_str()})
                : ask(made.get(), {"AUTH", settings.username.c_str(), settings.password.c_str()});
        if (reply->type == REDIS_REPLY_ERROR) {
          throw store_error(store_failure::unavailable,
                            "idem::redis_store: the server at " + where +
                                " refused AUTH: " + std::string(detail::reply_text(reply.get())));
        }
      }
      if (settings.database != 0) {
        const std::string number = std::to_string(settings.database);
        const detail::redis_reply reply = ask(made.get(), {"SELECT", number.c_str()});
        if (reply->type == REDIS_REPLY_ERROR) {
          throw store_error(store_failure::unavailable,
                            "idem::redis_store: the server at " + where + " refused SELECT " +
                                number + ": " + std::string(detail::reply_text(reply.get())));
        }
      }
      return made;
    }

    // Runs `talk(context, replies)` on a pooled connection: it answers false after an I/O
    // error, with errno as the failing call left it. A failure on a reused connection that the
    // server had closed (a restart) is tried once more on a fresh connection; any other failure
    // throws store_error(unavailable).
    template <class Talk>
    std::vector<detail::redis_reply> over_connection(const char* operation, Talk&& talk) {
      for (int attempt = 0;; ++attempt) {
        auto connection = connections.acquire();
        std::vector<detail::redis_reply> replies;
        int saved_errno = 0;
        bool answered = false;
        {
          const detail::sigpipe_blocked blocked(guard_sigpipe);
          answered = talk(connection.get().get(), replies);
          if (!answered) {
            saved_errno = errno;
            blocked.consume_pending();
          }
        }
        if (answered) {
          connection.give_back();
          return replies;
        }
        const int kind = connection.get()->err;
        const bool closed_by_server =
            kind == REDIS_ERR_EOF ||
            (kind == REDIS_ERR_IO && (saved_errno == ECONNRESET || saved_errno == EPIPE));
        const bool timed_out =
            kind == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK);
        const std::string reason =
            timed_out
                ? "no answer within " + std::to_string(settings.command_timeout.count()) + " ms"
                : std::string(connection.get()->errstr);
        const bool retry = closed_by_server && connection.reused() && attempt == 0;
        // When the server closed it, it went away for every connection: they all go.
        if (closed_by_server) {
          connection.discard_all();
        } else {
          connection.discard();
        }
        if (!retry) {
          throw store_error(store_failure::unavailable, std::string("idem::redis_store: ") +
                                                            operation + " failed: the server at " +
                                                            where + " is unreachable: " + reason);
        }
      }
    }

    // Script calls, sent in one write, every reply read. EVALSHA first; if the server lost the
    // scripts (NOSCRIPT: a restart, SCRIPT FLUSH), the whole batch again with EVAL, so the order
    // of the commands is kept.
    std::vector<detail::redis_reply> exchange(std::span<const command> commands,
                                              const char* operation) {
      return over_connection(operation,
                             [&](redisContext* context, std::vector<detail::redis_reply>& replies) {
                               if (!send(context, commands, true, replies)) return false;
                               if (!any_noscript(replies)) return true;
                               replies.clear();
                               return send(context, commands, false, replies);
                             });
    }

    // Plain commands (no scripts), pipelined the same way.
    std::vector<detail::redis_reply> plain(std::span<const std::vector<std::string_view>> commands,
                                           const char* operation) {
      return over_connection(
          operation, [&](redisContext* context, std::vector<detail::redis_reply>& replies) {
            std::vector<const char*> argv;
            std::vector<std::size_t> lengths;
            for (const std::vector<std::string_view>& words : commands) {
              argv.clear();
              lengths.clear();
              for (const std::string_view word : words) {
                argv.push_back(word.empty() ? "" : word.data());
                lengths.push_back(word.size());
              }
              if (redisAppendCommandArgv(context, static_cast<int>(argv.size()), argv.data(),
                                         lengths.data()) != REDIS_OK) {
                return false;
              }
            }
            return read_replies(context, commands.size(), replies);
          });
    }

    static bool any_noscript(const std::vector<detail::redis_reply>& replies) noexcept {
      return std::any_of(replies.begin(), replies.end(), [](const detail::redis_reply& reply) {
        return reply->type == REDIS_REPLY_ERROR &&
               detail::reply_text(reply.get()).starts_with("NOSCRIPT");
      });
    }

    static bool read_replies(redisContext* context, std::size_t count,
                             std::vector<detail::redis_reply>& replies) {
      replies.reserve(count);
      for (std::size_t i = 0; i < count; ++i) {
        void* raw = nullptr;
        if (redisGetReply(context, &raw) != REDIS_OK) return false;
        replies.emplace_back(static_cast<redisReply*>(raw));
      }
      return true;
    }

    bool send(redisContext* context, std::span<const command> commands, bool by_digest,
              std::vector<detail::redis_reply>& replies) const {
      constexpr std::size_t most = 3 + command::max_keys + command::max_args;
      for (const command& each : commands) {
        const char* argv[most];
        std::size_t lengths[most];
        const auto index = static_cast<std::size_t>(each.name);
        const char* text = script_text(each.name);
        const char count_text[2] = {static_cast<char>('0' + each.key_count), '\0'};
        argv[0] = by_digest ? "EVALSHA" : "EVAL";
        lengths[0] = by_digest ? 7 : 4;
        argv[1] = by_digest ? digests[index].data() : text;
        lengths[1] = by_digest ? digests[index].size() : std::char_traits<char>::length(text);
        argv[2] = count_text;
        lengths[2] = 1;
        std::size_t argc = 3;
        for (std::size_t k = 0; k < each.key_count; ++k, ++argc) {
          argv[argc] = each.keys[k].data();
          lengths[argc] = each.keys[k].size();
        }
        for (std::size_t a = 0; a < each.arg_count; ++a, ++argc) {
          // An empty view may have a null data(); hiredis wants a pointer all the same.
          argv[argc] = each.args[a].empty() ? "" : each.args[a].data();
          lengths[argc] = each.args[a].size();
        }
        if (redisAppendCommandArgv(context, static_cast<int>(argc), argv, lengths) != REDIS_OK) {
          return false;
        }
      }
      return read_replies(context, commands.size(), replies);
    }
  };

  // The names of one record's keys.
  struct keys {
    std::string tag;
    std::string record;
    std::string expiry;
    std::string lease;
  };
  struct scope_keys {
    std::string record_prefix;
    std::string expiry;
    std::string lease;
  };

  static std::string tag_of(std::string_view scope) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string tag;
    tag.reserve(1 + 2 * scope.size());
    tag.push_back('s');
    for (const char c : scope) {
      const auto byte = static_cast<unsigned char>(c);
      tag.push_back(digits[byte >> 4]);
      tag.push_back(digits[byte & 0xf]);
    }
    return tag;
  }

  static std::string scope_of_tag(std::string_view tag) {
    std::string scope;
    if (tag.empty() || tag[0] != 's' || tag.size() % 2 != 1) return scope;
    scope.reserve(tag.size() / 2);
    const auto nibble = [](char c) {
      return static_cast<unsigned>(c <= '9' ? c - '0' : c - 'a' + 10);
    };
    for (std::size_t i = 1; i + 1 < tag.size(); i += 2) {
      scope.push_back(static_cast<char>((nibble(tag[i]) << 4) | nibble(tag[i + 1])));
    }
    return scope;
  }

  scope_keys scope_keys_of(std::string_view tag) const {
    std::string base = state().settings.prefix;
    base.push_back('{');
    base.append(tag);
    base.push_back('}');
    return scope_keys{base + ":", base + "#expiry", base + "#lease"};
  }

  keys keys_of(std::string_view scope, std::string_view key) const {
    keys names;
    names.tag = tag_of(scope);
    const std::string& prefix = state().settings.prefix;
    std::string base;
    base.reserve(prefix.size() + names.tag.size() + 2);
    base.append(prefix);
    base.push_back('{');
    base.append(names.tag);
    base.push_back('}');
    names.record.reserve(base.size() + 1 + key.size());
    names.record.append(base);
    names.record.push_back(':');
    names.record.append(key);
    names.expiry = base + "#expiry";
    names.lease = base + "#lease";
    return names;
  }

  template <class Integer>
  static std::string decimal(Integer value) {
    char digits[24];
    const auto written = std::to_chars(digits, digits + sizeof digits, value);
    return std::string(digits, written.ptr);
  }

  static std::string time_argument(store_time when) {
    const auto since =
        std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch());
    if (since.count() < 0) {
      throw std::invalid_argument("idem::redis_store: times before 1970 cannot be stored");
    }
    return decimal(since.count());
  }

  std::string now_argument(store_time now) const {
    if (state().settings.time == redis_time::server) return {};
    return time_argument(now);
  }

  std::string scope_cap() const {
    const std::size_t cap = state().settings.max_records_per_scope;
    return cap == std::numeric_limits<std::size_t>::max() ? std::string() : decimal(cap);
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
                           state().where + " answered: " + text);
  }
  store_error malformed(const char* operation) const {
    return store_error(store_failure::unavailable, std::string("idem::redis_store: ") + operation +
                                                       ": unexpected answer from " + state().where);
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
      const auto replies = state().plain(scan, "listing scopes");
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
    const auto replies = state().plain(round, "sweep");
    std::vector<std::vector<std::string_view>> back;
    for (std::size_t i = 0; i < tags.size(); ++i) {
      const redisReply* left = replies[2 * i + 1].get();
      if (is_error(left)) throw failure("sweep", left);
      if (left->type == REDIS_REPLY_INTEGER && left->integer == 0) continue;
      back.push_back({"SADD", state().registry, tags[i]});
    }
    if (back.empty()) return;
    for (const auto& reply : state().plain(back, "sweep")) {
      if (is_error(reply.get())) throw failure("sweep", reply.get());
    }
  }

  pool& state() const {
    if (!pool_) {
      throw std::logic_error(
          "idem::redis_store: a default-constructed store has no server; assign one made with "
          "redis_store(options) first");
    }
    return *pool_;
  }

  std::shared_ptr<pool> pool_;
};

}  // namespace idem

#endif  // IDEM_STORE_REDIS_HPP
