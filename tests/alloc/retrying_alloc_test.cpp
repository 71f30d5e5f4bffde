// The success path of idem::retrying allocates nothing: the key, the engine, the history and the
// outcome all live on the stack. Global operator new is replaced and counted in this binary.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <string>

#include "../support/count_allocations.hpp"

namespace {

struct response {
  int status;
};

[[gnu::noinline]] response send(const idem::attempt_context& attempt) {
  return {attempt.key().empty() ? 500 : 200};
}

}  // namespace

TEST_CASE("the success path with default policies performs no heap allocation") {
  idem::retrying call{&send};  // built outside the measured region: its budget is shared state
  call();                      // warm up anything lazily set up by the runtime

  idem_test::allocation_scope scope;
  for (int i = 0; i < 1000; ++i) {
    auto outcome = call();
    REQUIRE(outcome.succeeded());
  }
  CHECK(scope.count() == 0);
}

TEST_CASE("the success path with a breaker and a counting observer performs no heap allocation") {
  struct guarded : idem::default_policies {
    using breaker = idem::consecutive_failure_breaker;
    using observer = idem::counting_observer;
    using key_generator = idem::uuid_v7;
  };
  idem::retrying<decltype(&send), guarded> call{&send};
  call();

  idem_test::allocation_scope scope;
  for (int i = 0; i < 1000; ++i)
    REQUIRE(call().succeeded());
  CHECK(scope.count() == 0);
  CHECK(call.observer().successes() == 1001);
}

TEST_CASE("the allocation counter sees allocations (control)") {
  idem_test::allocation_scope scope;
  auto* text = new std::string(100, 'x');  // longer than any small-string buffer
  CHECK(scope.count() >= 1);
  delete text;
}

TEST_CASE("a retry beyond the history's inline capacity allocates, and only then") {
  struct manual : idem::default_policies {
    using clock = idem::manual_clock;
    using budget = idem::unlimited_budget;
  };
  int calls = 0;
  auto failing_then_ok = [&](const idem::attempt_context&) {
    return response{++calls % 12 == 0 ? 200 : 503};
  };
  idem::retrying<decltype(failing_then_ok), manual>::options o;
  o.limits = {20, std::chrono::hours{1}};
  idem::retrying<decltype(failing_then_ok), manual> call{failing_then_ok, o};

  idem_test::allocation_scope scope;
  auto outcome = call();
  REQUIRE(outcome.attempts() == 12);
  CHECK(scope.count() >= 1);  // records 9 to 12 spilled to the heap
}
