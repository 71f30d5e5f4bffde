// Cancelling an async_retrying operation (the completion handler's cancellation slot) during a
// wait or during an attempt, and the per-attempt timeout. The clang build runs these under
// AddressSanitizer with leak detection: a timer or coroutine frame left behind fails it.
#include "asio/driver.hpp"

#include <memory>
#include <string>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
namespace asio = test_net::asio;
using test_net::response;

namespace {

struct manual_policies : test_net::manual_policies {
  using backoff = idem::constant_backoff;
};

// A downstream call that takes `takes` of the manual clock, then answers `status`; it counts
// its calls and remembers the keys it was sent.
struct slow_call {
  idem::manual_clock clock;
  std::chrono::nanoseconds takes;
  int status = 200;
  std::shared_ptr<std::vector<std::string>> keys = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<int> finished = std::make_shared<int>(0);

  asio::awaitable<response> operator()(const idem::attempt_context& attempt) {
    keys->emplace_back(attempt.key());
    idem::clock_timer timer{co_await asio::this_coro::executor, clock};
    co_await timer.async_wait_until(clock.now() + takes, asio::use_awaitable);
    ++*finished;
    co_return response{status};
  }
};

template <class Call>
typename idem::async_retrying<Call, manual_policies>::options manual(
    idem::manual_clock clock, std::chrono::nanoseconds attempt_timeout = {}) {
  auto o = test_net::manual_options<Call, manual_policies>(clock);
  o.backoff = idem::constant_backoff{1s};
  o.attempt_timeout = attempt_timeout;
  return o;
}

struct recorded {
  std::optional<idem::retry_outcome<response>> outcome;
  int completions = 0;
};

// Starts an operation whose handler is bound to `signal`'s slot.
template <class Retry>
void start(Retry& retry, asio::cancellation_signal& signal, recorded& into) {
  retry.async_call(asio::bind_cancellation_slot(
      signal.slot(), [&into](std::exception_ptr, idem::retry_outcome<response> outcome) {
        ++into.completions;
        into.outcome.emplace(std::move(outcome));
      }));
}

}  // namespace

TEST_CASE("cancelling during a wait ends the operation cancelled, with no further attempt") {
  asio::io_context io;
  idem::manual_clock clock;
  slow_call call{clock, 0ms, 503};
  idem::async_retrying<slow_call, manual_policies> retry{io.get_executor(), call,
                                                         manual<slow_call>(clock)};
  asio::cancellation_signal signal;
  recorded seen;
  start(retry, signal, seen);
  io.poll();  // the first attempt answers 503; the operation waits 1 s
  REQUIRE(call.keys->size() == 1);
  REQUIRE(clock.waiting_wakes() == 1);

  signal.emit(asio::cancellation_type::terminal);
  test_net::run_until_done(io, clock, [&] { return seen.outcome.has_value(); });

  CHECK(seen.outcome->verdict() == idem::retry_verdict::cancelled);
  CHECK(seen.outcome->attempts() == 1);
  CHECK(seen.outcome->value().status == 503);  // the last answer, as it came
  clock.advance(10s);
  io.restart();
  io.poll();
  CHECK(call.keys->size() == 1);
  CHECK(seen.completions == 1);
  CHECK(clock.waiting_wakes() == 0);
}

TEST_CASE("cancelling during an attempt cuts it short and records it as ambiguous") {
  asio::io_context io;
  idem::manual_clock clock;
  slow_call call{clock, 10s};
  idem::async_retrying<slow_call, manual_policies> retry{io.get_executor(), call,
                                                         manual<slow_call>(clock)};
  asio::cancellation_signal signal;
  recorded seen;
  start(retry, signal, seen);
  io.poll();  // the attempt is in flight, waiting on its downstream
  REQUIRE(call.keys->size() == 1);

  signal.emit(asio::cancellation_type::terminal);
  test_net::run_until_done(io, clock, [&] { return seen.outcome.has_value(); });

  const auto& outcome = *seen.outcome;
  CHECK(outcome.verdict() == idem::retry_verdict::cancelled);
  REQUIRE(outcome.attempts() == 1);
  CHECK(outcome.history()[0].kind == idem::disposition::ambiguous);
  CHECK(outcome.history()[0].threw);
  CHECK_THROWS(outcome.value());  // the attempt's operation_aborted, as it was thrown
  CHECK(*call.finished == 0);
  CHECK(clock.elapsed() < 10s);
  CHECK(seen.completions == 1);
}

