// Cancelling async_idempotent::async_call through its cancellation slot, at each point a call
// can wait: the coalescing wait, the handler, a step. Each ends with verdict::cancelled, records
// nothing twice, settles a started handler's claim by the failure policy, and leaves no wake,
// timer or coroutine frame behind (the sanitizer build checks the frames).
#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "asio/event_loop.hpp"
#include "asio/net.hpp"
#include "asio/server_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace asio = idem::asio;
using idem::verdict;
using outcome = idem::idempotent_outcome<idem::http_response>;
using test_async::completion;
using test_async::downstream;
using test_async::run_until;

// A handler that charges at once, then waits `email_takes` in its second step.
struct slow_email_handler {
  idem::manual_clock clock;
  std::chrono::nanoseconds email_takes = 90s;
  bool step_first = true;
  std::shared_ptr<int> runs = std::make_shared<int>(0);
  std::shared_ptr<int> emails = std::make_shared<int>(0);
  std::shared_ptr<int> waiting = std::make_shared<int>(0);  // downstream calls begun

  asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                  const idem::http_request&) const {
    ++*runs;
    if (step_first) {
      co_await ctx.async_step("charge", [&]() -> asio::awaitable<int> { co_return 7; });
      co_await ctx.async_step("email", [&]() -> asio::awaitable<void> {
        ++*waiting;
        co_await downstream(clock, email_takes);
        ++*emails;
      });
    } else {
      ++*waiting;
      co_await downstream(clock, email_takes);
    }
    co_return idem::http_response{201, {}, "sent"};
  }
};

template <class Policies>
struct cancel_run {
  using guard = idem::async_idempotent<slow_email_handler, Policies>;

  asio::io_context io;
  idem::manual_clock clock;
  slow_email_handler handler{clock};
  typename guard::options parts;
  std::unique_ptr<guard> payments;
  const idem::http_request request = test_async::charge();
  asio::cancellation_signal signal;
  completion<outcome> call;

  explicit cancel_run(bool heartbeat = true, bool step_first = true, bool isolate = false) {
    parts.clock = clock;
    parts.heartbeat = heartbeat;
    parts.isolate_handler = isolate;
    handler.step_first = step_first;
  }
  void make() { payments = std::make_unique<guard>(io.get_executor(), handler, parts); }
  void start() {
    if (!payments) make();
    payments->async_call("tenant", request,
                         asio::bind_cancellation_slot(signal.slot(), call.handler()));
  }
  outcome cancel(asio::cancellation_type type = asio::cancellation_type::terminal) {
    signal.emit(type);
    run_until(io, clock, [&] { return call.done; });
    return call.take();
  }
  std::optional<idem::record> record() {
    return payments->store().find("tenant", "order-1", clock.wall_now());
  }
};

using default_run = cancel_run<test_async::manual_policies>;

}  // namespace

TEST_CASE("cancelled while it waits for a duplicate, a call answers cancelled and claims nothing") {
  default_run run;
  run.parts.coalesce = 10s;
  run.make();
  // Another attempt holds the key.
  const idem::digest held = run.payments->fingerprint()(idem::view_of(run.request));
  REQUIRE(run.payments->store()
              .claim(idem::claim_request{"tenant", "order-1", held, run.clock.wall_now(), 30s, 24h})
              .status == idem::claim_status::claimed);
  run.start();
  run.io.poll();
  REQUIRE(run.clock.advance_to_next_wake());  // one pause waited, the next begun
  run.io.poll();
  REQUIRE(run.clock.waiting_wakes() == 1);

  const outcome cancelled = run.cancel();
  CHECK(cancelled.verdict() == verdict::cancelled);
  CHECK(cancelled.http_status() == 503);
  CHECK_THAT(std::string(cancelled.message()), Catch::Matchers::Contains("nothing was claimed"));
  CHECK(*run.handler.runs == 0);
  CHECK(run.clock.waiting_wakes() == 0);
  const auto record = run.record();
  REQUIRE(record);
  CHECK(record->state == idem::record_state::in_progress);
  CHECK(record->fence == 1);
}

TEST_CASE("a handler cancelled mid-call is settled as a throw: the key is released") {
  // With the heartbeat, the handler in the call's coroutine or on one of its own; without.
  for (const auto& [heartbeat, isolate] :
       {std::pair{true, false}, std::pair{true, true}, std::pair{false, false}}) {
    INFO("heartbeat " << heartbeat << ", isolate_handler " << isolate);
    default_run run{heartbeat, false, isolate};
    run.start();
    run_until(run.io, run.clock, [&] { return *run.handler.waiting == 1; });
    run.io.poll();
    REQUIRE_FALSE(run.call.done);

    const outcome cancelled = run.cancel();
    CHECK(cancelled.verdict() == verdict::cancelled);
    CHECK_THAT(std::string(cancelled.message()), Catch::Matchers::Contains("handler ran"));
    CHECK_FALSE(run.record());  // released: a retry runs again
    CHECK(run.clock.waiting_wakes() == 0);
    CHECK(run.clock.now() == idem::manual_clock::time_point{});

    completion<outcome> retry;
    run.handler.email_takes = 0s;
    run.payments->async_call("tenant", run.request, retry.handler());
    run_until(run.io, run.clock, [&] { return retry.done; });
    CHECK(retry.take().verdict() == verdict::executed);
  }
}

TEST_CASE("a call cancelled inside a step records neither that step nor the response") {
  for (const auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                          asio::cancellation_type::total}) {
    INFO("cancellation type " << static_cast<int>(type));
    default_run run;
    run.start();
    run_until(run.io, run.clock, [&] { return *run.handler.waiting == 1; });
    const outcome cancelled = run.cancel(type);
    CHECK(cancelled.verdict() == verdict::cancelled);
    CHECK(*run.handler.emails == 0);
    // Released by the default policy, even though "charge" was recorded: the step's name and
    // value went with the record.
    CHECK_FALSE(run.record());
    CHECK(run.clock.waiting_wakes() == 0);
  }
}

TEST_CASE("a call cancelled after a recorded step is settled by the failure policy: stored") {
  cancel_run<test_async::stripe_store_policies<idem::memory_store>> run;
  run.start();
  run_until(run.io, run.clock, [&] { return *run.handler.waiting == 1; });
  const outcome cancelled = run.cancel();
  CHECK(cancelled.verdict() == verdict::cancelled);
  const auto record = run.record();
  REQUIRE(record);
  CHECK(record->state == idem::record_state::completed);

  // Once: the repeat replays the stored failure and runs nothing.
  completion<outcome> repeat;
  run.payments->async_call("tenant", run.request, repeat.handler());
  run_until(run.io, run.clock, [&] { return repeat.done; });
  const outcome replayed = repeat.take();
  CHECK(replayed.verdict() == verdict::replayed);
  CHECK(replayed.http_status() == 500);
  CHECK(*run.handler.runs == 1);
  CHECK(*run.handler.emails == 0);
}
