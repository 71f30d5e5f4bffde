// The outbox's operator vocabulary, the same for every reader (the SQLite and PostgreSQL readers
// in store/*/outbox_reader.hpp, and one of your own):
//
//   std::vector<idem::outbox_dead_letter> letters = reader.dead_letters(100);   // after = 0
//   idem::outbox_requeue_report report = reader.requeue(sequences, now);
//   for (const idem::outbox_requeue_result& each : report) { ... each.sequence, each.status }
//
// A dead letter is a message the relay gave up on (the sink rejected it, or it failed its last
// attempt, or the reader could not read its row): out of the outbox, kept with why and when.
// requeue moves dead letters back into the outbox as new rows (a new sequence, no attempts, due
// at `now`; same id, so consumers still deduplicate it) and answers, for each sequence asked and
// in the order asked, what became of it. A span with a sequence twice is refused before anything
// is written (std::invalid_argument). Standard library only.
#ifndef IDEM_OUTBOX_DEAD_LETTER_HPP
#define IDEM_OUTBOX_DEAD_LETTER_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/outbox/sink.hpp>

namespace idem {

/// A message the relay gave up on, as the store's dead-letter table keeps it.
struct outbox_dead_letter {
  /// The row as it was, with the sequence it had; `attempts` is the number of sends tried, the
  /// last one included (one for a row the reader could not read). Headers that cannot be
  /// decoded are left empty (the reason then says so).
  outbox_entry entry{};
  std::chrono::system_clock::time_point dead_at{};
  /// The sink's last error or its rejection, or why the reader buried the row.
  std::string reason{};
};

/// What requeue did with one sequence.
enum class outbox_requeue_status : std::uint8_t {
  /// Moved back into the outbox, with a new sequence and no attempts: it is sent again, behind
  /// what its partition key committed before the requeue.
  requeued,
  /// No dead letter has that sequence (never one, requeued or deleted already).
  no_such_dead_letter,
  /// The outbox holds a message with the same id (written again since, or requeued earlier in
  /// the same call): the dead letter stays where it is, since consumers would deduplicate the
  /// second copy anyway, and its payload may differ: the operator decides.
  id_already_in_outbox,
};

/// One sequence of a requeue, and what became of it.
struct outbox_requeue_result {
  std::int64_t sequence = 0;
  outbox_requeue_status status = outbox_requeue_status::no_such_dead_letter;
  friend bool operator==(const outbox_requeue_result&, const outbox_requeue_result&) = default;
};

/// requeue's answer: one result per sequence asked, in the order asked.
using outbox_requeue_report = std::vector<outbox_requeue_result>;

namespace detail {

// The check every reader's requeue makes before it writes: a sequence asked twice has no one
// answer (the first would requeue it, the second find no dead letter), so the call is refused.
inline void check_requeue_sequences(std::span<const std::int64_t> sequences, const char* who) {
  std::vector<std::int64_t> sorted(sequences.begin(), sequences.end());
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end()) {
    throw std::invalid_argument(std::string(who) + "sequence " + std::to_string(*twice) +
                                " is asked more than once; nothing was requeued");
  }
}

}  // namespace detail
}  // namespace idem

#endif  // IDEM_OUTBOX_DEAD_LETTER_HPP
