// The class of idem::redis_store, declared with every member: idem/store/redis.hpp is its face
// (and documents it), and includes this header with the definitions of the members kept
// apart (detail/batch.hpp), which include this one.
#ifndef IDEM_STORE_REDIS_DETAIL_STORE_HPP
#define IDEM_STORE_REDIS_DETAIL_STORE_HPP

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

#include <idem/core/fingerprint/digest.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/operations.hpp>
#include <idem/store/redis/detail/walks.hpp>

namespace idem {
namespace detail {
struct redis_batch_access;
}

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
    time_source clock = time_source::server;
    /// time_source::caller only: how long after a record's retention Redis's own TTL drops it,
    /// a margin for callers whose clocks disagree.
    std::chrono::milliseconds caller_time_margin{std::chrono::minutes{10}};
    /// The most records one scope may hold that have not expired (released ones included: they
    /// keep their fence until then); a claim that would add one more answers `full`. Keeps one
    /// tenant from filling a server others share. Unlimited by default.
    std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
    /// Check at construction that the server cannot evict records (maxmemory-policy). Set to
    /// false only when CONFIG is unavailable and you know the policy is noeviction.
    bool verify_eviction_policy = true;
    /// Replicas each claim, complete, release and checkpoint waits for (WAIT, in the same round
    /// trip) before it answers; fewer acknowledgements within `replica_timeout` throw
    /// store_error(unavailable), ambiguous as a timeout is. 0 (the default): no waiting, Redis's
    /// asynchronous replication. What this does and does not promise: docs/stores/redis.md.
    std::size_t replicas = 0;
    /// How long one write waits for its replicas: positive, and shorter than command_timeout.
    std::chrono::milliseconds replica_timeout{1000};
    /// Sentinel discovery: "host:port" of each Sentinel, asked in order for the address of the
    /// primary named `sentinel_master`; host, port and unix_socket are then not used. Each new
    /// connection asks again and checks that the server is a master (ROLE), so after a failover
    /// the store reconnects to the new primary and never writes to a demoted one.
    std::vector<std::string> sentinels;
    std::string sentinel_master;
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
    const auto& calls = state().operations;
    return calls.claim_result_of(calls.claim(request, write("claim", true)));
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    const auto& calls = state().operations;
    return calls.applied(calls.complete(held, response, write("complete")), "complete");
  }

  bool release(const fenced_key& held) {
    const auto& calls = state().operations;
    return calls.applied(calls.release(held, write("release")), "release");
  }

  /// With time_source::server, `lease_until` is read as a duration from this machine's clock
  /// (lease_until - system_clock::now()) and added to the server's time.
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    const auto& calls = state().operations;
    return calls.applied(calls.checkpoint(held, recovery, lease_until, write("checkpoint")),
                         "checkpoint");
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    const auto& calls = state().operations;
    return calls.found(calls.find(scope, key, now, send{&state().client, "find"}), scope, key);
  }

  /// Removes the records that expired by `now` (with time_source::server, by the server's
  /// clock), and answers how many: those it deleted, and those Redis's TTL had already dropped
  /// whose index entries it removed. Costs one pipelined script per scope that holds records,
  /// plus what it removes.
  std::size_t sweep(store_time now) {
    detail::redis_sweep_walk walk(state().operations, now);
    detail::redis_walk(walk, send{&state().client, "sweep"});
    return walk.removed();
  }

  /// Live in-progress records whose lease ended by `now`, at most `limit` of them. Reads only.
  std::vector<record> stuck(store_time now, std::size_t limit) const {
    detail::redis_stuck_walk walk(state().operations, now, limit);
    detail::redis_walk(walk, send{&state().client, "stuck"});
    return walk.take();
  }

  const options& settings() const { return state().settings; }

  /// Batches (idem/store/batch.hpp), each pipelined in one round trip: store/redis/batch.hpp.
  std::vector<claim_result> claim_batch(std::span<const claim_request> requests);
  std::vector<bool> complete_batch(std::span<const batch_completion> done, store_time now);

 private:
  friend struct detail::redis_batch_access;
  // The shared part of every copy: the options, the operations' calls, and the client that
  // holds the connections.
  struct shared_state {
    explicit shared_state(options given)
        : settings(checked(std::move(given))),
          operations(detail::redis_record_settings_of(settings), who,
                     detail::redis_where(detail::redis_settings_of(settings, who))),
          client(detail::redis_settings_of(settings, who)) {}
    shared_state(const shared_state&) = delete;
    shared_state& operator=(const shared_state&) = delete;
    ~shared_state() = default;

    static constexpr const char* who = "idem::redis_store";
    options settings;
    // Checked first (the prefix, the margin): the options are checked in the order users meet
    // them.
    detail::redis_operations operations;
    detail::redis_client client;

    // WAIT must end before the exchange's own timeout does (redis_check_replica_timeout).
    static options checked(options given) {
      detail::redis_check_replica_timeout(who, given.replicas, given.replica_timeout,
                                          given.command_timeout);
      return given;
    }
  };

  // What an operation's call is given (its script calls), and what a walk is given (one step:
  // script calls or plain commands): sends them and answers their replies.
  struct send {
    detail::redis_client* client;
    const char* operation;
    std::vector<detail::redis_reply> operator()(
        std::span<const detail::redis_command> commands) const {
      return client->exchange(commands, operation);
    }
    std::vector<detail::redis_reply> operator()(const detail::redis_step& step) const {
      return step.scripts.empty() ? client->plain(step.plain, operation)
                                  : client->exchange(step.scripts, operation);
    }
  };

  // What a claim, complete, release or checkpoint is given: its script calls and, when writes
  // wait for replicas, WAIT after them in the same round trip, whose answer is checked (and
  // taken off) before the operation decodes the rest.
  struct write_send {
    const detail::redis_operations* operations;
    detail::redis_client* client;
    const char* operation;
    bool claim;
    std::vector<detail::redis_reply> operator()(
        std::span<const detail::redis_command> commands) const {
      return operations->replicated(
          client->exchange(commands, operation, operations->wait_for_replicas(claim)), operation,
          claim);
    }
  };
  write_send write(const char* operation, bool claim = false) const {
    return write_send{&state().operations, &state().client, operation, claim};
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

#endif  // IDEM_STORE_REDIS_DETAIL_STORE_HPP
