// The conformance cases that drive a store through idempotent and inbox: every row of the
// semantics table, fenced takeover with a paused holder, the failure policies.
#ifndef IDEM_TESTING_DETAIL_CONFORMANCE_GUARDED_CASES_HPP
#define IDEM_TESTING_DETAIL_CONFORMANCE_GUARDED_CASES_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/store_conformance.hpp>."
#endif

#include <idem/testing/detail/conformance/guarded_handlers.hpp>
#include <idem/testing/detail/conformance/support.hpp>

namespace idem::testing {

namespace conformance {

// ---- through idempotent and inbox --------------------------------------------------------
//
// Each case takes the Driver that calls the wrapper (guarded_handlers.hpp): blocking_driver for
// idempotent and inbox, or an asynchronous one.

template <class Factory, class Driver, class Handler = counted_handler>
auto guarded(store_of<Factory> store, manual_clock clock, Handler handler = {}) {
  using policies = wrapped_policies<store_of<Factory>>;
  typename Driver::template guard<Handler, policies>::options parts;
  parts.store = std::move(store);
  parts.clock = std::move(clock);
  return std::make_unique<typename Driver::template guard<Handler, policies>>(std::move(handler),
                                                                              std::move(parts));
}

template <class Factory, class Driver = blocking_driver>
void a_missing_or_invalid_key_is_refused_and_stores_nothing() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory, Driver>(store, clock, handler);

  const auto missing = (*payments)("tenant", std::nullopt, charge());
  CHECK(missing.verdict() == verdict::missing_key);
  CHECK(missing.http_status() == 400);

  const std::string too_long(256, 'k');
  for (const std::string& bad :
       {std::string{}, too_long, std::string("has space"), std::string("tab\tkey"),
        std::string("nul\0key", 7), std::string("caf\xc3\xa9"), std::string("del\x7f")}) {
    INFO("key of " << bad.size() << " bytes");
    const auto refused = (*payments)("tenant", bad, charge());
    CHECK(refused.verdict() == verdict::invalid_key);
    CHECK(refused.http_status() == 400);
    CHECK_FALSE(refused.message().empty());
    CHECK_FALSE(store.find("tenant", bad, clock.wall_now()));
  }
  CHECK(*handler.runs == 0);
  // 255 bytes is the limit, not past it.
  const std::string longest(255, 'k');
  CHECK((*payments)("tenant", longest, charge()).verdict() == verdict::executed);
}

template <class Factory, class Driver = blocking_driver>
void a_repeat_replays_the_stored_response_byte_for_byte() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory, Driver>(store, clock, handler);

  const auto first = (*payments)("tenant", "order-17", charge());
  REQUIRE(first.verdict() == verdict::executed);
  CHECK(first.recorded());
  CHECK(first.fence() == 1);
  clock.advance(1h);
  const auto second = (*payments)("tenant", "order-17", charge());
  REQUIRE(second.verdict() == verdict::replayed);
  CHECK(second.value() == first.value());
  CHECK(second.http_status() == 201);
  CHECK(*handler.runs == 1);
}

template <class Factory, class Driver = blocking_driver>
void a_key_reused_with_another_request_is_rejected_with_422() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory, Driver>(store, clock, handler);

  REQUIRE((*payments)("tenant", "k", charge("{\"amount\":100}")).verdict() == verdict::executed);
  const auto reused = (*payments)("tenant", "k", charge("{\"amount\":999}"));
  CHECK(reused.verdict() == verdict::mismatch);
  CHECK(reused.http_status() == 422);
  http_request other_target = charge();
  other_target.target = "/refunds";
  CHECK((*payments)("tenant", "k", other_target).verdict() == verdict::mismatch);

  // In progress too.
  const digest held = payments->fingerprint()(view_of(charge("{\"amount\":1}")));
  REQUIRE(store.claim(claim_request{"tenant", "running", held, clock.wall_now(), lease, retention})
              .status == claim_status::claimed);
  CHECK((*payments)("tenant", "running", charge("{\"amount\":2}")).verdict() == verdict::mismatch);
  CHECK(*handler.runs == 1);
}

