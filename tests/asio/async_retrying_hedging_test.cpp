// Hedged requests (Policies::hedge = idem::hedging, async_retrying only): a second attempt under
// the same key once the first is slower than the hedge delay, the first decisive answer wins and
// the other is cancelled; the hedge budget; a transient failure of one letting the other run on;
// and a heavy-tailed dependency over 10,000 calls: its tail cut to about p95 plus the hedge's own
// time, at most 5% more attempts, one effect per key.
#include "asio/driver.hpp"
#include "support/heavy_tail.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace async_retrying_hedging_test {

using namespace std::chrono_literals;
namespace asio = test_net::asio;
using std::chrono::nanoseconds;

namespace {

struct hedged_policies : test_net::manual_policies {
  using backoff = idem::constant_backoff;
  using hedge = idem::hedging;
};

struct tracked_policies : hedged_policies {
  using latency = idem::latency_tracker;
};

using idem_test::downstream;
using response = idem_test::status_response;

template <class Policies>
typename idem::async_retrying<downstream, Policies>::options hedged(idem::manual_clock clock,
                                                                    idem::hedging hedge) {
  auto o = test_net::manual_options<downstream, Policies>(clock);
  o.backoff = idem::constant_backoff{1s};
  o.hedge = std::move(hedge);
  return o;
}

// A hedge budget that starts full: `tokens` hedges at once.
idem::hedging budget_of(double tokens, nanoseconds start_delay = 100ms, double ratio = 1.0) {
  idem::hedging h{
      {.start_delay = start_delay, .ratio = ratio, .max_tokens = std::max(1.0, tokens)}};
  for (int i = 0; i < 1000 && h.tokens() < tokens; ++i)
    h.on_operation();
  return h;
}

template <class Retry>
idem::retry_outcome<response> run_one(asio::io_context& io, idem::manual_clock& clock,
                                      Retry& retry) {
  std::optional<idem::retry_outcome<response>> seen;
  retry.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });
  return std::move(*seen);
}

}  // namespace

TEST_CASE(
    "hedging: a slow first attempt gets a hedge under the same key, and the first answer wins") {
  asio::io_context io;
  idem::manual_clock clock;
  downstream service{clock, [](int n) { return n == 0 ? nanoseconds{30s} : nanoseconds{50ms}; }};
  idem::async_retrying<downstream, hedged_policies> retry{
      io.get_executor(), service, hedged<hedged_policies>(clock, budget_of(1))};
  const auto outcome = run_one(io, clock, retry);
  CHECK(outcome.succeeded());
  CHECK(outcome.attempts() == 1);
  CHECK(outcome.history()[0].hedged);
  CHECK(clock.elapsed() == 150ms);  // the hedge went out at 100 ms and answered 50 ms later
  REQUIRE(service.keys->size() == 2);
  CHECK((*service.keys)[0] == (*service.keys)[1]);
  CHECK(*service.finished == 1);  // the slow first attempt was cancelled
  CHECK(clock.waiting_wakes() == 0);
  CHECK(retry.hedge().tokens() < 1);  // the hedge took its token
}

TEST_CASE("hedging: an attempt that answers before the delay sends no hedge") {
  asio::io_context io;
  idem::manual_clock clock;
  downstream service{clock, [](int) { return nanoseconds{40ms}; }};
  idem::async_retrying<downstream, hedged_policies> retry{
      io.get_executor(), service, hedged<hedged_policies>(clock, budget_of(1))};
  const auto outcome = run_one(io, clock, retry);
  CHECK(outcome.succeeded());
  CHECK_FALSE(outcome.history()[0].hedged);
  CHECK(service.keys->size() == 1);
  CHECK(clock.elapsed() == 40ms);
  CHECK(clock.waiting_wakes() == 0);  // the hedge's timer was withdrawn
  CHECK(retry.hedge().tokens() >= 1);
}

TEST_CASE("hedging: with the budget spent the slow attempt is simply waited for") {
  asio::io_context io;
  idem::manual_clock clock;
  downstream service{clock, [](int) { return nanoseconds{2s}; }};
  // One token, and a ratio that earns no whole token back in one operation.
  idem::async_retrying<downstream, hedged_policies> retry{
      io.get_executor(), service, hedged<hedged_policies>(clock, budget_of(1, 100ms, 0.01))};
  CHECK(run_one(io, clock, retry).history()[0].hedged);
  CHECK(service.keys->size() == 2);
  const auto unhedged = run_one(io, clock, retry);
  CHECK(unhedged.succeeded());
  CHECK_FALSE(unhedged.history()[0].hedged);
  CHECK(service.keys->size() == 3);
}

TEST_CASE("hedging: a hedge that fails transiently lets the first attempt answer") {
  asio::io_context io;
  idem::manual_clock clock;
  downstream service{clock, [](int n) { return n == 0 ? nanoseconds{300ms} : nanoseconds{10ms}; }};
  service.status = [](int n) { return n == 1 ? 503 : 200; };
  idem::async_retrying<downstream, hedged_policies> retry{
      io.get_executor(), service, hedged<hedged_policies>(clock, budget_of(1))};
  const auto outcome = run_one(io, clock, retry);
  CHECK(outcome.succeeded());
  CHECK(outcome.value().status == 200);
  CHECK(outcome.attempts() == 1);
  CHECK(clock.elapsed() == 300ms);
  CHECK(*service.finished == 2);
}

