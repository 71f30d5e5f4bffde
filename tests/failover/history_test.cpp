// The history checker (history.hpp) on hand-made histories: a clean one passes, and each kind of
// violation is found alone, so a failover test that reports none has a checker that could have.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "failover/history.hpp"

using namespace idem::testing::failover;

namespace {

call at(std::string key, answer result, std::string response, std::int64_t invoked,
        std::int64_t returned, bool executed = false, bool final = false) {
  return call{std::move(key), result, executed, std::move(response), invoked, returned, final};
}

using effects_map = std::map<std::string, std::vector<std::string>>;

}  // namespace

TEST_CASE("a history where each key ran once and every repeat replayed it has no violation",
          "[failover][history]") {
  const std::vector<call> calls = {
      at("a", answer::acknowledged, "a#1", 0, 10, true),
      at("a", answer::acknowledged, "a#1", 20, 30),
      at("b", answer::ambiguous, "", 5, 15),  // the store was unavailable: no promise
      at("b", answer::acknowledged, "b#2", 40, 50, true),
      at("a", answer::acknowledged, "a#1", 100, 110, false, true),
      at("b", answer::acknowledged, "b#2", 100, 110, false, true),
  };
  const report found = check(calls, effects_map{{"a", {"a#1"}}, {"b", {"b#2"}}});
  CHECK(found.violations.empty());
  CHECK(found.calls == 6);
  CHECK(found.acknowledged == 5);
  CHECK(found.ambiguous == 1);
  CHECK(found.effects == 2);
  CHECK(found.keys == 2);
}

TEST_CASE("two effects of one key are a double effect", "[failover][history]") {
  // The second run's caller was told nothing (ambiguous): only the ledger shows it.
  const std::vector<call> calls = {
      at("a", answer::acknowledged, "a#1", 0, 10, true),
      at("a", answer::ambiguous, "", 20, 30, true),
      at("a", answer::acknowledged, "a#1", 100, 110, false, true),
  };
  const report found = check(calls, effects_map{{"a", {"a#1", "a#2"}}});
  CHECK(found.count(violation_kind::double_effect) == 1);
  CHECK(found.violations.size() == 1);
}

TEST_CASE("a repeat refused as in progress after an acknowledgement is a lost acknowledgement",
          "[failover][history]") {
  const std::vector<call> calls = {
      at("a", answer::acknowledged, "a#1", 0, 10, true),
      at("a", answer::refused, "", 20, 30),  // the completion was lost, the claim kept
      at("a", answer::acknowledged, "a#1", 100, 110, false, true),
  };
  const report found = check(calls, effects_map{{"a", {"a#1"}}});
  CHECK(found.count(violation_kind::lost_acknowledgement) == 1);
  CHECK(found.violations.size() == 1);
}

TEST_CASE("a refusal that overlaps the acknowledged call is no violation", "[failover][history]") {
  const std::vector<call> calls = {
      at("a", answer::acknowledged, "a#1", 0, 10, true),
      at("a", answer::refused, "", 5, 12),  // invoked while the first ran: 409 is right
      at("a", answer::acknowledged, "a#1", 100, 110, false, true),
  };
  CHECK(check(calls, effects_map{{"a", {"a#1"}}}).violations.empty());
}

TEST_CASE("an acknowledged key whose final read does not replay it is a lost acknowledgement",
          "[failover][history]") {
  SECTION("the final read is refused") {
    const std::vector<call> calls = {
        at("a", answer::acknowledged, "a#1", 0, 10, true),
        at("a", answer::refused, "", 100, 110, false, true),
    };
    const report found = check(calls, effects_map{{"a", {"a#1"}}});
    CHECK(found.count(violation_kind::lost_acknowledgement) == 1);
  }
  SECTION("there is no final read") {
    const std::vector<call> calls = {at("a", answer::acknowledged, "a#1", 0, 10, true)};
    const report found = check(calls, effects_map{{"a", {"a#1"}}});
    CHECK(found.count(violation_kind::lost_acknowledgement) == 1);
  }
}

TEST_CASE("a lost record run again is found three ways", "[failover][history]") {
  // What asynchronous replication loses: the record is gone after the failover, so the repeat
  // claims the key anew and the handler runs a second time.
  const std::vector<call> calls = {
      at("a", answer::acknowledged, "a#1", 0, 10, true),
      at("a", answer::acknowledged, "a#2", 20, 30, true),
      at("a", answer::acknowledged, "a#2", 100, 110, false, true),
  };
  const report found = check(calls, effects_map{{"a", {"a#1", "a#2"}}});
  CHECK(found.count(violation_kind::double_effect) == 1);
  CHECK(found.count(violation_kind::lost_acknowledgement) == 1);
  CHECK(found.count(violation_kind::changed_response) == 1);
  CHECK(found.count(violation_kind::unexplained_response) == 0);
  CHECK(found.keys_violated() == 1);
}

TEST_CASE("two acknowledgements of one key with different responses are a changed response",
          "[failover][history]") {
  // Concurrent calls (neither after the other returned): only the responses disagree.
  const std::vector<call> calls = {
      at("a", answer::acknowledged, "a#1", 0, 10, true),
      at("a", answer::acknowledged, "a#2", 5, 12),
      at("a", answer::acknowledged, "a#1", 100, 110, false, true),
  };
  const report found = check(calls, effects_map{{"a", {"a#1", "a#2"}}});
  CHECK(found.count(violation_kind::changed_response) == 1);
}

TEST_CASE("an acknowledged response that no effect produced is unexplained",
          "[failover][history]") {
  const std::vector<call> calls = {
      at("a", answer::acknowledged, "a#9", 0, 10),
      at("a", answer::acknowledged, "a#9", 100, 110, false, true),
  };
  const report found = check(calls, effects_map{});
  CHECK(found.count(violation_kind::unexplained_response) == 1);
  CHECK(found.violations.size() == 1);
  CHECK_THAT(found.summary(), Catch::Matchers::Contains("unexplained response 1"));
}

TEST_CASE("the ledger gives each effect its own token, from many threads", "[failover][history]") {
  ledger effects;
  CHECK(effects.effect("a") == "a#1");
  CHECK(effects.effect("b") == "b#2");
  CHECK(effects.effect("a") == "a#3");
  CHECK(effects.effects().at("a").size() == 2);
}
