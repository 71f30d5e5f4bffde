// redis_client: how redis_store, and the outbox's Redis Streams sink, talk to their server.
// Connecting (TCP or a unix socket, AUTH, SELECT, timeouts), the store's checks at start (Redis
// 7.0 or newer; a maxmemory-policy that cannot evict records), loading the scripts, and the
// exchanges every operation makes on a pooled connection: script calls pipelined with EVALSHA
// (and a plain command after them, the store's WAIT), sent again with EVAL when the server lost
// its scripts, plain commands pipelined (the sink's XADDs), and once more on a fresh connection
// when the server had closed a reused one or answered that it is a replica now (READONLY).
// With Sentinel discovery, each new connection asks the Sentinels for the primary's address and
// checks that the server it reached calls itself a master (ROLE), so a demoted primary is never
// written to and, after a failover, the next connection finds the new primary. The checks are
// free functions of what the server answered, so that they are tested without a server
// (tests/stores/redis/redis_connection_test.cpp).
#ifndef IDEM_STORE_REDIS_DETAIL_CONNECTION_HPP
#define IDEM_STORE_REDIS_DETAIL_CONNECTION_HPP

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <ctime>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/detail/connection_pool.hpp>
#include <idem/store/redis/detail/command.hpp>
#include <idem/store/redis/detail/reply.hpp>
#include <idem/store/redis/detail/scripts.hpp>
#include <idem/store/redis/detail/sigpipe.hpp>

namespace idem::detail {

struct redis_context_free {
  void operator()(redisContext* context) const noexcept { redisFree(context); }
};
using redis_connection = std::unique_ptr<redisContext, redis_context_free>;

// What redis_client needs of redis_store::options, whose comments say what each field is;
// redis_store fills every one. The Redis Streams sink (redis_streams/sink.hpp) fills them from
// its own options and names itself in `who`.
struct redis_settings {
  std::string host;
  int port = 0;
  std::string unix_socket;
  // Sentinel discovery (when not empty): "host:port" of each Sentinel, asked in order for the
  // primary of `master_name`; host, port and unix_socket are then not used.
  std::vector<std::string> sentinels;
  std::string master_name;
  std::string username;
  std::string password;
  int database = 0;
  std::size_t pool_size = 0;
  std::chrono::milliseconds connect_timeout{};
  std::chrono::milliseconds command_timeout{};
  bool verify_eviction_policy = true;
  // Who the client works for, as its error messages begin: the store, or another user of the
  // client (the Redis Streams sink, the stream consumer) naming itself.
  std::string who = "idem::redis_store";
};

// The client settings of redis_store's options (async_redis_store's derive from them), for the
// store named `who`.
template <class Options>
redis_settings redis_settings_of(const Options& given, const char* who) {
  return {.host = given.host,
          .port = given.port,
          .unix_socket = given.unix_socket,
          .sentinels = given.sentinels,
          .master_name = given.sentinel_master,
          .username = given.username,
          .password = given.password,
          .database = given.database,
          .pool_size = given.pool_size,
          .connect_timeout = given.connect_timeout,
          .command_timeout = given.command_timeout,
          .verify_eviction_policy = given.verify_eviction_policy,
          .who = who};
}

// The major version named in the text of INFO server ("redis_version:7.2.4" is 7); 0 when it
// names none.
inline int redis_major_version(std::string_view info) {
  const std::string_view field = "redis_version:";
  const std::size_t at = info.find(field);
  int major = 0;
  if (at != std::string_view::npos) {
    std::from_chars(info.data() + at + field.size(), info.data() + info.size(), major);
  }
  return major;
}

// Refuses, given its answer to INFO server, a server older than Redis 7.0: one script declares
// the allow-oom flag, which older servers reject.
inline void redis_check_version(const redisReply* info, const std::string& where) {
  const std::string_view text = reply_text(info);
  const int major = info->type == REDIS_REPLY_STRING ? redis_major_version(text) : 0;
  if (major < 7) {
    throw std::invalid_argument(
        "idem::redis_store: the server at " + where +
        " is not Redis 7.0 or newer (INFO says: " + std::string(text.substr(0, 200)) + ")");
  }
}

// Whether a maxmemory-policy may evict records: any allkeys-* policy, and any volatile-* one
// too, since every record carries a TTL.
inline bool redis_policy_may_evict(std::string_view policy) noexcept {
  return policy.starts_with("allkeys-") || policy.starts_with("volatile-");
}

// Refuses, given its answer to CONFIG GET maxmemory-policy, a server that may evict records: a
// store that silently loses records loses exactly-once. An answer without the policy (CONFIG
// renamed, or refused by an ACL) is refused too: nobody can tell then.
inline void redis_check_eviction_policy(const redisReply* policy, const std::string& where) {
  if (policy->type != REDIS_REPLY_ARRAY || policy->elements != 2) {
    throw std::invalid_argument(
        "idem::redis_store: cannot read the maxmemory-policy of the server at " + where +
        " (CONFIG GET answered: " + std::string(reply_text(policy)) +
        "), so cannot tell whether it may evict records. Configure maxmemory-policy "
        "noeviction and, if CONFIG is disabled, set options::verify_eviction_policy = false");
  }
  const std::string_view value = reply_text(policy->element[1]);
  if (redis_policy_may_evict(value)) {
    throw std::invalid_argument("idem::redis_store: the server at " + where +
                                " has maxmemory-policy " + std::string(value) +
                                ", which may evict records and with them the guarantee that "
                                "each request runs once; set maxmemory-policy noeviction");
  }
}

// One Sentinel's address, from "host:port" (the last ':' ends the host, so "[::1]:26379" and
// "::1:26379" both read); nothing when it is not that form or the port is not a TCP port.
struct redis_address {
  std::string host;
  int port = 0;
};
inline std::optional<redis_address> redis_address_of(std::string_view text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) return {};
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  const std::string_view digits = text.substr(colon + 1);
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (error != std::errc{} || end != digits.data() + digits.size() || port <= 0 || port > 65535) {
    return {};
  }
  return redis_address{std::string(host), port};
}

