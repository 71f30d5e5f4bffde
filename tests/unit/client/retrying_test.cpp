// The client side's specification: idem::retrying under a manual clock, so that seconds of
// backoff take no time and every delay can be asserted exactly.
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

using namespace std::chrono_literals;

namespace {

struct response {
  int status;
  std::string retry_after{};
};

// A manual clock and no budget: each test adds what it is about.
struct manual_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using budget = idem::unlimited_budget;
};

struct constant_policies : manual_policies {
  using backoff = idem::constant_backoff;
};

// A scripted dependency: answers with the given statuses in turn, then repeats the last.
struct scripted {
  std::vector<int> statuses;
  std::vector<std::string> keys{};
  std::string retry_after{};
  response operator()(const idem::attempt_context& attempt) {
    keys.emplace_back(attempt.key());
    const auto i = std::min(keys.size(), statuses.size()) - 1;
    return {statuses[i], retry_after};
  }
  int calls() const { return static_cast<int>(keys.size()); }
};

// The parts of a wrapper over `Call` on a manual clock, with a fixed seed.
template <class Call, class Policies = manual_policies>
typename idem::retrying<Call, Policies>::options manual_options(
    idem::manual_clock clock, int max_attempts = Policies::max_attempts,
    std::chrono::nanoseconds deadline = Policies::deadline) {
  typename idem::retrying<Call, Policies>::options o;
  o.clock = clock;
  o.seed = 42;
  o.limits = {max_attempts, deadline};
  return o;
}

// Such a wrapper itself. retrying is neither copyable nor movable; a returned prvalue
// initialises the caller's variable in place.
template <class Policies = manual_policies, class Call>
idem::retrying<Call, Policies> manual_retrying(Call call, idem::manual_clock clock) {
  return idem::retrying<Call, Policies>{std::move(call), manual_options<Call, Policies>(clock)};
}

template <class Policies = manual_policies>
using retrying_scripted = idem::retrying<std::reference_wrapper<scripted>, Policies>;

template <class Policies = manual_policies>
typename retrying_scripted<Policies>::options options_with(
    idem::manual_clock clock, int max_attempts = Policies::max_attempts,
    std::chrono::nanoseconds deadline = Policies::deadline) {
  return manual_options<std::reference_wrapper<scripted>, Policies>(clock, max_attempts, deadline);
}

}  // namespace

TEST_CASE("the key is generated once and every attempt of an operation gets it") {
  idem::manual_clock clock;
  scripted dependency{{503, 503, 503, 503, 200}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 5)};

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

TEST_CASE("with_key runs the operation under the given key on every attempt") {
  idem::manual_clock clock;
  scripted dependency{{503, 503, 200}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 5)};
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

TEST_CASE("with_key refuses an invalid key before any attempt") {
  idem::manual_clock clock;
  scripted dependency{{200}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock)};

  CHECK_THROWS_AS(call.with_key(""), std::invalid_argument);
  CHECK_THROWS_AS(call.with_key(std::string(256, 'k')), std::invalid_argument);
  CHECK_THROWS_AS(call.with_key("has space"), std::invalid_argument);
  CHECK(dependency.calls() == 0);
  CHECK(call.with_key(std::string(255, 'k')).succeeded());
}

TEST_CASE("a success on the first attempt returns at once, without waiting") {
  idem::manual_clock clock;
  scripted dependency{{200}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock)};

  auto outcome = call();

  CHECK(outcome.verdict() == idem::retry_verdict::succeeded);
  CHECK(outcome.value().status == 200);
  CHECK(outcome.attempts() == 1);
  CHECK(clock.sleeps() == 0);
  CHECK_FALSE(outcome.error());
}

TEST_CASE("the attempt cap counts the first call") {
  idem::manual_clock clock;
  scripted dependency{{503}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 3)};

  auto outcome = call();

  CHECK(dependency.calls() == 3);
  CHECK(outcome.verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK_FALSE(outcome.succeeded());
  REQUIRE(outcome.has_value());
  CHECK(outcome.value().status == 503);  // the last answer, as it came
  CHECK(clock.sleeps() == 2);
}

TEST_CASE("4xx answers other than 408, 425 and 429 are never retried") {
  const int status = GENERATE(400, 401, 403, 404, 405, 409, 410, 413, 422, 500, 501);
  idem::manual_clock clock;
  scripted dependency{{status, 200}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 5)};

  auto outcome = call();

  CHECK(dependency.calls() == 1);
  CHECK(outcome.verdict() == idem::retry_verdict::permanent_failure);
  CHECK(outcome.value().status == status);
  CHECK(clock.sleeps() == 0);
}

