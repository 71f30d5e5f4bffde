// Webhooks received through the protocol layer (idem/http/webhook.hpp), without a server: the
// signature (HMAC-SHA-256 against RFC 4231's vectors and OpenSSL's), every refusal, the event id
// read from a field or from the body, and one effect per event through an idem::inbox on the
// memory store, however the same event is delivered. Over real sockets and a real sender
// process: tests/http/webhook_receiver_test.cpp.
#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <idem/http.hpp>
#include <idem/server/inbox.hpp>
#include <idem/store/memory.hpp>
#include <idem/testing/faulty_store.hpp>

#include <atomic>
#include <cctype>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace http = idem::http;
using namespace std::chrono_literals;

namespace {

using webhook_clock = std::chrono::system_clock;

std::chrono::sys_seconds webhook_now() {
  return std::chrono::time_point_cast<std::chrono::seconds>(webhook_clock::now());
}

std::string webhook_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 0xf];
  }
  return out;
}

std::string webhook_unhex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

std::string openssl_hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &length);
  return webhook_hex(std::string_view(reinterpret_cast<const char*>(out), length));
}

/// A request's webhook_fields, as a server binding hands them over.
struct webhook_fields {
  std::multimap<std::string, std::string> values;
  auto operator()(std::string_view name) const {
    std::vector<std::string_view> found;
    for (const auto& [field, value] : values)
      if (idem::header_name_equals(field, name)) found.emplace_back(value);
    return found;
  }
};

webhook_fields signed_webhook_fields(std::string_view secret, std::string_view body,
                                     std::chrono::sys_seconds at = webhook_now()) {
  return webhook_fields{{{"Webhook-Signature", http::sign_webhook(secret, at, body)}}};
}

http::webhook_receiver webhook_receiver_of(std::vector<std::string> secrets = {"whsec_current"}) {
  http::webhook_sender sender;
  sender.name = "provider";
  sender.secrets = std::move(secrets);
  return http::webhook_receiver{std::move(sender)};
}

std::string webhook_event_body(std::string_view id, std::string_view type = "charge.succeeded",
                               int amount = 100) {
  return R"({"id":")" + std::string(id) + R"(","type":")" + std::string(type) +
         R"(","data":{"amount":)" + std::to_string(amount) + "}}";
}

}  // namespace

