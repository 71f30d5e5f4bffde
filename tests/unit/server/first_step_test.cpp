// options.first_step: the claim writes the first step's start with the record, and the step,
// starting soon after, writes none of its own. Counted on a store that counts its checkpoints;
// the record read back where the text says what a reconciler would find.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include "support/forwarding_store.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

using namespace std::chrono_literals;

namespace {

// locked_store that counts the checkpoints (recovery points, heartbeats) written, and can refuse
// releases: a handler that throws then leaves its claim in progress, as a process that died would.
class counting_store : public idem_test::forwarding_store<idem::locked_store> {
 public:
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    ++*checkpoints_;
    return inner_.checkpoint(held, recovery, lease_until);
  }
  bool release(const idem::fenced_key& held) {
    if (*refuse_release_) throw idem::store_error(idem::store_failure::unavailable, "refused");
    return inner_.release(held);
  }
  int checkpoints() const { return *checkpoints_; }
  void refuse_releases() { *refuse_release_ = true; }

 private:
  std::shared_ptr<int> checkpoints_ = std::make_shared<int>(0);
  std::shared_ptr<bool> refuse_release_ = std::make_shared<bool>(false);
};

struct counting_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using store = counting_store;
};

using guard =
    idem::idempotent<std::function<std::string(idem::handler_context&, const std::string&)>,
                     counting_policies>;

// A wrapper's options on `clock` and `store`, a 30 s lease, and `first_step`.
guard::options options_for(idem::manual_clock& clock, const counting_store& store,
                           std::string first_step) {
  guard::options options;
  options.clock = clock;
  options.store = store;
  options.lease = 30s;
  options.first_step = std::move(first_step);
  return options;
}

// The recovery bytes of (s, k) as the store holds them now.
std::string recovery_of(counting_store& store, idem::manual_clock& clock) {
  const std::optional<idem::record> found = store.find("s", "k", clock.wall_now());
  REQUIRE(found);
  return found->recovery;
}

}  // namespace

TEST_CASE("the first step's start rides on the claim: one fenced write a call fewer",
          "[first_step]") {
  idem::manual_clock clock;
  counting_store store;
  int charges = 0;
  std::string seen_before_charge;
  const auto make = [&](std::string first_step) {
    return guard{[&](idem::handler_context& ctx, const std::string&) {
                   return ctx.step(
                       "charge",
                       [&] {
                         seen_before_charge = recovery_of(store, clock);
                         return "ch_" + std::to_string(++charges);
                       },
                       idem::with_next_write);
                 },
                 options_for(clock, store, std::move(first_step))};
  };

  SECTION("without it, the step writes its start before the charge") {
    guard guarded = make("");
    REQUIRE(guarded("s", "k", std::string("x")).verdict() == idem::verdict::executed);
    CHECK(store.checkpoints() == 1);
    CHECK(idem::detail::find_started(seen_before_charge, "charge"));
  }
  SECTION("with it, the claim wrote the start: the record shows it before the charge runs") {
    guard guarded = make("charge");
    const auto done = guarded("s", "k", std::string("x"));
    REQUIRE(done.verdict() == idem::verdict::executed);
    CHECK(*done == "ch_1");
    CHECK(store.checkpoints() == 0);
    CHECK(idem::detail::find_started(seen_before_charge, "charge"));
    CHECK(idem::detail::count_steps(seen_before_charge) == 0);
    CHECK(guarded("s", "k", std::string("x")).verdict() == idem::verdict::replayed);
    CHECK(charges == 1);
  }
  SECTION("a first step the handler does not start first changes nothing else") {
    guard guarded = make("refund");
    REQUIRE(guarded("s", "k", std::string("x")).verdict() == idem::verdict::executed);
    CHECK(store.checkpoints() == 1);
  }
}

