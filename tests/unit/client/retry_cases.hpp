// The client side's specification, as a table of cases that every driver of the retry rules
// must pass: the blocking idem::retrying (tests/unit/client/retrying_test.cpp) and the
// asynchronous idem::async_retrying (tests/asio/async_retrying_test.cpp) include this file after
// naming their driver `retry_driver`, a type with
//
//   template <class Policies, class Call>
//   static W wrap(Call call, retry_options<Policies> options);
//
// that answers a wrapper W over `call` (a plain, synchronous callable here; an asynchronous
// driver adapts it) with operator()(args...), with_key(key, args...) answering a
// retry_outcome, and call(), clock(), budget(), breaker(), observer(). Time is a manual clock,
// so seconds of backoff take no time and every delay can be asserted exactly, through either
// driver. (Each case is a TEMPLATE_TEST_CASE over retry_driver, so its test name ends in
// " - retry_driver".)
#ifndef IDEM_TESTS_UNIT_CLIENT_RETRY_CASES_HPP
#define IDEM_TESTS_UNIT_CLIENT_RETRY_CASES_HPP

#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <algorithm>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "unit/client/retry_support.hpp"

namespace retry_cases {

using namespace std::chrono_literals;

namespace {

// Policies some cases are about.
struct observed : manual_policies {
  using observer = idem::callback_observer;
};
struct counted : manual_policies {
  using observer = idem::counting_observer;
};
struct real_clock_policies : idem::default_policies {
  using backoff = idem::constant_backoff;
  using budget = idem::unlimited_budget;
};

TEMPLATE_TEST_CASE("the key is generated once and every attempt of an operation gets it",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503, 503, 503, 503, 200}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 5));

  auto outcome = call();

  REQUIRE(outcome.succeeded());
  REQUIRE(dependency.calls() == 5);
  for (const auto& key : dependency.keys)
    CHECK(key == dependency.keys.front());
  CHECK(outcome.key() == dependency.keys.front());
  CHECK(idem::is_valid_key(outcome.key()));

  auto second = call();
  CHECK(second.key() != outcome.key());
  CHECK(dependency.keys.back() == second.key());
}

TEMPLATE_TEST_CASE("with_key runs the operation under the given key on every attempt", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503, 503, 200}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 5));
  const std::string key(64, 'a');

  auto outcome = call.with_key(key);

  REQUIRE(outcome.succeeded());
  REQUIRE(dependency.calls() == 3);
  for (const auto& seen : dependency.keys)
    CHECK(seen == key);
  CHECK(outcome.key() == key);
  // The generator is not consulted for the given key; a plain call still gets a fresh one.
  auto fresh = call();
  CHECK(fresh.key() != key);
}

TEMPLATE_TEST_CASE("with_key refuses an invalid key before any attempt", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{200}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock));

  CHECK_THROWS_AS(call.with_key(""), std::invalid_argument);
  CHECK_THROWS_AS(call.with_key(std::string(256, 'k')), std::invalid_argument);
  CHECK_THROWS_AS(call.with_key("has space"), std::invalid_argument);
  CHECK(dependency.calls() == 0);
  CHECK(call.with_key(std::string(255, 'k')).succeeded());
}

TEMPLATE_TEST_CASE("a success on the first attempt returns at once, without waiting", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{200}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock));

  auto outcome = call();

  CHECK(outcome.verdict() == idem::retry_verdict::succeeded);
  CHECK(outcome.value().status == 200);
  CHECK(outcome.attempts() == 1);
  CHECK(clock.sleeps() == 0);
  CHECK_FALSE(outcome.error());
}

TEMPLATE_TEST_CASE("the attempt cap counts the first call", "[retrying]", retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 3));

  auto outcome = call();

  CHECK(dependency.calls() == 3);
  CHECK(outcome.verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK_FALSE(outcome.succeeded());
  REQUIRE(outcome.has_value());
  CHECK(outcome.value().status == 503);  // the last answer, as it came
  CHECK(clock.sleeps() == 2);
}

TEMPLATE_TEST_CASE("4xx answers other than 408, 425 and 429 are never retried", "[retrying]",
                   retry_driver) {
  const int status = GENERATE(400, 401, 403, 404, 405, 409, 410, 413, 422, 500, 501);
  idem::manual_clock clock;
  scripted dependency{{status, 200}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 5));

  auto outcome = call();

  CHECK(dependency.calls() == 1);
  CHECK(outcome.verdict() == idem::retry_verdict::permanent_failure);
  CHECK(outcome.value().status == status);
  CHECK(clock.sleeps() == 0);
}

