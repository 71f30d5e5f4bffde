// The Redis stream entry format (idem/redis_streams/entry.hpp) without a server: what the sink
// writes decodes back to the same entry, and every kind of malformed entry is refused with a
// reason that names what is wrong.
#include <catch2/catch.hpp>

#include <idem/redis_streams/entry.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using Catch::Matchers::Contains;

namespace {

using field = std::pair<std::string_view, std::string_view>;

idem::outbox_entry sample_entry() {
  idem::outbox_entry entry;
  entry.sequence = 4711;
  entry.id = idem::outbox_message_id("tenant", "order-1", "charged");
  entry.message.topic = "payments";
  entry.message.partition_key = std::string("acct\0-7", 7);
  entry.message.payload = std::string("{\"amount\":\0\xff}", 13);
  entry.message.headers = {
      {"type", "payment.charged"}, {"trace", ""}, {"bin", std::string("\0,:", 3)}};
  entry.created_at = std::chrono::system_clock::time_point{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds{1767225600123456789})};
  return entry;
}

// The fields as the sink writes them, in its order.
std::vector<field> fields_of(const idem::outbox_entry& entry,
                             const idem::redis_streams::encoded_entry& encoded) {
  const auto values = idem::redis_streams::entry_values(entry, encoded);
  std::vector<field> fields;
  for (std::size_t i = 0; i < values.size(); ++i)
    fields.emplace_back(idem::redis_streams::entry_fields[i], values[i]);
  return fields;
}

void check_refused(const std::vector<field>& fields, const std::string& reason) {
  CHECK_THROWS_WITH(idem::redis_streams::decode_entry("payments", fields), Contains(reason));
  CHECK_THROWS_AS(idem::redis_streams::decode_entry("payments", fields), std::invalid_argument);
}

}  // namespace

TEST_CASE("a stream entry decodes back to the outbox entry it was encoded from", "[outbox]") {
  const idem::outbox_entry entry = sample_entry();
  const auto encoded = idem::redis_streams::encode_entry(entry);
  CHECK(encoded.sequence == "4711");
  CHECK(encoded.created_at == "1767225600123456789");
  const idem::outbox_entry decoded =
      idem::redis_streams::decode_entry("payments", fields_of(entry, encoded));
  CHECK(decoded.sequence == entry.sequence);
  CHECK(decoded.id == entry.id);
  CHECK(decoded.message.topic == "payments");
  CHECK(decoded.message.partition_key == entry.message.partition_key);
  CHECK(decoded.message.payload == entry.message.payload);
  CHECK(decoded.message.headers == entry.message.headers);
  CHECK(decoded.created_at == entry.created_at);
  CHECK(decoded.attempts == 0);
}

TEST_CASE("a stream entry with empty payload, key and headers round-trips", "[outbox]") {
  idem::outbox_entry entry;
  entry.sequence = 1;
  entry.id = "m";
  const auto encoded = idem::redis_streams::encode_entry(entry);
  CHECK(encoded.headers.empty());
  const idem::outbox_entry decoded =
      idem::redis_streams::decode_entry("t", fields_of(entry, encoded));
  CHECK(decoded.message.payload.empty());
  CHECK(decoded.message.partition_key.empty());
  CHECK(decoded.message.headers.empty());
  CHECK(decoded.created_at == entry.created_at);
}

TEST_CASE("a stream entry's fields are written in the documented order", "[outbox]") {
  CHECK(idem::redis_streams::entry_fields ==
        std::array<std::string_view, 6>{"id", "sequence", "partition_key", "created_at", "headers",
                                        "payload"});
  CHECK(idem::redis_streams::stream_name("outbox:", "payments") == "outbox:payments");
  CHECK(idem::redis_streams::stream_name("", "payments") == "payments");
}

