// The options of the server side's faces, declared once for both drivers of each:
// idempotent_options<Policies> is idempotent::options and the base of async_idempotent::options,
// inbox_options<Policies> is inbox::options and the base of async_inbox::options. The
// asynchronous faces add only what is asynchronous (where a blocking store's calls run, the
// heartbeat); every field here means the same on both.
//
//   idem::idempotent<H>::options parts;   // idem::idempotent_options<idem::default_policies>
//   parts.lease = std::chrono::seconds(30);
//   parts.max_kept_request_bytes = 64 * 1024;   // resumable records
#ifndef IDEM_SERVER_OPTIONS_HPP
#define IDEM_SERVER_OPTIONS_HPP

#include <chrono>
#include <cstddef>
#include <string>

#include <idem/core/fingerprint/fingerprint.hpp>

namespace idem {

/// The parts a wrapper is built from; each defaults to its policy (idem/policies.hpp), and is
/// checked once, when the wrapper is built. A store is a handle: give several wrappers copies
/// of one store and they share its records.
template <class Policies>
struct idempotent_options {
  typename Policies::store store{};
  typename Policies::clock clock{};
  fingerprint_for<typename Policies::fingerprint> fingerprint{};
  typename Policies::failure failure{};
  /// How long a claim is honoured before another attempt may take it over. Longer than the
  /// handler's usual run time; each recovery point renews it.
  std::chrono::nanoseconds lease = Policies::lease;
  /// How long records are kept. A repeat after this runs again: choose it longer than your
  /// clients retry for.
  std::chrono::nanoseconds retention = Policies::retention;
  /// How long a duplicate of a request in progress waits for its response before answering
  /// in_progress; zero answers at once.
  std::chrono::nanoseconds coalesce = Policies::coalesce;
  /// The longest key accepted, in bytes.
  std::size_t max_key_length = Policies::max_key_length;
  /// Whether a call without a key is refused (missing_key) or run unguarded.
  bool require_key = Policies::require_key;
  /// The longest request body accepted, in bytes; a longer one answers body_too_large (413)
  /// before anything is hashed or claimed.
  std::size_t max_body_bytes = Policies::max_body_bytes;
  /// The largest stored response, in bytes (after the response codec): a larger one is not
  /// stored, its caller gets it with verdict response_too_large, and repeats answer
  /// response_too_large (500) without running again.
  std::size_t max_response_bytes = Policies::max_response_bytes;
  /// Seals responses and recovery points before the store keeps them, opens them on replay.
  typename Policies::response_codec response_codec{};
  /// Where operator()(scope, request) finds the key.
  std::string key_header = std::string(Policies::key_header);
  /// Resumable records: each request is kept in its record (encoded by idem::codec<Request>,
  /// sealed by the response codec) until the record completes, so that idem::reconciler can
  /// finish the work of a client that gave up (docs/reconciler.md). The largest kept request,
  /// in bytes as stored; a larger one answers body_too_large (413) before anything is claimed.
  /// 0 keeps none: the records are not resumable.
  std::size_t max_kept_request_bytes = 0;
  /// The name a reconciler finds this wrapper by, kept with each request (resumable records
  /// only): give each wrapper that shares a store its own.
  std::string name{};
  /// The step the handler starts first, whose start the claim may record: each new record's
  /// claim writes the step's started entry with it, and the step (a keyed one: step(name, fn),
  /// with or without idem::with_next_write), when it starts before a third of the lease has
  /// passed and nothing was written since the claim, writes no start of its own: one fenced
  /// write a call fewer, since the claim has just checked the fence and set the lease. A
  /// lookup step of that name writes its own start, and asks its lookup only when a takeover
  /// or its own earlier start says so. The price: a process that dies between the claim and
  /// the step leaves its record looking as if the step had started, which a reconciler reports
  /// as unknown rather than not landed. Empty (the default): none. (docs/server.md)
  std::string first_step{};
  /// A call whose caller_deadline leaves less than this (or nothing) is refused with
  /// deadline_exceeded before anything is claimed: the least the handler needs to finish.
  std::chrono::nanoseconds minimum_time_left{0};
  /// Hears of each call's verdict and each handler run (idem/server/observer.hpp): a handle,
  /// so copies given to several wrappers report to one place.
  [[no_unique_address]] typename Policies::server_observer server_observer{};
};

/// The parts an inbox is built from; each defaults to its policy, and means what the field
/// of the same name in idempotent_options does.
template <class Policies>
struct inbox_options {
  typename Policies::store store{};
  typename Policies::clock clock{};
  std::chrono::nanoseconds lease = Policies::lease;
  std::chrono::nanoseconds retention = Policies::retention;
  std::chrono::nanoseconds coalesce = Policies::coalesce;
  /// The longest event id accepted, in bytes.
  std::size_t max_key_length = Policies::max_key_length;
  std::size_t max_response_bytes = Policies::max_response_bytes;
  typename Policies::response_codec response_codec{};
  /// Told of each delivery and each run of `fn` (Policies::server_observer).
  [[no_unique_address]] typename Policies::server_observer server_observer{};
};

}  // namespace idem

#endif  // IDEM_SERVER_OPTIONS_HPP
