// The outbox's Redis Streams sink (idem/redis_streams/sink.hpp) against real servers: the sink
// conformance check on the shared server, what a stream holds after publish, one round trip per
// batch, each kind of refusal (WRONGTYPE, bad input, bad options), a server that is gone or
// takes no writes, trimming and WAIT. Servers the tests reconfigure or kill are their own
// (private_redis), so the shared one is never disturbed.
#include <catch2/catch.hpp>

#include <idem/redis_streams/entry.hpp>
#include <idem/redis_streams/sink.hpp>
#include <idem/testing/sink_conformance.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redis_test_support.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::sink_result;
using idem::sink_status;
using idem::redis_streams::sink;
using idem::testing::sink_conformance::entry;
using idem::testing::sink_conformance::publish;
using idem_redis_test::read_stream;

namespace {

long long integer_of(redisContext* context, const std::vector<std::string>& words) {
  const auto reply = idem_redis_test::command(context, words);
  REQUIRE(reply->type == REDIS_REPLY_INTEGER);
  return reply->integer;
}

// A field of INFO's text ("total_reads_processed:12" -> 12).
long long info_number(redisContext* context, const std::string& section, const std::string& name) {
  const auto reply = idem_redis_test::command(context, {"INFO", section});
  const std::string text(reply->str, reply->len);
  const std::size_t at = text.find(name + ":");
  REQUIRE(at != std::string::npos);
  return std::stoll(text.substr(at + name.size() + 1));
}

// Sinks on the shared server, each factory under a prefix of its own, deleted when the test
// case ends; make_unavailable points at a loopback port nothing listens on.
struct redis_sink_factory {
  redis_sink_factory() : server(idem_redis_test::shared_server()) {}
  redis_sink_factory(const redis_sink_factory&) = delete;
  redis_sink_factory& operator=(const redis_sink_factory&) = delete;
  ~redis_sink_factory() { idem_redis_test::remove_keys(server.first, server.second, prefix); }

  sink::options options() const {
    sink::options given;
    given.server.host = server.first;
    given.server.port = server.second;
    given.stream_prefix = prefix;
    return given;
  }
  sink make() const { return sink(options()); }
  sink make_unavailable() const {
    sink::options given = options();
    given.server.port = idem_redis_test::free_port();
    return sink(given);
  }
  std::vector<idem::outbox_entry> read(std::string_view topic) const {
    const auto context = idem_redis_test::connect_raw(server.first, server.second);
    return read_stream(context.get(), prefix + std::string(topic), topic);
  }
  std::string stream(std::string_view topic) const { return prefix + std::string(topic); }
  idem_redis_test::context_ptr connect() const {
    return idem_redis_test::connect_raw(server.first, server.second);
  }

  std::pair<std::string, int> server;
  std::string prefix = idem_redis_test::unique_prefix() + "outbox:";
};

sink::options private_options(const idem_redis_test::private_redis& server) {
  sink::options given;
  given.server.host = "127.0.0.1";
  given.server.port = server.port();
  given.stream_prefix = "outbox:";
  return given;
}

std::vector<idem::outbox_entry> numbered(std::string_view topic, std::int64_t count) {
  std::vector<idem::outbox_entry> batch;
  for (std::int64_t sequence = 1; sequence <= count; ++sequence)
    batch.push_back(entry(std::string(topic), "key-" + std::to_string(sequence % 5), sequence));
  return batch;
}

// Runs `operation` and answers the store_error it throws (or fails the test).
template <class Operation>
idem::store_error store_error_of(Operation&& operation) {
  try {
    operation();
  } catch (const idem::store_error& error) {
    return error;
  }
  FAIL("the operation did not throw store_error");
  return idem::store_error(idem::store_failure::full, "");
}

}  // namespace

IDEM_SINK_CONFORMANCE_TESTS(redis_sink_factory)