TEST_CASE("a stream entry decodes whatever the order of its fields, ignoring unknown ones",
          "[outbox]") {
  const idem::outbox_entry entry = sample_entry();
  const auto encoded = idem::redis_streams::encode_entry(entry);
  std::vector<field> fields = fields_of(entry, encoded);
  std::reverse(fields.begin(), fields.end());
  fields.insert(fields.begin() + 2, field{"added-by-a-later-idem", "whatever"});
  fields.emplace_back("trace", "t-1");
  const idem::outbox_entry decoded = idem::redis_streams::decode_entry("payments", fields);
  CHECK(decoded.id == entry.id);
  CHECK(decoded.message.payload == entry.message.payload);
  CHECK(decoded.message.headers == entry.message.headers);
}

TEST_CASE("a stream entry without one of the fields is refused, naming it", "[outbox]") {
  const idem::outbox_entry entry = sample_entry();
  const auto encoded = idem::redis_streams::encode_entry(entry);
  for (std::size_t missing = 0; missing < idem::redis_streams::entry_fields.size(); ++missing) {
    std::vector<field> fields = fields_of(entry, encoded);
    fields.erase(fields.begin() + static_cast<std::ptrdiff_t>(missing));
    const std::string name(idem::redis_streams::entry_fields[missing]);
    INFO("without " << name);
    check_refused(fields, "no field " + name);
  }
}

TEST_CASE("a stream entry with a field twice is refused, naming it", "[outbox]") {
  const idem::outbox_entry entry = sample_entry();
  const auto encoded = idem::redis_streams::encode_entry(entry);
  for (const std::string_view name : idem::redis_streams::entry_fields) {
    std::vector<field> fields = fields_of(entry, encoded);
    fields.emplace_back(name, "again");
    INFO("twice: " << name);
    check_refused(fields, "the field " + std::string(name) + " appears twice");
  }
}

TEST_CASE("a stream entry whose id is not a valid message id is refused", "[outbox]") {
  const idem::outbox_entry entry = sample_entry();
  const auto encoded = idem::redis_streams::encode_entry(entry);
  const std::string too_long(idem::max_outbox_message_id_length + 1, 'a');
  for (const std::string_view id : {std::string_view{}, std::string_view{"with space"},
                                    std::string_view{"tab\t"}, std::string_view{"nul\0", 4},
                                    std::string_view{"caf\xc3\xa9"}, std::string_view{too_long}}) {
    std::vector<field> fields = fields_of(entry, encoded);
    fields[0].second = id;
    INFO("id: " << id);
    check_refused(fields, "the id is not 1 to 255 bytes of visible ASCII");
  }
}

TEST_CASE("a stream entry whose sequence or created_at is not a decimal integer is refused",
          "[outbox]") {
  const idem::outbox_entry entry = sample_entry();
  const auto encoded = idem::redis_streams::encode_entry(entry);
  for (const auto& [index, name] :
       {std::pair<std::size_t, std::string>{1, "sequence"}, {3, "created_at"}}) {
    for (const std::string_view bad :
         {"", "12a", " 12", "12 ", "0x10", "1.5", "+5", "99999999999999999999"}) {
      std::vector<field> fields = fields_of(entry, encoded);
      fields[index].second = bad;
      INFO(name << " = '" << bad << "'");
      check_refused(fields, "the field " + name + " is not a decimal integer");
    }
  }
}

TEST_CASE("a stream entry whose headers are not netstrings is refused, saying where", "[outbox]") {
  const idem::outbox_entry entry = sample_entry();
  const auto encoded = idem::redis_streams::encode_entry(entry);
  for (const auto& [bad, reason] : std::vector<std::pair<std::string_view, std::string>>{
           {"4:type", "a netstring longer than what follows"},
           {"4:type,", "a header name without its value"},
           {"x:type,", "a length expected"},
           {"4-type,", "':' expected after a length"},
           {"4:types", "',' expected after a netstring"},
           {"04:type,0:,", "a length with a leading zero"}}) {
    std::vector<field> fields = fields_of(entry, encoded);
    fields[4].second = bad;
    INFO("headers: " << bad);
    check_refused(fields, "idem: outbox headers: " + reason);
  }
}
