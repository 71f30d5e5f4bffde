// Budgets and breakers seen through a driver of the retry rules: they refuse, and the operation
// ends with their own verdict and the last error as it was. A table of cases, as
// retry_cases.hpp is: the blocking and the asynchronous driver run it.
#ifndef IDEM_TESTS_UNIT_CLIENT_RETRY_GUARD_CASES_HPP
#define IDEM_TESTS_UNIT_CLIENT_RETRY_GUARD_CASES_HPP

#include <catch2/catch.hpp>

#include "unit/client/retry_support.hpp"

namespace retry_cases {

using namespace std::chrono_literals;

namespace {

struct budgeted_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using budget = idem::token_bucket;
};

struct unlimited_policies : budgeted_policies {
  using budget = idem::unlimited_budget;
};

struct breaker_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using budget = idem::unlimited_budget;
  using breaker = idem::consecutive_failure_breaker;
};

// A wrapper over `dependency` guarded by a consecutive-failure breaker that opens after
// `threshold` failures and probes after 30 s. retrying is not movable; the prvalue is built in
// place.
template <class Driver, class Dependency>
auto with_breaker(Dependency dependency, idem::manual_clock clock, int threshold,
                  idem::retry_limits limits) {
  retry_options<breaker_policies> o;
  o.clock = clock;
  o.breaker =
      idem::consecutive_failure_breaker({.threshold = threshold, .open_for = 30s, .probes = 1});
  o.limits = limits;
  return wrap<Driver, breaker_policies>(std::move(dependency), o);
}

// Runs `operations` operations against a dependency that always answers 503 and returns how
// many retries (calls beyond the first of each operation) went out.
template <class Driver, class Policies>
long long retries_under_total_failure(int operations, int* budget_refusals = nullptr) {
  idem::manual_clock clock;
  long long calls = 0;
  auto failing = [&](const idem::attempt_context&) {
    ++calls;
    return response{503};
  };
  retry_options<Policies> o;
  o.clock = clock;
  o.seed = 3;
  auto call = wrap<Driver, Policies>(failing, o);
  for (int i = 0; i < operations; ++i) {
    auto outcome = call();
    if (budget_refusals && outcome.verdict() == idem::retry_verdict::budget_exhausted) {
      ++*budget_refusals;
    }
  }
  return calls - operations;
}

}  // namespace

TEMPLATE_TEST_CASE("under total failure the budget holds retries near its ratio of traffic",
                   "[retrying]", retry_driver) {
  constexpr int operations = 20'000;
  int refusals = 0;
  const auto retries =
      retries_under_total_failure<TestType, budgeted_policies>(operations, &refusals);
  const double ratio = static_cast<double>(retries) / operations;

  // Defaults: a retry costs 5 tokens, each operation deposits 10% of that, and the bucket starts
  // with 500 tokens (100 retries' worth) to spend first.
  CHECK(ratio >= 0.095);
  CHECK(ratio <= 0.1 + 100.0 / operations + 0.005);
  CHECK(refusals > operations / 2);
  // Without a budget every operation would retry twice.
  CHECK(retries_under_total_failure<TestType, unlimited_policies>(operations) == 2LL * operations);
}

TEMPLATE_TEST_CASE("a refused retry ends the operation with budget_exhausted and the last answer",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  auto failing = [&](const idem::attempt_context&) {
    ++calls;
    return response{503};
  };
  retry_options<budgeted_policies> o;
  o.clock = clock;
  // Room for exactly one retry, and no refill.
  o.budget = idem::token_bucket({.max_tokens = 5,
                                 .retry_cost = 5,
                                 .ambiguous_retry_cost = 10,
                                 .success_deposit = 0,
                                 .retry_ratio = 0});
  auto call = wrap<TestType, budgeted_policies>(failing, o);

  auto first = call();
  CHECK(first.verdict() == idem::retry_verdict::budget_exhausted);
  CHECK(calls == 2);
  auto second = call();
  CHECK(second.verdict() == idem::retry_verdict::budget_exhausted);
  CHECK(calls == 3);
  REQUIRE(second.has_value());
  CHECK(second.value().status == 503);
}