TEMPLATE_TEST_CASE("408, 425, 429, 502, 503 and 504 are retried", "[retrying]", retry_driver) {
  const int status = GENERATE(408, 425, 429, 502, 503, 504);
  idem::manual_clock clock;
  scripted dependency{{status, status, 201}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 5));

  auto outcome = call();

  CHECK(dependency.calls() == 3);
  CHECK(outcome.verdict() == idem::retry_verdict::succeeded);
  CHECK(outcome.value().status == 201);
}

TEMPLATE_TEST_CASE("the deadline wins over the attempt cap and no wait ends past it", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503}};
  retry_options<constant_policies> o;
  o.clock = clock;
  o.backoff = idem::constant_backoff{300ms};
  o.limits = {100, 1s};
  auto call = wrap<TestType, constant_policies>(std::ref(dependency), o);

  auto outcome = call();

  // Attempts at 0, 300, 600 and 900 ms; a fifth would need a wait ending at 1200 ms.
  CHECK(dependency.calls() == 4);
  CHECK(outcome.verdict() == idem::retry_verdict::deadline_exceeded);
  CHECK(clock.slept() == 900ms);
  CHECK(clock.elapsed() < 1s);
}

TEMPLATE_TEST_CASE("each attempt is told how much of the deadline is left", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  std::vector<std::chrono::nanoseconds> left;
  auto slow = [&](const idem::attempt_context& attempt) {
    left.push_back(attempt.time_left());
    clock.advance(100ms);  // the attempt itself takes time
    return response{503};
  };
  retry_options<constant_policies> o;
  o.clock = clock;
  o.backoff = idem::constant_backoff{50ms};
  o.limits = {3, 1s};
  auto call = wrap<TestType, constant_policies>(slow, o);

  call();

  CHECK(left == std::vector<std::chrono::nanoseconds>{1000ms, 850ms, 700ms});
}

TEMPLATE_TEST_CASE("a Retry-After in delay-seconds sets the wait", "[retrying]", retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503, 200}, {}, "2"};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock));

  auto outcome = call();

  REQUIRE(outcome.succeeded());
  CHECK(outcome.history()[0].delay_after == 2s);
  CHECK(outcome.history()[0].delay_from_retry_after);
  CHECK(clock.slept() == 2s);
}

TEMPLATE_TEST_CASE("a Retry-After HTTP-date in any of its three forms sets the wait", "[retrying]",
                   retry_driver) {
  // manual_clock's wall time starts at 2026-01-01T00:00:00Z, a Thursday.
  const auto [value, expected] = GENERATE(table<std::string, std::chrono::seconds>({
      {"Thu, 01 Jan 2026 00:00:05 GMT", 5s},     // IMF-fixdate
      {"Thursday, 01-Jan-26 00:00:03 GMT", 3s},  // obsolete RFC 850
      {"Thu Jan  1 00:00:04 2026", 4s},          // obsolete asctime
      {"Wed, 31 Dec 2025 23:59:00 GMT", 0s},     // in the past: retry now
  }));
  idem::manual_clock clock;
  scripted dependency{{429, 200}, {}, value};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock));

  auto outcome = call();

  REQUIRE(outcome.succeeded());
  CHECK(outcome.history()[0].delay_from_retry_after);
  CHECK(outcome.history()[0].delay_after == expected);
}

TEMPLATE_TEST_CASE("a malformed Retry-After is ignored and the backoff applies", "[retrying]",
                   retry_driver) {
  const std::string value = GENERATE(
      as<std::string>{}, "soon", "-1", "1.5", "+3", " ", "0x10", "Thu, 32 Jan 2026 00:00:05 GMT",
      "Thu, 01 Jan 2026 25:00:00 GMT", "3 seconds", std::string("1\0", 2));
  idem::manual_clock clock;
  scripted dependency{{503, 200}, {}, value};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock));

  auto outcome = call();

  REQUIRE(outcome.succeeded());
  CHECK_FALSE(outcome.history()[0].delay_from_retry_after);
  CHECK(outcome.history()[0].delay_after <= 100ms);  // full jitter's first window
}

TEMPLATE_TEST_CASE("a Retry-After beyond the deadline ends the retries at once", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503, 200}, {}, "60"};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 3, 10s));

  auto outcome = call();

  CHECK(dependency.calls() == 1);
  CHECK(outcome.verdict() == idem::retry_verdict::deadline_exceeded);
  CHECK(clock.sleeps() == 0);
  CHECK(outcome.value().status == 503);
}