TEST_CASE("408, 425, 429, 502, 503 and 504 are retried") {
  const int status = GENERATE(408, 425, 429, 502, 503, 504);
  idem::manual_clock clock;
  scripted dependency{{status, status, 201}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 5)};

  auto outcome = call();

  CHECK(dependency.calls() == 3);
  CHECK(outcome.verdict() == idem::retry_verdict::succeeded);
  CHECK(outcome.value().status == 201);
}

TEST_CASE("the deadline wins over the attempt cap and no wait ends past it") {
  idem::manual_clock clock;
  scripted dependency{{503}};
  typename retrying_scripted<constant_policies>::options o;
  o.clock = clock;
  o.backoff = idem::constant_backoff{300ms};
  o.limits = {100, 1s};
  retrying_scripted<constant_policies> call{std::ref(dependency), o};

  auto outcome = call();

  // Attempts at 0, 300, 600 and 900 ms; a fifth would need a wait ending at 1200 ms.
  CHECK(dependency.calls() == 4);
  CHECK(outcome.verdict() == idem::retry_verdict::deadline_exceeded);
  CHECK(clock.slept() == 900ms);
  CHECK(clock.elapsed() < 1s);
}

TEST_CASE("each attempt is told how much of the deadline is left") {
  idem::manual_clock clock;
  std::vector<std::chrono::nanoseconds> left;
  auto slow = [&](const idem::attempt_context& attempt) {
    left.push_back(attempt.time_left());
    clock.advance(100ms);  // the attempt itself takes time
    return response{503};
  };
  idem::retrying<decltype(slow), constant_policies>::options o;
  o.clock = clock;
  o.backoff = idem::constant_backoff{50ms};
  o.limits = {3, 1s};
  idem::retrying<decltype(slow), constant_policies> call{slow, o};

  call();

  CHECK(left == std::vector<std::chrono::nanoseconds>{1000ms, 850ms, 700ms});
}

TEST_CASE("a Retry-After in delay-seconds sets the wait") {
  idem::manual_clock clock;
  scripted dependency{{503, 200}, {}, "2"};
  retrying_scripted<> call{std::ref(dependency), options_with(clock)};

  auto outcome = call();

  REQUIRE(outcome.succeeded());
  CHECK(outcome.history()[0].delay_after == 2s);
  CHECK(outcome.history()[0].delay_from_retry_after);
  CHECK(clock.slept() == 2s);
}

TEST_CASE("a Retry-After HTTP-date in any of its three forms sets the wait") {
  // manual_clock's wall time starts at 2026-01-01T00:00:00Z, a Thursday.
  const auto [value, expected] = GENERATE(table<std::string, std::chrono::seconds>({
      {"Thu, 01 Jan 2026 00:00:05 GMT", 5s},     // IMF-fixdate
      {"Thursday, 01-Jan-26 00:00:03 GMT", 3s},  // obsolete RFC 850
      {"Thu Jan  1 00:00:04 2026", 4s},          // obsolete asctime
      {"Wed, 31 Dec 2025 23:59:00 GMT", 0s},     // in the past: retry now
  }));
  idem::manual_clock clock;
  scripted dependency{{429, 200}, {}, value};
  retrying_scripted<> call{std::ref(dependency), options_with(clock)};

  auto outcome = call();

  REQUIRE(outcome.succeeded());
  CHECK(outcome.history()[0].delay_from_retry_after);
  CHECK(outcome.history()[0].delay_after == expected);
}

TEST_CASE("a malformed Retry-After is ignored and the backoff applies") {
  const std::string value = GENERATE(
      as<std::string>{}, "soon", "-1", "1.5", "+3", " ", "0x10", "Thu, 32 Jan 2026 00:00:05 GMT",
      "Thu, 01 Jan 2026 25:00:00 GMT", "3 seconds", std::string("1\0", 2));
  idem::manual_clock clock;
  scripted dependency{{503, 200}, {}, value};
  retrying_scripted<> call{std::ref(dependency), options_with(clock)};

  auto outcome = call();

  REQUIRE(outcome.succeeded());
  CHECK_FALSE(outcome.history()[0].delay_from_retry_after);
  CHECK(outcome.history()[0].delay_after <= 100ms);  // full jitter's first window
}

TEST_CASE("a Retry-After beyond the deadline ends the retries at once") {
  idem::manual_clock clock;
  scripted dependency{{503, 200}, {}, "60"};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 3, 10s)};

  auto outcome = call();

  CHECK(dependency.calls() == 1);
  CHECK(outcome.verdict() == idem::retry_verdict::deadline_exceeded);
  CHECK(clock.sleeps() == 0);
  CHECK(outcome.value().status == 503);
}

