// Nesting across coroutines: the layer travels with the operation (its executor), not with the
// thread. A nested async_retrying makes one attempt; an unrelated operation interleaved on the
// same thread still retries. (tests/mutants/nesting_per_thread.patch puts a thread-local
// counter back, and the interleaving case fails.)
#include "asio/driver.hpp"

#include <memory>

namespace async_retrying_nesting_test {

using namespace std::chrono_literals;
namespace asio = test_net::asio;
using test_net::manual_policies;
using test_net::response;

namespace {

// Always 503, counting its calls.
struct failing {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  asio::awaitable<response> operator()(const idem::attempt_context&) {
    ++*calls;
    co_return response{503};
  }
};

template <class Call>
typename idem::async_retrying<Call, manual_policies>::options manual(idem::manual_clock clock) {
  auto o = test_net::manual_options<Call>(clock);
  o.limits = {3, 1000s};
  return o;
}

}  // namespace

TEST_CASE("an async_retrying inside another's attempt makes one attempt") {
  asio::io_context io;
  idem::manual_clock clock;
  failing innermost;
  idem::async_retrying<failing, manual_policies> inner{io.get_executor(), innermost,
                                                       manual<failing>(clock)};
  std::vector<idem::retry_verdict> inner_verdicts;
  auto outer_call = [&](const idem::attempt_context&) -> asio::awaitable<response> {
    auto outcome = co_await inner.async_call(asio::use_awaitable);
    inner_verdicts.push_back(outcome.verdict());
    co_return outcome.value();
  };
  idem::async_retrying<decltype(outer_call), manual_policies> outer{
      io.get_executor(), outer_call, manual<decltype(outer_call)>(clock)};
  std::optional<idem::retry_outcome<response>> seen;
  outer.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });

  CHECK(seen->verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK(*innermost.calls == 3);  // not 9: only the outer layer retries
  CHECK(inner_verdicts == std::vector<idem::retry_verdict>(3, idem::retry_verdict::not_retried));
}

TEST_CASE("an unrelated operation interleaved on the same thread still retries") {
  asio::io_context io;  // one thread runs both operations
  idem::manual_clock clock;

  // The outer operation's attempt suspends for 5 s inside its downstream call.
  auto slow_call = [&](const idem::attempt_context&) -> asio::awaitable<response> {
    idem::clock_timer timer{co_await asio::this_coro::executor, clock};
    co_await timer.async_wait_until(clock.now() + 5s, asio::use_awaitable);
    co_return response{200};
  };
  idem::async_retrying<decltype(slow_call), manual_policies> slow{
      io.get_executor(), slow_call, manual<decltype(slow_call)>(clock)};
  bool slow_done = false;
  slow.async_call([&](std::exception_ptr, auto) { slow_done = true; });
  io.poll();
  REQUIRE_FALSE(slow_done);  // suspended inside its attempt

  // Meanwhile, on the same thread, an operation that has nothing to do with it.
  failing dependency;
  idem::async_retrying<failing, manual_policies> unrelated{io.get_executor(), dependency,
                                                           manual<failing>(clock)};
  std::optional<idem::retry_outcome<response>> seen;
  unrelated.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value() && slow_done; });

  CHECK(*dependency.calls == 3);
  CHECK(seen->verdict() == idem::retry_verdict::attempts_exhausted);
}

TEST_CASE("an operation's attempts run in its layer") {
  asio::io_context io;
  idem::manual_clock clock;
  int depth_in_attempt = -1;
  auto probe = [&](const idem::attempt_context&) -> asio::awaitable<response> {
    depth_in_attempt = idem::detail::layer_of(co_await asio::this_coro::executor);
    co_return response{200};
  };
  idem::async_retrying<decltype(probe), manual_policies> retry{io.get_executor(), probe,
                                                               manual<decltype(probe)>(clock)};
  bool done = false;
  retry.async_call([&](std::exception_ptr, auto) { done = true; });
  test_net::run_until_done(io, clock, [&] { return done; });
  CHECK(depth_in_attempt == 1);
}

}  // namespace async_retrying_nesting_test