namespace {
struct unsafe_policies : manual_policies {
  static constexpr idem::call_safety safety = idem::call_safety::unsafe;
};
}  // namespace

TEMPLATE_TEST_CASE("an unkeyed call that is not idempotent is never retried", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  auto post = [&] {
    ++calls;
    throw std::system_error(std::make_error_code(std::errc::timed_out));
  };
  auto call = wrap_manual<TestType, unsafe_policies>(post, clock);

  auto outcome = call();

  CHECK(calls == 1);
  CHECK(outcome.verdict() == idem::retry_verdict::not_retried);
  CHECK_THROWS_AS(outcome.value(), std::system_error);
}

namespace {

// A charge whose first attempt times out after the provider already recorded it.
struct charge_call {
  std::set<std::string>* provider;  // keys the provider has charged
  int* calls;
  int* resolves;
  response operator()(const idem::attempt_context& attempt) {
    ++*calls;
    provider->insert(std::string(attempt.key()));
    if (attempt.attempt() == 1) throw std::system_error(std::make_error_code(std::errc::timed_out));
    return {201};
  }
  std::optional<response> resolve(const idem::attempt_context& attempt) {
    ++*resolves;
    if (provider->count(std::string(attempt.key())) != 0) return response{200};
    return std::nullopt;
  }
};

}  // namespace

TEMPLATE_TEST_CASE("the resolve hook stops a repeat when the ambiguous attempt had landed",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  std::set<std::string> provider;
  int calls = 0;
  int resolves = 0;
  auto call =
      wrap_manual<TestType, manual_policies>(charge_call{&provider, &calls, &resolves}, clock);

  auto outcome = call();

  CHECK(outcome.verdict() == idem::retry_verdict::resolved);
  CHECK(outcome.succeeded());
  CHECK(calls == 1);
  CHECK(resolves == 1);
  CHECK(outcome.value().status == 200);
  CHECK_FALSE(outcome.error());
}

TEMPLATE_TEST_CASE("the resolve hook lets the repeat go when the effect did not land", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  int resolves = 0;
  auto flaky = [&](const idem::attempt_context& attempt) {
    ++calls;
    if (attempt.attempt() == 1) throw std::system_error(std::make_error_code(std::errc::timed_out));
    return response{201};
  };
  auto ask = [&](const idem::attempt_context&) -> std::optional<response> {
    ++resolves;
    return std::nullopt;
  };
  auto both = idem::with_resolver(flaky, ask);
  auto call = wrap_manual<TestType, manual_policies>(both, clock);

  auto outcome = call();

  CHECK(outcome.verdict() == idem::retry_verdict::succeeded);
  CHECK(calls == 2);
  CHECK(resolves == 1);
  CHECK(outcome.value().status == 201);
}

TEMPLATE_TEST_CASE("the resolve hook is not asked after a failure that did not take effect",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  int resolves = 0;
  auto refused = [&](const idem::attempt_context& attempt) {
    if (attempt.attempt() == 1) {
      throw std::system_error(std::make_error_code(std::errc::connection_refused));
    }
    return response{200};
  };
  auto ask = [&](const idem::attempt_context&) -> std::optional<response> {
    ++resolves;
    return response{200};
  };
  auto both = idem::with_resolver(refused, ask);
  auto call = wrap_manual<TestType, manual_policies>(both, clock);

  CHECK(call().verdict() == idem::retry_verdict::succeeded);
  CHECK(resolves == 0);
}

