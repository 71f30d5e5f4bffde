// The sink conformance check: the Sink contract (idem/outbox/sink.hpp) as Catch2 test cases,
// for any sink: the Redis Streams sink idem ships, and the one you write for Kafka or RabbitMQ.
//
//   #include <catch2/catch.hpp>                       // Catch2 v2, before this header
//   #include <idem/testing/sink_conformance.hpp>
//
//   struct my_sink_factory {
//     my_sink make();                                 // a sink whose topics hold nothing yet
//     std::vector<idem::outbox_entry> read(std::string_view topic);  // what it delivered there
//     my_sink make_unavailable();                     // optional: a sink whose broker is down
//   };
//   IDEM_SINK_CONFORMANCE_TESTS(my_sink_factory)
//
// `read(topic)` answers every message the sink delivered to `topic`, oldest first, as
// outbox_entry values (read back through your broker's consumer, decoded the way your consumers
// decode them; `attempts` is not compared). The factory object lives as long as one test case,
// so it can keep a unique topic prefix, a connection or a temporary broker in it. Each behaviour
// is one test case, named "sink conformance: <behaviour> - <factory>", tagged [conformance]; each
// is the function of the same name in idem::testing::sink_conformance, which a test may also
// call directly (to show the check catches a sink that breaks the contract, say).
//
// What it checks: one acknowledged result per entry of a valid batch; every acknowledged
// message read back with its id, sequence, partition key, created_at (to the nanosecond),
// headers and payload byte for byte (every byte value, NULs, empty payload, key and headers, a
// hundred headers, a 1 MiB payload); the batch's order kept for each partition key in each
// topic; several topics in one batch; an empty batch; the same entry published twice accepted
// twice (sinks never deduplicate: consumers do, by id); an entry without a topic not
// acknowledged and answered with a reason; and, with make_unavailable, publish throwing.
// Not checked (no sink-independent way to): durability across a broker crash, and the
// at-least-once redelivery after a lost acknowledgement; test those against your broker.
#ifndef IDEM_TESTING_SINK_CONFORMANCE_HPP
#define IDEM_TESTING_SINK_CONFORMANCE_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/sink_conformance.hpp>."
#endif

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/outbox/headers.hpp>
#include <idem/outbox/message.hpp>
#include <idem/outbox/sink.hpp>
#include <idem/testing/detail/conformance/registration.hpp>

namespace idem::testing {

/// What IDEM_SINK_CONFORMANCE_TESTS needs of its argument.
template <class F>
concept SinkFactory = std::default_initializable<F> &&
    requires(F& factory, std::string_view topic) {
  { factory.make() } -> Sink;
  { factory.read(topic) } -> std::convertible_to<std::vector<outbox_entry>>;
};

/// Whether a factory can make a sink whose broker is down (the optional hook).
template <class F>
concept UnavailableSinkFactory = SinkFactory<F> && requires(F& factory) {
  { factory.make_unavailable() } -> Sink;
};

namespace sink_conformance {

// 2026-01-01T00:00:00.123456789Z: nanoseconds that a sink keeping only micro- or milliseconds
// would lose.
inline std::chrono::system_clock::time_point written_at(std::int64_t offset_ns = 0) {
  return std::chrono::system_clock::time_point{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds{1767225600123456789 + offset_ns})};
}

inline std::string every_byte() {
  std::string bytes;
  for (int round = 0; round < 2; ++round) {
    for (int value = 0; value < 256; ++value)
      bytes.push_back(static_cast<char>(value));
  }
  return bytes;
}

/// An entry of `topic` and `key` whose id, sequence and payload come from `sequence`.
inline outbox_entry entry(std::string topic, std::string key, std::int64_t sequence) {
  outbox_entry made;
  made.sequence = sequence;
  made.id = "conformance-" + std::to_string(sequence);
  made.message.topic = std::move(topic);
  made.message.partition_key = std::move(key);
  made.message.payload = "payload " + std::to_string(sequence);
  made.message.headers = {{"type", "conformance"}};
  made.created_at = written_at(sequence);
  return made;
}

/// The batch published as a relay publishes it: results preset to failed with no error.
template <class S>
std::vector<sink_result> publish(S& sink, std::span<const outbox_entry> batch) {
  std::vector<sink_result> results(batch.size(), sink_result{sink_status::failed, {}});
  sink.publish(batch, std::span<sink_result>(results));
  return results;
}

inline void require_all_acknowledged(const std::vector<sink_result>& results) {
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("entry " << i << ": " << results[i].error);
    REQUIRE(results[i].status == sink_status::acknowledged);
  }
}

/// `delivered`'s entry of `expected.id`, compared field by field (attempts aside).
inline void check_delivered(const std::vector<outbox_entry>& delivered,
                            const outbox_entry& expected) {
  INFO("message " << expected.id);
  const auto found = std::find_if(delivered.begin(), delivered.end(),
                                  [&](const outbox_entry& each) { return each.id == expected.id; });
  REQUIRE(found != delivered.end());
  CHECK(found->sequence == expected.sequence);
  CHECK(found->message.topic == expected.message.topic);
  CHECK(found->message.partition_key == expected.message.partition_key);
  CHECK(found->created_at == expected.created_at);
  CHECK(found->message.headers == expected.message.headers);
  CHECK(found->message.payload.size() == expected.message.payload.size());
  CHECK(found->message.payload == expected.message.payload);
}

