// async_redis_store: the asynchronous store contract (idem/store/async_contract.hpp) on Redis, on
// an Asio executor, with no thread of its own and no blocking call.
//
// The same store as redis_store (idem/store/redis.hpp), whose header says what the records,
// the keys, the scripts, the server's or the caller's time and the eviction check are: it runs
// the same Lua scripts with the same arguments, written under the same keys, so the two can
// share one database (a record one claims, the other sees).
//
// Connections. A store is a handle: copies share `pool_size` TCP connections (default 8),
// opened when the first operations need them. Each carries many operations at once: what they
// send is written in one write while the previous one is in flight, and the replies are matched
// to the operations in the order they were sent (Redis answers in order). Operations are spread
// over the ready connections in turn. A new connection sends AUTH, SELECT, the checks at start
// (Redis 7.0 or newer; a maxmemory-policy that cannot evict records) and SCRIPT LOAD in one
// round trip, and is used once every answer is right; a server refused by the checks is never
// used, and every operation sent to it fails with store_error(unavailable) saying why. Scripts
// go by EVALSHA, and again by EVAL after NOSCRIPT (SCRIPT FLUSH).
//
// Failures. Every operation completes with the answer, or with store_error(unavailable):
//   * its connection lost (I/O error, the server closing it): what it sent may have run;
//   * no answer within command_timeout: what it sent may still run. Its reply slot stays and
//     the late reply is dropped when it comes, so no reply ever answers another operation; the
//     connection stays, unless nothing at all is read for one more command_timeout, when it is
//     taken as lost (a half-open connection, a server stopped by SIGSTOP) and closed;
//   * cancelled through its handler's cancellation slot (any cancellation type): completes at
//     once, ambiguous as a timeout; the reply is dropped the same way, others are unaffected;
//   * no connection: a slot whose last attempt to connect failed waits reconnect_delay (doubling
//     up to max_reconnect_delay) before the next, and fails what it is given meanwhile at once,
//     so a server that is down is answered promptly. A connection lost after it was ready is
//     replaced at the next operation without waiting.
// As with redis_store, a claim, complete, release or checkpoint repeated after an ambiguous
// failure is safe: a repeated claim answers `existing`, the others are fenced.
//
// Replicas: options::replicas and replica_timeout as redis_store has them (WAIT pipelined after
// each write, from the operations layer both stores share). Sentinel discovery as redis_store
// has it (options::sentinels, sentinel_master): each new connection asks the Sentinels for the
// primary and checks ROLE. One difference: a write answered READONLY (a primary demoted under an
// open connection) fails as store_error(unavailable) (nothing was written) and its connection is
// replaced, where redis_store sends it once more itself.
//
// Threads. Operations may be started from any thread: each runs on a strand of the executor the
// store was made with, and completes on its handler's associated executor (that executor when
// the handler has none). The views an operation is given are copied into the commands when it
// starts. Destroy the last copy of a store before the execution context of its executor: its
// connections are closed by a function posted there.
#ifndef IDEM_STORE_REDIS_ASYNC_HPP
#define IDEM_STORE_REDIS_ASYNC_HPP

#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/redis/detail/async/pool.hpp>
#include <idem/store/redis/detail/async/spawn.hpp>
#include <idem/store/redis/detail/async/wire.hpp>
#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/operations.hpp>
#include <idem/store/redis/detail/walks.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem {

class async_redis_store {
 public:
  /// Records keep no completion time (see redis_store).
  static constexpr bool reads_completion_time = false;

  /// redis_store::options, each field meaning the same, and how a connection that failed waits
  /// to connect again. `pool_size` is the connections the store keeps, each one pipelined (the
  /// blocking store's are each one caller's at a time): a few are enough for many operations.
  struct options : redis_store::options, detail::redis_reconnect_options {};

  /// An unconnected handle, for option structs that hold a store before it is configured:
  /// assign a constructed store before use. Its operations throw std::logic_error.
  async_redis_store() = default;
  /// Checks the options (std::invalid_argument) and connects nothing yet: the first operations
  /// open the connections.
  async_redis_store(asio::any_io_executor executor, options settings)
      : state_(std::make_shared<shared_state>(std::move(executor), std::move(settings))) {}

  asio::any_io_executor get_executor() const { return state().executor; }

