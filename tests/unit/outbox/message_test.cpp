// The outbox's core: a message's id (stable, collision-free by construction, apart from
// downstream keys), the headers' stored form, and the checks every writer makes.
#include <catch2/catch.hpp>

#include <idem/outbox/headers.hpp>
#include <idem/outbox/message.hpp>
#include <idem/server/handler_context.hpp>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using Catch::Matchers::Contains;

TEST_CASE("a message id is the same for the same scope, key and name, and 64 hex digits",
          "[outbox]") {
  const std::string id = idem::outbox_message_id("tenant", "order-1", "charged");
  CHECK(id == idem::outbox_message_id("tenant", "order-1", "charged"));
  CHECK(id.size() == 64);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(idem::is_valid_key(id));
}

TEST_CASE("message ids differ for every scope, key and name, however the parts are split",
          "[outbox]") {
  std::set<std::string> ids;
  ids.insert(idem::outbox_message_id("a", "bc", "n"));
  ids.insert(idem::outbox_message_id("ab", "c", "n"));
  ids.insert(idem::outbox_message_id("a", "b", "cn"));
  ids.insert(idem::outbox_message_id("a", "bcn", ""));
  ids.insert(idem::outbox_message_id("", "abc", "n"));
  ids.insert(idem::outbox_message_id("tenant", "order-1", "charged"));
  ids.insert(idem::outbox_message_id("tenant", "order-1", "refunded"));
  ids.insert(idem::outbox_message_id("other", "order-1", "charged"));
  CHECK(ids.size() == 8);
}

TEST_CASE("a message id is known-answer stable, so ids written by one version match the next",
          "[outbox]") {
  // The construction is part of the outbox's contract: consumers deduplicate by these ids, so a
  // change would make every redelivery after an upgrade look new. SHA-256 of the tag and the
  // three parts, each after its LEB128 length.
  std::string input = "idem outbox message id v1";
  for (const std::string part : {"tenant", "order-1", "charged"}) {
    input += static_cast<char>(part.size());
    input += part;
  }
  CHECK(idem::outbox_message_id("tenant", "order-1", "charged") == idem::sha256::hash(input).hex());
}

TEST_CASE("a message id never equals the downstream key of the same name", "[outbox]") {
  idem::handler_context context{"tenant", "order-1"};
  CHECK(std::string(context.downstream_key("charged").view()) !=
        idem::outbox_message_id("tenant", "order-1", "charged"));
}

TEST_CASE("headers are stored as netstrings and read back as they were", "[outbox]") {
  const std::vector<idem::outbox_header> headers{
      {"type", "charged"}, {"trace", ""}, {"odd", std::string("a,b:c\0d", 7)}};
  const std::string stored = idem::encode_outbox_headers(headers);
  CHECK(stored == std::string("4:type,7:charged,5:trace,0:,3:odd,7:a,b:c\0d,", 44));
  CHECK(idem::decode_outbox_headers(stored) == headers);
  CHECK(idem::encode_outbox_headers({}).empty());
  CHECK(idem::decode_outbox_headers("").empty());
}

TEST_CASE("stored headers that are not netstrings are refused, saying where", "[outbox]") {
  const auto refused = [](const std::string& stored, const char* why) {
    INFO(stored);
    CHECK_THROWS_WITH(idem::decode_outbox_headers(stored), Contains(why));
  };
  refused("x:ab,", "a length expected");
  refused("4type,", "':' expected");
  refused("9:type,", "longer than what follows");
  refused("4:typeX", "',' expected");
  refused("4:type,", "without its value");
  refused("04:type,0:,", "leading zero");
  refused("99999999999999999999:", "too long");
  CHECK_THROWS_WITH(idem::decode_outbox_headers("4:type,9"), Contains("at byte 7 of 8"));
}

TEST_CASE("a writer refuses a bad id, a message without a topic and a payload past the limit",
          "[outbox]") {
  idem::outbox_message message{.topic = "payments", .partition_key = "acct", .payload = "12345"};
  CHECK_NOTHROW(idem::detail::check_outbox_message("id-1", message, 5, "writer"));
  CHECK_THROWS_WITH(
      idem::detail::check_outbox_message("id-1", message, 4, "writer"),
      Contains("writer: the payload is 5 bytes") && Contains("max_outbox_payload_bytes (4)"));
  CHECK_THROWS_AS(idem::detail::check_outbox_message("", message, 5, "writer"),
                  std::invalid_argument);
  CHECK_THROWS_WITH(idem::detail::check_outbox_message("has space", message, 5, "writer"),
                    Contains("visible ASCII"));
  CHECK_THROWS_AS(idem::detail::check_outbox_message(std::string(256, 'i'), message, 5, "writer"),
                  std::invalid_argument);
  message.topic.clear();
  CHECK_THROWS_WITH(idem::detail::check_outbox_message("id-1", message, 5, "writer"),
                    Contains("no topic"));
}