TEST_CASE("the Redis sink adds each message to its topic's stream with the documented fields",
          "[redis][sink]") {
  const redis_sink_factory factory;
  sink publisher = factory.make();
  idem::outbox_entry message = entry("payments", std::string("acct\0-7", 7), 42);
  message.message.headers = {{"type", "charged"}, {"trace", ""}};
  message.message.payload = std::string("{\"amount\":\0}", 12);
  const idem::outbox_entry batch[] = {message, entry("payments", "acct-8", 43)};
  const auto results = publish(publisher, batch);
  CHECK(results[0].status == sink_status::acknowledged);
  CHECK(results[1].status == sink_status::acknowledged);

  const auto context = factory.connect();
  const auto range =
      idem_redis_test::command(context.get(), {"XRANGE", factory.stream("payments"), "-", "+"});
  REQUIRE(range->elements == 2);
  const redisReply* fields = range->element[0]->element[1];
  std::vector<std::string> got;
  for (std::size_t i = 0; i < fields->elements; ++i)
    got.emplace_back(fields->element[i]->str, fields->element[i]->len);
  const auto nanoseconds =
      std::chrono::duration_cast<std::chrono::nanoseconds>(message.created_at.time_since_epoch())
          .count();
  CHECK(got == std::vector<std::string>{
                   "id", message.id, "sequence", "42", "partition_key", std::string("acct\0-7", 7),
                   "created_at", std::to_string(nanoseconds), "headers",
                   "4:type,7:charged,5:trace,0:,", "payload", std::string("{\"amount\":\0}", 12)});
  CHECK(integer_of(context.get(), {"EXISTS", "payments"}) == 0);  // the prefix is applied
}

TEST_CASE("the Redis sink sends a whole batch in one round trip", "[redis][sink]") {
  // A server of its own, so that the sink's connection is the only one that reads there apart
  // from the INFO that measures. Redis counts each read of a client's socket: a batch sent one
  // command at a time costs at least one read a command, a pipelined one a read per 16 KiB.
  idem_redis_test::private_redis server;
  sink publisher(private_options(server));
  const auto context = server.connect();
  const auto batch = numbered("orders", 200);
  // The first publish opens the connection; measure the second.
  idem::testing::sink_conformance::require_all_acknowledged(publish(publisher, batch));
  const long long before = info_number(context.get(), "stats", "total_reads_processed");
  idem::testing::sink_conformance::require_all_acknowledged(publish(publisher, batch));
  const long long after = info_number(context.get(), "stats", "total_reads_processed");
  INFO("reads while publishing 200 entries (and one INFO): " << after - before);
  CHECK(after - before < 20);
  CHECK(integer_of(context.get(), {"XLEN", "outbox:orders"}) == 400);
}

TEST_CASE("a stream name that is another type's key is rejected with Redis's WRONGTYPE",
          "[redis][sink]") {
  const redis_sink_factory factory;
  sink publisher = factory.make();
  const auto context = factory.connect();
  (void)idem_redis_test::command(context.get(), {"SET", factory.stream("taken"), "a string"});
  const idem::outbox_entry batch[] = {entry("orders", "k", 1), entry("taken", "k", 2),
                                      entry("orders", "k", 3)};
  const auto results = publish(publisher, batch);
  CHECK(results[0].status == sink_status::acknowledged);
  CHECK(results[1].status == sink_status::rejected);
  CHECK_THAT(results[1].error, Contains("WRONGTYPE") && Contains(factory.stream("taken")));
  CHECK(results[2].status == sink_status::acknowledged);
  const auto kept = idem_redis_test::command(context.get(), {"GET", factory.stream("taken")});
  CHECK(std::string(kept->str, kept->len) == "a string");
  CHECK(factory.read("orders").size() == 2);
}

TEST_CASE("entries no consumer could read are rejected with the reason and never written",
          "[redis][sink]") {
  const redis_sink_factory factory;
  sink publisher = factory.make();
  auto spaced = entry("orders", "k", 2);
  spaced.id = "with space";
  auto empty = entry("orders", "k", 3);
  empty.id.clear();
  auto long_id = entry("orders", "k", 4);
  long_id.id = std::string(idem::max_outbox_message_id_length + 1, 'a');
  const idem::outbox_entry batch[] = {entry("", "k", 1), spaced, empty, long_id,
                                      entry("orders", "k", 5)};
  const auto results = publish(publisher, batch);
  CHECK(results[0].status == sink_status::rejected);
  CHECK_THAT(results[0].error, Contains("the message has no topic"));
  for (std::size_t i = 1; i <= 3; ++i) {
    INFO("entry " << i);
    CHECK(results[i].status == sink_status::rejected);
    CHECK_THAT(results[i].error,
               Contains("the message id must be 1 to 255 bytes of visible ASCII"));
  }
  CHECK(results[4].status == sink_status::acknowledged);
  const auto delivered = factory.read("orders");
  REQUIRE(delivered.size() == 1);
  CHECK(delivered[0].sequence == 5);
  const auto context = factory.connect();
  CHECK(integer_of(context.get(), {"EXISTS", factory.prefix}) == 0);
}

