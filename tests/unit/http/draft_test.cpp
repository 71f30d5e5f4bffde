// The IETF draft's statements, one by one (draft-ietf-httpapi-idempotency-key-header, the
// sections as its latest text numbers them), each checked through the protocol layer: an
// exchange (idem/http/exchange.hpp) with an idempotent wrapper on the memory store. The server
// bindings run the same table over real sockets (tests/http).
#include <catch2/catch.hpp>

#include <idem/core/clock.hpp>
#include <idem/http.hpp>
#include <idem/policies.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/store/memory.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace http = idem::http;
using namespace std::chrono_literals;

namespace {

struct draft_policies : idem::default_policies {
  using clock = idem::manual_clock;
};

/// Charges: 201 with the charge's number; a body of "decline" is answered 402, an error the
/// record keeps like any response.
struct charge_handler {
  std::shared_ptr<int> runs = std::make_shared<int>(0);
  idem::http_response operator()(const idem::http_request& request) const {
    ++*runs;
    if (request.body == "decline") {
      return {402, {{"Content-Type", "application/json"}}, R"({"error":"card declined"})"};
    }
    return {
        201,
        {{"Content-Type", "application/json"}, {"Location", "/charges/" + std::to_string(*runs)}},
        R"({"charge":)" + std::to_string(*runs) + "}"};
  }
};

/// field_values for a request whose only fields are these Idempotency-Key values.
auto key_fields(const std::vector<std::string_view>& keys) {
  return [&keys](std::string_view name) {
    return idem::header_name_equals(name, "Idempotency-Key") ? keys
                                                             : std::vector<std::string_view>{};
  };
}

struct service {
  idem::manual_clock clock;
  idem::memory_store store;
  charge_handler handler;
  std::unique_ptr<idem::idempotent<charge_handler, draft_policies>> charges;
  http::specification spec;

  explicit service(http::key_form accepted = http::key_form::any) {
    idem::idempotent<charge_handler, draft_policies>::options parts;
    parts.store = store;
    parts.clock = clock;
    parts.lease = 20s;
    parts.retention = 24h;
    charges = std::make_unique<idem::idempotent<charge_handler, draft_policies>>(handler,
                                                                                 std::move(parts));
    spec = http::specification::of(*charges, "https://api.example.com/idempotency");
    spec.accepted = accepted;
  }

  /// A POST with these Idempotency-Key field values (none, one, several) and body, from `client`.
  http::reply post(std::vector<std::string_view> keys, std::string body,
                   std::string_view client = "client-1") {
    const idem::http_request request{"POST", "/charges", {}, std::move(body)};
    http::reply answer;
    http::exchange(*charges, client, key_fields(keys), request, spec, answer);
    return answer;
  }

  int runs() const { return *handler.runs; }

  /// Holds `key` as an attempt still running would: claimed, never completed.
  void hold(std::string_view key, std::string body, std::string_view client = "client-1") {
    const idem::http_request request{"POST", "/charges", {}, std::move(body)};
    const idem::claim_request claim{
        client, key, charges->fingerprint()(idem::view_of(request)), clock.wall_now(), 20s, 24h};
    REQUIRE(store.claim(claim).status == idem::claim_status::claimed);
  }
};

/// The problem body's "type" member, read from the JSON the layer wrote.
bool has_type(const http::reply& answer, std::string_view fragment) {
  const std::string member =
      R"("type":"https://api.example.com/idempotency#)" + std::string(fragment) + "\"";
  return answer.content_type == http::problem_media_type &&
         answer.body.find(member) != std::string::npos;
}

}  // namespace