  template <class Token>
  auto async_claim(const claim_request& request, Token&& token) {
    auto wire = waited(state().operations.claim(request, to_wire), true);
    return run<claim_result>(
        std::forward<Token>(token), "claim", std::move(wire),
        replicated{"claim", true,
                   [](const shared_state& state, const std::vector<detail::redis_reply>& replies) {
                     return state.operations.claim_result_of(replies);
                   }});
  }
  template <class Token>
  auto async_complete(const fenced_key& held, std::string_view bytes, store_time /*now*/,
                      Token&& token) {
    return run<bool>(std::forward<Token>(token), "complete",
                     waited(state().operations.complete(held, bytes, to_wire)),
                     replicated{"complete", false, applied{"complete"}});
  }
  template <class Token>
  auto async_release(const fenced_key& held, Token&& token) {
    return run<bool>(std::forward<Token>(token), "release",
                     waited(state().operations.release(held, to_wire)),
                     replicated{"release", false, applied{"release"}});
  }
  /// With time_source::server, `lease_until` is read as a duration from this machine's clock
  /// when the operation starts, and added to the server's time.
  template <class Token>
  auto async_checkpoint(const fenced_key& held, std::string_view bytes, store_time lease_until,
                        Token&& token) {
    return run<bool>(std::forward<Token>(token), "checkpoint",
                     waited(state().operations.checkpoint(held, bytes, lease_until, to_wire)),
                     replicated{"checkpoint", false, applied{"checkpoint"}});
  }
  /// The heartbeat's renewals (idem/store/batch.hpp's checkpoint_batch): each entry's
  /// checkpoint script, pipelined in one write (one round trip), with one WAIT after them all
  /// when writes wait for replicas.
  template <class Token>
  auto async_checkpoint_batch(std::span<const batch_checkpoint> entries, store_time lease_until,
                              Token&& token) {
    if (entries.empty()) {
      return spawn<std::vector<bool>>(
          std::forward<Token>(token),
          []() -> asio::awaitable<std::vector<bool>, detail::redis_strand> {
            co_return std::vector<bool>{};
          });
    }
    std::vector<detail::redis_wire_command> wire;
    wire.reserve(entries.size() + 1);
    for (const batch_checkpoint& entry : entries) {
      for (detail::redis_wire_command& command :
           state().operations.checkpoint(entry.held, entry.recovery, lease_until, to_wire)) {
        wire.push_back(std::move(command));
      }
    }
    const std::size_t count = entries.size();
    return run<std::vector<bool>>(
        std::forward<Token>(token), "checkpoint_batch", waited(std::move(wire)),
        replicated{
            "checkpoint_batch", false,
            [count](const shared_state& state, const std::vector<detail::redis_reply>& replies) {
              std::vector<bool> renewed(count, false);
              for (std::size_t i = 0; i < count; ++i)
                renewed[i] = state.operations.applied_at(replies, i, "checkpoint_batch");
              return renewed;
            }});
  }
  template <class Token>
  auto async_find(std::string_view scope, std::string_view key, store_time now, Token&& token) {
    return run<std::optional<record>>(
        std::forward<Token>(token), "find", state().operations.find(scope, key, now, to_wire),
        [scope = std::string(scope), key = std::string(key)](
            const shared_state& state, const std::vector<detail::redis_reply>& replies) {
          return state.operations.found(replies, scope, key);
        });
  }
  /// redis_store::sweep's semantics and cost, each round trip awaited.
  template <class Token>
  auto async_sweep(store_time now, Token&& token) {
    return spawn<std::size_t>(
        std::forward<Token>(token),
        [state = shared(), now]() -> asio::awaitable<std::size_t, detail::redis_strand> {
          detail::redis_sweep_walk walk(state->operations, now);
          co_await walk_through(*state, walk, "sweep");
          co_return walk.removed();
        });
  }
  /// redis_store::stuck's semantics. Reads only.
  template <class Token>
  auto async_stuck(store_time now, std::size_t limit, Token&& token) {
    return spawn<std::vector<record>>(
        std::forward<Token>(token),
        [state = shared(), now,
         limit]() -> asio::awaitable<std::vector<record>, detail::redis_strand> {
          detail::redis_stuck_walk walk(state->operations, now, limit);
          co_await walk_through(*state, walk, "stuck");
          co_return walk.take();
        });
  }

  const options& settings() const { return state().settings; }

  /// How many connections are open and ready now; completes with std::size_t. For tests and
  /// metrics.
  template <class Token>
  auto async_open_connections(Token&& token) {
    return spawn<std::size_t>(
        std::forward<Token>(token),
        [state = shared()]() -> asio::awaitable<std::size_t, detail::redis_strand> {
          co_return state->pool->open_connections();
        });
  }

 private:
  static constexpr const char* who = "idem::async_redis_store";