TEST_CASE("a batch whose results are not one per entry is refused before anything is sent",
          "[redis][sink]") {
  const redis_sink_factory factory;
  sink publisher = factory.make();
  const idem::outbox_entry batch[] = {entry("orders", "k", 1), entry("orders", "k", 2)};
  std::vector<sink_result> results(1);
  CHECK_THROWS_WITH(publisher.publish(batch, results),
                    Contains("publish needs one result per entry (2 entries, 1 results)"));
  CHECK(factory.read("orders").empty());
}

TEST_CASE("Redis sink options no connection could use are refused at construction",
          "[redis][sink]") {
  const auto refused = [](const sink::options& given, const std::string& reason) {
    INFO(reason);
    CHECK_THROWS_AS(sink(given), std::invalid_argument);
    CHECK_THROWS_WITH(sink(given), Contains("idem::redis_streams::sink: " + reason));
  };
  sink::options given;
  given.approximate_max_length = 0;
  refused(given, "approximate_max_length 0 would trim away every message");
  given = {};
  given.wait_for_replicas = sink::replication{.replicas = -1, .timeout = 100ms};
  refused(given, "wait_for_replicas.replicas must not be negative");
  given.wait_for_replicas = sink::replication{.replicas = 1, .timeout = 0ms};
  refused(given, "wait_for_replicas.timeout must be positive and shorter than command_timeout");
  given.wait_for_replicas =
      sink::replication{.replicas = 1, .timeout = given.server.command_timeout};
  refused(given, "wait_for_replicas.timeout must be positive and shorter than command_timeout");
  given = {};
  given.server.port = 0;
  refused(given, "port 0 is not a TCP port");
  given = {};
  given.pool_size = 0;
  refused(given, "pool_size must be at least 1");
  given = {};
  given.server.command_timeout = 0ms;
  refused(given, "timeouts must be positive");
}

TEST_CASE("a Redis sink whose server is unreachable throws, and works once the server is back",
          "[redis][sink]") {
  idem_redis_test::private_redis server;
  sink publisher(private_options(server));
  const auto batch = numbered("orders", 3);
  idem::testing::sink_conformance::require_all_acknowledged(publish(publisher, batch));

  server.kill9();
  const idem::store_error down = store_error_of([&] { (void)publish(publisher, batch); });
  CHECK(down.failure() == idem::store_failure::unavailable);
  // The pooled connection fails, and so does the fresh one it is tried again on.
  CHECK_THAT(std::string(down.what()), Contains("idem::redis_streams::sink: cannot connect to"));

  server.start();
  idem::testing::sink_conformance::require_all_acknowledged(publish(publisher, batch));
  const auto context = server.connect();
  CHECK(integer_of(context.get(), {"XLEN", "outbox:orders"}) == 6);
}

TEST_CASE("a Redis sink reaches its server through a unix socket, AUTH and SELECT",
          "[redis][sink]") {
  idem_redis_test::private_redis server;
  {
    const auto context = server.connect();
    const auto acl = idem_redis_test::command(
        context.get(), {"ACL", "SETUSER", "relay", "on", ">relay-secret", "~*", "+@all"});
    REQUIRE(acl->type == REDIS_REPLY_STATUS);
  }
  sink::options given;
  given.server.unix_socket = server.socket_path();
  given.server.username = "relay";
  given.server.password = "relay-secret";
  given.server.database = 3;
  given.stream_prefix = "outbox:";
  sink publisher(given);
  idem::testing::sink_conformance::require_all_acknowledged(
      publish(publisher, numbered("orders", 2)));
  const auto context = server.connect();
  CHECK(integer_of(context.get(), {"EXISTS", "outbox:orders"}) == 0);  // not in database 0
  (void)idem_redis_test::command(context.get(), {"SELECT", "3"});
  CHECK(integer_of(context.get(), {"XLEN", "outbox:orders"}) == 2);

  given.server.password = "wrong";
  sink refused(given);
  const idem::store_error error =
      store_error_of([&] { (void)publish(refused, numbered("orders", 1)); });
  CHECK(error.failure() == idem::store_failure::unavailable);
  CHECK_THAT(std::string(error.what()),
             Contains("idem::redis_streams::sink: the server at") && Contains("refused AUTH"));
}