// Where the server is, as messages name it: host:port, the socket's path, or the primary a
// Sentinel names.
inline std::string redis_where(const redis_settings& settings) {
  if (!settings.sentinels.empty()) {
    std::string where = "the primary of '" + settings.master_name + "' (Sentinel";
    for (const std::string& sentinel : settings.sentinels)
      where += " " + sentinel;
    return where + ")";
  }
  return settings.unix_socket.empty() ? settings.host + ":" + std::to_string(settings.port)
                                      : settings.unix_socket;
}

// The primary's address in a Sentinel's answer to SENTINEL get-master-addr-by-name: nothing
// when it knows no primary of that name (a nil answer), or answered anything else.
inline std::optional<redis_address> redis_sentinel_primary(const redisReply* answer) {
  if (answer->type != REDIS_REPLY_ARRAY || answer->elements != 2 ||
      answer->element[0]->type != REDIS_REPLY_STRING ||
      answer->element[1]->type != REDIS_REPLY_STRING) {
    return {};
  }
  int port = 0;
  const std::string_view digits = reply_text(answer->element[1]);
  std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (port <= 0 || port > 65535) return {};
  return redis_address{std::string(reply_text(answer->element[0])), port};
}

// Whether a server's answer to ROLE says it is a primary ("master"): a replica, or an old
// primary demoted after a failover, is never written to.
inline bool redis_role_is_primary(const redisReply* answer) noexcept {
  return answer->type == REDIS_REPLY_ARRAY && answer->elements >= 1 &&
         reply_text(answer->element[0]) == "master";
}

