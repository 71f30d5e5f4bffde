// Lookup before retry: a step given a lookup, for a downstream without idempotency keys. After a
// takeover the lookup is asked before the step's function may run again; only a definite
// not_landed runs it; unknown keeps the claim. Against a fake bank that sometimes lands a
// transfer and loses the answer, no reference is ever transferred twice.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

struct test_policies : idem::default_policies {
  using clock = idem::manual_clock;
};

struct test_reconciler_policies : idem::default_reconciler_policies {
  using clock = idem::manual_clock;
};

// A bank without idempotency keys: a transfer made twice is two transfers. It can be told to lose
// the answer of a transfer that landed, to fail before landing, and to fail lookups.
class keyless_bank {
 public:
  explicit keyless_bank(std::uint64_t seed) : random_(seed) {}

  std::string transfer(const std::string& reference) {
    ++calls_;
    // Called again for a reference whose earlier call was not looked up since: what lookup
    // before retry exists to prevent.
    if (tried_.count(reference) != 0 && looked_up_.count(reference) == 0) ++unchecked_repeats_;
    tried_.insert(reference);
    looked_up_.erase(reference);
    const int roll = die();
    if (roll < 20) throw std::runtime_error("connection reset before the transfer");
    const std::string id = "tr_" + std::to_string(++next_id_);
    transfers_[reference].push_back(id);
    if (roll < 45) throw std::runtime_error("connection reset after the transfer");
    return id;
  }

  idem::lookup_answer<std::string> find(std::string_view reference) {
    ++lookups_;
    const std::string key(reference);
    if (die() < 15) throw std::runtime_error("the bank's search is down");
    looked_up_.insert(key);
    const auto found = transfers_.find(key);
    if (found == transfers_.end()) return idem::lookup_answer<std::string>::not_landed();
    return idem::lookup_answer<std::string>::landed(found->second.front());
  }

  idem::landing landed(std::string_view reference) const {
    return transfers_.count(std::string(reference)) ? idem::landing::landed
                                                    : idem::landing::not_landed;
  }
  std::size_t transfers_of(const std::string& reference) const {
    const auto found = transfers_.find(reference);
    return found == transfers_.end() ? 0 : found->second.size();
  }
  int calls() const { return calls_; }
  int lookups() const { return lookups_; }
  int unchecked_repeats() const { return unchecked_repeats_; }

 private:
  int die() { return static_cast<int>(random_() % 100); }

  std::mt19937_64 random_;
  std::map<std::string, std::vector<std::string>> transfers_;
  std::set<std::string> tried_, looked_up_;
  int next_id_ = 0;
  int calls_ = 0;
  int lookups_ = 0;
  int unchecked_repeats_ = 0;
};

}  // namespace

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

TEST_CASE("a keyless downstream that loses answers is never charged twice", "[lookup]") {
  idem::memory_store store;
  idem::manual_clock clock;
  keyless_bank bank(20261203);
  auto handler = [&](idem::handler_context& ctx, const idem::http_request&) {
    const std::string reference(ctx.downstream_key("transfer").view());
    const std::string id = ctx.step(
        "transfer", [&] { return bank.transfer(reference); },
        [&](std::string_view ref) { return bank.find(ref); });
    return idem::http_response{201, {}, id};
  };
  using wrapper = idem::idempotent<decltype(handler), test_policies>;
  wrapper::options options;
  options.store = store;
  options.clock = clock;
  wrapper transfers{handler, options};

  constexpr int keys = 400;
  int completed = 0;
  std::vector<std::string> open;
  for (int i = 0; i < keys; ++i) {
    const std::string key = "t-" + std::to_string(i);
    // A client that retries a few times, each after the lease, then gives up.
    bool done = false;
    for (int attempt = 0; attempt < 3 && !done; ++attempt) {
      try {
        const auto outcome = transfers("acct", key, idem::http_request{"POST", "/t", {}, "9"});
        done = outcome.verdict() == idem::verdict::executed ||
               outcome.verdict() == idem::verdict::replayed;
      } catch (const std::exception&) {
        // the step threw (in doubt: the claim is kept) or its lookup could not tell
      }
      clock.advance(31s);
    }
    if (done) {
      ++completed;
    } else {
      open.push_back(key);
    }
  }
  // The bank never moved money twice under one reference, and never was called again for a
  // reference whose earlier call had not been looked up since.
  for (int i = 0; i < keys; ++i) {
    const std::string reference(
        idem::downstream_key("acct", "t-" + std::to_string(i), "transfer").view());
    CHECK(bank.transfers_of(reference) <= 1);
  }
  CHECK(bank.unchecked_repeats() == 0);
  CHECK(bank.lookups() > 0);
  CHECK(completed > keys / 2);
  REQUIRE_FALSE(open.empty());  // the seed leaves some in doubt

  // What the clients gave up on is in the report: each open key, one row, with what the bank
  // says (unknown when its search is down).
  idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
  reconciler.lookup_with(
      [&](const idem::lookup_query& query) { return bank.find(query.reference).status(); });
  const idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.not_resumable == open.size());
  std::set<std::string> reported;
  for (const idem::discrepancy& row : report.rows) {
    reported.insert(row.redacted_key);
    CHECK(row.step == "transfer");
    CHECK(row.source == idem::evidence::lookup);
  }
  for (const std::string& key : open)
    CHECK(reported.count(idem::redacted_key(key).str()) == 1);
  CHECK(report.summary.landed + report.summary.not_landed + report.summary.unknown ==
        report.rows.size());
}
