// An outbox message, and the id it is stored under.
//
// A transactional handler publishes messages with its store's transaction:
//
//   auto handler = [](idem::handler_context& ctx, const idem::http_request& request,
//                     idem::sqlite_store::transaction& txn) {
//     txn.exec("INSERT INTO charges ...");
//     txn.publish("charged", {.topic = "payments", .partition_key = "acct-7", .payload = body});
//     return idem::http_response{201, {}, "charged"};
//   };
//
// The message is a row written in the transaction that completes the record, so the effect,
// its record and its messages commit together or not at all; a relay (the next step of the
// outbox) sends committed rows on. Its id is outbox_message_id(scope, key, name): the same for
// every run of the handler for one (scope, key), so a run after a takeover cannot add the
// message twice, and a consumer deduplicates deliveries by it (idem::inbox, keyed by the id).
// Standard library only: the stores' writers (store/sqlite/outbox.hpp, store/postgres/outbox.hpp)
// need their client libraries, this header does not. docs/outbox.md has the whole story.
#ifndef IDEM_OUTBOX_MESSAGE_HPP
#define IDEM_OUTBOX_MESSAGE_HPP

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/core/codec.hpp>
#include <idem/core/fingerprint/sha256.hpp>
#include <idem/core/key.hpp>
#include <idem/outbox/headers.hpp>

namespace idem {

/// One message for the outbox. Every field has a default, so designated initializers may leave
/// out what a message does not need ({.topic = "t", .payload = p}).
struct outbox_message {
  /// Where the relay sends it (a Redis stream's name, a Kafka topic). Not empty.
  std::string topic{};
  /// Messages of one partition key are delivered in the order they were written; messages of
  /// different keys are not ordered with each other. The aggregate the message is about
  /// (an account, an order) is the usual choice. Any bytes, empty allowed.
  std::string partition_key{};
  /// The message itself: any bytes, up to the store's max_outbox_payload_bytes.
  std::string payload{};
  std::vector<outbox_header> headers{};
};

/// The payload limit the stores use unless configured otherwise: 1 MiB, the default largest
/// message of Kafka (message.max.bytes), and far below what Redis Streams or a database row
/// takes, so a message the outbox accepts is one a usual sink accepts too.
inline constexpr std::size_t default_max_outbox_payload_bytes = std::size_t{1} << 20;

/// The longest message id accepted (an application's own ids; derived ones are 64 bytes). An id
/// is what a consumer deduplicates by, so it follows the rules of an idempotency key: 1 to 255
/// bytes of visible ASCII.
inline constexpr std::size_t max_outbox_message_id_length = max_key_length;

/// The id of the message `name` published for (scope, key): 64 lower-case hex digits.
///
/// The same (scope, key, name) always gives the same id, so a handler run again after a
/// takeover publishes under the id its first run used, and the outbox keeps one row. SHA-256
/// rather than XXH3 (idem's other digest) because the key comes from the client: with a
/// collision-resistant digest nobody can craft a key whose message id lands on another scope's
/// message and so suppress it. Each part is length-prefixed, so ("a", "bc") and ("ab", "c")
/// never meet, and a tag of its own keeps an id apart from handler_context::downstream_key
/// for the same name.
inline std::string outbox_message_id(std::string_view scope, std::string_view key,
                                     std::string_view name) {
  sha256::state hash;
  hash.update(std::string_view{"idem outbox message id v1"});
  for (const std::string_view part : {scope, key, name}) {
    std::string length;
    detail::put_varint(length, part.size());
    hash.update(std::string_view{length});
    hash.update(part);
  }
  return hash.finish().hex();
}

namespace detail {

// The checks every writer makes before it writes a row, so that bad input is refused with a
// sentence at publish, never by the database as a constraint or a size limit.
inline void check_outbox_message(std::string_view id, const outbox_message& message,
                                 std::size_t max_payload_bytes, const char* who) {
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(std::string(who) + ": " + why);
  };
  if (!is_valid_key(id, max_outbox_message_id_length)) {
    refuse("the message id must be 1 to " + std::to_string(max_outbox_message_id_length) +
           " bytes of visible ASCII (it was " + std::to_string(id.size()) + " bytes)");
  }
  if (message.topic.empty()) refuse("the message has no topic");
  if (message.payload.size() > max_payload_bytes) {
    refuse("the payload is " + std::to_string(message.payload.size()) +
           " bytes, more than max_outbox_payload_bytes (" + std::to_string(max_payload_bytes) +
           ")");
  }
}

}  // namespace detail

}  // namespace idem

#endif  // IDEM_OUTBOX_MESSAGE_HPP