TEST_CASE("draft 2.1: an Idempotency-Key sent as an sf-string is the key between its quotes") {
  service s;
  const auto first = s.post({R"("8e03978e-40d5-43e8-bc93-6894a57f9324")"}, "100");
  CHECK(first.status == 201);
  // The same key, so a repeat, whichever form it comes in.
  const auto again = s.post({"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "100");
  CHECK(again.status == 201);
  CHECK(again.header("Idempotent-Replayed") == "true");
  CHECK(s.runs() == 1);
}

TEST_CASE("draft 2.1: a server that takes the draft's form only refuses a bare key with 400") {
  service s(http::key_form::sf_string);
  const auto bare = s.post({"k-1"}, "100");
  CHECK(bare.status == 400);
  CHECK(has_type(bare, "invalid-key"));
  CHECK(s.post({R"("k-1")"}, "100").status == 201);
  CHECK(s.runs() == 1);
}

TEST_CASE("draft 2.1: a request with more than one Idempotency-Key field is refused with 400") {
  service s;
  const auto twice = s.post({R"("k-1")", R"("k-2")"}, "100");
  CHECK(twice.status == 400);
  CHECK(has_type(twice, "several-keys"));
  // Nothing was claimed under either key: each runs when sent alone.
  CHECK(s.runs() == 0);
  CHECK(s.post({R"("k-1")"}, "100").header("Idempotent-Replayed").empty());
  CHECK(s.post({R"("k-2")"}, "100").header("Idempotent-Replayed").empty());
  CHECK(s.runs() == 2);
}

TEST_CASE("draft 2.1: a value that is not an sf-string is refused with 400, and never guessed at") {
  service s;
  for (const std::string_view malformed :
       {R"("k-1)", R"("k-1"x)", R"("k-1", "k-2")", "\"caf\xc3\xa9\"", R"("")", ""}) {
    CAPTURE(malformed);
    const auto refused = s.post({malformed}, "100");
    CHECK(refused.status == 400);
    CHECK(has_type(refused, "invalid-key"));
  }
  CHECK(s.runs() == 0);
}

TEST_CASE("draft 2.2: a key reused with a different request payload is refused with 422") {
  service s;
  CHECK(s.post({R"("k-1")"}, "100").status == 201);
  const auto reused = s.post({R"("k-1")"}, "999");
  CHECK(reused.status == 422);
  CHECK(has_type(reused, "key-reused"));
  CHECK(s.runs() == 1);
}

TEST_CASE("draft 2.3: keys expire as the published policy says: a repeat after it runs again") {
  service s;
  CHECK(s.spec.retention == 24h);
  CHECK(http::specification_json(s.spec).find(R"("retention_seconds":86400)") != std::string::npos);
  CHECK(s.post({R"("k-1")"}, "100").status == 201);
  s.clock.advance(24h - 1s);
  CHECK(s.post({R"("k-1")"}, "100").header("Idempotent-Replayed") == "true");
  s.clock.advance(1s);
  const auto after = s.post({R"("k-1")"}, "100");
  CHECK(after.status == 201);
  CHECK(after.header("Idempotent-Replayed").empty());
  CHECK(s.runs() == 2);
}

TEST_CASE("draft 2.4: the fingerprint is made from the payload: the same payload is a repeat") {
  service s;
  CHECK(s.post({R"("k-1")"}, "100").status == 201);
  CHECK(s.post({R"("k-1")"}, "100").header("Idempotent-Replayed") == "true");
  CHECK(s.post({R"("k-1")"}, "101").status == 422);
  CHECK(s.runs() == 1);
}

TEST_CASE("draft 2.5: the resource publishes its idempotency specification, expiration included") {
  service s;
  const std::string json = http::specification_json(s.spec);
  CHECK(json.find(R"("key_field":"Idempotency-Key")") != std::string::npos);
  CHECK(json.find(R"("key_required":true)") != std::string::npos);
  CHECK(json.find(R"("retention_seconds":86400)") != std::string::npos);
  CHECK(json.find(R"("lease_seconds":20)") != std::string::npos);
  const std::string html = http::specification_html(s.spec);
  CHECK(html.find("kept for 86400 s") != std::string::npos);
  // Every problem type a refusal names leads to its explanation on that page.
  for (const http::problem_kind kind : http::all_problem_kinds) {
    const std::string anchor = "id=\"" + std::string(http::type_of(kind).fragment) + "\"";
    CAPTURE(anchor);
    CHECK(html.find(anchor) != std::string::npos);
    CHECK(json.find("idempotency#" + std::string(http::type_of(kind).fragment)) !=
          std::string::npos);
  }
}

TEST_CASE("draft 2.6: a first request is processed normally") {
  service s;
  const auto first = s.post({R"("k-1")"}, "100");
  CHECK(first.status == 201);
  CHECK(first.content_type == "application/json");
  CHECK(first.body == R"({"charge":1})");
  CHECK(first.header("Location") == "/charges/1");
  CHECK(first.header("Idempotent-Replayed").empty());
}

TEST_CASE("draft 2.6: a retry after the original completed gets its result, a success") {
  service s;
  const auto first = s.post({R"("k-1")"}, "100");
  const auto retry = s.post({R"("k-1")"}, "100");
  CHECK(retry.status == first.status);
  CHECK(retry.body == first.body);
  CHECK(retry.content_type == first.content_type);
  CHECK(retry.header("Location") == first.header("Location"));
  CHECK(retry.header("Idempotent-Replayed") == "true");
  CHECK(s.runs() == 1);
}

TEST_CASE("draft 2.6: a retry after the original completed gets its result, an error too") {
  service s;
  const auto first = s.post({R"("k-1")"}, "decline");
  CHECK(first.status == 402);
  const auto retry = s.post({R"("k-1")"}, "decline");
  CHECK(retry.status == 402);
  CHECK(retry.body == first.body);
  CHECK(retry.header("Idempotent-Replayed") == "true");
  CHECK(s.runs() == 1);
}

TEST_CASE("draft 2.6: a request retried before the original completed MUST get a conflict, 409") {
  service s;
  s.hold("k-1", "100");
  s.clock.advance(5s + 300ms);
  const auto concurrent = s.post({R"("k-1")"}, "100");
  CHECK(concurrent.status == 409);
  CHECK(has_type(concurrent, "request-outstanding"));
  // When to come back: the original's lease (20 s) less what has passed, rounded up.
  CHECK(concurrent.header("Retry-After") == "15");
  CHECK(s.runs() == 0);
}

TEST_CASE("draft 2.7: a missing key is 400 with a problem body that links the documentation") {
  service s;
  const auto missing = s.post({}, "100");
  CHECK(missing.status == 400);
  CHECK(missing.content_type == "application/problem+json");
  CHECK(missing.header("Content-Language") == "en");
  CHECK(has_type(missing, "missing-key"));
  CHECK(missing.body.find(R"("title":"Idempotency-Key is missing")") != std::string::npos);
  CHECK(s.runs() == 0);
}

TEST_CASE("draft 2.7: a key used for another payload is 422 with a problem body") {
  service s;
  (void)s.post({R"("k-1")"}, "100");
  const auto reused = s.post({R"("k-1")"}, "200");
  CHECK(reused.status == 422);
  CHECK(reused.header("Content-Language") == "en");
  CHECK(reused.body.find(R"("title":"Idempotency-Key is already used")") != std::string::npos);
  CHECK(reused.body.find(R"("status":422)") != std::string::npos);
}

TEST_CASE("draft 2.7: a request outstanding is 409 with a problem body") {
  service s;
  s.hold("k-1", "100");
  const auto outstanding = s.post({R"("k-1")"}, "100");
  CHECK(outstanding.status == 409);
  CHECK(outstanding.body.find(R"("title":"A request is outstanding for this Idempotency-Key")") !=
        std::string::npos);
}

TEST_CASE("draft 2.7: after a 409 no correction is needed: the same retry later gets the result") {
  service s;
  const auto first = s.post({R"("k-1")"}, "100");
  // A second key held by an attempt that then stopped answering: after its lease the retry,
  // uncorrected, runs (takes the claim over) and later ones replay.
  s.hold("k-2", "100");
  CHECK(s.post({R"("k-2")"}, "100").status == 409);
  s.clock.advance(20s);
  CHECK(s.post({R"("k-2")"}, "100").status == 201);
  CHECK(s.post({R"("k-2")"}, "100").header("Idempotent-Replayed") == "true");
  CHECK(first.status == 201);
}

TEST_CASE("draft 2.7: a retry that was not corrected after a 4xx fails again with the same error") {
  service s;
  CHECK(s.post({}, "100").status == 400);
  CHECK(s.post({}, "100").status == 400);
  (void)s.post({R"("k-1")"}, "100");
  CHECK(s.post({R"("k-1")"}, "200").status == 422);
  CHECK(s.post({R"("k-1")"}, "200").status == 422);
  CHECK(s.runs() == 1);
}

TEST_CASE("draft 5: the key is validated against its published format before it is looked up") {
  service s;
  const std::string too_long(s.spec.max_key_length + 1, 'k');
  for (const std::string& invalid : {too_long, std::string(R"("a b")"), std::string("\"a\tb\"")}) {
    CAPTURE(invalid);
    const auto refused = s.post({invalid}, "100");
    CHECK(refused.status == 400);
    CHECK(has_type(refused, "invalid-key"));
  }
  CHECK(s.runs() == 0);
  const std::string longest(s.spec.max_key_length, 'k');
  CHECK(s.post({longest}, "100").status == 201);
}

TEST_CASE("draft 5: the lookup key is composite: another client's same key is its own request") {
  service s;
  CHECK(s.post({R"("k-1")"}, "100", "client-1").status == 201);
  const auto other = s.post({R"("k-1")"}, "100", "client-2");
  CHECK(other.status == 201);
  CHECK(other.header("Idempotent-Replayed").empty());
  CHECK(other.body == R"({"charge":2})");
  // And a different payload from another client is no misuse of the first client's key.
  CHECK(s.post({R"("k-1")"}, "555", "client-3").status == 201);
  CHECK(s.runs() == 3);
}

TEST_CASE("a server where keys are optional runs a keyless request unguarded, each time") {
  idem::idempotent<charge_handler, draft_policies>::options parts;
  parts.require_key = false;
  charge_handler handler;
  idem::idempotent<charge_handler, draft_policies> charges(handler, std::move(parts));
  const http::specification spec = http::specification::of(charges);
  CHECK_FALSE(spec.key_required);
  const idem::http_request request{"POST", "/charges", {}, "100"};
  for (int i = 0; i < 2; ++i) {
    http::reply answer;
    http::exchange(charges, "client-1", http::field_values_in(request), request, spec, answer);
    CHECK(answer.status == 201);
  }
  CHECK(*handler.runs == 2);
}