template <class Factory, class Driver = blocking_driver>
void a_duplicate_of_a_request_in_progress_gets_409() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory, Driver>(store, clock, handler);
  const digest held = payments->fingerprint()(view_of(charge()));
  REQUIRE(
      store.claim(claim_request{"tenant", "k", held, clock.wall_now(), lease, retention}).status ==
      claim_status::claimed);

  clock.advance(12s);
  const auto duplicate = (*payments)("tenant", "k", charge());
  CHECK(duplicate.verdict() == verdict::in_progress);
  CHECK(duplicate.http_status() == 409);
  CHECK_FALSE(duplicate.has_value());
  // What a 409's Retry-After says: the holder's lease, as the store answered the claim.
  CHECK(duplicate.lease_left() == lease - 12s);
  CHECK(*handler.runs == 0);
}

template <class Factory, class Driver = blocking_driver>
void a_coalescing_duplicate_waits_for_the_response_and_replays_it() {
  Factory factory;
  using policies = coalescing_policies<store_of<Factory>>;
  gated_handler handler;
  typename Driver::template guard<gated_handler, policies>::options parts;
  parts.store = fresh(factory);
  parts.coalesce = 10s;
  typename Driver::template guard<gated_handler, policies> payments(handler, std::move(parts));

  std::optional<idempotent_outcome<http_response>> original;
  std::thread first([&] { original.emplace(payments("tenant", "k", charge())); });
  handler.wait_until_entered();
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    handler.open();
  });
  const auto duplicate = payments("tenant", "k", charge());
  first.join();
  opener.join();
  REQUIRE(original);
  CHECK(original->verdict() == verdict::executed);
  CHECK(duplicate.verdict() == verdict::replayed);
  CHECK(duplicate.value() == original->value());
  CHECK(handler.state->runs == 1);
}

template <class Factory, class Driver = blocking_driver>
void a_coalescing_wait_is_bounded() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  using policies = wrapped_policies<store_of<Factory>>;
  typename Driver::template guard<counted_handler, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.coalesce = 2s;
  typename Driver::template guard<counted_handler, policies> payments(counted_handler{},
                                                                      std::move(parts));
  const digest held = payments.fingerprint()(view_of(charge()));
  REQUIRE(
      store.claim(claim_request{"tenant", "k", held, clock.wall_now(), lease, retention}).status ==
      claim_status::claimed);

  const auto waited = payments("tenant", "k", charge());
  CHECK(waited.verdict() == verdict::in_progress);
  CHECK(clock.slept() == 2s);
  CHECK(*payments.handler().runs == 0);
}

template <class Factory, class Driver = blocking_driver>
void an_expired_claim_is_taken_over_and_resumes_from_its_recovery_point() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  resumable_handler handler;
  auto payments = guarded<Factory, Driver, resumable_handler>(store, clock, handler);

  std::optional<idempotent_outcome<http_response>> paused_outcome;
  std::thread paused([&] { paused_outcome.emplace((*payments)("tenant", "k", charge())); });
  handler.wait_until_paused();

  // Within the lease a repeat is told to wait.
  CHECK((*payments)("tenant", "k", charge()).verdict() == verdict::in_progress);

  clock.advance(lease + 1s);
  const auto taken = (*payments)("tenant", "k", charge());
  REQUIRE(taken.verdict() == verdict::executed);
  CHECK(taken.resumed());
  CHECK(taken.fence() == 2);
  // The charge was recorded before the pause: it is not made again.
  CHECK(taken->body == "ch_1 fence 2");
  CHECK(handler.state->charges == 1);
  CHECK(handler.state->emails == 1);

  // The paused holder wakes up: its next step finds the fence gone, so it neither sends the
  // email again nor overwrites the recovered response; it is answered with that response.
  handler.resume();
  paused.join();
  REQUIRE(paused_outcome);
  CHECK(paused_outcome->verdict() == verdict::replayed);
  CHECK(paused_outcome->value() == taken.value());
  CHECK(handler.state->emails == 1);
  const std::optional<record> found = store.find("tenant", "k", clock.wall_now());
  REQUIRE(found);
  CHECK(found->fence == 2);
  CHECK(decode<http_response>(found->response) == taken.value());
}