TEST_CASE("hedging: a first attempt that fails before the delay is retried as without hedging") {
  asio::io_context io;
  idem::manual_clock clock;
  downstream service{clock, [](int) { return nanoseconds{20ms}; }};
  service.status = [](int n) { return n == 0 ? 503 : 200; };
  idem::async_retrying<downstream, hedged_policies> retry{
      io.get_executor(), service, hedged<hedged_policies>(clock, budget_of(1))};
  const auto outcome = run_one(io, clock, retry);
  CHECK(outcome.succeeded());
  CHECK(outcome.attempts() == 2);
  CHECK_FALSE(outcome.history()[0].hedged);
  CHECK(outcome.history()[1].started_at == 1020ms);  // 20 ms, then the 1 s backoff
  CHECK(service.keys->size() == 2);
  CHECK(retry.hedge().tokens() >= 1);
}

TEST_CASE("hedging: a hedge that answers a failure repeating cannot fix ends the race") {
  asio::io_context io;
  idem::manual_clock clock;
  downstream service{clock, [](int n) { return n == 0 ? nanoseconds{30s} : nanoseconds{10ms}; }};
  service.status = [](int n) { return n == 1 ? 422 : 200; };
  idem::async_retrying<downstream, hedged_policies> retry{
      io.get_executor(), service, hedged<hedged_policies>(clock, budget_of(1))};
  const auto outcome = run_one(io, clock, retry);
  CHECK(outcome.verdict() == idem::retry_verdict::permanent_failure);
  CHECK(clock.elapsed() == 110ms);
  CHECK(*service.finished == 1);
}

TEST_CASE("hedging: settings no hedge can come from are refused") {
  CHECK_THROWS_AS(idem::hedging({.quantile = 1}), std::invalid_argument);
  CHECK_THROWS_AS(idem::hedging({.start_delay = 0ms}), std::invalid_argument);
  CHECK_THROWS_AS(idem::hedging({.floor = -1ms}), std::invalid_argument);
  CHECK_THROWS_AS(idem::hedging({.ratio = 0}), std::invalid_argument);
  CHECK_THROWS_WITH(idem::hedging({.max_tokens = 0.5}), Catch::Matchers::Contains("idem::hedging"));
  // A tracker that does not keep the hedging quantile.
  asio::io_context io;
  idem::manual_clock clock;
  auto o = hedged<tracked_policies>(clock, idem::hedging{{.quantile = 0.9}});
  CHECK_THROWS_WITH((idem::async_retrying<downstream, tracked_policies>{
                        io.get_executor(), downstream{clock, [](int) { return 1ms; }}, o}),
                    Catch::Matchers::Contains("hedging quantile"));
}

namespace {

using idem_test::heavy_tail;

nanoseconds percentile(std::vector<nanoseconds> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(q * static_cast<double>(values.size() - 1))];
}

struct tracked_unhedged_policies : test_net::manual_policies {
  using backoff = idem::constant_backoff;
  using latency = idem::latency_tracker;
};

// 10,000 calls to the heavy tail through `Policies`: each call's latency, and the attempts and
// effects the downstream service saw.
template <class Policies>
std::vector<nanoseconds> heavy_tail_run(int calls, int& attempts, int& effects) {
  asio::io_context io;
  idem::manual_clock clock;
  downstream service{clock, heavy_tail{}};
  auto o = test_net::manual_options<downstream, Policies>(clock);
  o.backoff = idem::constant_backoff{1s};
  o.latency = idem::latency_tracker{{.window = 4096, .min_samples = 200}};
  // Timeouts well above the tail: this run is about hedges, not timeouts.
  o.timeouts.start = 10s;
  o.timeouts.factor = 4;
  if constexpr (idem::detail::hedges<typename Policies::hedge>) {
    o.hedge = idem::hedging{{.ratio = 0.05}};
  }
  idem::async_retrying<downstream, Policies> retry{io.get_executor(), service, o};
  std::vector<nanoseconds> took;
  took.reserve(static_cast<std::size_t>(calls));
  for (int i = 0; i < calls; ++i) {
    const nanoseconds start = clock.elapsed();
    const auto outcome = run_one(io, clock, retry);
    REQUIRE(outcome.succeeded());
    took.push_back(clock.elapsed() - start);
  }
  attempts = static_cast<int>(service.keys->size());
  effects = static_cast<int>(service.effects->size());
  return took;
}

}  // namespace

TEST_CASE(
    "hedging: a heavy tail's p99 falls to about p95 plus the hedge, at most 5 percent more "
    "attempts") {
  constexpr int calls = 10'000;
  int plain_attempts = 0, plain_effects = 0, hedged_attempts = 0, hedged_effects = 0;
  const std::vector<nanoseconds> plain =
      heavy_tail_run<tracked_unhedged_policies>(calls, plain_attempts, plain_effects);
  const std::vector<nanoseconds> with_hedges =
      heavy_tail_run<tracked_policies>(calls, hedged_attempts, hedged_effects);
  const nanoseconds median = percentile(plain, 0.5);
  const nanoseconds p95 = percentile(plain, 0.95);
  const nanoseconds plain_p99 = percentile(plain, 0.99);
  const nanoseconds hedged_p99 = percentile(with_hedges, 0.99);
  INFO("median " << median.count() / 1000 << " us, p95 " << p95.count() / 1000 << " us, p99 "
                 << plain_p99.count() / 1000 << " us unhedged and " << hedged_p99.count() / 1000
                 << " us hedged; attempts " << plain_attempts << " and " << hedged_attempts);
  CHECK(plain_attempts == calls);
  CHECK(plain_p99 > 500ms);  // the slow 2%
  // The hedge goes out at about p95 and takes a typical answer's time: far under the tail.
  CHECK(hedged_p99 < p95 + 3 * median);
  CHECK(hedged_attempts > calls);
  CHECK(hedged_attempts <= calls + calls / 20);  // the 5% budget
  // Every hedge went under its operation's key: one effect per operation.
  CHECK(plain_effects == calls);
  CHECK(hedged_effects == calls);
}

}  // namespace async_retrying_hedging_test