// Refuses settings no connection could use, in the order users meet them: what a client checks
// before it connects (the blocking one's pool, the asynchronous one's connections).
inline redis_settings redis_checked_settings(redis_settings given) {
  if (given.pool_size == 0) {
    throw std::invalid_argument(given.who + ": pool_size must be at least 1");
  }
  if (given.sentinels.empty() && !given.master_name.empty()) {
    throw std::invalid_argument(given.who +
                                ": sentinel_master is set but no sentinels are: "
                                "name the Sentinels to ask for its primary");
  }
  if (!given.sentinels.empty()) {
    if (given.master_name.empty()) {
      throw std::invalid_argument(given.who +
                                  ": sentinels are set but sentinel_master is empty: name the "
                                  "primary the Sentinels monitor (their `sentinel monitor NAME`)");
    }
    if (!given.unix_socket.empty()) {
      throw std::invalid_argument(given.who +
                                  ": unix_socket and sentinels cannot both be set: the Sentinels "
                                  "name the primary by host and port");
    }
    for (const std::string& sentinel : given.sentinels) {
      if (!redis_address_of(sentinel)) {
        throw std::invalid_argument(given.who + ": sentinel '" + sentinel +
                                    "' is not host:port with a TCP port");
      }
    }
  } else if (given.unix_socket.empty() && (given.port <= 0 || given.port > 65535)) {
    throw std::invalid_argument(given.who + ": port " + std::to_string(given.port) +
                                " is not a TCP port");
  }
  if (given.connect_timeout <= std::chrono::milliseconds::zero() ||
      given.command_timeout <= std::chrono::milliseconds::zero()) {
    throw std::invalid_argument(given.who + ": timeouts must be positive");
  }
  return given;
}

// The part of a redis_store that every copy shares: its settings, the scripts' digests and the
// connection pool. Once started, safe to use from many threads.
class redis_client {
 public:
  // Refuses settings no connection could use; connects to nothing yet.
  explicit redis_client(redis_settings given)
      : settings_(redis_checked_settings(std::move(given))), where_(redis_where(settings_)) {}
  redis_client(const redis_client&) = delete;
  redis_client& operator=(const redis_client&) = delete;
  ~redis_client() = default;

  // Where the server is, as messages name it: host:port, or the socket's path.
  const std::string& where() const noexcept { return where_; }

  // The first connection: checks the server and loads the scripts, then joins the pool.
  void start() {
    auto first = connections_.acquire();
    redisContext* context = first.get().get();
    check_server(context);
    std::vector<redis_reply> loaded;
    {
      const sigpipe_blocked blocked(guard_sigpipe_);
      for (std::size_t i = 0; i < redis_script_count; ++i) {
        const char* text = redis_script_text(static_cast<redis_script>(i));
        const char* argv[] = {"SCRIPT", "LOAD", text};
        const std::size_t lengths[] = {6, 4, std::char_traits<char>::length(text)};
        if (redisAppendCommandArgv(context, 3, argv, lengths) != REDIS_OK) {
          throw lost(context, "loading its scripts");
        }
      }
      for (std::size_t i = 0; i < redis_script_count; ++i) {
        void* raw = nullptr;
        if (redisGetReply(context, &raw) != REDIS_OK) {
          blocked.consume_pending();
          throw lost(context, "loading its scripts");
        }
        loaded.emplace_back(static_cast<redisReply*>(raw));
      }
    }
    for (std::size_t i = 0; i < redis_script_count; ++i) {
      const redisReply* reply = loaded[i].get();
      if (reply->type != REDIS_REPLY_STRING) {
        throw std::invalid_argument(settings_.who + ": the server at " + where_ +
                                    " refused a script: " + std::string(reply_text(reply)));
      }
      digests_[i] = reply_text(reply);
    }
    first.give_back();
  }

  // The checks at start, on `context`: the version, and the eviction policy unless the
  // settings say the operator vouches for it.
  void check_server(redisContext* context) const {
    redis_check_version(ask(context, {"INFO", "server"}).get(), where_);
    if (!settings_.verify_eviction_policy) return;
    redis_check_eviction_policy(ask(context, {"CONFIG", "GET", "maxmemory-policy"}).get(), where_);
  }

