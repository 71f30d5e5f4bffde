// Conditional requests (idem/http/conditional.hpp): If-Match read as RFC 9110 defines it, and
// checked against a resource's version before anything is claimed (conditional_exchange).
#include <catch2/catch.hpp>

#include <idem/http.hpp>
#include <idem/server/idempotent.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace http = idem::http;

namespace {

std::vector<http::entity_tag> tags_of(std::string_view value) {
  const http::parsed_if_match parsed = http::parse_if_match(value);
  REQUIRE(parsed);
  return parsed.tags();
}

bool malformed(std::string_view value) {
  return !http::parse_if_match(value);
}

/// An account whose balance a PUT sets, at a version that each change moves on.
struct account {
  std::shared_ptr<int> version = std::make_shared<int>(7);
  std::shared_ptr<int> changes = std::make_shared<int>(0);
  std::shared_ptr<bool> exists = std::make_shared<bool>(true);

  std::optional<std::string> etag() const {
    if (!*exists) return std::nullopt;
    return "v" + std::to_string(*version);
  }
  idem::http_response operator()(const idem::http_request& request) const {
    ++*changes;
    ++*version;
    return {200,
            {{"Content-Type", "application/json"}, {"ETag", http::format_etag(*etag())}},
            request.body};
  }
};

/// Keys optional: a conditional request is safe to repeat without one.
idem::idempotent<account>::options keys_optional() {
  idem::idempotent<account>::options parts;
  parts.require_key = false;
  return parts;
}

struct account_service {
  account resource;
  idem::idempotent<account> guarded{resource, keys_optional()};
  http::specification spec = http::specification::of(guarded);

  http::reply put(std::vector<std::pair<std::string, std::string>> headers,
                  std::string body = R"({"balance":1})") {
    const idem::http_request request{"PUT", "/accounts/1", std::move(headers), std::move(body)};
    http::reply answer;
    http::conditional_exchange(guarded, "client", http::field_values_in(request), request, spec,
                               answer, [this] { return resource.etag(); });
    return answer;
  }
};

bool is_problem(const http::reply& answer, std::string_view fragment) {
  return answer.content_type == http::problem_media_type &&
         answer.body.find("#" + std::string(fragment) + "\"") != std::string::npos;
}

}  // namespace

TEST_CASE("If-Match is a list of quoted entity-tags, weak ones marked (RFC 9110 13.1.1)") {
  CHECK(tags_of(R"("v7")") == std::vector<http::entity_tag>{{"v7", false}});
  CHECK(tags_of(R"( "a" , W/"b",  "c")") ==
        std::vector<http::entity_tag>{{"a", false}, {"b", true}, {"c", false}});
  CHECK(tags_of(R"("")") == std::vector<http::entity_tag>{{"", false}});
  CHECK(tags_of(R"(,"a",,)") == std::vector<http::entity_tag>{{"a", false}});
  CHECK(http::parse_if_match("*").any());
  CHECK(http::parse_if_match(" * ").any());
}

TEST_CASE("an If-Match that is not a list of entity-tags is malformed and says so") {
  for (const std::string_view wrong :
       {"v7", R"("v7)", R"("v 7")", R"("a" "b")", R"(*, "a")", R"("a", *)", "", " , ", R"(w/"a")",
        R"(W/ "a")", "**", "\"a\"x", "\"\x01\""}) {
    CAPTURE(wrong);
    CHECK(malformed(wrong));
    CHECK_FALSE(http::parse_if_match(wrong).message().empty());
  }
}

TEST_CASE("several If-Match fields are one list, and * must stand alone across them") {
  const std::vector<std::string_view> two{R"("a")", R"("b")"};
  const http::parsed_if_match joined = http::parse_if_match_fields(two);
  REQUIRE(joined);
  CHECK(joined.tags().size() == 2);
  const std::vector<std::string_view> mixed{"*", R"("b")"};
  CHECK_FALSE(http::parse_if_match_fields(mixed));
  const std::vector<std::string_view> none;
  CHECK_FALSE(http::parse_if_match_fields(none).present());
}

