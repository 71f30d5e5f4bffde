// The client side's specification through the blocking driver: the shared table of cases
// (retry_cases.hpp, which the asynchronous driver runs too), and what only the blocking driver
// has, its layers counted per thread.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "unit/client/blocking_driver.hpp"

#include "unit/client/retry_cases.hpp"

namespace retrying_test {

using namespace std::chrono_literals;
using namespace retry_cases;
using retry_cases::response;

namespace {

template <class Policies = manual_policies, class Call>
idem::retrying<Call, Policies> manual_retrying(Call call, idem::manual_clock clock) {
  return wrap_manual<blocking_driver, Policies>(std::move(call), clock);
}

struct nested_policies : manual_policies {};
struct layered_policies : manual_policies {
  static constexpr bool retry_when_nested = true;
};

}  // namespace

TEST_CASE("a retrying call inside another does not multiply attempts") {
  auto layers = [](auto policies_tag) {
    using policies = decltype(policies_tag);
    idem::manual_clock clock;
    int innermost_calls = 0;
    auto innermost = [&](const idem::attempt_context&) {
      ++innermost_calls;
      return response{503};
    };
    auto inner = manual_retrying<policies>(innermost, clock);
    auto middle_call = [&](const idem::attempt_context&) { return inner().value(); };
    auto middle = manual_retrying<policies>(middle_call, clock);
    auto outer_call = [&](const idem::attempt_context&) { return middle().value(); };
    auto outer = manual_retrying<policies>(outer_call, clock);

    auto outcome = outer();
    CHECK(outcome.verdict() == idem::retry_verdict::attempts_exhausted);
    return innermost_calls;
  };

  CHECK(layers(nested_policies{}) == 3);    // only the outermost layer retries
  CHECK(layers(layered_policies{}) == 27);  // what the guard prevents, when a policy allows it
}

TEST_CASE("a nested layer reports a transient failure as not retried") {
  idem::manual_clock clock;
  scripted dependency{{503, 200}};
  auto inner = manual_retrying(std::ref(dependency), clock);
  std::optional<idem::retry_verdict> inner_verdict;
  auto outer_call = [&] {
    auto outcome = inner();
    inner_verdict = outcome.verdict();
    return outcome.value();
  };
  auto outer = manual_retrying<manual_policies>(outer_call, clock);

  auto outcome = outer();

  CHECK(inner_verdict == idem::retry_verdict::succeeded);  // the outer layer's second try
  CHECK(outcome.attempts() == 2);
  CHECK(outcome.succeeded());
  CHECK(dependency.calls() == 2);
}

TEST_CASE("an event_callback takes any callable of its event") {
  const idem::finish_event event{idem::redacted_key{"key"}, idem::retry_verdict::succeeded, 2,
                                 std::chrono::nanoseconds{5}};
  idem::event_callback<idem::finish_event> callback;
  CHECK_FALSE(callback);  // unset: callback_observer skips it (the next test)

  int calls = 0;
  callback = [&](const idem::finish_event& e) { calls += e.attempts; };
  REQUIRE(callback);
  callback(event);
  CHECK(calls == 2);

  // Copies copy the callable, state included, as std::function's do.
  int counted = 0;
  callback = [&counted, n = 0](const idem::finish_event&) mutable { counted = ++n; };
  const idem::event_callback<idem::finish_event> copy = callback;
  callback(event);
  callback(event);
  copy(event);
  CHECK(counted == 1);

  // A result is discarded; a std::function, a function pointer and a member pointer are held too.
  callback = std::function<void(const idem::finish_event&)>{[&](auto&) { calls = 100; }};
  callback(event);
  CHECK(calls == 100);
  static int seen_by_pointer = 0;
  callback = +[](const idem::finish_event& e) {
    seen_by_pointer = e.attempts;
    return true;
  };
  callback(event);
  CHECK(seen_by_pointer == 2);
  callback = &idem::finish_event::attempts;
  CHECK(callback);
  callback(event);

  // nullptr and a null function pointer leave it empty.
  callback = nullptr;
  CHECK_FALSE(callback);
  void (*no_function)(const idem::finish_event&) = nullptr;
  callback = no_function;
  CHECK_FALSE(callback);
  STATIC_REQUIRE_FALSE(std::is_constructible_v<idem::event_callback<idem::finish_event>, int>);
  STATIC_REQUIRE_FALSE(std::is_constructible_v<idem::event_callback<idem::finish_event>,
                                               void (*)(const idem::delay_event&)>);
}

TEST_CASE("a callback observer skips the events it has no function for") {
  idem::callback_observer observer;
  int attempts = 0;
  observer.attempt = [&](const idem::attempt_event&) { ++attempts; };
  const idem::attempt_record record{1,    idem::disposition::success, 200, false, {}, {}, false,
                                    false};
  observer.on_attempt(idem::attempt_event{idem::redacted_key{"key"}, record, {}});
  observer.on_delay(idem::delay_event{idem::redacted_key{"key"}, 2, {}, false});
  observer.on_finish(
      idem::finish_event{idem::redacted_key{"key"}, idem::retry_verdict::succeeded, 1, {}});
  CHECK(attempts == 1);
  CHECK(observer.attempt);
  CHECK_FALSE(observer.delay);
}

}  // namespace retrying_test