TEST_CASE("a cancelled operation's key is never used again") {
  asio::io_context io;
  idem::manual_clock clock;
  slow_call call{clock, 0ms, 503};
  idem::async_retrying<slow_call, manual_policies> retry{io.get_executor(), call,
                                                         manual<slow_call>(clock)};
  asio::cancellation_signal first_signal;
  recorded first;
  start(retry, first_signal, first);
  io.poll();
  first_signal.emit(asio::cancellation_type::terminal);
  test_net::run_until_done(io, clock, [&] { return first.outcome.has_value(); });

  retry.call().status = 200;
  asio::cancellation_signal second_signal;
  recorded second;
  start(retry, second_signal, second);
  test_net::run_until_done(io, clock, [&] { return second.outcome.has_value(); });

  CHECK(second.outcome->succeeded());
  CHECK(second.outcome->key() != first.outcome->key());
  REQUIRE(call.keys->size() == 2);
  CHECK((*call.keys)[1] != (*call.keys)[0]);
}

TEST_CASE("an attempt that outlives attempt_timeout is a timeout, repeated under the same key") {
  asio::io_context io;
  idem::manual_clock clock;
  struct first_slow {
    slow_call slow;
    asio::awaitable<response> operator()(const idem::attempt_context& attempt) {
      slow.takes = attempt.attempt() == 1 ? 30s : 100ms;
      co_return co_await slow(attempt);
    }
  };
  first_slow call{slow_call{clock, 0ms}};
  idem::async_retrying<first_slow, manual_policies> retry{io.get_executor(), call,
                                                          manual<first_slow>(clock, 2s)};
  std::optional<idem::retry_outcome<response>> seen;
  retry.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });

  REQUIRE(seen->succeeded());
  REQUIRE(seen->attempts() == 2);
  const auto& timed_out = seen->history()[0];
  CHECK(timed_out.kind == idem::disposition::ambiguous);
  CHECK(timed_out.code == static_cast<int>(std::errc::timed_out));
  CHECK(timed_out.threw);
  CHECK(seen->history()[1].started_at == 3s);  // 2 s of attempt, then the 1 s wait
  REQUIRE(call.slow.keys->size() == 2);
  CHECK((*call.slow.keys)[0] == (*call.slow.keys)[1]);
  CHECK(*call.slow.finished == 1);  // the slow attempt was cancelled, never finished
  CHECK(clock.waiting_wakes() == 0);
}

TEST_CASE("an attempt within attempt_timeout is not disturbed by it") {
  asio::io_context io;
  idem::manual_clock clock;
  slow_call call{clock, 500ms};
  idem::async_retrying<slow_call, manual_policies> retry{io.get_executor(), call,
                                                         manual<slow_call>(clock, 2s)};
  std::optional<idem::retry_outcome<response>> seen;
  retry.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });
  CHECK(seen->succeeded());
  CHECK(seen->attempts() == 1);
  CHECK(clock.elapsed() == 500ms);
  CHECK(clock.waiting_wakes() == 0);  // the timeout's wake was withdrawn
}

TEST_CASE("cancelling a timed attempt ends the operation cancelled, not timed out") {
  asio::io_context io;
  idem::manual_clock clock;
  slow_call call{clock, 10s};
  idem::async_retrying<slow_call, manual_policies> retry{io.get_executor(), call,
                                                         manual<slow_call>(clock, 5s)};
  asio::cancellation_signal signal;
  recorded seen;
  start(retry, signal, seen);
  io.poll();
  signal.emit(asio::cancellation_type::terminal);
  test_net::run_until_done(io, clock, [&] { return seen.outcome.has_value(); });
  CHECK(seen.outcome->verdict() == idem::retry_verdict::cancelled);
  CHECK(seen.outcome->attempts() == 1);
  CHECK(call.keys->size() == 1);
  CHECK(clock.elapsed() == 0s);
}

TEST_CASE("a coroutine awaiting the operation cancels it with its own cancellation") {
  asio::io_context io;
  idem::manual_clock clock;
  slow_call call{clock, 0ms, 503};
  idem::async_retrying<slow_call, manual_policies> retry{io.get_executor(), call,
                                                         manual<slow_call>(clock)};
  asio::cancellation_signal signal;
  std::optional<idem::retry_verdict> verdict;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto outcome = co_await retry.async_call(asio::use_awaitable);
        verdict = outcome.verdict();
      },
      asio::bind_cancellation_slot(signal.slot(), asio::detached));
  io.poll();
  signal.emit(asio::cancellation_type::terminal);
  test_net::run_until_done(io, clock, [&] { return verdict.has_value(); });
  CHECK(verdict == idem::retry_verdict::cancelled);
  CHECK(call.keys->size() == 1);
}