template <class Factory, class Driver = blocking_driver>
void a_handler_that_throws_releases_the_key_and_its_exception_passes_through() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  throwing_handler handler;
  auto payments = guarded<Factory, Driver, throwing_handler>(store, clock, handler);

  try {
    (void)(*payments)("tenant", "k", charge());
    FAIL("the handler's exception did not pass through");
  } catch (const declined& error) {
    CHECK(std::string(error.what()) == "card declined, attempt 1");
  }
  CHECK_FALSE(store.find("tenant", "k", clock.wall_now()));
  *handler.fail = false;
  const auto corrected = (*payments)("tenant", "k", charge());
  CHECK(corrected.verdict() == verdict::executed);
  CHECK(corrected->body == "charged");
  CHECK(*handler.runs == 2);
}

template <class Factory, class Driver = blocking_driver>
void a_failure_after_the_effect_began_is_stored_under_the_stripe_policy() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  using policies = stripe_policies<store_of<Factory>>;
  throwing_handler handler;
  typename Driver::template guard<throwing_handler, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  typename Driver::template guard<throwing_handler, policies> payments(handler, std::move(parts));

  // Failing before any recovery point: released, as by default.
  CHECK_THROWS_AS(payments("tenant", "early", charge()), declined);
  CHECK_FALSE(store.find("tenant", "early", clock.wall_now()));

  // Failing after one: stored, and replayed to every repeat.
  *handler.step_first = true;
  CHECK_THROWS_AS(payments("tenant", "late", charge()), declined);
  *handler.fail = false;
  const auto repeat = payments("tenant", "late", charge());
  CHECK(repeat.verdict() == verdict::replayed);
  CHECK(repeat.http_status() == 500);
  CHECK(*handler.runs == 2);
}

template <class Factory, class Driver = blocking_driver>
void a_store_that_is_down_or_full_answers_503_and_runs_nothing() {
  Factory factory;
  faulty_store<store_of<Factory>> store(fresh(factory));
  manual_clock clock;
  counted_handler handler;
  using policies = wrapped_policies<faulty_store<store_of<Factory>>>;
  typename Driver::template guard<counted_handler, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  typename Driver::template guard<counted_handler, policies> payments(handler, std::move(parts));

  store.fail(faulty_store<store_of<Factory>>::mode::unavailable);
  const auto down = payments("tenant", "k", charge());
  CHECK(down.verdict() == verdict::store_unavailable);
  CHECK(down.http_status() == 503);
  CHECK_THAT(std::string(down.message()), Catch::Matchers::Contains("down"));

  store.fail(faulty_store<store_of<Factory>>::mode::full);
  const auto full = payments("tenant", "k", charge());
  CHECK(full.verdict() == verdict::store_full);
  CHECK(full.http_status() == 503);
  CHECK(*handler.runs == 0);

  // Recovered, the same key runs: the refusals stored nothing.
  store.heal();
  CHECK(payments("tenant", "k", charge()).verdict() == verdict::executed);
  CHECK(*handler.runs == 1);

  if constexpr (Factory::bounded) {
    Factory bounded_factory;
    store_limits limits;
    limits.max_records = 1;
    typename Driver::template guard<counted_handler, wrapped_policies<store_of<Factory>>>::options
        small;
    small.store = fresh(bounded_factory, limits);
    small.clock = clock;
    typename Driver::template guard<counted_handler, wrapped_policies<store_of<Factory>>> tiny(
        handler, std::move(small));
    CHECK(tiny("tenant", "one", charge()).verdict() == verdict::executed);
    const auto no_room = tiny("tenant", "two", charge());
    CHECK(no_room.verdict() == verdict::store_full);
    CHECK(no_room.http_status() == 503);
    CHECK(*handler.runs == 2);
  }
}