  // A new connection, authenticated and on its database: what the pool opens. Throws
  // store_error(unavailable) when the server cannot be reached or refuses AUTH or SELECT. With
  // Sentinel discovery: to the primary the first Sentinel that answers names, once it says
  // (ROLE) that it is a master; the next Sentinel when that fails.
  redis_connection connect() const {
    if (settings_.sentinels.empty()) return open(settings_.host, settings_.port);
    std::string failures;
    for (const std::string& sentinel : settings_.sentinels) {
      try {
        const std::optional<redis_address> primary = ask_sentinel(sentinel);
        if (!primary) {
          failures.append("; Sentinel ")
              .append(sentinel)
              .append(" knows no primary named '")
              .append(settings_.master_name)
              .append("'");
          continue;
        }
        redis_connection made = open(primary->host, primary->port);
        const std::string named = primary->host + ":" + std::to_string(primary->port);
        if (!redis_role_is_primary(ask(made.get(), {"ROLE"}).get())) {
          failures.append("; Sentinel ")
              .append(sentinel)
              .append(" named ")
              .append(named)
              .append(
                  ", which is not a master (ROLE): a replica, or a demoted primary, is never "
                  "written to");
          continue;
        }
        return made;
      } catch (const store_error& failed) {
        failures.append("; ").append(failed.what());
      }
    }
    throw store_error(store_failure::unavailable, settings_.who + ": no primary of '" +
                                                      settings_.master_name + "' could be reached" +
                                                      failures);
  }

 private:
  // The primary a Sentinel names; nothing when it knows none by that name.
  std::optional<redis_address> ask_sentinel(const std::string& sentinel) const {
    const std::optional<redis_address> address = redis_address_of(sentinel);
    redis_connection made = dial(address->host, address->port, "Sentinel " + sentinel);
    return redis_sentinel_primary(
        ask(made.get(), {"SENTINEL", "get-master-addr-by-name", settings_.master_name.c_str()})
            .get());
  }

  // A connection with the timeouts set, to host:port (the socket when the settings name one and
  // `host` is empty); `what` names it in messages.
  redis_connection dial(const std::string& host, int port, const std::string& what) const {
    timeval limit{};
    limit.tv_sec = static_cast<time_t>(settings_.connect_timeout.count() / 1000);
    limit.tv_usec = static_cast<suseconds_t>((settings_.connect_timeout.count() % 1000) * 1000);
    const bool by_socket = host.empty();
    redis_connection made(by_socket
                              ? redisConnectUnixWithTimeout(settings_.unix_socket.c_str(), limit)
                              : redisConnectWithTimeout(host.c_str(), port, limit));
    if (!made) {
      throw store_error(store_failure::unavailable,
                        settings_.who + ": cannot connect to " + what + ": out of memory");
    }
    if (made->err != 0) {
      throw store_error(store_failure::unavailable,
                        settings_.who + ": cannot connect to " + what + ": " + made->errstr);
    }
    timeval each{};
    each.tv_sec = static_cast<time_t>(settings_.command_timeout.count() / 1000);
    each.tv_usec = static_cast<suseconds_t>((settings_.command_timeout.count() % 1000) * 1000);
    redisSetTimeout(made.get(), each);
    if (!by_socket) redisEnableKeepAlive(made.get());
    return made;
  }

  // A connection to the server at host:port (the settings' socket when it is set and there are
  // no Sentinels), authenticated and on its database.
  redis_connection open(const std::string& host, int port) const {
    const bool by_socket = settings_.sentinels.empty() && !settings_.unix_socket.empty();
    redis_connection made = dial(by_socket ? std::string() : host, port,
                                 by_socket ? where_ : host + ":" + std::to_string(port));
    if (!settings_.password.empty()) {
      const redis_reply reply =
          settings_.username.empty()
              ? ask(made.get(), {"AUTH", settings_.password.c_str()})
              : ask(made.get(), {"AUTH", settings_.username.c_str(), settings_.password.c_str()});
      if (reply->type == REDIS_REPLY_ERROR) {
        throw store_error(store_failure::unavailable,
                          settings_.who + ": the server at " + where_ +
                              " refused AUTH: " + std::string(reply_text(reply.get())));
      }
    }
    if (settings_.database != 0) {
      const std::string number = std::to_string(settings_.database);
      const redis_reply reply = ask(made.get(), {"SELECT", number.c_str()});
      if (reply->type == REDIS_REPLY_ERROR) {
        throw store_error(store_failure::unavailable, settings_.who + ": the server at " + where_ +
                                                          " refused SELECT " + number + ": " +
                                                          std::string(reply_text(reply.get())));
      }
    }
    return made;
  }