TEST_CASE("with a latency tracker an attempt is cut at the timeout its latency gives") {
  struct tracked_policies : manual_policies {
    using latency = idem::latency_tracker;
  };
  asio::io_context io;
  idem::manual_clock clock;
  struct first_slow {
    slow_call slow;
    std::shared_ptr<std::vector<std::chrono::nanoseconds>> timeouts =
        std::make_shared<std::vector<std::chrono::nanoseconds>>();
    asio::awaitable<response> operator()(const idem::attempt_context& attempt) {
      timeouts->push_back(attempt.timeout());
      slow.takes = attempt.attempt() == 1 ? 30s : 100ms;
      co_return co_await slow(attempt);
    }
  };
  // The dependency has answered in 200 ms, a thousand times: its attempts get 300 ms. Every
  // attempt timed (no sampling), so that what each one fed the tracker can be counted.
  idem::latency_tracker dependency{{.window = 4096, .min_samples = 1000, .sample_every = 1}};
  for (int i = 0; i < 1000; ++i)
    dependency.record(200ms);
  first_slow call{slow_call{clock, 0ms}};
  auto options = test_net::manual_options<first_slow, tracked_policies>(clock);
  options.backoff = idem::constant_backoff{1s};
  options.latency = dependency;
  idem::async_retrying<first_slow, tracked_policies> retry{io.get_executor(), call, options};
  std::optional<idem::retry_outcome<response>> seen;
  retry.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });

  REQUIRE(seen->succeeded());
  REQUIRE(seen->attempts() == 2);
  CHECK(seen->history()[0].code == static_cast<int>(std::errc::timed_out));
  CHECK(seen->history()[0].kind == idem::disposition::ambiguous);
  REQUIRE(call.timeouts->size() == 2);
  const auto ms = [](std::chrono::nanoseconds d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  CHECK(ms((*call.timeouts)[0]) >= 297);  // 200 ms x 1.5, within the sketch's 0.8%
  CHECK(ms((*call.timeouts)[0]) <= 303);
  // Cut at its timeout, then the 1 s wait: the second attempt started 1.3 s in.
  CHECK(ms(seen->history()[1].started_at) == ms((*call.timeouts)[0]) + 1000);
  CHECK((*call.slow.keys)[0] == (*call.slow.keys)[1]);
  CHECK(*call.slow.finished == 1);
  CHECK(dependency.samples() == 1002);  // both attempts fed it: the cut one as its timeout
  CHECK(clock.waiting_wakes() == 0);
}

TEST_CASE("async_retrying waits on a timer for the limiter's permit, and a cancel ends the wait") {
  struct limited_policies : manual_policies {
    using limiter = idem::token_bucket_limiter;
  };
  asio::io_context io;
  idem::manual_clock clock;
  slow_call call{clock, 0ms};
  auto options = test_net::manual_options<slow_call, limited_policies>(clock);
  options.limiter = idem::token_bucket_limiter{{.rate = 10, .burst = 1}};  // every 100 ms
  idem::async_retrying<slow_call, limited_policies> retry{io.get_executor(), call, options};

  std::vector<std::chrono::nanoseconds> ended;
  for (int i = 0; i < 3; ++i) {
    retry.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
      CHECK(outcome.verdict() == idem::retry_verdict::succeeded);
      ended.push_back(clock.elapsed());
    });
  }
  test_net::run_until_done(io, clock, [&] { return ended.size() == 3; });
  CHECK(ended == std::vector<std::chrono::nanoseconds>{0ms, 100ms, 200ms});

  // The next permit is 100 ms away; the caller gives up during the wait.
  asio::cancellation_signal signal;
  recorded seen;
  start(retry, signal, seen);
  io.restart();
  io.poll();
  REQUIRE(clock.waiting_wakes() == 1);
  signal.emit(asio::cancellation_type::terminal);
  test_net::run_until_done(io, clock, [&] { return seen.outcome.has_value(); });
  CHECK(seen.outcome->verdict() == idem::retry_verdict::cancelled);
  CHECK(seen.outcome->attempts() == 0);
  CHECK(call.keys->size() == 3);
  CHECK(clock.waiting_wakes() == 0);
}
