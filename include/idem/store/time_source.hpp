// idem::time_source: whose clock a store that keeps records elsewhere (PostgreSQL, Redis, Redis
// Cluster, and their asynchronous twins) reads leases and expiry from. Every such store's options
// name it `clock`:
//
//   idem::postgres_store::options parts;
//   parts.clock = idem::time_source::caller;   // tests with an idem::manual_clock
#ifndef IDEM_STORE_TIME_SOURCE_HPP
#define IDEM_STORE_TIME_SOURCE_HPP

#include <cstdint>

namespace idem {

/// Whose clock leases and expiry follow.
enum class time_source : std::uint8_t {
  /// The server's (PostgreSQL's clock_timestamp(), Redis's TIME in the scripts): clients and
  /// replicas with skewed clocks agree. The default.
  server,
  /// The `now` each call is given: tests with a manual clock, replays of time.
  caller,
};

}  // namespace idem

#endif  // IDEM_STORE_TIME_SOURCE_HPP
