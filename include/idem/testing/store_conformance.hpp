// The store conformance suite: the store contract (idem/store/contract.hpp) as Catch2 test cases,
// for any store, including your own.
//
//   #include <catch2/catch.hpp>                       // Catch2 v2, before this header
//   #include <idem/testing/store_conformance.hpp>
//
//   struct my_store_factory {
//     static constexpr bool bounded = true;             // honours store_limits (else false)
//     my_store make(const idem::testing::store_limits& limits);  // a fresh, empty store
//   };
//   IDEM_STORE_CONFORMANCE_TESTS(my_store_factory)
//
// Each behaviour is one test case, named "store conformance: <behaviour> - <factory>", tagged
// [conformance]; the many-thread storm is also tagged [concurrency]. The factory object lives as
// long as the test case, so a durable store can keep its temporary directory or server in it.
//
// It checks the store directly (claim, complete, release, checkpoint, find, sweep, stuck, with
// fences, expiry, scopes, capacity and awkward bytes) and through idempotent and inbox: every
// row of the semantics table, fenced takeover with a paused holder, the failure policies, and a
// storm of 64 threads on 1,000 keys with an effect counter. Time is a manual_clock, so leases
// and retention are exact and instant.
//
// The cases that go through a wrapper are registered apart too, for any driver of the wrappers:
// IDEM_GUARDED_CONFORMANCE_TESTS(Factory, Driver, "name prefix: ") with Driver blocking_driver
// (what IDEM_STORE_CONFORMANCE_TESTS uses) or an asynchronous driver's (tests/asio runs them
// through async_idempotent and async_inbox; idem/testing/detail/conformance/guarded_handlers.hpp
// says what a driver provides).
//
// The cases live in idem/testing/detail/conformance/: support.hpp, store_cases.hpp,
// guarded_cases.hpp (with guarded_handlers.hpp) and storm.hpp; this header registers them.
#ifndef IDEM_TESTING_STORE_CONFORMANCE_HPP
#define IDEM_TESTING_STORE_CONFORMANCE_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/store_conformance.hpp>."
#endif

#include <idem/testing/detail/conformance/guarded_cases.hpp>
#include <idem/testing/detail/conformance/registration.hpp>
#include <idem/testing/detail/conformance/store_cases.hpp>
#include <idem/testing/detail/conformance/storm.hpp>
#include <idem/testing/detail/conformance/support.hpp>

// One Catch2 test case per behaviour, for the factory given. A macro only because Catch2
// registers test cases with macros; each case is the function of the same name above.
#define IDEM_CONFORMANCE_CASE(Factory, behaviour, tags, function)                    \
  TEMPLATE_TEST_CASE("store conformance: " behaviour, tags, Factory) {               \
    static_assert(::idem::testing::StoreFactory<TestType>,                           \
                  "A conformance factory must be default-constructible, provide "    \
                  "make(const idem::testing::store_limits&) returning a Store, and " \
                  "static constexpr bool bounded.");                                 \
    ::idem::testing::conformance::function<TestType>();                              \
  }

// IDEM_CONFORMANCE_SERIAL_CASE: IDEM_CONFORMANCE_CASE for a case not tagged [concurrency], which a
// build that defines IDEM_TESTING_CONCURRENCY_ONLY leaves out
// (idem/testing/detail/conformance/registration.hpp).
#define IDEM_CONFORMANCE_SERIAL_CASE(Factory, behaviour, tags, function) \
  IDEM_CONFORMANCE_SERIAL(IDEM_CONFORMANCE_CASE(Factory, behaviour, tags, function))

// The cases that drive a store through a wrapper, for the factory given, called through
// `Driver` (idem/testing/detail/conformance/guarded_handlers.hpp: blocking_driver, or an
// asynchronous driver's), each test named `prefix` and its behaviour.
#define IDEM_GUARDED_CASE(Factory, Driver, prefix, behaviour, tags, function)        \
  TEMPLATE_TEST_CASE(prefix behaviour, tags, Factory) {                              \
    static_assert(::idem::testing::StoreFactory<TestType>,                           \
                  "A conformance factory must be default-constructible, provide "    \
                  "make(const idem::testing::store_limits&) returning a Store, and " \
                  "static constexpr bool bounded.");                                 \
    ::idem::testing::conformance::function<TestType, Driver>();                      \
  }

