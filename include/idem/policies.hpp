// The policies struct: every choice a retrying or idempotent wrapper makes, in one place.
//
// Users inherit from default_policies and override only what they change:
//
//   struct my_policies : idem::default_policies {
//     using backoff = idem::decorrelated_jitter;
//     using breaker = idem::consecutive_failure_breaker;
//     static constexpr int max_attempts = 5;
//   };
//
// Each type is checked against its concept where the policies are used, with a message that
// names what is missing.
//
// The server side's defaults (the memory store, the XXH3 fingerprint, the failure policy, the
// response codec, the observer) are only declared here; idem/server/idempotent.hpp and
// idem/server/inbox.hpp include their definitions. A client that includes idem/client/retrying.hpp
// alone then does not compile the lock-free store and the hash it never uses: about a fifth of that
// header's build time.
//
// This struct is the one place a default is written: idempotent::options and inbox::options
// take each of theirs from the Policies they are given.
#ifndef IDEM_POLICIES_HPP
#define IDEM_POLICIES_HPP

#include <chrono>
#include <cstddef>
#include <string_view>

#include <idem/client/policy/breaker.hpp>
#include <idem/client/policy/classifier.hpp>
#include <idem/client/policy/hedging.hpp>
#include <idem/client/policy/key_generator.hpp>
#include <idem/client/policy/latency.hpp>
#include <idem/client/policy/limiter.hpp>
#include <idem/client/policy/observer.hpp>
#include <idem/core/clock.hpp>
#include <idem/core/key.hpp>
#include <idem/core/policy/backoff.hpp>
#include <idem/core/policy/budget.hpp>
#include <idem/core/policy/random.hpp>

namespace idem {

// The server side's defaults, defined in the headers idem/server/idempotent.hpp and
// idem/server/inbox.hpp include: idem/store/memory.hpp, idem/core/fingerprint/xxh3.hpp,
// idem/server/failure.hpp, idem/server/response_codec.hpp, idem/server/observer.hpp.
template <class Lazy>
class basic_memory_store;
using memory_store = basic_memory_store<void>;
struct xxh3_128;
struct release_on_failure;
struct plain_response_codec;
struct no_server_observer;

/// Whether a call may be repeated, and why.
enum class call_safety {
  /// The call sends the idempotency key and the server deduplicates by it: repeating is safe,
  /// even after an ambiguous failure. The default.
  keyed,
  /// The call is idempotent by nature (a GET, a PUT of a whole resource): repeating is safe.
  idempotent,
  /// Neither: a repeat might do the effect twice. Never retried.
  unsafe,
};

struct default_policies {
  /// Reads the time and waits: coarse_clock (monotonic deadlines; a wall time within a timer
  /// tick, cheap to read), steady_clock (the exact wall time), or manual_clock in tests. The
  /// server side stamps records with its wall_now().
  using clock = idem::coarse_clock;

