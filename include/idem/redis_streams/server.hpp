// Where the Redis server of an outbox's streams listens and how to log in: what the sink and the
// consumer (redis_streams/sink.hpp, consumer.hpp) are both told, and the one place that turns it
// into the settings of the Redis store's client, on whose pooled connections both run.
#ifndef IDEM_REDIS_STREAMS_SERVER_HPP
#define IDEM_REDIS_STREAMS_SERVER_HPP

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include <idem/store/redis/detail/connection.hpp>

namespace idem::redis_streams {

/// A Redis server: as in redis_store::options.
struct server {
  /// Where it listens. When `unix_socket` is set, host and port are not used.
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string unix_socket{};
  /// AUTH, when set (username empty: the default user); SELECT database, when not 0.
  std::string username{};
  std::string password{};
  int database = 0;
  std::chrono::milliseconds connect_timeout{2000};
  /// How long one exchange may wait for the server before store_error(unavailable).
  std::chrono::milliseconds command_timeout{5000};
};

namespace detail {

// The client settings for `where`, for a user that names itself `who` in its errors. Neither
// the sink nor the consumer loads the store's scripts, so neither checks the eviction policy
// the store needs (the docs ask for noeviction).
inline idem::detail::redis_settings client_settings(const server& where, std::size_t pool_size,
                                                    std::string who) {
  return {.host = where.host,
          .port = where.port,
          .unix_socket = where.unix_socket,
          .sentinels = {},
          .master_name = {},
          .username = where.username,
          .password = where.password,
          .database = where.database,
          .pool_size = pool_size,
          .connect_timeout = where.connect_timeout,
          .command_timeout = where.command_timeout,
          .verify_eviction_policy = false,
          .who = std::move(who)};
}

}  // namespace detail

}  // namespace idem::redis_streams

#endif  // IDEM_REDIS_STREAMS_SERVER_HPP
