// Lookup before retry: a step given a lookup, for a downstream without idempotency keys. After a
// takeover the lookup is asked before the step's function may run again; only a definite
// not_landed runs it; unknown keeps the claim. The same against a fake bank that sometimes lands
// a transfer and loses the answer, on every store, is in idem/testing/reconciler_conformance.hpp.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <stdexcept>
#include <string>
#include <vector>

TEST_CASE("a lookup step is never asked on a first attempt", "[lookup]") {
  idem::handler_context ctx{"s", "k"};
  int lookups = 0;
  const std::string id = ctx.step(
      "transfer", [] { return std::string("tr_1"); },
      [&](std::string_view) {
        ++lookups;
        return idem::lookup_answer<std::string>::not_landed();
      });
  CHECK(id == "tr_1");
  CHECK(lookups == 0);
  CHECK(ctx.steps_recorded() == 1);
}

TEST_CASE("after a takeover a started step asks its lookup before it may call again", "[lookup]") {
  // The recovery bytes of an attempt that started "transfer" and died before recording it.
  std::string recovery;
  struct capture final : idem::detail::recovery_writer {
    std::string* into;
    bool write(std::string_view bytes) override {
      *into = std::string(bytes);
      return true;
    }
  } writer;
  writer.into = &recovery;
  idem::handler_context dying{"s", "k", 1, false, {}, &writer};
  CHECK_THROWS_AS(
      dying.step(
          "transfer", []() -> std::string { throw std::runtime_error("answer lost"); },
          [](std::string_view) { return idem::lookup_answer<std::string>::unknown(""); }),
      std::runtime_error);
  CHECK(dying.in_doubt());
  REQUIRE(idem::detail::find_started(recovery, "transfer"));

  std::vector<std::string> order;
  const auto call = [&] {
    order.push_back("call");
    return std::string("tr_2");
  };
  SECTION("landed: the found result is recorded and the function is not called") {
    idem::handler_context resumed{"s", "k", 2, true, recovery, &writer};
    const std::string id = resumed.step("transfer", call, [&](std::string_view reference) {
      order.push_back("lookup");
      CHECK(reference == idem::downstream_key("s", "k", "transfer").view());
      return idem::lookup_answer<std::string>::landed("tr_1");
    });
    CHECK(id == "tr_1");
    CHECK(order == std::vector<std::string>{"lookup"});
    CHECK(resumed.steps_recorded() == 1);
    std::string_view value;
    CHECK(idem::detail::find_step(recovery, "transfer", value));
    CHECK(value == idem::encode(std::string("tr_1")));
  }
  SECTION("not_landed: the function is called, after the lookup") {
    idem::handler_context resumed{"s", "k", 2, true, recovery, &writer};
    const std::string id = resumed.step("transfer", call, [&](std::string_view) {
      order.push_back("lookup");
      return idem::lookup_answer<std::string>::not_landed();
    });
    CHECK(id == "tr_2");
    CHECK(order == std::vector<std::string>{"lookup", "call"});
  }
  SECTION("unknown, or a lookup that throws: effect_unknown, nothing called, claim in doubt") {
    for (bool throws : {false, true}) {
      idem::handler_context resumed{"s", "k", 2, true, recovery, &writer};
      try {
        (void)resumed.step("transfer", call, [&](std::string_view) {
          order.push_back("lookup");
          if (throws) throw std::runtime_error("search down");
          return idem::lookup_answer<std::string>::unknown("pending");
        });
        FAIL("the step went on without knowing");
      } catch (const idem::effect_unknown& error) {
        CHECK(error.step() == "transfer");
        CHECK(std::string(error.what()).find(throws ? "search down" : "pending") !=
              std::string::npos);
      }
      CHECK(resumed.in_doubt());
    }
    CHECK(order == std::vector<std::string>{"lookup", "lookup"});
  }
}

TEST_CASE("a step name may not begin with a zero byte", "[lookup]") {
  idem::handler_context ctx{"s", "k"};
  CHECK_THROWS_AS(ctx.step(std::string_view("\0x", 2), [] { return 1; }), std::invalid_argument);
}