TEMPLATE_TEST_CASE("one budget shared by two wrappers guards both", "[retrying]", retry_driver) {
  idem::manual_clock clock;
  idem::token_bucket shared({.max_tokens = 10,
                             .retry_cost = 5,
                             .ambiguous_retry_cost = 10,
                             .success_deposit = 0,
                             .retry_ratio = 0});
  int calls = 0;
  auto failing = [&](const idem::attempt_context&) {
    ++calls;
    return response{503};
  };
  retry_options<budgeted_policies> o;
  o.clock = clock;
  o.budget = shared;
  auto a = wrap<TestType, budgeted_policies>(failing, o);
  auto b = wrap<TestType, budgeted_policies>(failing, o);

  a();  // two retries: the shared bucket is empty
  calls = 0;
  CHECK(b().verdict() == idem::retry_verdict::budget_exhausted);
  CHECK(calls == 1);
}

TEMPLATE_TEST_CASE("an open breaker fails fast, half-opens after its wait and closes on success",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  int status = 503;
  auto dependency = [&](const idem::attempt_context&) {
    ++calls;
    return response{status};
  };
  auto call = with_breaker<TestType>(dependency, clock, 3, {1, 10s});

  for (int i = 0; i < 3; ++i)
    CHECK(call().verdict() == idem::retry_verdict::attempts_exhausted);
  REQUIRE(calls == 3);

  // Open: no call reaches the dependency, and there is no value to return.
  auto refused = call();
  CHECK(refused.verdict() == idem::retry_verdict::circuit_open);
  CHECK(calls == 3);
  CHECK(refused.attempts() == 0);
  CHECK_FALSE(refused.has_value());
  CHECK_THROWS_AS(refused.value(), idem::retry_error);

  clock.advance(29s);
  CHECK(call().verdict() == idem::retry_verdict::circuit_open);
  CHECK(calls == 3);

  // Half-open: one probe goes through; it fails, so the breaker opens again.
  clock.advance(1s);
  CHECK(call().verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK(calls == 4);
  CHECK(call().verdict() == idem::retry_verdict::circuit_open);
  CHECK(calls == 4);

  // The next probe succeeds and closes it; calls flow again.
  clock.advance(30s);
  status = 200;
  CHECK(call().verdict() == idem::retry_verdict::succeeded);
  CHECK(call().verdict() == idem::retry_verdict::succeeded);
  CHECK(calls == 6);
  CHECK(call.breaker().state(clock.now().time_since_epoch()) == idem::breaker_state::closed);
}

TEMPLATE_TEST_CASE("a breaker that opens between retries ends the operation with the last answer",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  auto dependency = [&](const idem::attempt_context&) {
    ++calls;
    return response{502};
  };
  auto call = with_breaker<TestType>(dependency, clock, 2, {5, 100s});

  auto outcome = call();

  CHECK(calls == 2);
  CHECK(outcome.verdict() == idem::retry_verdict::circuit_open);
  REQUIRE(outcome.has_value());
  CHECK(outcome.value().status == 502);
}

TEMPLATE_TEST_CASE("a request the dependency rightly refused does not trip the breaker",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  auto dependency = [&](const idem::attempt_context&) {
    ++calls;
    return response{404};
  };
  auto call = with_breaker<TestType>(dependency, clock, 2, {3, 10s});

  for (int i = 0; i < 10; ++i)
    CHECK(call().verdict() == idem::retry_verdict::permanent_failure);
  CHECK(calls == 10);
}

}  // namespace retry_cases

#endif  // IDEM_TESTS_UNIT_CLIENT_RETRY_GUARD_CASES_HPP