 public:
  // Script calls, sent in one write, every reply read; `then` are plain commands sent after them
  // in the same write (the store's WAIT), their replies last. EVALSHA
  // first; if the server lost the scripts (NOSCRIPT: a restart, SCRIPT FLUSH), the whole batch
  // again with EVAL, so the order of the commands is kept. With `asking` (a cluster node's ASK
  // redirect), ASKING goes first, and its reply is not among those answered.
  std::vector<redis_reply> exchange(std::span<const redis_command> commands, const char* operation,
                                    std::span<const std::span<const std::string_view>> then = {},
                                    bool asking = false) {
    return over_connection(operation, true,
                           [&](redisContext* context, std::vector<redis_reply>& replies) {
                             if (!send(context, commands, then, true, asking, replies)) {
                               return false;
                             }
                             if (!any_noscript(replies)) return true;
                             replies.clear();
                             return send(context, commands, then, false, asking, replies);
                           });
  }

  // Plain commands (no scripts), pipelined the same way; `asking` as for exchange.
  std::vector<redis_reply> plain(std::span<const std::vector<std::string_view>> commands,
                                 const char* operation, bool asking = false) {
    return over_connection(
        operation, false, [&](redisContext* context, std::vector<redis_reply>& replies) {
          std::vector<const char*> argv;
          std::vector<std::size_t> lengths;
          for (const std::vector<std::string_view>& words : commands) {
            if (asking && !append_asking(context)) return false;
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
          return read_replies(context, commands.size(), asking ? commands.size() : 0, replies);
        });
  }

 private:
  redis_reply ask(redisContext* context, std::initializer_list<const char*> words) const {
    const char* argv[4];
    std::size_t lengths[4];
    int count = 0;
    for (const char* word : words) {
      argv[count] = word;
      lengths[count] = std::char_traits<char>::length(word);
      ++count;
    }
    const sigpipe_blocked blocked(guard_sigpipe_);
    void* raw = redisCommandArgv(context, count, argv, lengths);
    if (raw == nullptr) {
      blocked.consume_pending();
      throw lost(context, std::string("asking ") + argv[0]);
    }
    return redis_reply(static_cast<redisReply*>(raw));
  }

  store_error lost(const redisContext* context, const std::string& doing) const {
    return store_error(store_failure::unavailable, settings_.who + ": the server at " + where_ +
                                                       " did not answer " + doing + ": " +
                                                       std::string(context->errstr));
  }

  // Runs `talk(context, replies)` on a pooled connection: it answers false after an I/O
  // error, with errno as the failing call left it. A failure on a reused connection that the
  // server had closed (a restart) is tried once more on a fresh connection; any other failure
  // throws store_error(unavailable). With `find_primary`, an answer that says the server is a
  // replica now (READONLY) is one too: the script calls' (the store's); the plain commands'
  // callers (the Redis Streams sink) read READONLY themselves.
  template <class Talk>
  std::vector<redis_reply> over_connection(const char* operation, bool find_primary, Talk&& talk) {
    for (int attempt = 0;; ++attempt) {
      auto connection = connections_.acquire();
      std::vector<redis_reply> replies;
      int saved_errno = 0;
      bool answered = false;
      {
        const sigpipe_blocked blocked(guard_sigpipe_);
        answered = talk(connection.get().get(), replies);
        if (!answered) {
          saved_errno = errno;
          blocked.consume_pending();
        }
      }
      if (answered && !(find_primary && any_readonly(replies))) {
        connection.give_back();
        return replies;
      }
      if (answered) {
        // A replica now (a failover demoted it, or REPLICAOF): nothing was written. Every
        // connection goes, the next one finds the primary again (through the Sentinels), and
        // the call is sent once more there.
        connection.discard_all();
        if (attempt == 0) continue;
        throw store_error(store_failure::unavailable,
                          settings_.who + ": " + operation + " failed: the server at " + where_ +
                              " is a replica (READONLY): " + std::string(readonly_text(replies)));
      }
      const int kind = connection.get()->err;
      const bool closed_by_server =
          kind == REDIS_ERR_EOF ||
          (kind == REDIS_ERR_IO && (saved_errno == ECONNRESET || saved_errno == EPIPE));
      const bool timed_out =
          kind == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK);
      const std::string reason =
          timed_out
              ? "no answer within " + std::to_string(settings_.command_timeout.count()) + " ms"
              : std::string(connection.get()->errstr);
      const bool retry = closed_by_server && connection.reused() && attempt == 0;
      // When the server closed it, it went away for every connection: they all go.
      if (closed_by_server) {
        connection.discard_all();
      } else {
        connection.discard();
      }
      if (!retry) {
        throw store_error(store_failure::unavailable, settings_.who + ": " + operation +
                                                          " failed: the server at " + where_ +
                                                          " is unreachable: " + reason);
      }
    }
  }

