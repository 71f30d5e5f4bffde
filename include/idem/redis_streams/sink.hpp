// idem::redis_streams::sink: the outbox Sink (idem/outbox/sink.hpp) on Redis Streams, through
// hiredis and the Redis store's connections (store/redis/detail/connection.hpp: pooled, AUTH,
// SELECT, timeouts, SIGPIPE kept away, a reused connection the server closed tried once more).
//
//   idem::redis_streams::sink sink({.server = {.host = "redis"}, .stream_prefix = "outbox:"});
//   sink.publish(batch, results);   // what idem::outbox_relay calls
//
// Layout (idem/redis_streams/entry.hpp, which the consumer reads with): a stream per topic,
// `prefix + topic`; each message one entry added with `XADD stream * id .. sequence ..
// partition_key .. created_at .. headers .. payload` (plus `MAXLEN ~ n` when trimming is on), so
// Redis gives it the entry id and keeps a stream in the order entries were added.
//
// One round trip a batch: every XADD of the batch (and the WAIT, when asked for) is written to one
// connection at once and the replies are read after; Redis runs a connection's commands in the
// order they came. Each entry is answered from its own reply:
//   * the new entry's id             -> acknowledged (after WAIT, if asked for, confirmed it);
//   * WRONGTYPE (the stream's name is a key of another type: Redis will never add to it until
//     someone removes that key)      -> rejected, with Redis's text;
//   * an error that says the server takes no writes now (OOM, READONLY, MISCONF, LOADING, BUSY,
//     MASTERDOWN, NOREPLICAS, CLUSTERDOWN, TRYAGAIN)
//                                    -> the sink throws store_error(unavailable): an outage,
//     which the relay waits out without counting attempts or dead-lettering anything;
//   * any other error reply          -> failed, with Redis's text (tried again later).
// Entries refused before anything is sent (an empty topic, an id a consumer would refuse, a
// field longer than Redis takes) are rejected with the reason and never written. A connection
// that fails (unreachable, closed, no answer within command_timeout) throws store_error
// (unavailable), whatever was read before: the relay sends the whole batch again, so what Redis
// had already added is added a second time, a duplicate the consumer drops by message id.
//
// Order. Entries of one partition key reach one stream in the order of the batch: they are sent
// in that order on one connection. The Sink contract also asks a sink that fails an entry not to
// send the later entries of its key; a pipelined sink has sent them before it reads the first
// reply, so that cannot hold literally. What holds: the errors after which a later XADD to the
// same stream could still succeed are the server-wide ones above, and those throw (nothing is
// acknowledged; the batch goes again, in order); WRONGTYPE and ACL refusals concern the stream,
// so every entry of it in the batch gets the same answer. A key's messages in different topics
// are in different streams, which no reader sees in one order anyway.
//
// Every option and its default, what acknowledged means, trimming and WAIT:
// docs/outbox_sinks.md, "Redis Streams sink".
#ifndef IDEM_REDIS_STREAMS_SINK_HPP
#define IDEM_REDIS_STREAMS_SINK_HPP

#include <hiredis/hiredis.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/core/key.hpp>
#include <idem/outbox/message.hpp>
#include <idem/outbox/sink.hpp>
#include <idem/redis_streams/entry.hpp>
#include <idem/redis_streams/server.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/reply.hpp>