template <class Factory, class Driver = blocking_driver>
void a_store_failing_after_the_handler_ran_is_reported_not_swallowed() {
  Factory factory;
  faulty_store<store_of<Factory>> store(fresh(factory));
  manual_clock clock;
  using policies = wrapped_policies<faulty_store<store_of<Factory>>>;
  using failing_midway = store_failing_midway<store_of<Factory>>;
  typename Driver::template guard<failing_midway, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  typename Driver::template guard<failing_midway, policies> payments(failing_midway{store},
                                                                     std::move(parts));

  const auto outcome = payments("tenant", "k", charge());
  CHECK(outcome.verdict() == verdict::executed);
  CHECK(outcome->body == "effect done");
  CHECK_FALSE(outcome.recorded());
  CHECK_THAT(std::string(outcome.message()), Catch::Matchers::Contains("not stored"));
  // The claim stays: a repeat within the lease waits rather than running the effect again.
  store.heal();
  CHECK(payments("tenant", "k", charge()).verdict() == verdict::in_progress);
  CHECK(payments.stuck().empty());
  clock.advance(lease);
  CHECK(payments.stuck().size() == 1);
}

template <class Factory, class Driver = blocking_driver>
void a_repeat_after_retention_runs_again_and_sweep_forgets() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory, Driver>(store, clock, handler);

  REQUIRE((*payments)("tenant", "k", charge()).verdict() == verdict::executed);
  clock.advance(retention - 1s);
  CHECK((*payments)("tenant", "k", charge()).verdict() == verdict::replayed);
  CHECK(payments->sweep() == 0);
  clock.advance(1s);
  CHECK(payments->sweep() == 1);
  CHECK((*payments)("tenant", "k", charge()).verdict() == verdict::executed);
  CHECK(*handler.runs == 2);
}

template <class Factory, class Driver = blocking_driver>
void reconciliation_lists_requests_stuck_past_their_lease() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  resumable_handler handler;
  auto payments = guarded<Factory, Driver, resumable_handler>(store, clock, handler);
  std::thread paused([&] { (void)(*payments)("tenant", "stuck-key", charge()); });
  handler.wait_until_paused();
  CHECK(payments->stuck().empty());
  clock.advance(lease);
  const std::vector<record> stuck = payments->stuck();
  REQUIRE(stuck.size() == 1);
  CHECK(stuck[0].key == "stuck-key");
  CHECK(stuck[0].scope == "tenant");
  CHECK_FALSE(stuck[0].recovery.empty());
  handler.resume();
  paused.join();
  // Reporting took nothing over: the paused holder still completed under fence 1.
  const std::optional<record> found = store.find("tenant", "stuck-key", clock.wall_now());
  REQUIRE(found);
  CHECK(found->state == record_state::completed);
  CHECK(found->fence == 1);
}

template <class Factory, class Driver = blocking_driver>
void another_scopes_key_is_answered_as_an_absent_one() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory, Driver>(store, clock, handler);
  REQUIRE((*payments)("tenant-a", "shared-key", charge("{\"a\":1}")).verdict() ==
          verdict::executed);
  // Another body under the same key in another scope is neither a mismatch nor a replay.
  const auto other = (*payments)("tenant-b", "shared-key", charge("{\"b\":2}"));
  CHECK(other.verdict() == verdict::executed);
  CHECK(*handler.runs == 2);
}

template <class Factory, class Driver = blocking_driver>
void an_inbox_runs_each_event_once() {
  Factory factory;
  using policies = wrapped_policies<store_of<Factory>>;
  typename Driver::template inbox<policies>::options parts;
  parts.store = fresh(factory);
  typename Driver::template inbox<policies> consumed(std::move(parts));
  int shipped = 0;
  for (int delivery = 0; delivery < 3; ++delivery) {
    const auto outcome = consumed.deduplicate("orders", "evt-1", [&] { ++shipped; });
    CHECK(outcome.verdict() == (delivery == 0 ? verdict::executed : verdict::replayed));
  }
  const auto counted = consumed.deduplicate("orders", "evt-2", [&] { return ++shipped; });
  CHECK(counted.value() == 2);
  CHECK(consumed.deduplicate("orders", "evt-2", [] { return -1; }).value() == 2);
  CHECK(consumed.deduplicate("refunds", "evt-1", [&] { ++shipped; }).verdict() ==
        verdict::executed);
  CHECK(consumed.deduplicate("orders", "", [&] { ++shipped; }).verdict() == verdict::invalid_key);
  CHECK(shipped == 3);
}

}  // namespace conformance
}  // namespace idem::testing

#endif  // IDEM_TESTING_DETAIL_CONFORMANCE_GUARDED_CASES_HPP