// IDEM_GUARDED_SERIAL_CASE: IDEM_GUARDED_CASE for a case not tagged [concurrency], which a build
// that defines IDEM_TESTING_CONCURRENCY_ONLY leaves out
// (idem/testing/detail/conformance/registration.hpp).
#define IDEM_GUARDED_SERIAL_CASE(Factory, Driver, prefix, behaviour, tags, function) \
  IDEM_CONFORMANCE_SERIAL(IDEM_GUARDED_CASE(Factory, Driver, prefix, behaviour, tags, function))

#define IDEM_GUARDED_CONFORMANCE_TESTS(Factory, Driver, prefix)                                    \
  IDEM_GUARDED_SERIAL_CASE(                                                                        \
      Factory, Driver, prefix, "a missing or invalid key is refused with 400 and stores nothing",  \
      "[conformance]", a_missing_or_invalid_key_is_refused_and_stores_nothing)                     \
  IDEM_GUARDED_SERIAL_CASE(Factory, Driver, prefix,                                                \
                           "a repeat replays the stored response byte for byte", "[conformance]",  \
                           a_repeat_replays_the_stored_response_byte_for_byte)                     \
  IDEM_GUARDED_SERIAL_CASE(                                                                        \
      Factory, Driver, prefix, "a key reused with another request is rejected with 422",           \
      "[conformance]", a_key_reused_with_another_request_is_rejected_with_422)                     \
  IDEM_GUARDED_SERIAL_CASE(Factory, Driver, prefix,                                                \
                           "a duplicate of a request in progress gets 409", "[conformance]",       \
                           a_duplicate_of_a_request_in_progress_gets_409)                          \
  IDEM_GUARDED_CASE(                                                                               \
      Factory, Driver, prefix, "a coalescing duplicate waits for the response and replays it",     \
      "[conformance][concurrency]", a_coalescing_duplicate_waits_for_the_response_and_replays_it)  \
  IDEM_GUARDED_SERIAL_CASE(Factory, Driver, prefix, "a coalescing wait is bounded",                \
                           "[conformance]", a_coalescing_wait_is_bounded)                          \
  IDEM_GUARDED_CASE(Factory, Driver, prefix,                                                       \
                    "an expired claim is taken over and resumes from its recovery point",          \
                    "[conformance][concurrency]",                                                  \
                    an_expired_claim_is_taken_over_and_resumes_from_its_recovery_point)            \
  IDEM_GUARDED_SERIAL_CASE(                                                                        \
      Factory, Driver, prefix,                                                                     \
      "a handler that throws releases the key and its exception passes through", "[conformance]",  \
      a_handler_that_throws_releases_the_key_and_its_exception_passes_through)                     \
  IDEM_GUARDED_SERIAL_CASE(Factory, Driver, prefix,                                                \
                           "a failure after the effect began is stored under the Stripe policy",   \
                           "[conformance]",                                                        \
                           a_failure_after_the_effect_began_is_stored_under_the_stripe_policy)     \
  IDEM_GUARDED_SERIAL_CASE(                                                                        \
      Factory, Driver, prefix, "a store that is down or full answers 503 and runs nothing",        \
      "[conformance]", a_store_that_is_down_or_full_answers_503_and_runs_nothing)                  \
  IDEM_GUARDED_SERIAL_CASE(                                                                        \
      Factory, Driver, prefix, "a store failing after the handler ran is reported, not swallowed", \
      "[conformance]", a_store_failing_after_the_handler_ran_is_reported_not_swallowed)            \
  IDEM_GUARDED_SERIAL_CASE(Factory, Driver, prefix,                                                \
                           "a repeat after retention runs again and sweep forgets",                \
                           "[conformance]", a_repeat_after_retention_runs_again_and_sweep_forgets) \
  IDEM_GUARDED_CASE(                                                                               \
      Factory, Driver, prefix, "reconciliation lists requests stuck past their lease",             \
      "[conformance][concurrency]", reconciliation_lists_requests_stuck_past_their_lease)          \
  IDEM_GUARDED_SERIAL_CASE(Factory, Driver, prefix,                                                \
                           "another scope's key is answered as an absent one", "[conformance]",    \
                           another_scopes_key_is_answered_as_an_absent_one)                        \
  IDEM_GUARDED_SERIAL_CASE(Factory, Driver, prefix, "an inbox runs each event once",               \
                           "[conformance]", an_inbox_runs_each_event_once)

