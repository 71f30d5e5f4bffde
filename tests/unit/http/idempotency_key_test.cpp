// idem/http/idempotency_key.hpp: the Idempotency-Key field read as the IETF draft
// (draft-ietf-httpapi-idempotency-key-header) and RFC 8941 define it, and as bare keys. Each case
// names the section whose statement it checks.
#include <catch2/catch.hpp>

#include <idem/core/key.hpp>
#include <idem/http/idempotency_key.hpp>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace http = idem::http;
using http::key_error;
using http::key_form;

namespace {

std::string key_of(std::string_view field, key_form form = key_form::any) {
  const http::parsed_key parsed = http::parse_key(field, form);
  REQUIRE(parsed);
  return std::string(parsed.value());
}

key_error error_of(std::string_view field, key_form form = key_form::any) {
  return http::parse_key(field, form).error();
}

}  // namespace

TEST_CASE("draft 2.1: the key is an sf-string, and its example reads as the UUID without quotes") {
  CHECK(key_of(R"("8e03978e-40d5-43e8-bc93-6894a57f9324")") ==
        "8e03978e-40d5-43e8-bc93-6894a57f9324");
  CHECK(key_of(R"("8e03978e-40d5-43e8-bc93-6894a57f9324")", key_form::sf_string) ==
        "8e03978e-40d5-43e8-bc93-6894a57f9324");
}

TEST_CASE("a bare key (Stripe's clients) and its sf-string are the same key, by default") {
  CHECK(key_of("k-1") == "k-1");
  CHECK(key_of(R"("k-1")") == key_of("k-1"));
  CHECK(key_of("8e03978e-40d5-43e8-bc93-6894a57f9324") == "8e03978e-40d5-43e8-bc93-6894a57f9324");
}

TEST_CASE("draft 2.1, strictly: only an sf-string is accepted, and a bare key says why") {
  CHECK(error_of("k-1", key_form::sf_string) == key_error::not_a_string);
  CHECK(error_of("k-1", key_form::sf_string) != key_error::none);
  CHECK_FALSE(http::parse_key("k-1", key_form::sf_string).message().empty());
}

TEST_CASE(
    "RFC 8941 3.3.3: an escaped quote and an escaped backslash are the only escapes, and are "
    "undone") {
  CHECK(key_of(R"("a\"b")") == "a\"b");
  CHECK(key_of(R"("a\\b")") == "a\\b");
  CHECK(key_of(R"("\\\"")") == "\\\"");
  CHECK(error_of(R"("a\nb")") == key_error::malformed);
  CHECK(error_of(R"("a\")") == key_error::malformed);  // the quote is escaped: unterminated
}

TEST_CASE("RFC 8941 3.3.3: a string holds printable ASCII only") {
  CHECK(error_of("\"a\tb\"") == key_error::malformed);
  CHECK(error_of("\"a\x7f"
                 "b\"") == key_error::malformed);
  CHECK(error_of("\"caf\xc3\xa9\"") == key_error::malformed);
  CHECK(key_of(R"("a b")") == "a b");  // a space is printable; idempotent's own rule refuses it
  CHECK_FALSE(idem::is_valid_key(key_of(R"("a b")")));
}

TEST_CASE("RFC 8941 4.2: a malformed item is refused, never guessed") {
  for (const std::string_view field :
       {R"("k-1)", R"("k-1"x)", R"("k-1" "k-2")", R"("k-1";)", R"("k-1";=1)", R"("k-1";A=1)",
        R"("k-1";a=)", R"("k-1";a="x)", R"("k-1";a=1.2345)", R"("k-1";a=?2)"}) {
    INFO(field);
    CHECK(error_of(field) == key_error::malformed);
  }
}

TEST_CASE("RFC 9110 5.3: two fields joined by a proxy with a comma are not one key") {
  CHECK(error_of(R"("k-1", "k-2")") == key_error::malformed);
}

TEST_CASE("RFC 8941 3.1.2: an item's parameters are checked and ignored") {
  CHECK(key_of(R"("k-1";v=1)") == "k-1");
  CHECK(key_of(R"("k-1"; a=1;b="two";c=?0;d=tok/x:y;e=:aGk=:;f=-1.5;g)") == "k-1");
}

TEST_CASE("RFC 9110 5.5: spaces and tabs around the value are not part of it") {
  CHECK(key_of("  \"k-1\"\t") == "k-1");
  CHECK(key_of("\tk-1  ") == "k-1");
}

TEST_CASE("an empty key is refused, as a value and as an sf-string") {
  CHECK(error_of("") == key_error::empty);
  CHECK(error_of("   ") == key_error::empty);
  CHECK(error_of(R"("")") == key_error::empty);
  CHECK(error_of(R"("";a=1)") == key_error::empty);
}

TEST_CASE("draft 2.1: a request with more than one Idempotency-Key field is refused") {
  const std::vector<std::string_view> two{R"("k-1")", R"("k-1")"};
  CHECK(http::parse_key_fields(two).error() == key_error::several_fields);
  const std::vector<std::string_view> none;
  CHECK(http::parse_key_fields(none).error() == key_error::missing);
  const std::vector<std::string_view> one{R"("k-1")"};
  CHECK(http::parse_key_fields(one).value() == "k-1");
}

TEST_CASE("every refusal says what is wrong") {
  for (const key_error error : {key_error::missing, key_error::empty, key_error::malformed,
                                key_error::not_a_string, key_error::several_fields}) {
    CHECK_FALSE(http::parsed_key::failed(error).message().empty());
  }
  CHECK(http::parse_key("k").message().empty());
}

TEST_CASE("a parsed key with escapes keeps its value when moved") {
  http::parsed_key parsed = http::parse_key(R"("a\"b")");
  const http::parsed_key moved = std::move(parsed);
  CHECK(moved.value() == "a\"b");
}

TEST_CASE("format_key writes the bare key by default and the draft's sf-string when asked") {
  CHECK(http::format_key("k-1") == "k-1");
  CHECK(http::format_key("k-1", key_form::sf_string) == R"("k-1")");
  CHECK(http::format_key(R"(a"b\c)", key_form::sf_string) == R"("a\"b\\c")");
  // What is written reads back as the same key, in either form.
  for (const std::string_view key : {"k-1", "8e03978e-40d5-43e8-bc93-6894a57f9324", "a\"b\\c"}) {
    CHECK(key_of(http::format_key(key, key_form::sf_string), key_form::sf_string) == key);
  }
  CHECK(key_of(http::format_key("k-1")) == "k-1");
}

TEST_CASE("format_key refuses what a server would read otherwise") {
  CHECK_THROWS_AS(http::format_key(""), std::invalid_argument);
  CHECK_THROWS_AS(http::format_key("a b"), std::invalid_argument);
  CHECK_THROWS_AS(http::format_key(R"("quoted")"), std::invalid_argument);
  CHECK_THROWS_AS(http::format_key("caf\xc3\xa9", key_form::sf_string), std::invalid_argument);
  CHECK(http::format_key(R"("quoted")", key_form::sf_string) == R"("\"quoted\"")");
}
