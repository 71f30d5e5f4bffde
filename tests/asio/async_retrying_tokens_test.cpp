// idem::async_retrying with each kind of completion token, each form of call, and waits that
// are timers on the event loop rather than a sleeping thread.
#include "asio/driver.hpp"

#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace async_retrying_tokens_test {

using namespace std::chrono_literals;
namespace asio = test_net::asio;
using test_net::manual_policies;
using test_net::response;

namespace {

// A dependency that answers 503 until its third call.
struct flaky {
  std::shared_ptr<std::vector<std::string>> keys = std::make_shared<std::vector<std::string>>();
  asio::awaitable<response> operator()(const idem::attempt_context& attempt) {
    keys->emplace_back(attempt.key());
    co_return response{keys->size() < 3 ? 503 : 200};
  }
};

}  // namespace

TEST_CASE("use_awaitable completes a coroutine with the retry_outcome") {
  asio::io_context io;
  idem::manual_clock clock;
  flaky dependency;
  idem::async_retrying<flaky, manual_policies> retry{io.get_executor(), dependency,
                                                     test_net::manual_options<flaky>(clock)};
  std::optional<idem::retry_outcome<response>> seen;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { seen = co_await retry.async_call(asio::use_awaitable); },
      asio::detached);
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });
  REQUIRE(seen->succeeded());
  CHECK(seen->attempts() == 3);
  CHECK(dependency.keys->size() == 3);
  CHECK((*dependency.keys)[2] == seen->key());
  CHECK(clock.sleeps() == 2);
}

TEST_CASE("use_future completes a future while the event loop runs on another thread") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::thread loop{[&] { io.run(); }};
  struct real_policies : idem::default_policies {
    using backoff = idem::constant_backoff;
    using budget = idem::unlimited_budget;
  };
  flaky dependency;
  typename idem::async_retrying<flaky, real_policies>::options o;
  o.backoff = idem::constant_backoff{1ms};
  idem::async_retrying<flaky, real_policies> retry{io.get_executor(), dependency, o};
  std::future<idem::retry_outcome<response>> future = retry.async_call(asio::use_future);
  const idem::retry_outcome<response> outcome = future.get();
  guard.reset();
  loop.join();
  CHECK(outcome.succeeded());
  CHECK(outcome.attempts() == 3);
}

TEST_CASE("a deferred operation starts only when it is launched") {
  asio::io_context io;
  idem::manual_clock clock;
  flaky dependency;
  idem::async_retrying<flaky, manual_policies> retry{io.get_executor(), dependency,
                                                     test_net::manual_options<flaky>(clock)};
  auto operation = retry.async_call(test_net::deferred);
  io.poll();
  CHECK(dependency.keys->empty());
  std::optional<idem::retry_outcome<response>> seen;
  std::move(operation)([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });
  CHECK(seen->succeeded());
}

TEST_CASE("a wait is a timer: the event loop runs other work while an operation waits") {
  asio::io_context io;
  idem::manual_clock clock;
  flaky dependency;
  idem::async_retrying<flaky, manual_policies> retry{io.get_executor(), dependency,
                                                     test_net::manual_options<flaky>(clock)};
  bool done = false;
  retry.async_call([&](std::exception_ptr, idem::retry_outcome<response>) { done = true; });
  io.restart();
  io.poll();
  REQUIRE(dependency.keys->size() == 1);  // the first attempt failed; the operation waits
  int other_work = 0;
  for (int i = 0; i < 3; ++i)
    asio::post(io, [&] { ++other_work; });
  io.restart();
  io.poll();
  CHECK(other_work == 3);  // the loop's one thread was free during the wait
  CHECK_FALSE(done);
  CHECK(clock.waiting_wakes() == 1);
  test_net::run_until_done(io, clock, [&] { return done; });
  CHECK(dependency.keys->size() == 3);
}

TEST_CASE("the arguments are copied into the operation and given to every attempt") {
  asio::io_context io;
  idem::manual_clock clock;
  std::vector<std::string> seen;
  auto call = [&](const idem::attempt_context&, std::string& text,
                  std::unique_ptr<int>& number) -> asio::awaitable<response> {
    seen.push_back(text + std::to_string(*number));
    co_return response{seen.size() < 2 ? 503 : 200};
  };
  idem::async_retrying<decltype(call), manual_policies> retry{
      io.get_executor(), call, test_net::manual_options<decltype(call)>(clock)};
  bool done = false;
  {
    std::string text = "order-";
    retry.async_call(text, std::make_unique<int>(7),
                     [&](std::exception_ptr, idem::retry_outcome<response> outcome) {
                       done = outcome.succeeded();
                     });
    text = "changed";  // the operation holds its own copy
  }
  test_net::run_until_done(io, clock, [&] { return done; });
  CHECK(seen == std::vector<std::string>{"order-7", "order-7"});
}