  struct shared_state {
    shared_state(asio::any_io_executor given, options settings_given)
        : settings(checked(std::move(settings_given))),
          executor(std::move(given)),
          operations(detail::redis_record_settings_of(settings), who,
                     detail::redis_where(detail::redis_settings_of(settings, who))),
          pool(std::make_shared<detail::redis_async_pool>(
              checked(executor), detail::redis_settings_of(settings, who), settings.backoff())) {}
    shared_state(const shared_state&) = delete;
    shared_state& operator=(const shared_state&) = delete;
    // The connections close on the strand: what is in flight there fails, nothing waits here.
    ~shared_state() {
      try {
        asio::post(pool->strand(), [pool = pool] { pool->shut(); });
      } catch (...) {
        // Out of memory: the connections close when the pool's last owner lets it go.
      }
    }

    options settings;
    asio::any_io_executor executor;
    detail::redis_operations operations;
    std::shared_ptr<detail::redis_async_pool> pool;

    // WAIT must end before the operation's own timeout does (see redis_store).
    static options checked(options given) {
      detail::redis_check_replica_timeout(who, given.replicas, given.replica_timeout,
                                          given.command_timeout);
      return given;
    }

    static const asio::any_io_executor& checked(const asio::any_io_executor& executor) {
      if (!executor) {
        throw std::invalid_argument(std::string(who) + ": the executor is empty");
      }
      return executor;
    }
  };

  // What an operation's call is given: its commands, written out now.
  static constexpr auto to_wire = [](std::span<const detail::redis_command> commands) {
    return detail::redis_wire_of(commands);
  };

  // The decoding of complete, release and checkpoint: whether the fenced write applied.
  struct applied {
    const char* operation;
    bool operator()(const shared_state& state,
                    const std::vector<detail::redis_reply>& replies) const {
      return state.operations.applied(replies, operation);
    }
  };

  // A write's commands, with WAIT after them when writes wait for replicas.
  std::vector<detail::redis_wire_command> waited(std::vector<detail::redis_wire_command> wire,
                                                 bool claim = false) const {
    for (const std::span<const std::string_view> words :
         state().operations.wait_for_replicas(claim)) {
      wire.push_back(detail::redis_wire_of(words));
    }
    return wire;
  }

  // The decoding of a write sent with waited(): WAIT's answer checked and taken off first.
  template <class Decode>
  struct replicated {
    const char* operation;
    bool claim;
    Decode decode;
    auto operator()(const shared_state& state, std::vector<detail::redis_reply> replies) const {
      return decode(state, state.operations.replicated(std::move(replies), operation, claim));
    }
  };
  template <class Decode>
  replicated(const char*, bool, Decode) -> replicated<Decode>;

  // One exchange, its replies decoded by `decode(state, replies)`.
  template <class T, class Token, class Decode>
  auto run(Token&& token, const char* operation, std::vector<detail::redis_wire_command> wire,
           Decode decode) {
    return spawn<T>(
        std::forward<Token>(token),
        [state = shared(), operation, wire = std::move(wire),
         decode = std::move(decode)]() mutable -> asio::awaitable<T, detail::redis_strand> {
          std::vector<detail::redis_reply> replies =
              co_await detail::async_redis_exchange(state->pool, std::move(wire), operation,
                                                    asio::use_awaitable_t<detail::redis_strand>{});
          co_return decode(*state, std::move(replies));
        });
  }

  // Runs a walk, one exchange per step.
  template <class Walk>
  static asio::awaitable<void, detail::redis_strand> walk_through(const shared_state& state,
                                                                  Walk& walk,
                                                                  const char* operation) {
    for (detail::redis_step step = walk.next(); !step.done(); step = walk.next()) {
      walk.feed(
          co_await detail::async_redis_exchange(state.pool, detail::redis_wire_of(step), operation,
                                                asio::use_awaitable_t<detail::redis_strand>{}));
    }
  }

  // The coroutine `body` on the pool's strand (detail/async/spawn.hpp says how it completes).
  template <class T, class Token, class Body>
  auto spawn(Token&& token, Body body) {
    const shared_state& on = state();
    return detail::redis_spawn<T>(std::forward<Token>(token), who, on.executor, on.pool->strand(),
                                  shared(), std::move(body));
  }

  std::shared_ptr<shared_state> shared() const {
    (void)state();
    return state_;
  }

  shared_state& state() const {
    if (!state_) {
      throw std::logic_error(
          "idem::async_redis_store: a default-constructed store has no server; assign one made "
          "with async_redis_store(executor, options) first");
    }
    return *state_;
  }

  std::shared_ptr<shared_state> state_;
};

static_assert(AsyncStore<async_redis_store>);
static_assert(AsyncCheckpointBatchStore<async_redis_store>);

}  // namespace idem

IDEM_ASIO_CODE_END

#endif  // IDEM_STORE_REDIS_ASYNC_HPP