namespace {
struct nested_policies : manual_policies {};
struct layered_policies : manual_policies {
  static constexpr bool retry_when_nested = true;
};
struct unsafe_policies : manual_policies {
  static constexpr idem::call_safety safety = idem::call_safety::unsafe;
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
  retrying_scripted<> inner{std::ref(dependency), options_with(clock)};
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

TEST_CASE("an unkeyed call that is not idempotent is never retried") {
  idem::manual_clock clock;
  int calls = 0;
  auto post = [&] {
    ++calls;
    throw std::system_error(std::make_error_code(std::errc::timed_out));
  };
  auto call = manual_retrying<unsafe_policies>(post, clock);

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

TEST_CASE("the resolve hook stops a repeat when the ambiguous attempt had landed") {
  idem::manual_clock clock;
  std::set<std::string> provider;
  int calls = 0;
  int resolves = 0;
  auto call = manual_retrying<manual_policies>(charge_call{&provider, &calls, &resolves}, clock);

  auto outcome = call();

  CHECK(outcome.verdict() == idem::retry_verdict::resolved);
  CHECK(outcome.succeeded());
  CHECK(calls == 1);
  CHECK(resolves == 1);
  CHECK(outcome.value().status == 200);
  CHECK_FALSE(outcome.error());
}

TEST_CASE("the resolve hook lets the repeat go when the effect did not land") {
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
  auto call = manual_retrying<manual_policies>(both, clock);

  auto outcome = call();

  CHECK(outcome.verdict() == idem::retry_verdict::succeeded);
  CHECK(calls == 2);
  CHECK(resolves == 1);
  CHECK(outcome.value().status == 201);
}

TEST_CASE("the resolve hook is not asked after a failure that did not take effect") {
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
  auto call = manual_retrying<manual_policies>(both, clock);

  CHECK(call().verdict() == idem::retry_verdict::succeeded);
  CHECK(resolves == 0);
}

TEST_CASE("the last error is surfaced unchanged, with the attempt history") {
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
  auto call = manual_retrying<manual_policies>(refusing, clock);

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

TEST_CASE("a call's own permanent exception passes through after one attempt") {
  idem::manual_clock clock;
  int calls = 0;
  auto buggy = [&](const idem::attempt_context&) -> int {
    ++calls;
    throw std::logic_error("bad request body");
  };
  auto call = manual_retrying<exception_policies>(buggy, clock);

  auto outcome = call();

  CHECK(calls == 1);
  CHECK(outcome.verdict() == idem::retry_verdict::permanent_failure);
  CHECK_THROWS_WITH(outcome.value(), "bad request body");
}

TEST_CASE("the history reads oldest first in a range-for and through its iterators") {
  idem::manual_clock clock;
  scripted dependency{{503}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 12, 1000s)};

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

TEST_CASE("the history keeps every attempt beyond its inline capacity") {
  idem::manual_clock clock;
  scripted dependency{{503}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 20, 1000s)};

  auto outcome = call();

  REQUIRE(outcome.attempts() == 20);
  for (int i = 0; i < 20; ++i)
    CHECK(outcome.history()[static_cast<std::size_t>(i)].attempt == i + 1);
  const auto copy = outcome.history();
  CHECK(copy.size() == 20);
  CHECK(copy.back().attempt == 20);
}

TEST_CASE("arguments are given to every attempt, never moved away") {
  idem::manual_clock clock;
  std::vector<int> seen;
  auto call_with_argument = [&](const idem::attempt_context&, std::unique_ptr<int>& value) {
    seen.push_back(value ? *value : -1);
    return response{seen.size() < 3 ? 503 : 200};
  };
  auto call = manual_retrying<manual_policies>(call_with_argument, clock);

  auto outcome = call(std::make_unique<int>(7));

  CHECK(outcome.succeeded());
  CHECK(seen == std::vector<int>{7, 7, 7});
}

TEST_CASE("a call that returns void is judged by its exceptions") {
  idem::manual_clock clock;
  int calls = 0;
  auto send = [&](int times_to_fail) {
    if (++calls <= times_to_fail) {
      throw std::system_error(std::make_error_code(std::errc::connection_refused));
    }
  };
  auto call = manual_retrying<manual_policies>(send, clock);

  auto outcome = call(2);
  CHECK(outcome.succeeded());
  CHECK(calls == 3);
  CHECK_NOTHROW(outcome.value());

  calls = 0;
  auto failed = call(5);
  CHECK(failed.verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK_THROWS_AS(failed.value(), std::system_error);
}

TEST_CASE("a fixed seed replays the same keys and delays") {
  auto run = [](std::uint64_t seed) {
    idem::manual_clock clock;
    scripted dependency{{503, 503, 503, 200}};
    auto o = options_with(clock, 4);
    o.seed = seed;
    retrying_scripted<> call{std::ref(dependency), o};
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

TEST_CASE("the observer sees every attempt, every wait and the end") {
  struct observed : manual_policies {
    using observer = idem::callback_observer;
  };
  idem::manual_clock clock;
  scripted dependency{{503, 503, 200}};
  std::vector<std::string> events;
  idem::retrying<std::reference_wrapper<scripted>, observed>::options o;
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
  idem::retrying<std::reference_wrapper<scripted>, observed> call{std::ref(dependency), o};

  call();

  CHECK(events == std::vector<std::string>{"attempt 1 transient", "wait before 2",
                                           "attempt 2 transient", "wait before 3",
                                           "attempt 3 success", "finish succeeded after 3"});
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
  const idem::attempt_record record{1, idem::disposition::success, 200, false, {}, {}, false};
  observer.on_attempt(idem::attempt_event{idem::redacted_key{"key"}, record});
  observer.on_delay(idem::delay_event{idem::redacted_key{"key"}, 2, {}, false});
  observer.on_finish(
      idem::finish_event{idem::redacted_key{"key"}, idem::retry_verdict::succeeded, 1, {}});
  CHECK(attempts == 1);
  CHECK(observer.attempt);
  CHECK_FALSE(observer.delay);
}

TEST_CASE("a counting observer totals attempts, retries and outcomes") {
  struct counted : manual_policies {
    using observer = idem::counting_observer;
  };
  idem::manual_clock clock;
  scripted dependency{{503, 200, 404}};
  idem::retrying<std::reference_wrapper<scripted>, counted>::options o;
  o.clock = clock;
  idem::retrying<std::reference_wrapper<scripted>, counted> call{std::ref(dependency), o};

  call();  // 503 then 200
  call();  // 404
  const auto& counts = call.observer();
  CHECK(counts.attempts() == 3);
  CHECK(counts.retries() == 1);
  CHECK(counts.operations() == 2);
  CHECK(counts.successes() == 1);
  CHECK(counts.give_ups() == 1);
}

TEST_CASE("limits that cannot work are rejected at construction") {
  scripted dependency{{200}};
  idem::manual_clock clock;
  CHECK_THROWS_AS(retrying_scripted<>(std::ref(dependency), options_with(clock, 0)),
                  std::invalid_argument);
  CHECK_THROWS_AS(retrying_scripted<>(std::ref(dependency), options_with(clock, 3, 0s)),
                  std::invalid_argument);
}

TEST_CASE("an outcome can be copied and moved with its whole history") {
  idem::manual_clock clock;
  scripted dependency{{503}};
  retrying_scripted<> call{std::ref(dependency), options_with(clock, 12, 1000s)};

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

TEST_CASE("a gRPC status result is retried by the gRPC rules") {
  idem::manual_clock clock;
  int calls = 0;
  auto rpc = [&](const idem::attempt_context&) -> std::error_code {
    ++calls;
    if (calls == 1) return idem::grpc_status::unavailable;
    if (calls == 2) return idem::grpc_status::resource_exhausted;
    return {};
  };
  auto call = manual_retrying(rpc, clock);

  auto outcome = call();

  CHECK(outcome.succeeded());
  CHECK(calls == 3);
  CHECK(outcome.history()[0].code == static_cast<int>(idem::grpc_status::unavailable));

  calls = 10;  // from now on every answer is a success; INVALID_ARGUMENT is never repeated
  auto invalid = [&](const idem::attempt_context&) -> std::error_code {
    ++calls;
    return idem::grpc_status::invalid_argument;
  };
  auto rejecting = manual_retrying(invalid, clock);
  CHECK(rejecting().verdict() == idem::retry_verdict::permanent_failure);
  CHECK(calls == 11);
}

TEST_CASE("with the real steady clock the waits really pass") {
  struct real_clock_policies : idem::default_policies {
    using backoff = idem::constant_backoff;
    using budget = idem::unlimited_budget;
  };
  int calls = 0;
  auto flaky = [&](const idem::attempt_context&) { return response{++calls < 3 ? 503 : 200}; };
  idem::retrying<decltype(flaky), real_clock_policies>::options o;
  o.backoff = idem::constant_backoff{5ms};
  idem::retrying<decltype(flaky), real_clock_policies> call{flaky, o};

  const auto before = std::chrono::steady_clock::now();
  auto outcome = call();
  const auto elapsed = std::chrono::steady_clock::now() - before;

  CHECK(outcome.succeeded());
  CHECK(calls == 3);
  CHECK(elapsed >= 10ms);  // two waits of 5 ms: a lower bound, never a timing goal
  CHECK(outcome.history()[2].started_at >= 10ms);
}