namespace idem::redis_streams {

namespace detail {

// The longest argument Redis takes by default (proto-max-bulk-len, 512 MB). A longer one makes
// the server close the connection, which would look like an outage on every try: refused before
// sending instead.
inline constexpr std::size_t max_argument_bytes = std::size_t{512} << 20;

// Why `entry` cannot be written to `stream`, or empty when it can: an entry refused here would
// be refused by the server or by every consumer, so it is rejected rather than sent.
inline std::string refusal(const outbox_entry& entry, std::string_view stream,
                           const encoded_entry& encoded) {
  if (entry.message.topic.empty()) return "the message has no topic (no stream to add it to)";
  if (!is_valid_key(entry.id, max_outbox_message_id_length)) {
    return "the message id must be 1 to " + std::to_string(max_outbox_message_id_length) +
           " bytes of visible ASCII (it was " + std::to_string(entry.id.size()) +
           " bytes): a consumer would refuse the entry";
  }
  const std::pair<const char*, std::size_t> sizes[] = {
      {"stream name", stream.size()},
      {"payload", entry.message.payload.size()},
      {"partition key", entry.message.partition_key.size()},
      {"encoded headers", encoded.headers.size()}};
  for (const auto& [what, size] : sizes) {
    if (size > max_argument_bytes) {
      return std::string("the ") + what + " is " + std::to_string(size) +
             " bytes, more than Redis takes in one argument (proto-max-bulk-len, 512 MB)";
    }
  }
  return {};
}

// What an error reply to XADD means for the entry, from its first word.
enum class refusal_kind : std::uint8_t {
  failed,       // try again later
  rejected,     // never: the stream's name belongs to another type's key
  unavailable,  // the server takes no writes now: the whole sink is out
};

inline refusal_kind classify_error(std::string_view text) noexcept {
  const std::string_view word = text.substr(0, text.find(' '));
  if (word == "WRONGTYPE") return refusal_kind::rejected;
  for (const std::string_view outage : {"OOM", "READONLY", "MISCONF", "LOADING", "BUSY",
                                        "MASTERDOWN", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN"}) {
    if (word == outage) return refusal_kind::unavailable;
  }
  return refusal_kind::failed;
}

}  // namespace detail

/// Publishes outbox entries to Redis Streams: a stream per topic, one XADD per entry, one round
/// trip per batch. A handle: copies share one pool of `pool_size` connections (the Redis
/// store's pool), and each publish borrows one connection for its whole batch.
class sink {
 public:
  /// WAIT numreplicas timeout after each batch's XADDs: an entry is acknowledged only once that
  /// many replicas confirmed they have it.
  struct replication {
    /// Replicas that must confirm (0 is allowed: WAIT then returns at once).
    int replicas = 1;
    /// How long WAIT may wait; positive, and shorter than command_timeout.
    std::chrono::milliseconds timeout{1000};
  };

  struct options {
    /// Where Redis listens, how to log in, the timeouts.
    redis_streams::server server{};
    /// A message of topic T goes to the stream `stream_prefix + T`. Consumers read with the same
    /// prefix.
    std::string stream_prefix{default_stream_prefix};
    /// When set, every XADD trims its stream to about this many entries (`MAXLEN ~ n`; Redis
    /// trims whole nodes, so a stream may hold somewhat more). Off by default: trimming drops
    /// the oldest entries whether or not every consumer group has read them.
    std::optional<std::size_t> approximate_max_length{};
    /// When set, each batch ends with WAIT, and its entries are acknowledged only if enough
    /// replicas confirmed (a primary's acknowledgement alone is lost if it fails over before
    /// replicating).
    std::optional<replication> wait_for_replicas{};
    /// Connections the sink may open; publishers beyond that wait for one.
    std::size_t pool_size = 1;
  };

  /// Checks the options; connects on the first publish. Throws std::invalid_argument for
  /// options no connection could use.
  explicit sink(options settings) : state_(std::make_shared<state>(checked(std::move(settings)))) {}

  const options& settings() const noexcept { return state_->settings; }

