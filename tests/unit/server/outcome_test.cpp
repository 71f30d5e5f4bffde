// idempotent_outcome on its own: what each verdict carries, and the ways to reach the response.
#include <catch2/catch.hpp>

#include <idem/server/outcome.hpp>

#include <string>
#include <type_traits>
#include <utility>

namespace {

using outcome = idem::idempotent_outcome<std::string>;

}  // namespace

TEST_CASE("operator* reaches the response as std::optional's does", "[outcome]") {
  outcome executed = outcome::executed(std::string("charged"), 1, false);
  REQUIRE(executed);
  CHECK(*executed == "charged");

  const outcome& viewed = executed;
  STATIC_REQUIRE(std::is_same_v<decltype(*viewed), const std::string&>);
  CHECK(*viewed == "charged");

  STATIC_REQUIRE(std::is_same_v<decltype(*executed), std::string&>);
  *executed += " twice";
  CHECK(executed.value() == "charged twice");

  STATIC_REQUIRE(std::is_same_v<decltype(*std::move(executed)), std::string&&>);
  const std::string taken = *std::move(executed);
  CHECK(taken == "charged twice");
}

TEST_CASE("an executed outcome carries its fence and is recorded", "[outcome]") {
  const outcome executed = outcome::executed(std::string("charged"), 3, true);
  CHECK(executed.verdict() == idem::verdict::executed);
  CHECK(executed.fence() == 3);
  CHECK(executed.resumed());
  CHECK(executed.recorded());
  CHECK(executed.message().empty());
}

TEST_CASE("a replayed outcome is recorded and ran under no fence of its own", "[outcome]") {
  const outcome replayed = outcome::replayed(std::string("charged"));
  CHECK(replayed.verdict() == idem::verdict::replayed);
  CHECK(*replayed == "charged");
  CHECK(replayed.recorded());
  CHECK(replayed.fence() == 0);
  CHECK_FALSE(replayed.resumed());
}

TEST_CASE("an unrecorded outcome has its response and says why it was not stored", "[outcome]") {
  const outcome too_large = outcome::unrecorded(idem::verdict::response_too_large,
                                                std::string("big"), "too large", 2, false);
  CHECK(too_large.verdict() == idem::verdict::response_too_large);
  CHECK(*too_large == "big");
  CHECK_FALSE(too_large.recorded());
  CHECK(too_large.message() == "too large");
  CHECK(too_large.fence() == 2);
  CHECK(too_large.http_status() == 200);
}

TEST_CASE("a refusal has no response and answers its verdict's status", "[outcome]") {
  const outcome refused{idem::verdict::in_progress, "busy"};
  CHECK_FALSE(refused);
  CHECK(refused.http_status() == 409);
  CHECK_THROWS_AS(refused.value(), idem::no_response_error);
}

TEST_CASE("every verdict has a name and a status, cancelled answering 503", "[outcome]") {
  using idem::verdict;
  for (const verdict v :
       {verdict::executed, verdict::replayed, verdict::in_progress, verdict::mismatch,
        verdict::missing_key, verdict::invalid_key, verdict::invalid_request,
        verdict::body_too_large, verdict::store_unavailable, verdict::store_full,
        verdict::response_too_large, verdict::cancelled}) {
    INFO(static_cast<int>(v));
    CHECK(idem::to_string(v) != "unknown");
  }
  CHECK(idem::to_string(verdict::cancelled) == "cancelled");
  CHECK(idem::http_status(verdict::cancelled) == 503);
  const outcome cancelled{verdict::cancelled, "cancelled while waiting"};
  CHECK_FALSE(cancelled);
  CHECK(cancelled.http_status() == 503);
}
