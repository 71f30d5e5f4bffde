// idem/http/problem.hpp: refusals as RFC 9457 problem details, each with a type that never
// changes, and valid JSON whatever the detail holds.
#include <catch2/catch.hpp>

#include <idem/http/problem.hpp>

#include <chrono>
#include <set>
#include <string>
#include <string_view>

namespace http = idem::http;
using namespace std::chrono_literals;

namespace {

std::string json_string(std::string_view text) {
  std::string out;
  http::detail::append_json_string(out, text);
  return out;
}

}  // namespace

TEST_CASE("every verdict without a response is a problem whose status is the verdict's") {
  for (const idem::verdict v :
       {idem::verdict::in_progress, idem::verdict::mismatch, idem::verdict::missing_key,
        idem::verdict::invalid_key, idem::verdict::invalid_request, idem::verdict::body_too_large,
        idem::verdict::store_unavailable, idem::verdict::store_full,
        idem::verdict::response_too_large, idem::verdict::cancelled,
        idem::verdict::deadline_exceeded}) {
    const auto kind = http::problem_for(v);
    REQUIRE(kind);
    CHECK(http::type_of(*kind).status == idem::http_status(v));
  }
  CHECK_FALSE(http::problem_for(idem::verdict::executed));
  CHECK_FALSE(http::problem_for(idem::verdict::replayed));
}

TEST_CASE("problem types are stable: each kind keeps its fragment, status and title") {
  // These fragments are what clients match on (RFC 9457 section 3.1.1): changing one breaks
  // them. The table is the promise docs/http.md makes.
  struct row {
    http::problem_kind kind;
    std::string_view fragment;
    int status;
  };
  const row table[] = {
      {http::problem_kind::missing_key, "missing-key", 400},
      {http::problem_kind::invalid_key, "invalid-key", 400},
      {http::problem_kind::several_keys, "several-keys", 400},
      {http::problem_kind::key_reused, "key-reused", 422},
      {http::problem_kind::request_outstanding, "request-outstanding", 409},
      {http::problem_kind::invalid_request, "invalid-request", 400},
      {http::problem_kind::body_too_large, "body-too-large", 413},
      {http::problem_kind::store_unavailable, "store-unavailable", 503},
      {http::problem_kind::store_full, "store-full", 503},
      {http::problem_kind::response_too_large, "response-too-large", 500},
      {http::problem_kind::cancelled, "cancelled", 503},
      {http::problem_kind::deadline_exceeded, "deadline-exceeded", 504},
      {http::problem_kind::invalid_deadline, "invalid-deadline", 400},
      {http::problem_kind::precondition_failed, "precondition-failed", 412},
      {http::problem_kind::invalid_precondition, "invalid-precondition", 400},
      {http::problem_kind::invalid_signature, "invalid-signature", 400},
      {http::problem_kind::stale_webhook, "stale-webhook", 400},
      {http::problem_kind::missing_event_id, "missing-event-id", 400},
      {http::problem_kind::event_failed, "event-failed", 500},
  };
  std::set<std::string_view> fragments;
  for (const row& expected : table) {
    CAPTURE(expected.fragment);
    CHECK(http::type_of(expected.kind).fragment == expected.fragment);
    CHECK(http::type_of(expected.kind).status == expected.status);
    CHECK_FALSE(http::type_of(expected.kind).title.empty());
    fragments.insert(expected.fragment);
  }
  CHECK(fragments.size() == std::size(table));
  CHECK(std::size(http::all_problem_kinds) == std::size(table));
}

TEST_CASE("the draft's three titles are used for its three errors (section 2.7)") {
  CHECK(http::type_of(http::problem_kind::missing_key).title == "Idempotency-Key is missing");
  CHECK(http::type_of(http::problem_kind::key_reused).title == "Idempotency-Key is already used");
  CHECK(http::type_of(http::problem_kind::request_outstanding).title ==
        "A request is outstanding for this Idempotency-Key");
}

TEST_CASE("a problem body has type, title, status and detail (RFC 9457 section 3.1)") {
  const http::problem p =
      http::make_problem(http::problem_kind::key_reused, "used for another body",
                         "https://api.example.com/idempotency");
  CHECK(p.status == 422);
  CHECK(p.type == "https://api.example.com/idempotency#key-reused");
  CHECK(p.json() == R"({"type":"https://api.example.com/idempotency#key-reused",)"
                    R"("title":"Idempotency-Key is already used","status":422,)"
                    R"("detail":"used for another body"})");
}

TEST_CASE("a problem without words of its own has its title as the detail") {
  const http::problem p = http::make_problem(http::problem_kind::store_full, "", "/idempotency");
  CHECK(p.detail == "The idempotency key store is full");
}

TEST_CASE("JSON strings escape quotes, backslashes and control characters (RFC 8259 section 7)") {
  CHECK(json_string(R"(a "b" \c)") == R"("a \"b\" \\c")");
  CHECK(json_string(std::string("\n\t\x01\x7f", 4)) == R"("\u000a\u0009\u0001\u007f")");
  CHECK(json_string("") == R"("")");
}

TEST_CASE("JSON strings pass UTF-8 through and write a byte outside it as U+FFFD") {
  CHECK(json_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
        "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  CHECK(json_string("\xff") == R"("\ufffd")");                      // never in UTF-8
  CHECK(json_string("\xc3") == R"("\ufffd")");                      // a sequence cut short
  CHECK(json_string("\xc0\xaf") == R"("\ufffd\ufffd")");            // an overlong '/'
  CHECK(json_string("\xed\xa0\x80") == R"("\ufffd\ufffd\ufffd")");  // a surrogate
  CHECK(json_string("\xf4\x90\x80\x80") == R"("\ufffd\ufffd\ufffd\ufffd")");  // past U+10FFFF
  CHECK(json_string("a\xe2\x82z") == R"("a\ufffd\ufffdz")");
}

TEST_CASE("a 409's Retry-After is the holder's lease left, in whole seconds rounded up") {
  const auto busy = [](std::chrono::nanoseconds left) {
    return idem::idempotent_outcome<std::string>{idem::verdict::in_progress, "busy", left};
  };
  CHECK(http::problem_of(busy(30s), "/i").retry_after == 30s);
  CHECK(http::problem_of(busy(29s + 1ns), "/i").retry_after == 30s);
  CHECK(http::problem_of(busy(1ns), "/i").retry_after == 1s);
  // A lease already over, or not known: no Retry-After rather than a promise of 0.
  CHECK_FALSE(http::problem_of(busy(0s), "/i").retry_after);
  const idem::idempotent_outcome<std::string> reused{idem::verdict::mismatch, "other body"};
  CHECK_FALSE(http::problem_of(reused, "/i").retry_after);
  CHECK(http::problem_of(reused, "/i").detail == "other body");
}