  /// The Sink contract (idem/outbox/sink.hpp); the top of this header says how each reply is
  /// answered. Throws std::invalid_argument when `results` is not as long as `batch`, and
  /// store_error(unavailable) when the server cannot be reached or takes no writes.
  void publish(std::span<const outbox_entry> batch, std::span<sink_result> results) {
    if (results.size() != batch.size()) {
      throw std::invalid_argument(
          "idem::redis_streams::sink: publish needs one result per entry (" +
          std::to_string(batch.size()) + " entries, " + std::to_string(results.size()) +
          " results)");
    }
    const options& given = state_->settings;
    std::vector<std::string> streams;
    std::vector<encoded_entry> encoded;
    streams.reserve(batch.size());
    encoded.reserve(batch.size());
    std::vector<std::size_t> sent;  // the index in `batch` of each XADD sent
    sent.reserve(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      streams.push_back(stream_name(given.stream_prefix, batch[i].message.topic));
      encoded.push_back(encode_entry(batch[i]));
      std::string why = detail::refusal(batch[i], streams.back(), encoded.back());
      if (why.empty()) {
        sent.push_back(i);
      } else {
        results[i] = {sink_status::rejected, "idem::redis_streams::sink: " + std::move(why)};
      }
    }
    if (sent.empty()) return;

    std::vector<std::vector<std::string_view>> commands;
    commands.reserve(sent.size() + 1);
    for (const std::size_t i : sent) {
      std::vector<std::string_view>& words = commands.emplace_back();
      words.reserve(2 + 3 + 1 + 2 * entry_fields.size());
      words.emplace_back("XADD");
      words.emplace_back(streams[i]);
      if (given.approximate_max_length) {
        words.emplace_back("MAXLEN");
        words.emplace_back("~");
        words.emplace_back(state_->max_length_text);
      }
      words.emplace_back("*");
      const auto values = entry_values(batch[i], encoded[i]);
      for (std::size_t f = 0; f < entry_fields.size(); ++f) {
        words.push_back(entry_fields[f]);
        words.push_back(values[f]);
      }
    }
    if (given.wait_for_replicas) {
      commands.push_back({"WAIT", state_->wait_replicas_text, state_->wait_timeout_text});
    }

    const std::vector<idem::detail::redis_reply> replies =
        state_->client.plain(commands, "publish");

    for (const idem::detail::redis_reply& reply : replies) {
      if (reply->type == REDIS_REPLY_ERROR &&
          detail::classify_error(idem::detail::reply_text(reply.get())) ==
              detail::refusal_kind::unavailable) {
        throw store_error(
            store_failure::unavailable,
            "idem::redis_streams::sink: publish failed: the server at " + state_->client.where() +
                " takes no writes now: " + std::string(idem::detail::reply_text(reply.get())));
      }
    }
    std::string unconfirmed;  // why acknowledged entries are not, when WAIT fell short
    if (given.wait_for_replicas) {
      const redisReply* waited = replies.back().get();
      if (waited->type != REDIS_REPLY_INTEGER) {
        unconfirmed = "WAIT failed: " + std::string(idem::detail::reply_text(waited));
      } else if (waited->integer < given.wait_for_replicas->replicas) {
        unconfirmed = "added, but only " + std::to_string(waited->integer) + " of " +
                      state_->wait_replicas_text + " replicas confirmed it within " +
                      state_->wait_timeout_text + " ms (WAIT): not acknowledged, sent again";
      }
    }
    for (std::size_t r = 0; r < sent.size(); ++r) {
      const redisReply* reply = replies[r].get();
      sink_result& result = results[sent[r]];
      const std::string_view text = idem::detail::reply_text(reply);
      if (reply->type == REDIS_REPLY_STRING) {
        if (unconfirmed.empty()) {
          result = {sink_status::acknowledged, {}};
        } else {
          result = {sink_status::failed, "idem::redis_streams::sink: " + unconfirmed};
        }
      } else if (reply->type == REDIS_REPLY_ERROR) {
        const bool never = detail::classify_error(text) == detail::refusal_kind::rejected;
        result = {never ? sink_status::rejected : sink_status::failed,
                  "idem::redis_streams::sink: XADD to " + streams[sent[r]] +
                      " refused: " + std::string(text)};
      } else {
        result = {sink_status::failed,
                  "idem::redis_streams::sink: XADD to " + streams[sent[r]] +
                      " answered neither an entry id nor an error (reply type " +
                      std::to_string(reply->type) + ")"};
      }
    }
  }

 private:
  struct state {
    explicit state(options given)
        : settings(std::move(given)),
          client(client_settings(settings)),
          max_length_text(settings.approximate_max_length
                              ? std::to_string(*settings.approximate_max_length)
                              : std::string{}),
          wait_replicas_text(settings.wait_for_replicas
                                 ? std::to_string(settings.wait_for_replicas->replicas)
                                 : std::string{}),
          wait_timeout_text(settings.wait_for_replicas
                                ? std::to_string(settings.wait_for_replicas->timeout.count())
                                : std::string{}) {}
    options settings;
    idem::detail::redis_client client;
    // The numbers every batch sends, written once.
    std::string max_length_text;
    std::string wait_replicas_text;
    std::string wait_timeout_text;
  };

  static idem::detail::redis_settings client_settings(const options& given) {
    return detail::client_settings(given.server, given.pool_size, "idem::redis_streams::sink");
  }

  // What redis_client does not check itself (it checks the port, the pool and the timeouts).
  static options checked(options given) {
    const auto refuse = [](const std::string& why) {
      throw std::invalid_argument("idem::redis_streams::sink: " + why);
    };
    if (given.approximate_max_length && *given.approximate_max_length == 0) {
      refuse("approximate_max_length 0 would trim away every message as it is added");
    }
    if (const auto& wait = given.wait_for_replicas) {
      if (wait->replicas < 0) refuse("wait_for_replicas.replicas must not be negative");
      // WAIT with timeout 0 blocks for ever; one past command_timeout outlives the connection.
      if (wait->timeout <= std::chrono::milliseconds::zero() ||
          wait->timeout >= given.server.command_timeout) {
        refuse("wait_for_replicas.timeout must be positive and shorter than command_timeout (" +
               std::to_string(given.server.command_timeout.count()) + " ms)");
      }
    }
    return given;
  }

  std::shared_ptr<state> state_;
};

static_assert(Sink<sink>, "idem::redis_streams::sink must satisfy idem::Sink.");

}  // namespace idem::redis_streams

#endif  // IDEM_REDIS_STREAMS_SINK_HPP