  static bool any_noscript(const std::vector<redis_reply>& replies) noexcept {
    return std::any_of(replies.begin(), replies.end(), [](const redis_reply& reply) {
      return reply->type == REDIS_REPLY_ERROR && reply_text(reply.get()).starts_with("NOSCRIPT");
    });
  }

  static bool any_readonly(const std::vector<redis_reply>& replies) noexcept {
    return !readonly_text(replies).empty();
  }
  static std::string_view readonly_text(const std::vector<redis_reply>& replies) noexcept {
    for (const redis_reply& reply : replies) {
      if (reply->type == REDIS_REPLY_ERROR && reply_text(reply.get()).starts_with("READONLY")) {
        return reply_text(reply.get());
      }
    }
    return {};
  }

  // Reads `count` replies; before each of the first `asked`, an ASKING's (read and dropped).
  // ASKING lasts one command, so each keyed command of an exchange after ASK has its own.
  static bool read_replies(redisContext* context, std::size_t count, std::size_t asked,
                           std::vector<redis_reply>& replies) {
    replies.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      if (i < asked) {
        void* dropped = nullptr;
        if (redisGetReply(context, &dropped) != REDIS_OK) return false;
        freeReplyObject(dropped);
      }
      void* raw = nullptr;
      if (redisGetReply(context, &raw) != REDIS_OK) return false;
      replies.emplace_back(static_cast<redisReply*>(raw));
    }
    return true;
  }

  static bool append_asking(redisContext* context) {
    const char* argv[] = {"ASKING"};
    const std::size_t lengths[] = {6};
    return redisAppendCommandArgv(context, 1, argv, lengths) == REDIS_OK;
  }

  bool send(redisContext* context, std::span<const redis_command> commands,
            std::span<const std::span<const std::string_view>> then, bool by_digest, bool asking,
            std::vector<redis_reply>& replies) const {
    constexpr std::size_t most = 3 + redis_command::max_keys + redis_command::max_args;
    for (const redis_command& each : commands) {
      if (asking && !append_asking(context)) return false;
      const char* argv[most];
      std::size_t lengths[most];
      const auto index = static_cast<std::size_t>(each.name);
      const char* text = redis_script_text(each.name);
      const char count_text[2] = {static_cast<char>('0' + each.key_count), '\0'};
      argv[0] = by_digest ? "EVALSHA" : "EVAL";
      lengths[0] = by_digest ? 7 : 4;
      argv[1] = by_digest ? digests_[index].data() : text;
      lengths[1] = by_digest ? digests_[index].size() : std::char_traits<char>::length(text);
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
    for (const std::span<const std::string_view> words : then) {
      std::vector<const char*> argv;
      std::vector<std::size_t> lengths;
      for (const std::string_view word : words) {
        argv.push_back(word.empty() ? "" : word.data());
        lengths.push_back(word.size());
      }
      if (redisAppendCommandArgv(context, static_cast<int>(argv.size()), argv.data(),
                                 lengths.data()) != REDIS_OK) {
        return false;
      }
    }
    return read_replies(context, commands.size() + then.size(), asking ? commands.size() : 0,
                        replies);
  }

  redis_settings settings_;
  std::string where_;
  std::string digests_[redis_script_count];  // SHA1s from SCRIPT LOAD, read-only after start()
  // Whether exchanges block SIGPIPE: not when the process ignored it at construction.
  bool guard_sigpipe_ = !sigpipe_blocked::ignored();
  connection_pool<redis_connection> connections_{
      settings_.pool_size, {.open = [this] { return connect(); }, .reusable = {}, .alive = {}}};
};

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_CONNECTION_HPP