TEST_CASE("a Redis server that takes no writes makes publish throw instead of failing entries",
          "[redis][sink]") {
  idem_redis_test::private_redis server;
  sink publisher(private_options(server));
  const auto batch = numbered("orders", 3);
  SECTION("out of memory") {
    idem_redis_test::config_set(server, "maxmemory", "1");
    const idem::store_error full = store_error_of([&] { (void)publish(publisher, batch); });
    CHECK(full.failure() == idem::store_failure::unavailable);
    CHECK_THAT(std::string(full.what()), Contains("takes no writes now: OOM"));
  }
  SECTION("a replica") {
    const auto context = server.connect();
    const auto made = idem_redis_test::command(
        context.get(), {"REPLICAOF", "127.0.0.1", std::to_string(idem_redis_test::free_port())});
    REQUIRE(made->type == REDIS_REPLY_STATUS);
    const idem::store_error replica = store_error_of([&] { (void)publish(publisher, batch); });
    CHECK_THAT(std::string(replica.what()), Contains("takes no writes now: READONLY"));
  }
}

TEST_CASE("approximate trimming keeps a stream near its length, and none is the default",
          "[redis][sink]") {
  const redis_sink_factory factory;
  sink::options trimmed = factory.options();
  trimmed.approximate_max_length = 10;
  sink short_publisher(trimmed);
  sink long_publisher = factory.make();
  auto batch = numbered("short", 1000);
  idem::testing::sink_conformance::require_all_acknowledged(publish(short_publisher, batch));
  batch = numbered("long", 1000);
  idem::testing::sink_conformance::require_all_acknowledged(publish(long_publisher, batch));
  const auto context = factory.connect();
  const long long short_length = integer_of(context.get(), {"XLEN", factory.stream("short")});
  // "~": Redis removes whole nodes (stream-node-max-entries, 100 by default), never below 10.
  CHECK(short_length >= 10);
  CHECK(short_length <= 10 + 100);
  CHECK(integer_of(context.get(), {"XLEN", factory.stream("long")}) == 1000);
  // What is left is the newest.
  const auto left = factory.read("short");
  REQUIRE_FALSE(left.empty());
  CHECK(left.back().sequence == 1000);
}

TEST_CASE("WAIT acknowledges once the replicas asked for confirm, and fails entries they did not",
          "[redis][sink]") {
  const redis_sink_factory factory;
  const auto batch = numbered("orders", 3);
  SECTION("no replica asked for: acknowledged") {
    sink::options given = factory.options();
    given.wait_for_replicas = sink::replication{.replicas = 0, .timeout = 100ms};
    sink publisher(given);
    idem::testing::sink_conformance::require_all_acknowledged(publish(publisher, batch));
  }
  SECTION("more replicas than the server has: added but failed, to be sent again") {
    sink::options given = factory.options();
    given.wait_for_replicas = sink::replication{.replicas = 1, .timeout = 50ms};
    sink publisher(given);
    const auto results = publish(publisher, batch);
    for (const sink_result& result : results) {
      CHECK(result.status == sink_status::failed);
      CHECK_THAT(result.error, Contains("only 0 of 1 replicas confirmed it within 50 ms (WAIT)"));
    }
    CHECK(factory.read("orders").size() == 3);  // on the primary: a resend duplicates them
  }
}

TEST_CASE("what an XADD error means for the entry is read from its first word", "[redis][sink]") {
  using idem::redis_streams::detail::classify_error;
  using idem::redis_streams::detail::refusal_kind;
  CHECK(classify_error("WRONGTYPE Operation against a key holding the wrong kind of value") ==
        refusal_kind::rejected);
  for (const char* outage :
       {"OOM command not allowed when used memory > 'maxmemory'.",
        "READONLY You can't write against a read only replica.", "MISCONF Redis is configured",
        "LOADING Redis is loading the dataset in memory", "BUSY Redis is busy running a script",
        "MASTERDOWN Link with MASTER is down", "NOREPLICAS Not enough good replicas",
        "CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request"}) {
    INFO(outage);
    CHECK(classify_error(outage) == refusal_kind::unavailable);
  }
  CHECK(classify_error("ERR The stream has exhausted the last possible ID") ==
        refusal_kind::failed);
  CHECK(classify_error("NOPERM this user has no permissions") == refusal_kind::failed);
  CHECK(classify_error("OOMPH not a word we know") == refusal_kind::failed);
  CHECK(classify_error("") == refusal_kind::failed);
}