  // --- server side: idempotent, inbox ------------------------------------------------------
  /// Where records live: the lock-free sharded memory store (not durable; see the SQL and
  /// Redis stores for that).
  using store = idem::memory_store;
  /// The request digest: XXH3-128 over method, target and body. Wrap it in
  /// idem::request_fingerprint to cover headers, or idem::canonical_json for JSON bodies.
  using fingerprint = idem::xxh3_128;
  /// A handler that throws releases its key, so a corrected retry runs.
  using failure = idem::release_on_failure;
  /// A claim is honoured this long before another attempt may take it over; each recovery
  /// point renews it. Set it well above the handler's usual run time.
  static constexpr std::chrono::seconds lease{30};
  /// Records are kept 24 hours (Stripe's window): a repeat within it replays, one after it runs
  /// again.
  static constexpr std::chrono::hours retention{24};
  /// A duplicate of a request in progress answers 409 at once; a positive wait makes it wait
  /// (bounded) for the response and replay it instead.
  static constexpr std::chrono::milliseconds coalesce{0};
  /// Keys longer than this are invalid (400).
  static constexpr std::size_t max_key_length = idem::max_key_length;
  /// A request without a key is refused (400) rather than run unguarded.
  static constexpr bool require_key = true;
  /// Request bodies of any size are accepted; set a bound (413 past it) where the transport
  /// does not already impose one.
  static constexpr std::size_t max_body_bytes = static_cast<std::size_t>(-1);
  /// Responses of any size are stored; set a bound where one tenant's large responses could
  /// fill the store. A response past it is not stored: the first caller still gets it (verdict
  /// response_too_large), repeats answer response_too_large (500) and are not run again.
  static constexpr std::size_t max_response_bytes = static_cast<std::size_t>(-1);
  /// What responses and recovery points become before the store keeps them: as they are by
  /// default; an encrypting or redacting codec where they hold secrets (response_codec.hpp).
  using response_codec = idem::plain_response_codec;
  /// The request header idempotent(scope, request) reads the key from: the IETF
  /// draft-ietf-httpapi-idempotency-key-header's, which Stripe and others use too.
  static constexpr std::string_view key_header = idempotency_key_field;
  /// Server telemetry: one event a call (its verdict, whether it was a coalesced replay, its
  /// duration) and one a handler run (its duration). None by default, at no cost: no clock is
  /// read for it (idem/server/observer.hpp; idem/prometheus.hpp exports them as metrics).
  using server_observer = idem::no_server_observer;

  // --- client side: retrying ---------------------------------------------------------------
  /// The random engine each operation draws its jitter and key from.
  using random = idem::xoshiro256ss;
  /// The wait before each retry: full jitter, base 100 ms, cap 20 s (AWS SDK standard mode).
  using backoff = idem::full_jitter;
  /// Caps retries at a share of traffic: a 500-token bucket, a retry costs 5 (AWS SDK retry
  /// quota), refilled by 10% of a retry per first attempt (gRPC retry throttling's ratio).
  using budget = idem::token_bucket;
  /// No circuit breaker by default: whether to fail fast is the service's decision.
  using breaker = idem::no_breaker;
  /// HTTP-like responses, error codes, gRPC codes and std::system_error, by their specs' rules.
  using classifier = idem::default_classifier;
  /// Telemetry: none, at no cost.
  using observer = idem::no_observer;
  /// Attempts' durations, for timeouts derived from them: none by default, at no cost (no clock
  /// is read for it, and each attempt's timeout is the operation's time left). Set
  /// idem::latency_tracker, one per dependency, for attempt_timeouts (client/policy/latency.hpp).
  using latency = idem::no_latency_tracker;
  /// Permits for attempts, so many a second across every thread: none by default, at no cost.
  /// idem::token_bucket_limiter or idem::sliding_window_limiter, one per dependency
  /// (client/policy/limiter.hpp).
  using limiter = idem::no_limiter;
  /// A second attempt under the same key when the first is slow (async_retrying only): none by
  /// default. idem::hedging, one per dependency (client/policy/hedging.hpp).
  using hedge = idem::no_hedging;
  /// The idempotency key of each operation: a random UUID (version 4).
  using key_generator = idem::uuid_v4;

  /// Attempts per operation, the first included (the AWS SDKs' standard mode default).
  static constexpr int max_attempts = 3;
  /// The overall time one operation may take, attempts and waits together. There is no
  /// standard value; 10 s is a common request timeout. Set it from your caller's own deadline.
  static constexpr std::chrono::milliseconds deadline{10'000};
  /// Calls are keyed: the key goes with every attempt and the server deduplicates.
  static constexpr call_safety safety = call_safety::keyed;
  /// A retrying call made inside another one on the same thread makes one attempt only, so that
  /// retries happen at one layer (three layers of three attempts would be 27 calls).
  static constexpr bool retry_when_nested = false;
};

}  // namespace idem

#endif  // IDEM_POLICIES_HPP