TEST_CASE("webhook signatures: idem::hmac_sha256 agrees with RFC 4231 and with OpenSSL") {
  // RFC 4231, test cases 1, 2, 4 and 6 (a key longer than the block is hashed first).
  CHECK(idem::hmac_sha256::hex(idem::hmac_sha256::sign(std::string(20, '\x0b'), {"Hi There"})) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(idem::hmac_sha256::hex(
            idem::hmac_sha256::sign("Jefe", {"what do ya want ", "for nothing?"})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(idem::hmac_sha256::hex(idem::hmac_sha256::sign(
            webhook_unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
            {std::string(50, '\xcd')})) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  CHECK(
      idem::hmac_sha256::hex(idem::hmac_sha256::sign(
          std::string(131, '\xaa'), {"Test Using Larger Than Block-Size Key - Hash Key First"})) ==
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Hex both ways, and the comparison.
  const auto tag = idem::hmac_sha256::sign("key", {"message"});
  const std::string text = idem::hmac_sha256::hex(tag);
  std::string upper = text;
  for (char& c : upper)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  CHECK(idem::hmac_sha256::from_hex(upper) == tag);
  CHECK_FALSE(idem::hmac_sha256::from_hex(text.substr(1)));
  CHECK_FALSE(idem::hmac_sha256::from_hex(text.substr(1) + "g"));
  CHECK(idem::hmac_sha256::equal(tag, *idem::hmac_sha256::from_hex(text)));
  for (std::size_t i = 0; i < tag.size(); ++i) {
    auto other = tag;
    other[i] ^= 1;
    CHECK_FALSE(idem::hmac_sha256::equal(tag, other));
  }
  // Keys and messages of every length around the block size, against OpenSSL.
  std::mt19937 random(7);
  for (std::size_t key_length : {1U, 32U, 63U, 64U, 65U, 200U}) {
    for (std::size_t message_length : {0U, 1U, 55U, 56U, 64U, 1000U}) {
      std::string key(key_length, '\0'), message(message_length, '\0');
      for (char& c : key)
        c = static_cast<char>(random());
      for (char& c : message)
        c = static_cast<char>(random());
      CAPTURE(key_length, message_length);
      CHECK(idem::hmac_sha256::hex(idem::hmac_sha256::sign(key, {message})) ==
            openssl_hmac_sha256(key, message));
    }
  }
}

TEST_CASE("webhook signatures: a signed delivery passes, under any secret of a rotation") {
  const std::string body = webhook_event_body("evt_1");
  const auto receiver = webhook_receiver_of({"whsec_new", "whsec_old"});
  for (const char* secret : {"whsec_new", "whsec_old"}) {
    CAPTURE(secret);
    const auto checked =
        receiver.check(signed_webhook_fields(secret, body), body, webhook_clock::now());
    REQUIRE(checked);
    CHECK(checked.event().id == "evt_1");
    CHECK(checked.event().sender == "provider");
    CHECK(checked.event().body == body);
  }
  // A sender signing with both during its own rotation: two v1, one of them known.
  const auto at = webhook_now();
  const std::string both = http::sign_webhook("whsec_unknown", at, body) + ",v1=" +
                           http::sign_webhook("whsec_old", at, body)
                               .substr(http::sign_webhook("whsec_old", at, body).find("v1=") + 3);
  CHECK(receiver.check(webhook_fields{{{"Webhook-Signature", both}}}, body, webhook_clock::now()));
  // Schemes it does not know are skipped; spaces around the parts are allowed.
  const std::string with_v0 = "t=" + std::to_string(at.time_since_epoch().count()) + ", v0=abc ," +
                              http::sign_webhook("whsec_new", at, body)
                                  .substr(http::sign_webhook("whsec_new", at, body).find("v1="));
  CHECK(
      receiver.check(webhook_fields{{{"Webhook-Signature", with_v0}}}, body, webhook_clock::now()));
  // The timestamp is checked as it was signed, text for text: leading zeros are the sender's.
  const std::string padded = "0" + std::to_string(at.time_since_epoch().count());
  const std::string zeros =
      "t=" + padded +
      ",v1=" + idem::hmac_sha256::hex(idem::hmac_sha256::sign("whsec_new", {padded, ".", body}));
  CHECK(receiver.check(webhook_fields{{{"Webhook-Signature", zeros}}}, body, webhook_clock::now()));
}

TEST_CASE("webhook signatures: every bad delivery is refused with its problem, before the id") {
  const std::string body = webhook_event_body("evt_1");
  const auto receiver = webhook_receiver_of();
  const auto now = webhook_clock::now();
  const auto at = webhook_now();
  const std::string good = http::sign_webhook("whsec_current", at, body);
  const std::string stamp = std::to_string(at.time_since_epoch().count());
  const std::string tag = good.substr(good.find("v1=") + 3);
  auto refusal = [&](const webhook_fields& f, std::string_view sent = {}) {
    const auto checked = receiver.check(f, sent.data() == nullptr ? body : sent, now);
    REQUIRE_FALSE(checked);
    return *checked.refusal();
  };
  using kind = http::problem_kind;
  struct row {
    const char* what;
    webhook_fields sent;
    kind expected;
  };
  std::string flipped = tag;
  flipped[10] = flipped[10] == 'a' ? 'b' : 'a';
  const row rows[] = {
      {"unsigned", webhook_fields{}, kind::invalid_signature},
      {"two signature webhook_fields",
       webhook_fields{{{"Webhook-Signature", good}, {"Webhook-Signature", good}}},
       kind::invalid_signature},
      {"another secret", signed_webhook_fields("whsec_other", body), kind::invalid_signature},
      {"one hex digit changed",
       webhook_fields{{{"Webhook-Signature", "t=" + stamp + ",v1=" + flipped}}},
       kind::invalid_signature},
      {"no timestamp", webhook_fields{{{"Webhook-Signature", "v1=" + tag}}},
       kind::invalid_signature},
      {"no v1", webhook_fields{{{"Webhook-Signature", "t=" + stamp}}}, kind::invalid_signature},
      {"two timestamps",
       webhook_fields{{{"Webhook-Signature", "t=" + stamp + ",t=" + stamp + ",v1=" + tag}}},
       kind::invalid_signature},
      {"a timestamp that is not a number",
       webhook_fields{{{"Webhook-Signature", "t=12a,v1=" + tag}}}, kind::invalid_signature},
      {"a negative timestamp", webhook_fields{{{"Webhook-Signature", "t=-5,v1=" + tag}}},
       kind::invalid_signature},
      // A timestamp far past any clock, signed: refused as stale, without overflowing.
      {"a timestamp in the year 292 billion",
       signed_webhook_fields(
           "whsec_current", body,
           std::chrono::sys_seconds(std::chrono::seconds(INT64_C(9'000'000'000'000'000'000)))),
       kind::stale_webhook},
      {"a short tag",
       webhook_fields{{{"Webhook-Signature", "t=" + stamp + ",v1=" + tag.substr(2)}}},
       kind::invalid_signature},
      {"a part without =", webhook_fields{{{"Webhook-Signature", "t=" + stamp + ",v1" + tag}}},
       kind::invalid_signature},
      {"signed an hour ago", signed_webhook_fields("whsec_current", body, at - 1h),
       kind::stale_webhook},
      {"signed an hour ahead", signed_webhook_fields("whsec_current", body, at + 1h),
       kind::stale_webhook},
      // A timestamp changed after signing is a signature that no longer matches.
      {"the timestamp moved",
       webhook_fields{{{"Webhook-Signature",
                        "t=" + std::to_string(at.time_since_epoch().count() + 1) + ",v1=" + tag}}},
       kind::invalid_signature},
  };
  for (const row& r : rows) {
    CAPTURE(r.what);
    const http::problem p = refusal(r.sent);
    CHECK(p.kind == r.expected);
    CHECK(p.status == 400);
    CHECK(p.type == "/idempotency#" + std::string(http::type_of(r.expected).fragment));
    CHECK_FALSE(p.detail.empty());
  }
  // The body changed after signing (one byte).
  std::string changed = body;
  changed[changed.find("100")] = '9';
  CHECK(refusal(signed_webhook_fields("whsec_current", body), changed).kind ==
        kind::invalid_signature);
  // A body past the limit is refused before its signature is computed.
  http::webhook_sender small;
  small.name = "provider";
  small.secrets = {"whsec_current"};
  small.max_body_bytes = 16;
  const http::webhook_receiver limited{small};
  const auto big = limited.check(signed_webhook_fields("whsec_current", body), body, now);
  REQUIRE_FALSE(big);
  CHECK(big.refusal()->status == 413);
}

TEST_CASE("webhook event ids: read from a header field or a JSON Pointer, refused when unusable") {
  const auto now = webhook_clock::now();
  auto id_of = [&](const http::webhook_receiver& receiver, const std::string& body,
                   webhook_fields extra = {}) {
    webhook_fields f = signed_webhook_fields("whsec_current", body);
    f.values.insert(extra.values.begin(), extra.values.end());
    return receiver.check(f, body, now);
  };
  const auto by_pointer = webhook_receiver_of();
  CHECK(id_of(by_pointer, R"({"id":"evt_9"})").event().id == "evt_9");
  CHECK(id_of(by_pointer, R"({"id":12345})").event().id == "12345");

  http::webhook_sender nested;
  nested.name = "provider";
  nested.secrets = {"whsec_current"};
  nested.event_id_pointer = "/meta/a~1b/0/m~0n";
  const http::webhook_receiver deep{nested};
  CHECK(id_of(deep, R"({"meta":{"a/b":[{"m~n":"evt_deep"},{"m~n":"x"}]}})").event().id ==
        "evt_deep");

  http::webhook_sender by_field = nested;
  by_field.event_id_field = "Webhook-Id";
  const http::webhook_receiver field{by_field};
  // The field is read; the body need not even be JSON.
  CHECK(id_of(field, "not json", webhook_fields{{{"webhook-id", "msg_1"}}}).event().id == "msg_1");

  struct row {
    const char* what;
    const http::webhook_receiver* receiver;
    std::string body;
    webhook_fields extra;
  };
  const row rows[] = {
      {"no id member", &by_pointer, R"({"type":"x"})", {}},
      {"an id that is an object", &by_pointer, R"({"id":{"a":1}})", {}},
      {"an id that is a fraction", &by_pointer, R"({"id":1.5})", {}},
      {"an id with a space", &by_pointer, R"({"id":"evt 1"})", {}},
      {"an empty id", &by_pointer, R"({"id":""})", {}},
      {"a body that is not JSON", &by_pointer, "id=evt_1", {}},
      {"two members named id", &by_pointer, R"({"id":"a","id":"b"})", {}},
      {"a pointer past an array", &deep, R"({"meta":{"a/b":[]}})", {}},
      {"no id field", &field, "{}", {}},
      {"two id webhook_fields", &field, "{}",
       webhook_fields{{{"Webhook-Id", "a"}, {"Webhook-Id", "b"}}}},
  };
  for (const row& r : rows) {
    CAPTURE(r.what);
    const auto checked = id_of(*r.receiver, r.body, r.extra);
    REQUIRE_FALSE(checked);
    CHECK(checked.refusal()->kind == http::problem_kind::missing_event_id);
  }
}

TEST_CASE("webhook receivers refuse settings that cannot work, at construction") {
  auto make = [](auto change) {
    http::webhook_sender sender;
    sender.name = "provider";
    sender.secrets = {"whsec"};
    change(sender);
    return http::webhook_receiver{sender};
  };
  CHECK_THROWS_AS(make([](auto& s) { s.name.clear(); }), std::invalid_argument);
  CHECK_THROWS_AS(make([](auto& s) { s.secrets.clear(); }), std::invalid_argument);
  CHECK_THROWS_AS(make([](auto& s) { s.secrets.push_back(""); }), std::invalid_argument);
  CHECK_THROWS_AS(make([](auto& s) { s.event_id_pointer = "id"; }), std::invalid_argument);
  CHECK_THROWS_AS(make([](auto& s) { s.tolerance = 0s; }), std::invalid_argument);
  CHECK_NOTHROW(make([](auto& s) {
    s.event_id_pointer = "id";
    s.event_id_field = "Webhook-Id";
  }));
}

namespace {

/// A receiver on the memory store, counting its effects per event id.
struct webhook_receiving {
  idem::inbox<> events;
  http::webhook_receiver receiver = webhook_receiver_of();
  std::mutex mutex;
  std::map<std::string, int> effects;
  std::atomic<int> fail_next{0};

  http::reply deliver(const webhook_fields& f, std::string_view body) {
    auto handler = [this](const http::webhook_event& event) {
      if (fail_next > 0) {
        --fail_next;
        throw std::runtime_error("the ledger is down");
      }
      std::this_thread::sleep_for(1ms);  // long enough for concurrent deliveries to meet
      const std::lock_guard lock(mutex);
      ++effects[event.id];
    };
    http::reply out;
    http::receive_webhook(events, receiver, f, body, handler, out);
    return out;
  }
};

}  // namespace

TEST_CASE("webhooks through the inbox: one effect per event, a duplicate answered 2xx and marked") {
  webhook_receiving r;
  const std::string body = webhook_event_body("evt_1");
  const auto first = r.deliver(signed_webhook_fields("whsec_current", body), body);
  CHECK(first.status == 200);
  CHECK(first.body == R"({"event":"evt_1","outcome":"processed"})");
  CHECK(first.header(http::replayed_field).empty());
  // The same delivery again, and a real redelivery: re-signed later with a new timestamp.
  for (int i = 0; i < 5; ++i) {
    const auto again =
        r.deliver(signed_webhook_fields("whsec_current", body, webhook_now() + 1s * i), body);
    CHECK(again.status == 200);
    CHECK(again.body == R"({"event":"evt_1","outcome":"duplicate"})");
    CHECK(again.header(http::replayed_field) == "true");
  }
  CHECK(r.effects["evt_1"] == 1);
  // Two events with the same payload but for their ids (a second charge of the same amount).
  const std::string second = webhook_event_body("evt_2");
  CHECK(r.deliver(signed_webhook_fields("whsec_current", second), second).status == 200);
  CHECK(r.effects["evt_2"] == 1);
  // A refused delivery never reaches the inbox.
  const std::string third = webhook_event_body("evt_3");
  CHECK(r.deliver(signed_webhook_fields("whsec_other", third), third).status == 400);
  CHECK(r.effects.count("evt_3") == 0);
}

TEST_CASE("webhooks through the inbox: the same event delivered 20 times at once, one effect",
          "[concurrency]") {
  for (int round = 0; round < 20; ++round) {
    webhook_receiving r;
    const std::string id = "evt_round_" + std::to_string(round);
    const std::string body = webhook_event_body(id);
    std::vector<std::thread> senders;
    std::vector<int> statuses(20);
    for (int i = 0; i < 20; ++i) {
      senders.emplace_back([&, i] {
        // Each a redelivery of its own: signed at its own second.
        statuses[static_cast<std::size_t>(i)] =
            r.deliver(signed_webhook_fields("whsec_current", body, webhook_now() - 1s * (i % 5)),
                      body)
                .status;
      });
    }
    for (auto& t : senders)
      t.join();
    CHECK(r.effects[id] == 1);
    for (const int status : statuses) {
      // Processed, duplicate, or 409 for one that met the first still running (the sender retries).
      CHECK((status == 200 || status == 409));
    }
  }
}

TEST_CASE("webhooks through the inbox: a handler that fails answers 500, and the redelivery runs") {
  webhook_receiving r;
  r.fail_next = 1;
  const std::string body = webhook_event_body("evt_1");
  const auto failed = r.deliver(signed_webhook_fields("whsec_current", body), body);
  CHECK(failed.status == 500);
  CHECK(failed.content_type == http::problem_media_type);
  CHECK(failed.body.find("#event-failed") != std::string::npos);
  CHECK(r.effects.count("evt_1") == 0);
  const auto retried = r.deliver(signed_webhook_fields("whsec_current", body), body);
  CHECK(retried.status == 200);
  CHECK(retried.body == R"({"event":"evt_1","outcome":"processed"})");
  CHECK(r.effects["evt_1"] == 1);
}

TEST_CASE("webhooks through the inbox: a handler's own answer is replayed to duplicates") {
  idem::inbox<> events;
  const auto receiver = webhook_receiver_of();
  int runs = 0;
  auto handler = [&runs](const http::webhook_event& event) {
    ++runs;
    return idem::http_response{
        202, {{"Content-Type", "text/plain"}, {"X-Run", "1"}}, "queued " + event.id};
  };
  const std::string body = webhook_event_body("evt_7");
  for (int i = 0; i < 3; ++i) {
    http::reply out;
    http::receive_webhook(events, receiver, signed_webhook_fields("whsec_current", body), body,
                          handler, out);
    CHECK(out.status == 202);
    CHECK(out.body == "queued evt_7");
    CHECK(out.content_type == "text/plain");
    CHECK(out.header("X-Run") == "1");
    CHECK(out.header(http::replayed_field) == (i == 0 ? "" : "true"));
  }
  CHECK(runs == 1);
}

TEST_CASE(
    "webhooks through the inbox: every bad delivery is refused with its status and applies "
    "nothing") {
  webhook_receiving r;
  const auto now = webhook_now();
  const std::string body = webhook_event_body("evt_bad");
  std::string modified = body;
  modified[modified.find("100")] = '7';
  const std::string long_id = webhook_event_body(std::string(256, 'x'));
  http::webhook_sender small;
  small.name = "provider";
  small.secrets = {"whsec_current"};
  small.max_body_bytes = 32;
  struct row {
    const char* what;
    webhook_fields sent;
    std::string delivered;
    int status;
    std::string_view fragment;
  };
  const row rows[] = {
      {"no signature", webhook_fields{}, body, 400, "invalid-signature"},
      {"a wrong signature", signed_webhook_fields("whsec_wrong", body), body, 400,
       "invalid-signature"},
      {"a signature over another body", signed_webhook_fields("whsec_current", body), modified, 400,
       "invalid-signature"},
      {"a timestamp outside the tolerance",
       signed_webhook_fields("whsec_current", body, now - 301s), body, 400, "stale-webhook"},
      // A delivery captured and sent again ten minutes later: its signature still matches.
      {"a replayed old signature", signed_webhook_fields("whsec_current", body, now - 10min), body,
       400, "stale-webhook"},
      {"no event id", signed_webhook_fields("whsec_current", R"({"type":"x"})"), R"({"type":"x"})",
       400, "missing-event-id"},
      {"an event id over 255 bytes", signed_webhook_fields("whsec_current", long_id), long_id, 400,
       "missing-event-id"},
      {"malformed JSON", signed_webhook_fields("whsec_current", R"({"id":"evt_bad")"),
       R"({"id":"evt_bad")", 400, "missing-event-id"},
  };
  for (const row& bad : rows) {
    CAPTURE(bad.what);
    const http::reply answer = r.deliver(bad.sent, bad.delivered);
    CHECK(answer.status == bad.status);
    CHECK(answer.content_type == http::problem_media_type);
    CHECK(answer.body.find("#" + std::string(bad.fragment)) != std::string::npos);
  }
  // A body over the limit: 413, before its signature is computed.
  r.receiver = http::webhook_receiver{small};
  const http::reply big = r.deliver(signed_webhook_fields("whsec_current", body), body);
  CHECK(big.status == 413);
  CHECK(r.effects.empty());
}

TEST_CASE("webhooks through the inbox: deduplicated on the event id, never on the payload") {
  // The id in a header, so that two events can have byte-identical bodies.
  http::webhook_sender by_field;
  by_field.name = "provider";
  by_field.secrets = {"whsec_current"};
  by_field.event_id_field = "Webhook-Id";
  webhook_receiving r;
  r.receiver = http::webhook_receiver{by_field};
  auto delivery = [](std::string_view id, const std::string& body) {
    webhook_fields f = signed_webhook_fields("whsec_current", body);
    f.values.emplace("Webhook-Id", std::string(id));
    return f;
  };
  // Two charges of the same amount: one payload, two events, two effects.
  const std::string same = R"({"type":"charge.succeeded","amount":100})";
  CHECK(r.deliver(delivery("msg_1", same), same).body ==
        R"({"event":"msg_1","outcome":"processed"})");
  CHECK(r.deliver(delivery("msg_2", same), same).body ==
        R"({"event":"msg_2","outcome":"processed"})");
  // One event redelivered with a payload that changed between attempts (an attempt counter):
  // still one event, one effect.
  const std::string second_attempt = R"({"type":"charge.succeeded","amount":100,"attempt":2})";
  const http::reply again = r.deliver(delivery("msg_1", second_attempt), second_attempt);
  CHECK(again.body == R"({"event":"msg_1","outcome":"duplicate"})");
  CHECK(r.effects == std::map<std::string, int>{{"msg_1", 1}, {"msg_2", 1}});
}

TEST_CASE(
    "webhooks through the inbox: a store that cannot answer is 503, runs nothing, and the "
    "retry runs the event once") {
  using store_type = idem::testing::faulty_store<idem::memory_store>;
  struct policies : idem::default_policies {
    using store = store_type;
  };
  store_type store;
  idem::inbox<policies>::options options;
  options.store = store;
  idem::inbox<policies> events(std::move(options));
  const auto receiver = webhook_receiver_of();
  int runs = 0;
  auto handler = [&runs](const http::webhook_event&) { ++runs; };
  const std::string body = webhook_event_body("evt_down");
  auto deliver = [&] {
    http::reply out;
    http::receive_webhook(events, receiver, signed_webhook_fields("whsec_current", body), body,
                          handler, out);
    return out;
  };
  store.fail(store_type::mode::unavailable);
  const http::reply down = deliver();
  CHECK(down.status == 503);
  CHECK(down.body.find("#store-unavailable") != std::string::npos);
  CHECK(runs == 0);
  store.heal();
  CHECK(deliver().status == 200);
  CHECK(deliver().header(http::replayed_field) == "true");
  CHECK(runs == 1);
}