template <class Factory>
void every_entry_of_a_batch_is_acknowledged() {
  Factory factory;
  auto sink = factory.make();
  std::vector<outbox_entry> batch;
  for (std::int64_t sequence = 1; sequence <= 20; ++sequence)
    batch.push_back(entry("orders", "key-" + std::to_string(sequence % 3), sequence));
  const std::vector<sink_result> results = publish(sink, batch);
  REQUIRE(results.size() == batch.size());
  require_all_acknowledged(results);
  const std::vector<outbox_entry> delivered = factory.read("orders");
  CHECK(delivered.size() == batch.size());
  for (const outbox_entry& each : batch)
    check_delivered(delivered, each);
}

template <class Factory>
void an_acknowledged_message_is_read_back_byte_for_byte() {
  Factory factory;
  auto sink = factory.make();
  using namespace std::string_literals;  // "..."s keeps the NULs inside
  std::vector<outbox_entry> batch;
  outbox_entry binary = entry("bytes", "key\0with\xff nul"s, 1);
  binary.message.payload = every_byte();
  binary.message.headers = {
      {"type", "binary"}, {"n\0ame"s, "v,a:l\0ue\xfe"s}, {"empty-value", ""}, {"", "empty name"}};
  batch.push_back(binary);
  outbox_entry empty = entry("bytes", "", 2);
  empty.message.payload.clear();
  empty.message.headers.clear();
  batch.push_back(empty);
  outbox_entry many = entry("bytes", "many", 3);
  many.message.headers.clear();
  for (int i = 0; i < 100; ++i)
    many.message.headers.push_back({"header-" + std::to_string(i), std::string(i, 'v')});
  many.message.headers.push_back({"type", "repeated"});
  many.message.headers.push_back({"type", "names"});
  batch.push_back(many);
  outbox_entry long_id = entry("bytes", "id", 4);
  long_id.id = std::string(max_outbox_message_id_length, '~');
  long_id.message.payload = "{\"json\": [1, 2, 3]}\r\n";
  batch.push_back(long_id);
  require_all_acknowledged(publish(sink, batch));
  const std::vector<outbox_entry> delivered = factory.read("bytes");
  for (const outbox_entry& each : batch)
    check_delivered(delivered, each);
}

template <class Factory>
void a_payload_of_one_mebibyte_is_delivered_whole() {
  Factory factory;
  auto sink = factory.make();
  outbox_entry large = entry("large", "key", 1);
  large.message.payload.resize(default_max_outbox_payload_bytes);
  for (std::size_t i = 0; i < large.message.payload.size(); ++i)
    large.message.payload[i] = static_cast<char>((i * 7 + i / 256) & 0xff);
  const outbox_entry batch[] = {large};
  require_all_acknowledged(publish(sink, batch));
  check_delivered(factory.read("large"), large);
}

template <class Factory>
void the_batch_order_is_kept_for_each_partition_key_in_each_topic() {
  Factory factory;
  auto sink = factory.make();
  std::vector<outbox_entry> batch;
  const std::string topics[] = {"ledger", "audit"};
  const std::string keys[] = {"account-1", "account-2", "account-3"};
  for (std::int64_t sequence = 1; sequence <= 60; ++sequence) {
    const auto n = static_cast<std::size_t>(sequence);
    batch.push_back(entry(topics[n % 2], keys[(n * 7 / 3) % 3], sequence));
  }
  require_all_acknowledged(publish(sink, batch));
  for (const std::string& topic : topics) {
    const std::vector<outbox_entry> delivered = factory.read(topic);
    for (const std::string& key : keys) {
      std::vector<std::string> sent;
      std::vector<std::string> got;
      for (const outbox_entry& each : batch) {
        if (each.message.topic == topic && each.message.partition_key == key) {
          sent.push_back(each.id);
        }
      }
      for (const outbox_entry& each : delivered) {
        if (each.message.partition_key == key) got.push_back(each.id);
      }
      INFO("topic " << topic << ", key " << key);
      CHECK(got == sent);
    }
  }
}

template <class Factory>
void one_batch_may_span_several_topics() {
  Factory factory;
  auto sink = factory.make();
  std::vector<outbox_entry> batch;
  const std::string topics[] = {"payments", "shipping", "email"};
  for (std::int64_t sequence = 1; sequence <= 9; ++sequence) {
    batch.push_back(entry(topics[static_cast<std::size_t>(sequence) % 3], "order-1", sequence));
  }
  require_all_acknowledged(publish(sink, batch));
  for (const std::string& topic : topics) {
    INFO("topic " << topic);
    const std::vector<outbox_entry> delivered = factory.read(topic);
    CHECK(delivered.size() == 3);
    for (const outbox_entry& each : delivered)
      CHECK(each.message.topic == topic);
    for (const outbox_entry& each : batch) {
      if (each.message.topic == topic) check_delivered(delivered, each);
    }
  }
  CHECK(factory.read("nowhere").empty());
}