TEST_CASE("the first step writes its own start when the claim's is no longer fresh",
          "[first_step]") {
  idem::manual_clock clock;
  counting_store store;
  const guard::options options = options_for(clock, store, "charge");
  std::function<void(idem::handler_context&)> before_charge = [](idem::handler_context&) {};
  guard guarded{[&](idem::handler_context& ctx, const std::string&) {
                  before_charge(ctx);
                  return ctx.step(
                      "charge", [] { return std::string("ch_1"); }, idem::with_next_write);
                },
                options};

  SECTION("a third of the lease after the claim: the fence is checked again first") {
    before_charge = [&](idem::handler_context&) { clock.advance(10s); };
    REQUIRE(guarded("s", "k", std::string("x")).verdict() == idem::verdict::executed);
    CHECK(store.checkpoints() == 1);
  }
  SECTION("just under it: the claim's write still counts") {
    before_charge = [&](idem::handler_context&) { clock.advance(9s); };
    REQUIRE(guarded("s", "k", std::string("x")).verdict() == idem::verdict::executed);
    CHECK(store.checkpoints() == 0);
  }
  SECTION("after another write: the lease renewed, then the step's start written") {
    before_charge = [](idem::handler_context& ctx) { ctx.renew_lease(); };
    REQUIRE(guarded("s", "k", std::string("x")).verdict() == idem::verdict::executed);
    CHECK(store.checkpoints() == 2);
  }
  SECTION("after another step: that step's two writes, then the charge's start") {
    before_charge = [](idem::handler_context& ctx) { (void)ctx.step("quote", [] { return 7; }); };
    REQUIRE(guarded("s", "k", std::string("x")).verdict() == idem::verdict::executed);
    CHECK(store.checkpoints() == 3);
  }
}

TEST_CASE("a process that dies between the claim and the first step leaves it started",
          "[first_step]") {
  idem::manual_clock clock;
  counting_store store;
  store.refuse_releases();
  const guard::options options = options_for(clock, store, "charge");
  bool die = true;
  int charges = 0;
  guard guarded{[&](idem::handler_context& ctx, const std::string&) {
                  if (die) throw std::runtime_error("died before the charge");
                  return ctx.step(
                      "charge", [&] { return "ch_" + std::to_string(++charges); },
                      idem::with_next_write);
                },
                options};
  CHECK_THROWS_AS(guarded("s", "k", std::string("x")), std::runtime_error);
  // What a reconciler reads: the step started and not recorded, so it reports unknown (asking
  // the lookup it is given) rather than not landed.
  const std::string left = recovery_of(store, clock);
  CHECK(idem::detail::find_started(left, "charge"));
  CHECK(idem::detail::count_steps(left) == 0);
  CHECK(store.checkpoints() == 0);

  // The takeover keeps the bytes it found and writes the step's start itself, fence checked.
  die = false;
  clock.advance(31s);
  const auto resumed = guarded("s", "k", std::string("x"));
  REQUIRE(resumed.verdict() == idem::verdict::executed);
  CHECK(resumed.resumed());
  CHECK(store.checkpoints() == 1);
  CHECK(charges == 1);
}

TEST_CASE("a lookup step named first writes its own start and asks no lookup on a first attempt",
          "[first_step][lookup]") {
  idem::manual_clock clock;
  counting_store store;
  const guard::options options = options_for(clock, store, "transfer");
  int lookups = 0;
  guard guarded{[&](idem::handler_context& ctx, const std::string&) {
                  return ctx.step(
                      "transfer", [] { return std::string("tr_1"); },
                      [&](std::string_view) {
                        ++lookups;
                        return idem::lookup_answer<std::string>::not_landed();
                      });
                },
                options};
  const auto done = guarded("s", "k", std::string("x"));
  REQUIRE(done.verdict() == idem::verdict::executed);
  CHECK(*done == "tr_1");
  CHECK(lookups == 0);
  CHECK(store.checkpoints() == 2);  // its start and its result, as without first_step
}

TEST_CASE("a first step idem's own entries could be named is refused when the wrapper is built",
          "[first_step]") {
  guard::options options;
  options.first_step = std::string("\0started", 8);
  CHECK_THROWS_WITH(
      (guard{[](idem::handler_context&, const std::string&) { return std::string(); }, options}),
      Catch::Contains("first_step must not begin with a zero byte"));
}
