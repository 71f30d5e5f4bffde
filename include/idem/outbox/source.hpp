// What a relay needs of a store's outbox: the Outbox concept, which the SQLite and PostgreSQL
// readers implement (store/sqlite/outbox_reader.hpp, store/postgres/outbox_reader.hpp) and
// idem::outbox_relay drives:
//
//   auto batch = outbox.fetch(limit, now);        // claim due rows, in order
//   sink.publish(batch.entries(), results);       // hand them on
//   outbox.settle(batch, settlements, now);       // one transaction: mark, retry, dead-letter
//
// A batch is a claim: between fetch and settle no other relay sends its rows (PostgreSQL: the
// rows are locked FOR UPDATE SKIP LOCKED in the batch's open transaction; SQLite: one relay at a
// time holds a fenced lease). A batch dropped without settle changes nothing: its rows are sent
// again by the next fetch, here or in another relay, which is what makes a crash anywhere in a
// pass harmless (at least once, never lost). Standard library only.
#ifndef IDEM_OUTBOX_SOURCE_HPP
#define IDEM_OUTBOX_SOURCE_HPP

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include <idem/outbox/sink.hpp>

namespace idem {

/// What a relay decided for one entry of a batch, once the sink answered.
struct outbox_settlement {
  enum class kind : std::uint8_t {
    /// The sink acknowledged it: marked published (kept until retention removes it).
    published,
    /// The sink failed it: attempts + 1, tried again from next_attempt_at; error kept.
    retry,
    /// Moved to the dead-letter table with `error`, out of the outbox (it no longer holds back
    /// later messages of its partition key).
    dead,
    /// Left exactly as it was (the relay did not hand it to the sink).
    untouched,
  };
  kind what = kind::untouched;
  std::string error{};
  std::chrono::system_clock::time_point next_attempt_at{};
};

/// How far the relay is behind: what the observer reports as lag.
struct outbox_backlog {
  /// Unpublished rows, due or waiting for a retry.
  std::size_t waiting = 0;
  /// When the oldest unpublished row was written; empty when none waits.
  std::optional<std::chrono::system_clock::time_point> oldest_created_at{};
};

/// Thrown by settle (and by fetch) when this relay's claim is no longer its own: the SQLite
/// lease was taken over after it expired. Nothing of the batch was written; the rows are the
/// new holder's to send (again).
class outbox_claim_lost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A store's outbox, as a relay sees it.
///
/// * `fetch(limit, now)` claims at most `limit` rows that are unpublished and due
///   (next_attempt_at <= now) and answers them as a batch, in sequence order, leaving out every
///   row an earlier unpublished row of its partition key holds back (one not due yet, or claimed
///   by another relay, or simply not in this batch): a row is in the batch only if each earlier
///   unpublished row of its key is in it before it. That is what keeps one key's messages in
///   order through retries and several relays. An empty batch means nothing is due now (or,
///   SQLite, another relay holds the lease).
/// * `batch.entries()` answers `std::span<const outbox_entry>`.
/// * `settle(batch, settlements, now)` writes one settlement per entry, in one transaction that
///   also ends the claim; it throws outbox_claim_lost when the claim was lost (nothing written),
///   or the store's error. A batch is settled at most once; destroying it unsettled releases its
///   rows unchanged.
/// * `purge(published_before, limit)` deletes at most `limit` rows published before the time;
///   answers how many.
/// * `backlog(now)` answers what waits.
/// * `wait_for_rows(timeout)` returns when rows may have arrived (PostgreSQL: a NOTIFY from a
///   writer's commit, a hint only) or after `timeout`, whichever comes first.
template <class O>
concept Outbox = requires(O& outbox, typename O::batch& batch, std::size_t limit,
                          std::chrono::system_clock::time_point now,
                          std::span<const outbox_settlement> settlements,
                          std::chrono::milliseconds timeout) {
  { outbox.fetch(limit, now) } -> std::same_as<typename O::batch>;
  { batch.entries() } -> std::convertible_to<std::span<const outbox_entry>>;
  outbox.settle(batch, settlements, now);
  { outbox.purge(now, limit) } -> std::convertible_to<std::size_t>;
  { outbox.backlog(now) } -> std::same_as<outbox_backlog>;
  outbox.wait_for_rows(timeout);
};

}  // namespace idem

#endif  // IDEM_OUTBOX_SOURCE_HPP
