// What stream_consumer reads out of Redis's answers (RESP2, as hiredis speaks it by default):
// the entries XREADGROUP and XCLAIM answer, and the pending entries XPENDING's extended form
// answers. Each function refuses an answer of another shape with stream_error, naming the
// command, rather than guess: a wrong guess would acknowledge what was never handled.
#ifndef IDEM_REDIS_STREAMS_DETAIL_CONSUMER_REPLIES_HPP
#define IDEM_REDIS_STREAMS_DETAIL_CONSUMER_REPLIES_HPP

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/redis_streams/stream_error.hpp>
#include <idem/store/redis/detail/reply.hpp>

namespace idem::redis_streams::detail {

/// One stream entry as Redis answered it: its id and its field/value pairs, in order.
struct stream_entry {
  std::string id;
  std::vector<std::pair<std::string, std::string>> fields;
  /// XREADGROUP of a consumer's own history answers a deleted entry (trimmed, XDEL) with no
  /// fields at all: there is nothing left to handle.
  bool deleted = false;
};

/// One entry of the group's pending entries list.
struct pending_entry {
  std::string id;
  std::string owner;
  std::int64_t idle_ms = 0;
  std::uint64_t deliveries = 0;
};

[[noreturn]] inline void unexpected_reply(const char* command, const redisReply* reply) {
  if (reply != nullptr && reply->type == REDIS_REPLY_ERROR) {
    throw stream_error(std::string("idem::stream_consumer: ") + command +
                       " was refused: " + std::string(idem::detail::reply_text(reply)));
  }
  throw stream_error(std::string("idem::stream_consumer: ") + command +
                     " answered in a shape no stream command answers");
}

inline bool is_nil(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_NIL;
}

inline std::string text_of(const char* command, const redisReply* reply) {
  if (reply == nullptr ||
      (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_STATUS)) {
    unexpected_reply(command, reply);
  }
  return std::string(idem::detail::reply_text(reply));
}

/// [[id, [field, value, ...] | nil], ...]: what XCLAIM answers, and each stream's part of an
/// XREADGROUP answer.
inline std::vector<stream_entry> entries_of(const char* command, const redisReply* reply) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) unexpected_reply(command, reply);
  std::vector<stream_entry> entries;
  entries.reserve(reply->elements);
  for (std::size_t i = 0; i < reply->elements; ++i) {
    const redisReply* pair = reply->element[i];
    if (pair->type != REDIS_REPLY_ARRAY || pair->elements != 2) unexpected_reply(command, reply);
    stream_entry entry;
    entry.id = text_of(command, pair->element[0]);
    const redisReply* fields = pair->element[1];
    if (is_nil(fields)) {
      entry.deleted = true;
    } else {
      if (fields->type != REDIS_REPLY_ARRAY || fields->elements % 2 != 0) {
        unexpected_reply(command, reply);
      }
      entry.fields.reserve(fields->elements / 2);
      for (std::size_t f = 0; f < fields->elements; f += 2) {
        entry.fields.emplace_back(text_of(command, fields->element[f]),
                                  text_of(command, fields->element[f + 1]));
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

/// XREADGROUP ... STREAMS one-stream id: nil when nothing came (or BLOCK ran out), else
/// [[stream, entries]].
inline std::vector<stream_entry> read_entries_of(const redisReply* reply) {
  if (is_nil(reply)) return {};
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) unexpected_reply("XREADGROUP", reply);
  if (reply->elements == 0) return {};
  const redisReply* stream = reply->element[0];
  if (reply->elements != 1 || stream->type != REDIS_REPLY_ARRAY || stream->elements != 2) {
    unexpected_reply("XREADGROUP", reply);
  }
  return entries_of("XREADGROUP", stream->element[1]);
}

/// XPENDING key group [IDLE ms] start end count: [[id, consumer, idle ms, deliveries], ...].
inline std::vector<pending_entry> pending_entries_of(const redisReply* reply) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) unexpected_reply("XPENDING", reply);
  std::vector<pending_entry> pending;
  pending.reserve(reply->elements);
  for (std::size_t i = 0; i < reply->elements; ++i) {
    const redisReply* row = reply->element[i];
    if (row->type != REDIS_REPLY_ARRAY || row->elements != 4 ||
        row->element[2]->type != REDIS_REPLY_INTEGER ||
        row->element[3]->type != REDIS_REPLY_INTEGER) {
      unexpected_reply("XPENDING", reply);
    }
    pending.push_back({text_of("XPENDING", row->element[0]), text_of("XPENDING", row->element[1]),
                       row->element[2]->integer,
                       static_cast<std::uint64_t>(row->element[3]->integer)});
  }
  return pending;
}

}  // namespace idem::redis_streams::detail

#endif  // IDEM_REDIS_STREAMS_DETAIL_CONSUMER_REPLIES_HPP