namespace {

// An Asio initiating function: completes with (error_code, int) through the token. Refuses the
// connection on its first two calls.
struct initiating_dependency {
  int* calls;
  template <class Token>
  auto operator()(const idem::attempt_context&, Token&& token) {
    return asio::async_initiate<Token, void(idem::asio_error_code, int)>(
        [this](auto handler) {
          const int call = ++*calls;
          auto executor = asio::get_associated_executor(handler);
          asio::post(executor, [handler = std::move(handler), call]() mutable {
            if (call <= 2) {
              std::move(handler)(idem::asio_error_code(asio::error::connection_refused), 0);
            } else {
              std::move(handler)(idem::asio_error_code{}, 42);
            }
          });
        },
        token);
  }
};

struct exception_policies : manual_policies {
  using classifier = idem::exception_classifier<>;
};

}  // namespace

TEST_CASE("an initiating function's error code is an attempt that threw its system_error") {
  asio::io_context io;
  idem::manual_clock clock;
  int calls = 0;
  idem::async_retrying<initiating_dependency, exception_policies> retry{
      io.get_executor(), initiating_dependency{&calls},
      test_net::manual_options<initiating_dependency, exception_policies>(clock)};
  std::optional<idem::retry_outcome<int>> seen;
  retry.async_call([&](std::exception_ptr, idem::retry_outcome<int> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });
  REQUIRE(seen->succeeded());
  CHECK(seen->value() == 42);
  CHECK(calls == 3);
  CHECK(seen->history()[0].kind == idem::disposition::transient);
  CHECK(seen->history()[0].threw);
  CHECK(seen->history()[0].code == static_cast<int>(std::errc::connection_refused));
}

TEST_CASE("an Asio operation's own exception is judged by its error code") {
  asio::io_context io;
  idem::manual_clock clock;
  int calls = 0;
  auto call = [&](const idem::attempt_context&) -> asio::awaitable<int> {
    if (++calls == 1) {
      // What an Asio operation awaited with use_awaitable throws: Boost's system_error under
      // Boost.Asio, std::system_error under standalone Asio.
      throw test_net::system_error(asio::error::connection_reset);
    }
    co_return 7;
  };
  idem::async_retrying<decltype(call), exception_policies> retry{
      io.get_executor(), call, test_net::manual_options<decltype(call), exception_policies>(clock)};
  std::optional<idem::retry_outcome<int>> seen;
  retry.async_call([&](std::exception_ptr, idem::retry_outcome<int> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });
  REQUIRE(seen->succeeded());
  CHECK(calls == 2);
  CHECK(seen->history()[0].kind == idem::disposition::ambiguous);
  CHECK(seen->history()[0].code == static_cast<int>(std::errc::connection_reset));
}

TEST_CASE("a resolve hook may answer with an awaitable") {
  asio::io_context io;
  idem::manual_clock clock;
  int calls = 0;
  int resolves = 0;
  auto charge = [&](const idem::attempt_context&) -> asio::awaitable<response> {
    ++calls;
    throw std::system_error(std::make_error_code(std::errc::timed_out));
    co_return response{201};
  };
  auto ask = [&](const idem::attempt_context&) -> asio::awaitable<std::optional<response>> {
    ++resolves;
    co_return response{200};
  };
  auto both = idem::with_resolver(charge, ask);
  idem::async_retrying<decltype(both), manual_policies> retry{
      io.get_executor(), both, test_net::manual_options<decltype(both)>(clock)};
  std::optional<idem::retry_outcome<response>> seen;
  retry.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
    seen.emplace(std::move(outcome));
  });
  test_net::run_until_done(io, clock, [&] { return seen.has_value(); });
  CHECK(seen->verdict() == idem::retry_verdict::resolved);
  CHECK(seen->value().status == 200);
  CHECK(calls == 1);
  CHECK(resolves == 1);
}

TEST_CASE("the operation runs on the handler's associated executor") {
  asio::io_context io;
  idem::manual_clock clock;
  auto strand = asio::make_strand(io);
  bool on_strand = false;
  auto call = [&](const idem::attempt_context&) -> asio::awaitable<response> {
    on_strand = strand.running_in_this_thread();
    co_return response{200};
  };
  idem::async_retrying<decltype(call), manual_policies> retry{
      io.get_executor(), call, test_net::manual_options<decltype(call)>(clock)};
  bool done = false;
  retry.async_call(asio::bind_executor(
      strand, [&](std::exception_ptr, idem::retry_outcome<response>) { done = true; }));
  test_net::run_until_done(io, clock, [&] { return done; });
  CHECK(on_strand);
}

TEST_CASE("async_with_key refuses an invalid key before anything starts") {
  asio::io_context io;
  idem::manual_clock clock;
  flaky dependency;
  idem::async_retrying<flaky, manual_policies> retry{io.get_executor(), dependency,
                                                     test_net::manual_options<flaky>(clock)};
  auto ignore = [](std::exception_ptr, idem::retry_outcome<response>) {};
  CHECK_THROWS_AS(retry.async_with_key("", ignore), std::invalid_argument);
  CHECK_THROWS_AS(retry.async_with_key("has space", ignore), std::invalid_argument);
  io.poll();
  CHECK(dependency.keys->empty());
  typename idem::async_retrying<flaky, manual_policies>::options negative;
  negative.attempt_timeout = -1ms;
  CHECK_THROWS_AS(
      (idem::async_retrying<flaky, manual_policies>{io.get_executor(), dependency, negative}),
      std::invalid_argument);
}

}  // namespace async_retrying_tokens_test