TEST_CASE("If-Match holds by strong comparison against the current version (RFC 9110 13.2.2)") {
  const auto holds = [](std::string_view field, std::optional<std::string_view> current) {
    return http::if_match_holds(http::parse_if_match(field), current);
  };
  CHECK(holds(R"("v7")", "v7"));
  CHECK(holds(R"("v6", "v7")", "v7"));
  CHECK_FALSE(holds(R"("v6")", "v7"));
  CHECK_FALSE(holds(R"(W/"v7")", "v7"));  // a weak tag never matches strongly
  CHECK(holds("*", "v7"));
  CHECK_FALSE(holds("*", std::nullopt));
  CHECK_FALSE(holds(R"("v7")", std::nullopt));
  const std::vector<std::string_view> none;
  CHECK(http::if_match_holds(http::parse_if_match_fields(none), std::nullopt));
}

TEST_CASE("an entity-tag is written quoted, and one that cannot be is refused") {
  CHECK(http::format_etag("v7") == R"("v7")");
  CHECK(http::format_etag("v7", true) == R"(W/"v7")");
  CHECK_THROWS_AS(http::format_etag("a\"b"), std::invalid_argument);
  CHECK_THROWS_AS(http::format_etag("a b"), std::invalid_argument);
  // What is written reads back as the tag.
  CHECK(tags_of(http::format_etag("caf\xc3\xa9-1")) ==
        std::vector<http::entity_tag>{{"caf\xc3\xa9-1", false}});
}

TEST_CASE("a change under If-Match applies once: its repeat finds the new version and gets 412") {
  account_service s;
  const auto first = s.put({{"If-Match", R"("v7")"}});
  CHECK(first.status == 200);
  CHECK(first.header("ETag") == R"("v8")");
  const auto repeat = s.put({{"If-Match", R"("v7")"}});
  CHECK(repeat.status == 412);
  CHECK(is_problem(repeat, "precondition-failed"));
  CHECK(*s.resource.changes == 1);
  // The client that reads the new version can change it again.
  CHECK(s.put({{"If-Match", R"("v8")"}}).status == 200);
  CHECK(*s.resource.changes == 2);
}

TEST_CASE("If-Match * on a missing resource is 412, and nothing is claimed or run") {
  account_service s;
  *s.resource.exists = false;
  const auto refused = s.put({{"If-Match", "*"}, {"Idempotency-Key", "k-1"}});
  CHECK(refused.status == 412);
  CHECK(refused.body.find("does not exist") != std::string::npos);
  CHECK(*s.resource.changes == 0);
  // The key was not claimed: once the resource exists, the same key runs.
  *s.resource.exists = true;
  CHECK(s.put({{"If-Match", "*"}, {"Idempotency-Key", "k-1"}}).status == 200);
  CHECK(*s.resource.changes == 1);
}

TEST_CASE("a malformed If-Match is a 400 problem, and nothing is claimed or run") {
  account_service s;
  for (const std::string wrong : {"v7", R"("v7)", R"(*, "v7")"}) {
    CAPTURE(wrong);
    const auto refused = s.put({{"If-Match", wrong}, {"Idempotency-Key", "k-1"}});
    CHECK(refused.status == 400);
    CHECK(is_problem(refused, "invalid-precondition"));
  }
  CHECK(*s.resource.changes == 0);
}

TEST_CASE("a request without If-Match goes on as any other") {
  account_service s;
  CHECK(s.put({}).status == 200);
  CHECK(s.put({{"Idempotency-Key", "k-1"}}).status == 200);
  CHECK(s.put({{"Idempotency-Key", "k-1"}}).header("Idempotent-Replayed") == "true");
  CHECK(*s.resource.changes == 2);
}
