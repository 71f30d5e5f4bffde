// What the stream consumer's tests (and the crash matrix's, tests/crash) share: a stream of
// their own on the shared Redis server (a unique prefix, its keys deleted when the test ends),
// entries added with XADD in the outbox format (idem/redis_streams/entry.hpp) or by hand, and
// looks at what the consumer left: the group's pending entries and the dead letters.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <idem/outbox/sink.hpp>
#include <idem/redis_streams/entry.hpp>

#include "stores/redis/redis_test_support.hpp"

namespace idem_stream_test {

using idem_redis_test::command;
using idem_redis_test::context_ptr;

/// An outbox entry as a relay would hand it to the sink.
inline idem::outbox_entry message(const std::string& id, const std::string& payload = "p",
                                  std::int64_t sequence = 1) {
  idem::outbox_entry entry;
  entry.sequence = sequence;
  entry.id = id;
  entry.message.topic = "orders";
  entry.message.partition_key = "order-" + id;
  entry.message.payload = payload;
  entry.message.headers = {{"type", "order.placed"}};
  entry.created_at = std::chrono::system_clock::time_point{std::chrono::seconds{1'700'000'000}};
  return entry;
}

/// One entry of a dead-letter stream: its fields in order.
using fields = std::vector<std::pair<std::string, std::string>>;

class stream_fixture {
 public:
  stream_fixture() : server_(idem_redis_test::shared_server()) {
    redis_ = idem_redis_test::connect_raw(server_.first, server_.second);
  }
  stream_fixture(const stream_fixture&) = delete;
  stream_fixture& operator=(const stream_fixture&) = delete;
  ~stream_fixture() { idem_redis_test::remove_keys(server_.first, server_.second, prefix_); }

  const std::string& host() const noexcept { return server_.first; }
  int port() const noexcept { return server_.second; }
  const std::string& prefix() const noexcept { return prefix_; }
  std::string topic() const { return "orders"; }
  std::string stream() const { return prefix_ + topic(); }
  std::string dead_letters_stream() const { return stream() + ":dead"; }

  /// XADD in the sink's format; answers the entry's id.
  std::string add(const idem::outbox_entry& entry) {
    const auto encoded = idem::redis_streams::encode_entry(entry);
    const auto values = idem::redis_streams::entry_values(entry, encoded);
    fields pairs;
    for (std::size_t i = 0; i < values.size(); ++i)
      pairs.emplace_back(idem::redis_streams::entry_fields[i], values[i]);
    return add_raw(pairs);
  }

  /// XADD of any fields: how a malformed entry gets in.
  std::string add_raw(const fields& pairs) {
    std::vector<std::string> words{"XADD", stream(), "*"};
    for (const auto& [name, value] : pairs) {
      words.push_back(name);
      words.push_back(value);
    }
    const auto reply = command(redis_.get(), words);
    REQUIRE(reply->type == REDIS_REPLY_STRING);
    return std::string(reply->str, reply->len);
  }

  /// How many entries the group holds pending (read, not acknowledged).
  long long pending(const std::string& group) {
    const auto reply = command(redis_.get(), {"XPENDING", stream(), group});
    REQUIRE(reply->type == REDIS_REPLY_ARRAY);
    return reply->element[0]->integer;
  }

  /// Reads up to `count` new entries as `consumer` and never acknowledges them: a consumer that
  /// dies holding them. Answers their ids.
  std::vector<std::string> read_and_die(const std::string& group, const std::string& consumer,
                                        int count) {
    const auto reply = command(redis_.get(), {"XREADGROUP", "GROUP", group, consumer, "COUNT",
                                              std::to_string(count), "STREAMS", stream(), ">"});
    std::vector<std::string> ids;
    if (reply->type != REDIS_REPLY_ARRAY) return ids;
    const redisReply* entries = reply->element[0]->element[1];
    for (std::size_t i = 0; i < entries->elements; ++i)
      ids.emplace_back(entries->element[i]->element[0]->str, entries->element[i]->element[0]->len);
    return ids;
  }

  /// Every entry of `name`, its fields in order.
  std::vector<fields> entries(const std::string& name) {
    const auto reply = command(redis_.get(), {"XRANGE", name, "-", "+"});
    REQUIRE(reply->type == REDIS_REPLY_ARRAY);
    std::vector<fields> out;
    for (std::size_t i = 0; i < reply->elements; ++i) {
      const redisReply* values = reply->element[i]->element[1];
      fields pairs;
      for (std::size_t f = 0; f + 1 < values->elements; f += 2) {
        pairs.emplace_back(std::string(values->element[f]->str, values->element[f]->len),
                           std::string(values->element[f + 1]->str, values->element[f + 1]->len));
      }
      out.push_back(std::move(pairs));
    }
    return out;
  }

 private:
  std::pair<std::string, int> server_;
  std::string prefix_ = idem_redis_test::unique_prefix();
  context_ptr redis_{nullptr, &redisFree};
};

}  // namespace idem_stream_test