TEMPLATE_TEST_CASE("the last error is surfaced unchanged, with the attempt history", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  const std::system_error* thrown_last = nullptr;
  auto refusing = [&](const idem::attempt_context&) -> response {
    ++calls;
    auto error = std::system_error(std::make_error_code(std::errc::connection_refused),
                                   "attempt " + std::to_string(calls));
    try {
      throw error;
    } catch (const std::system_error& e) {
      thrown_last = &e;
      throw;
    }
  };
  auto call = wrap_manual<TestType, manual_policies>(refusing, clock);

  auto outcome = call();

  CHECK(outcome.verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK_FALSE(outcome.has_value());
  REQUIRE(outcome.error());
  try {
    outcome.value();
    FAIL("value() must rethrow the last error");
  } catch (const std::system_error& e) {
    CHECK(&e == thrown_last);  // the very object the call threw
    CHECK(std::string(e.what()).find("attempt 3") != std::string::npos);
  }
  const auto& history = outcome.history();
  REQUIRE(history.size() == 3);
  for (std::size_t i = 0; i < history.size(); ++i) {
    CHECK(history[i].attempt == static_cast<int>(i) + 1);
    CHECK(history[i].kind == idem::disposition::transient);
    CHECK(history[i].threw);
    CHECK(history[i].code == static_cast<int>(std::errc::connection_refused));
  }
  CHECK(history[0].delay_after > 0ns);
  CHECK(history[2].delay_after == 0ns);
  CHECK(history[1].started_at == history[0].delay_after);
}

// A call returning a plain int says failure by throwing: its policies say so.
struct exception_policies : manual_policies {
  using classifier = idem::exception_classifier<>;
};

TEMPLATE_TEST_CASE("a call's own permanent exception passes through after one attempt",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  auto buggy = [&](const idem::attempt_context&) -> int {
    ++calls;
    throw std::logic_error("bad request body");
  };
  auto call = wrap_manual<TestType, exception_policies>(buggy, clock);

  auto outcome = call();

  CHECK(calls == 1);
  CHECK(outcome.verdict() == idem::retry_verdict::permanent_failure);
  CHECK_THROWS_WITH(outcome.value(), "bad request body");
}

TEMPLATE_TEST_CASE("the history reads oldest first in a range-for and through its iterators",
                   "[retrying]", retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 12, 1000s));

  auto outcome = call();

  REQUIRE(outcome.attempts() == 12);  // past the eight held inline
  int expected = 1;
  for (const idem::attempt_record& attempt : outcome.history()) {
    CHECK(attempt.attempt == expected);
    CHECK(attempt.code == 503);
    ++expected;
  }
  CHECK(expected == 13);
  const auto& history = outcome.history();
  STATIC_REQUIRE(std::random_access_iterator<idem::attempt_history::const_iterator>);
  CHECK(std::ranges::distance(history) == 12);
  CHECK(history.end() - history.begin() == 12);
  CHECK(history.begin()[9].attempt == 10);
  CHECK((history.end() - 1)->attempt == 12);
  CHECK(std::ranges::count_if(history, [](const auto& a) { return a.code == 503; }) == 12);
}

TEMPLATE_TEST_CASE("the history keeps every attempt beyond its inline capacity", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 20, 1000s));

  auto outcome = call();

  REQUIRE(outcome.attempts() == 20);
  for (int i = 0; i < 20; ++i)
    CHECK(outcome.history()[static_cast<std::size_t>(i)].attempt == i + 1);
  const auto copy = outcome.history();
  CHECK(copy.size() == 20);
  CHECK(copy.back().attempt == 20);
}

TEMPLATE_TEST_CASE("arguments are given to every attempt, never moved away", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  std::vector<int> seen;
  auto call_with_argument = [&](const idem::attempt_context&, std::unique_ptr<int>& value) {
    seen.push_back(value ? *value : -1);
    return response{seen.size() < 3 ? 503 : 200};
  };
  auto call = wrap_manual<TestType, manual_policies>(call_with_argument, clock);

  auto outcome = call(std::make_unique<int>(7));

  CHECK(outcome.succeeded());
  CHECK(seen == std::vector<int>{7, 7, 7});
}

TEMPLATE_TEST_CASE("a call that returns void is judged by its exceptions", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  auto send = [&](int times_to_fail) {
    if (++calls <= times_to_fail) {
      throw std::system_error(std::make_error_code(std::errc::connection_refused));
    }
  };
  auto call = wrap_manual<TestType, manual_policies>(send, clock);

  auto outcome = call(2);
  CHECK(outcome.succeeded());
  CHECK(calls == 3);
  CHECK_NOTHROW(outcome.value());

  calls = 0;
  auto failed = call(5);
  CHECK(failed.verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK_THROWS_AS(failed.value(), std::system_error);
}

TEMPLATE_TEST_CASE("a fixed seed replays the same keys and delays", "[retrying]", retry_driver) {
  auto run = [](std::uint64_t seed) {
    idem::manual_clock clock;
    scripted dependency{{503, 503, 503, 200}};
    auto o = options_with(clock, 4);
    o.seed = seed;
    auto call = wrap<TestType>(std::ref(dependency), o);
    auto outcome = call();
    std::vector<std::string> trace{std::string(outcome.key())};
    for (std::size_t i = 0; i < outcome.history().size(); ++i) {
      trace.push_back(std::to_string(outcome.history()[i].delay_after.count()));
    }
    return trace;
  };
  CHECK(run(1) == run(1));
  CHECK(run(1) != run(2));
}

TEMPLATE_TEST_CASE("the observer sees every attempt, every wait and the end", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503, 503, 200}};
  std::vector<std::string> events;
  retry_options<observed> o;
  o.clock = clock;
  o.observer.attempt = [&](const idem::attempt_event& e) {
    events.push_back("attempt " + std::to_string(e.record.attempt) + " " +
                     std::string(idem::to_string(e.record.kind)));
  };
  o.observer.delay = [&](const idem::delay_event& e) {
    events.push_back("wait before " + std::to_string(e.next_attempt));
  };
  o.observer.finish = [&](const idem::finish_event& e) {
    events.push_back("finish " + std::string(idem::to_string(e.verdict)) + " after " +
                     std::to_string(e.attempts));
  };
  auto call = wrap<TestType, observed>(std::ref(dependency), o);

  call();

  CHECK(events == std::vector<std::string>{"attempt 1 transient", "wait before 2",
                                           "attempt 2 transient", "wait before 3",
                                           "attempt 3 success", "finish succeeded after 3"});
}

