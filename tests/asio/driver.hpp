// The asynchronous driver of the shared client cases (tests/unit/client/retry_cases.hpp): a
// wrapper that runs idem::async_retrying to completion on its own io_context, so that the cases
// written for the blocking retrying run unchanged through the asynchronous one.
//
// The cases' calls are plain functions; awaitable_call adapts one to the asynchronous form (a
// coroutine that runs it), resolve hook included. run_until_done is the test event loop: it
// runs what is ready and, when nothing is, moves a manual clock to its next wake, so waits of
// seconds take no time and the delays are the ones the blocking driver sleeps.
#ifndef IDEM_TESTS_ASIO_DRIVER_HPP
#define IDEM_TESTS_ASIO_DRIVER_HPP

#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include <exception>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "asio/net.hpp"
#include "unit/client/retry_support.hpp"

namespace test_net {

/// What the asynchronous drivers' own tests' calls answer.
struct response {
  int status;
};

/// A manual clock and no budget: each test adds what it is about.
struct manual_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using budget = idem::unlimited_budget;
};

/// async_retrying's parts on `clock`, with a fixed seed.
template <class Call, class Policies = manual_policies>
typename idem::async_retrying<Call, Policies>::options manual_options(idem::manual_clock clock) {
  typename idem::async_retrying<Call, Policies>::options o;
  o.clock = clock;
  o.seed = 7;
  return o;
}

/// Runs `io` until `done()`: what is ready first, then (under a manual clock) the next wake.
/// Fails the test if nothing is left to run and `done()` is still false.
template <class Clock, class Done>
void run_until_done(asio::io_context& io, Clock& clock, Done done) {
  for (;;) {
    io.restart();
    io.poll();
    if (done()) return;
    if constexpr (idem::WakingClock<Clock>) {
      if (clock.advance_to_next_wake()) continue;
    }
    io.restart();
    if (io.run_one() == 0 && !done()) {
      FAIL("the operation never completed: nothing is left to run");
    }
  }
}

/// A synchronous call as an asynchronous one: a coroutine that runs it.
template <class Call>
struct awaitable_call {
  Call call;

  template <class... Args>
  asio::awaitable<idem::detail::call_result_t<Call, Args...>> operator()(
      const idem::attempt_context& context, Args&... args) {
    if constexpr (idem::detail::takes_context<Call, Args...>) {
      co_return std::invoke(call, context, args...);
    } else {
      co_return std::invoke(call, args...);
    }
  }

  template <class... Args>
  requires requires(Call& c, const idem::attempt_context& context, Args&... args) {
    c.resolve(context, args...);
  }
  decltype(auto) resolve(const idem::attempt_context& context, Args&... args) {
    return call.resolve(context, args...);
  }
};

/// async_retrying over `Call`, with the blocking retrying's interface, on its own io_context.
template <class Call, class Policies>
class async_driven {
  using wrapper_type = idem::async_retrying<awaitable_call<Call>, Policies>;

 public:
  async_driven(Call call, retry_cases::retry_options<Policies> parts)
      : retry_(io_.get_executor(), awaitable_call<Call>{std::move(call)}, async_options(parts)) {}

  template <class... Args>
  auto operator()(Args&&... args) {
    return complete<Args...>(
        [&](auto handler) { retry_.async_call(std::forward<Args>(args)..., std::move(handler)); });
  }
  template <class... Args>
  auto with_key(std::string_view key, Args&&... args) {
    return complete<Args...>([&](auto handler) {
      retry_.async_with_key(key, std::forward<Args>(args)..., std::move(handler));
    });
  }

  Call& call() noexcept { return retry_.call().call; }
  auto& clock() noexcept { return retry_.clock(); }
  auto& budget() noexcept { return retry_.budget(); }
  auto& breaker() noexcept { return retry_.breaker(); }
  auto& observer() noexcept { return retry_.observer(); }
  asio::io_context& io() noexcept { return io_; }

 private:
  static typename wrapper_type::options async_options(retry_cases::retry_options<Policies> parts) {
    typename wrapper_type::options o;
    static_cast<retry_cases::retry_options<Policies>&>(o) = std::move(parts);
    return o;
  }

  template <class... Args, class Start>
  auto complete(Start start) {
    using result_type =
        idem::detail::async_call_result_t<awaitable_call<Call>, std::decay_t<Args>...>;
    std::optional<idem::retry_outcome<result_type>> outcome;
    std::exception_ptr failure;
    start([&](std::exception_ptr error, idem::retry_outcome<result_type> done) {
      failure = error;
      outcome.emplace(std::move(done));
    });
    run_until_done(io_, retry_.clock(), [&] { return outcome.has_value(); });
    if (failure) std::rethrow_exception(failure);
    return std::move(*outcome);
  }

  asio::io_context io_;
  wrapper_type retry_;
};

struct async_driver {
  template <class Policies, class Call>
  static async_driven<Call, Policies> wrap(Call call, retry_cases::retry_options<Policies> o) {
    return async_driven<Call, Policies>(std::move(call), std::move(o));
  }
};

}  // namespace test_net

#endif  // IDEM_TESTS_ASIO_DRIVER_HPP