#define IDEM_STORE_CONFORMANCE_TESTS(Factory)                                                      \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "a new key is claimed under fence 1", "[conformance]",     \
                               new_key_is_claimed_under_fence_one)                                 \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "a live claim is not claimed again", "[conformance]",      \
                               a_live_claim_is_not_claimed_again)                                  \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "a completed record keeps its response byte for byte",     \
                               "[conformance]",                                                    \
                               a_completed_record_keeps_its_response_byte_for_byte)                \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "a large response is stored whole", "[conformance]",       \
                               a_large_response_is_stored_whole)                                   \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "an abandoned claim is taken over under the next fence",   \
                               "[conformance]",                                                    \
                               an_abandoned_claim_is_taken_over_under_the_next_fence)              \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "an abandoned claim is not taken over by another request", \
                               "[conformance]",                                                    \
                               an_abandoned_claim_is_not_taken_over_by_another_request)            \
  IDEM_CONFORMANCE_SERIAL_CASE(                                                                    \
      Factory, "a paused holder cannot complete, release or checkpoint after a takeover",          \
      "[conformance]", a_paused_holder_cannot_complete_release_or_checkpoint_after_a_takeover)     \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "a released key is claimed again under a higher fence",    \
                               "[conformance]",                                                    \
                               a_released_key_is_claimed_again_under_a_higher_fence)               \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "writes to an unknown key do nothing", "[conformance]",    \
                               writes_to_an_unknown_key_do_nothing)                                \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "scopes never share or see records", "[conformance]",      \
                               scopes_never_share_or_see_records)                                  \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "awkward bytes round-trip", "[conformance]",               \
                               awkward_bytes_round_trip)                                           \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "records expire after retention and sweep removes them",   \
                               "[conformance]",                                                    \
                               records_expire_after_retention_and_sweep_removes_them)              \
  IDEM_CONFORMANCE_SERIAL_CASE(                                                                    \
      Factory, "a new record starts with the recovery bytes its claim gives", "[conformance]",     \
      a_new_record_starts_with_the_recovery_bytes_its_claim_gives)                                 \
  IDEM_CONFORMANCE_SERIAL_CASE(                                                                    \
      Factory, "recovery bytes a bounded store cannot hold answer full and store nothing",         \
      "[conformance]", recovery_bytes_a_bounded_store_cannot_hold_answer_full_and_store_nothing)   \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "stuck lists claims past their lease and changes nothing", \
                               "[conformance]",                                                    \
                               stuck_lists_claims_past_their_lease_and_changes_nothing)            \
  IDEM_CONFORMANCE_SERIAL_CASE(Factory, "a full store refuses new claims and keeps live records",  \
                               "[conformance]",                                                    \
                               a_full_store_refuses_new_claims_and_keeps_live_records)             \
  IDEM_CONFORMANCE_SERIAL_CASE(                                                                    \
      Factory, "a response larger than the store accepts is refused and writes nothing",           \
      "[conformance]", a_response_larger_than_the_store_accepts_is_refused_and_writes_nothing)     \
  IDEM_GUARDED_CONFORMANCE_TESTS(Factory, ::idem::testing::conformance::blocking_driver,           \
                                 "store conformance: ")                                            \
  IDEM_CONFORMANCE_CASE(Factory, "a storm of 64 threads on 1000 keys has one effect per key",      \
                        "[conformance][concurrency]",                                              \
                        a_storm_of_duplicates_has_one_effect_per_key)

#endif  // IDEM_TESTING_STORE_CONFORMANCE_HPP