TEMPLATE_TEST_CASE("a counting observer totals attempts, retries and outcomes", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503, 200, 404}};
  retry_options<counted> o;
  o.clock = clock;
  auto call = wrap<TestType, counted>(std::ref(dependency), o);

  call();  // 503 then 200
  call();  // 404
  const auto& counts = call.observer();
  CHECK(counts.attempts() == 3);
  CHECK(counts.retries() == 1);
  CHECK(counts.operations() == 2);
  CHECK(counts.successes() == 1);
  CHECK(counts.give_ups() == 1);
}

TEMPLATE_TEST_CASE("limits that cannot work are rejected at construction", "[retrying]",
                   retry_driver) {
  scripted dependency{{200}};
  idem::manual_clock clock;
  CHECK_THROWS_AS(wrap<TestType>(std::ref(dependency), options_with(clock, 0)),
                  std::invalid_argument);
  CHECK_THROWS_AS(wrap<TestType>(std::ref(dependency), options_with(clock, 3, 0s)),
                  std::invalid_argument);
}

TEMPLATE_TEST_CASE("an outcome can be copied and moved with its whole history", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  scripted dependency{{503}};
  auto call = wrap<TestType>(std::ref(dependency), options_with(clock, 12, 1000s));

  auto outcome = call();
  const auto copy = outcome;
  auto moved = std::move(outcome);

  const auto& moved_view = moved;
  for (const auto* o : {&copy, &moved_view}) {
    REQUIRE(o->attempts() == 12);
    CHECK(o->history()[3].attempt == 4);
    CHECK(o->history()[11].attempt == 12);
    CHECK(o->key() == dependency.keys.front());
    CHECK(o->value().status == 503);
  }
}

TEMPLATE_TEST_CASE("a gRPC status result is retried by the gRPC rules", "[retrying]",
                   retry_driver) {
  idem::manual_clock clock;
  int calls = 0;
  auto rpc = [&](const idem::attempt_context&) -> std::error_code {
    ++calls;
    if (calls == 1) return idem::grpc_status::unavailable;
    if (calls == 2) return idem::grpc_status::resource_exhausted;
    return {};
  };
  auto call = wrap_manual<TestType>(rpc, clock);

  auto outcome = call();

  CHECK(outcome.succeeded());
  CHECK(calls == 3);
  CHECK(outcome.history()[0].code == static_cast<int>(idem::grpc_status::unavailable));

  calls = 10;  // from now on every answer is a success; INVALID_ARGUMENT is never repeated
  auto invalid = [&](const idem::attempt_context&) -> std::error_code {
    ++calls;
    return idem::grpc_status::invalid_argument;
  };
  auto rejecting = wrap_manual<TestType>(invalid, clock);
  CHECK(rejecting().verdict() == idem::retry_verdict::permanent_failure);
  CHECK(calls == 11);
}

TEMPLATE_TEST_CASE("with the real steady clock the waits really pass", "[retrying]", retry_driver) {
  int calls = 0;
  auto flaky = [&](const idem::attempt_context&) { return response{++calls < 3 ? 503 : 200}; };
  retry_options<real_clock_policies> o;
  o.backoff = idem::constant_backoff{5ms};
  auto call = wrap<TestType, real_clock_policies>(flaky, o);

  const auto before = std::chrono::steady_clock::now();
  auto outcome = call();
  const auto elapsed = std::chrono::steady_clock::now() - before;

  CHECK(outcome.succeeded());
  CHECK(calls == 3);
  CHECK(elapsed >= 10ms);  // two waits of 5 ms: a lower bound, never a timing goal
  CHECK(outcome.history()[2].started_at >= 10ms);
}

}  // namespace
}  // namespace retry_cases

#endif  // IDEM_TESTS_UNIT_CLIENT_RETRY_CASES_HPP
