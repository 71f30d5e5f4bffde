// Where a relay sends outbox messages: the Sink concept, what a sink is handed (outbox_entry) and
// what it answers for each message (sink_result).
//
//   struct my_sink {
//     void publish(std::span<const idem::outbox_entry> batch,
//                  std::span<idem::sink_result> results);
//   };
//
// A relay (idem::outbox_relay) reads committed rows of the outbox in order, hands them to the
// sink a batch at a time and marks a row published only once the sink answered `acknowledged`
// for it, so a message is delivered at least once and never lost; consumers deduplicate by
// `entry.id`. Redis Streams is the sink idem ships (idem/redis_streams.hpp); Kafka or RabbitMQ
// users write theirs to this concept and check it with idem/testing/sink_conformance.hpp.
// Standard library only.
#ifndef IDEM_OUTBOX_SINK_HPP
#define IDEM_OUTBOX_SINK_HPP

#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>

#include <idem/outbox/message.hpp>

namespace idem {

/// One committed outbox row, as a relay hands it to a sink.
struct outbox_entry {
  /// The order rows were written in: increasing, with gaps. Within one partition key a relay
  /// hands a sink entries in this order.
  std::int64_t sequence = 0;
  /// The message id (outbox_message_id, or the application's own): what consumers deduplicate
  /// by. A sink passes it on with the message.
  std::string id{};
  outbox_message message{};
  /// When the message was written (the writer's clock; nanoseconds since the Unix epoch).
  std::chrono::system_clock::time_point created_at{};
  /// How many times a sink failed to take it before (0 on the first try).
  std::uint32_t attempts = 0;
};

/// What a sink did with one entry.
enum class sink_status : std::uint8_t {
  /// The sink has the message durably: the relay marks it published and never sends it again.
  acknowledged,
  /// Not taken this time (a timeout, a refused write): the relay tries again after a backoff,
  /// and dead-letters the message after its configured number of attempts.
  failed,
  /// The sink will never take this message (too large for it, a topic it cannot have): the
  /// relay dead-letters it at once with the reason.
  rejected,
};

struct sink_result {
  sink_status status = sink_status::failed;
  /// Why, for failed and rejected: kept with the row (last_error) and in the dead letter.
  std::string error{};
};

/// A sink takes a batch of entries and says, for each, what became of it.
///
/// The contract (idem/testing/sink_conformance.hpp checks it):
/// * `results` has one element per entry of `batch`, in the same order, each set to `failed`
///   with an empty error before the call; the sink sets each one it handled.
/// * `acknowledged` only once the message is durable in the sink (a reply from the broker, not
///   a write into a socket buffer): a crash of the relay after it still delivers the message.
/// * Entries of one partition key are delivered in the order of the batch. A sink that fails
///   an entry should not send the later entries of the same key in that batch (answer them
///   `failed` too), or their order is lost when the failed one is retried.
/// * A sink may deliver a message it then fails to acknowledge (the reply was lost): the relay
///   sends it again, so a consumer sees it twice and deduplicates by id. That is the at-least-
///   once half of the outbox; a sink never has to deduplicate.
/// * Throwing means the sink as a whole is unavailable (its server unreachable): the relay
///   keeps every entry of the batch as it was, without counting an attempt against any, and
///   backs off before it tries again; nothing is lost and nothing is dead-lettered for an
///   outage however long.
template <class S>
concept Sink = requires(S& sink, std::span<const outbox_entry> batch,
                        std::span<sink_result> results) {
  { sink.publish(batch, results) } -> std::same_as<void>;
};

}  // namespace idem

#endif  // IDEM_OUTBOX_SINK_HPP