template <class Factory>
void an_empty_batch_delivers_nothing() {
  Factory factory;
  auto sink = factory.make();
  const std::vector<sink_result> results = publish(sink, std::span<const outbox_entry>{});
  CHECK(results.empty());
  CHECK(factory.read("orders").empty());
}

template <class Factory>
void the_same_entry_published_twice_is_accepted_twice() {
  Factory factory;
  auto sink = factory.make();
  const outbox_entry batch[] = {entry("orders", "key", 1)};
  require_all_acknowledged(publish(sink, batch));
  // A relay whose acknowledgement was lost sends it again: the sink takes it, and a consumer
  // deduplicates by id. A sink that refused it would hold it (and its key) back for ever.
  require_all_acknowledged(publish(sink, batch));
  const std::vector<outbox_entry> delivered = factory.read("orders");
  REQUIRE_FALSE(delivered.empty());
  check_delivered(delivered, batch[0]);
}

template <class Factory>
void an_entry_without_a_topic_is_not_acknowledged_and_says_why() {
  Factory factory;
  auto sink = factory.make();
  const outbox_entry batch[] = {entry("orders", "key", 1), entry("", "key", 2),
                                entry("orders", "other", 3)};
  const std::vector<sink_result> results = publish(sink, batch);
  REQUIRE(results.size() == 3);
  CHECK(results[0].status == sink_status::acknowledged);
  CHECK(results[1].status != sink_status::acknowledged);
  CHECK_FALSE(results[1].error.empty());
  CHECK(results[2].status == sink_status::acknowledged);
}

template <class Factory>
void an_unavailable_sink_throws() {
  if constexpr (UnavailableSinkFactory<Factory>) {
    Factory factory;
    auto sink = factory.make_unavailable();
    const outbox_entry batch[] = {entry("orders", "key", 1)};
    // Throwing is how a sink says it is down: the relay keeps the batch, counts no attempt and
    // backs off. Answering `failed` would dead-letter messages during a long outage.
    CHECK_THROWS(publish(sink, batch));
  } else {
    SUCCEED("the factory has no make_unavailable(): not checked");
  }
}

}  // namespace sink_conformance

}  // namespace idem::testing

// One Catch2 test case per behaviour, for the factory given. A macro only because Catch2
// registers test cases with macros; each case is the function of the same name above.
#define IDEM_SINK_CONFORMANCE_CASE(Factory, behaviour, function)                              \
  IDEM_CONFORMANCE_SERIAL(                                                                    \
      TEMPLATE_TEST_CASE("sink conformance: " behaviour, "[conformance]", Factory) {          \
        static_assert(::idem::testing::SinkFactory<TestType>,                                 \
                      "A sink conformance factory must be default-constructible and provide " \
                      "make() returning a Sink and read(topic) returning the entries it "     \
                      "delivered there, as std::vector<idem::outbox_entry>.");                \
        ::idem::testing::sink_conformance::function<TestType>();                              \
      })

#define IDEM_SINK_CONFORMANCE_TESTS(Factory)                                                 \
  IDEM_SINK_CONFORMANCE_CASE(Factory, "every entry of a batch is acknowledged",              \
                             every_entry_of_a_batch_is_acknowledged)                         \
  IDEM_SINK_CONFORMANCE_CASE(Factory, "an acknowledged message is read back byte for byte",  \
                             an_acknowledged_message_is_read_back_byte_for_byte)             \
  IDEM_SINK_CONFORMANCE_CASE(Factory, "a payload of 1 MiB is delivered whole",               \
                             a_payload_of_one_mebibyte_is_delivered_whole)                   \
  IDEM_SINK_CONFORMANCE_CASE(Factory,                                                        \
                             "the batch order is kept for each partition key in each topic", \
                             the_batch_order_is_kept_for_each_partition_key_in_each_topic)   \
  IDEM_SINK_CONFORMANCE_CASE(Factory, "one batch may span several topics",                   \
                             one_batch_may_span_several_topics)                              \
  IDEM_SINK_CONFORMANCE_CASE(Factory, "an empty batch delivers nothing",                     \
                             an_empty_batch_delivers_nothing)                                \
  IDEM_SINK_CONFORMANCE_CASE(Factory, "the same entry published twice is accepted twice",    \
                             the_same_entry_published_twice_is_accepted_twice)               \
  IDEM_SINK_CONFORMANCE_CASE(Factory, "an entry without a topic is not acknowledged",        \
                             an_entry_without_a_topic_is_not_acknowledged_and_says_why)      \
  IDEM_SINK_CONFORMANCE_CASE(Factory, "an unavailable sink throws", an_unavailable_sink_throws)

#endif  // IDEM_TESTING_SINK_CONFORMANCE_HPP
