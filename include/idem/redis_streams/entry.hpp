// How an outbox message is laid out in a Redis stream: the one format the Redis Streams sink
// writes (idem/redis_streams/sink.hpp) and idem::stream_consumer reads back
// (idem/redis_streams/consumer.hpp), kept here so that the two cannot drift apart. Standard
// library only: no hiredis, so the format is tested without a server.
//
// A message of topic T goes to the stream `prefix + T` (a stream per topic: a consumer group
// reads one topic, and Redis keeps one stream's entries in the order they were added, which is
// the order the relay sent them). The entry's fields, in this order:
//
//   id             the message id (what consumers deduplicate by): 1 to 255 visible ASCII bytes
//   sequence       the outbox row's sequence, decimal
//   partition_key  any bytes
//   created_at     nanoseconds since the Unix epoch when the message was written, decimal
//   headers        netstrings (idem/outbox/headers.hpp), empty for none
//   payload        any bytes
//
// A reader ignores fields it does not know (a later idem may add some) and refuses an entry
// without one of these, or with one it cannot read, saying which: such an entry is malformed
// and a consumer dead-letters it rather than retrying it forever.
#ifndef IDEM_REDIS_STREAMS_ENTRY_HPP
#define IDEM_REDIS_STREAMS_ENTRY_HPP

#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <idem/core/key.hpp>
#include <idem/outbox/headers.hpp>
#include <idem/outbox/message.hpp>
#include <idem/outbox/sink.hpp>

namespace idem::redis_streams {

/// The prefix of a topic's stream unless configured otherwise: the sink's and the consumer's
/// stream_prefix, which must agree.
inline constexpr std::string_view default_stream_prefix = "idem:outbox:";

/// The field names, in the order the sink writes them.
inline constexpr std::array<std::string_view, 6> entry_fields{
    "id", "sequence", "partition_key", "created_at", "headers", "payload"};

/// The stream a message of `topic` goes to.
inline std::string stream_name(std::string_view prefix, std::string_view topic) {
  std::string name;
  name.reserve(prefix.size() + topic.size());
  name += prefix;
  name += topic;
  return name;
}

/// The values of an entry's fields, in the order of entry_fields. The strings `encoded` holds
/// must outlive the views (the sink builds its XADD from them).
struct encoded_entry {
  std::string sequence;
  std::string created_at;
  std::string headers;
};

inline encoded_entry encode_entry(const outbox_entry& entry) {
  const auto nanoseconds =
      std::chrono::duration_cast<std::chrono::nanoseconds>(entry.created_at.time_since_epoch())
          .count();
  return {std::to_string(entry.sequence), std::to_string(nanoseconds),
          encode_outbox_headers(entry.message.headers)};
}

/// The six values of `entry`'s fields, in the order of entry_fields; `encoded` is
/// encode_entry(entry).
inline std::array<std::string_view, 6> entry_values(const outbox_entry& entry,
                                                    const encoded_entry& encoded) {
  return {entry.id,           encoded.sequence, entry.message.partition_key,
          encoded.created_at, encoded.headers,  entry.message.payload};
}

namespace detail {
inline std::int64_t decimal_field(std::string_view name, std::string_view text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) {
    throw std::invalid_argument("idem: stream entry: the field " + std::string(name) +
                                " is not a decimal integer");
  }
  return value;
}
}  // namespace detail

/// The outbox entry a stream entry holds; `topic` is the topic the stream is for (streams do not
/// repeat it in every entry) and `fields` the entry's field/value pairs as Redis answered them.
/// Throws std::invalid_argument naming what is missing or unreadable (a malformed entry).
inline outbox_entry decode_entry(
    std::string_view topic, std::span<const std::pair<std::string_view, std::string_view>> fields) {
  std::array<const std::string_view*, entry_fields.size()> found{};
  for (const auto& [name, value] : fields) {
    for (std::size_t i = 0; i < entry_fields.size(); ++i) {
      if (name == entry_fields[i]) {
        if (found[i] != nullptr) {
          throw std::invalid_argument("idem: stream entry: the field " + std::string(name) +
                                      " appears twice");
        }
        found[i] = &value;
      }
    }
  }
  for (std::size_t i = 0; i < entry_fields.size(); ++i) {
    if (found[i] == nullptr) {
      throw std::invalid_argument("idem: stream entry: no field " + std::string(entry_fields[i]) +
                                  " (not written by idem's outbox sink)");
    }
  }
  outbox_entry entry;
  if (!is_valid_key(*found[0], max_outbox_message_id_length)) {
    throw std::invalid_argument(
        "idem: stream entry: the id is not 1 to 255 bytes of visible ASCII");
  }
  entry.id = std::string(*found[0]);
  entry.sequence = detail::decimal_field("sequence", *found[1]);
  entry.message.topic = std::string(topic);
  entry.message.partition_key = std::string(*found[2]);
  entry.created_at = std::chrono::system_clock::time_point{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds{detail::decimal_field("created_at", *found[3])})};
  entry.message.headers = decode_outbox_headers(*found[4]);
  entry.message.payload = std::string(*found[5]);
  return entry;
}

}  // namespace idem::redis_streams

#endif  // IDEM_REDIS_STREAMS_ENTRY_HPP
