// idem::async_idempotent: what the asynchronous driver adds to the blocking wrapper's verdicts
// (those are async_conformance_test.cpp's): coroutine handlers and async_step, completion
// tokens, the lease heartbeat, a blocking store's calls off the event loop, and cancellation.
// Time is a manual_clock moved by the test's event loop (event_loop.hpp): nothing sleeps.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>
#include <idem/testing/faulty_store.hpp>
#include <idem/testing/posted_store.hpp>

#include <chrono>
#include <cstddef>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "asio/event_loop.hpp"
#include "asio/net.hpp"
#include "asio/server_support.hpp"

namespace {

using namespace std::chrono_literals;
using test_async::charge;
using test_async::completion;
using test_async::downstream;
using test_async::run_until;
namespace asio = idem::asio;
using outcome = idem::idempotent_outcome<idem::http_response>;
using idem::verdict;

template <class T>
T run_to_end(asio::io_context& io, idem::manual_clock& clock, asio::awaitable<T> work) {
  completion<T> done;
  asio::co_spawn(io, std::move(work), done.handler());
  run_until(io, clock, [&] { return done.done; });
  return done.take();
}

// A handler whose charge is a recovery point around a downstream call of `takes`.
// `hears_lease_lost`: the downstream call is bound to the context's lease_lost_slot().
struct charging_handler {
  idem::manual_clock clock;
  std::chrono::nanoseconds takes = 0s;
  std::shared_ptr<int> charges = std::make_shared<int>(0);
  std::shared_ptr<int> emails = std::make_shared<int>(0);
  bool hears_lease_lost = false;

  asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                  const idem::http_request& request) const {
    const std::string id = co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
      ++*charges;
      if (takes > 0s && hears_lease_lost) {
        co_await downstream(clock, takes, ctx.lease_lost_slot());
      } else if (takes > 0s) {
        co_await downstream(clock, takes);
      }
      co_return "ch_" + std::to_string(ctx.fence());
    });
    co_await ctx.async_step("email", [&]() -> asio::awaitable<void> {
      ++*emails;
      co_return;
    });
    co_return idem::http_response{201, {}, id + " for " + request.body};
  }
};

using guard = idem::async_idempotent<charging_handler, test_async::manual_policies>;

guard::options on(const idem::manual_clock& clock) {
  guard::options parts;
  parts.clock = clock;
  return parts;
}

}  // namespace

TEST_CASE("a coroutine handler runs once and its repeat replays the stored response") {
  asio::io_context io;
  idem::manual_clock clock;
  charging_handler handler{clock};
  guard payments{io.get_executor(), handler, on(clock)};
  const idem::http_request request = charge("order-1");

  const outcome first =
      run_to_end(io, clock, payments.async_call("tenant", request, asio::use_awaitable));
  REQUIRE(first.verdict() == verdict::executed);
  CHECK(first->body == "ch_1 for {\"amount\":100}");
  CHECK(first.fence() == 1);
  const outcome second =
      run_to_end(io, clock, payments.async_call("tenant", request, asio::use_awaitable));
  CHECK(second.verdict() == verdict::replayed);
  CHECK(second.value() == first.value());
  CHECK(*handler.charges == 1);
  CHECK(*handler.emails == 1);
}

// A handler taking only the request: answers "echo " and the body, and counts its runs.
struct echo_handler {
  int* runs;
  asio::awaitable<std::string> operator()(const idem::http_request& request) const {
    ++*runs;
    co_return "echo " + request.body;
  }
};

// A wrapper's options on the test's clock.
template <class Wrapper>
typename Wrapper::options options_on(const idem::manual_clock& clock) {
  typename Wrapper::options parts;
  parts.clock = clock;
  return parts;
}

TEST_CASE("a handler taking only the request is guarded, and an explicit key is used as given") {
  asio::io_context io;
  idem::manual_clock clock;
  int runs = 0;
  using plain = idem::async_idempotent<echo_handler, test_async::manual_policies>;
  plain guarded{io.get_executor(), echo_handler{&runs}, options_on<plain>(clock)};
  const idem::http_request request = charge("");  // no header: the key comes apart

  auto call = [&](std::optional<std::string_view> key) {
    return run_to_end(io, clock, guarded.async_call("tenant", key, request, asio::use_awaitable));
  };
  CHECK(call(std::nullopt).verdict() == verdict::missing_key);
  CHECK(call("k-1").verdict() == verdict::executed);
  const auto again = call("k-1");
  CHECK(again.verdict() == verdict::replayed);
  CHECK(again.value() == "echo {\"amount\":100}");
  CHECK(runs == 1);
}

// The response recorded by a store whose calls run inline is the call's last act, made where the
// caller's co_await reads it: a store that fails there answers as the blocking wrapper does (the
// response, marked not recorded, with the store's message), and a completion whose answer was
// lost after the store wrote it is replayed by the next call.
TEST_CASE(
    "a completion the store fails answers the response unrecorded, and a lost answer replays") {
  asio::io_context io;
  idem::manual_clock clock;
  int runs = 0;
  using faulty = idem::testing::faulty_store<idem::memory_store>;
  struct faulty_policies : test_async::manual_policies {
    using store = faulty;
  };
  using plain = idem::async_idempotent<echo_handler, faulty_policies>;
  faulty store;
  plain::options parts = options_on<plain>(clock);
  parts.store = store;
  plain guarded{io.get_executor(), echo_handler{&runs}, parts};
  const idem::http_request request = charge("");
  auto call = [&](std::string_view key) {
    return run_to_end(io, clock, guarded.async_call("tenant", key, request, asio::use_awaitable));
  };

  store.inject({idem::testing::store_operation::complete, 0,
                idem::testing::fault_timing::before_store, faulty::mode::unavailable});
  const auto refused = call("k-before");
  CHECK(refused.verdict() == verdict::executed);
  REQUIRE(refused.has_value());
  CHECK(refused.value() == "echo {\"amount\":100}");
  CHECK_FALSE(refused.recorded());
  CHECK(std::string(refused.message()).find("faulty_store: complete") != std::string::npos);

  store.inject({idem::testing::store_operation::complete, 0,
                idem::testing::fault_timing::after_store, faulty::mode::unavailable});
  const auto lost = call("k-after");
  CHECK(lost.verdict() == verdict::executed);
  CHECK_FALSE(lost.recorded());
  CHECK(store.faults_struck() == 2);
  const auto again = call("k-after");
  CHECK(again.verdict() == verdict::replayed);
  CHECK(again.value() == lost.value());
  CHECK(runs == 2);
}

TEST_CASE("async_call completes through a callback, use_future and deferred alike") {
  asio::io_context io;
  idem::manual_clock clock;
  charging_handler handler{clock};
  guard payments{io.get_executor(), handler, on(clock)};
  const idem::http_request first = charge("by-callback");
  const idem::http_request second = charge("by-future");
  const idem::http_request third = charge("by-deferred");

  completion<outcome> by_callback;
  payments.async_call("tenant", first, by_callback.handler());
  run_until(io, clock, [&] { return by_callback.done; });
  CHECK(by_callback.take().verdict() == verdict::executed);

  std::future<outcome> by_future = payments.async_call("tenant", second, asio::use_future);
  // The call runs to its end on the event loop; use_future's promise may be set on a thread of
  // Asio's system executor after that, so the future is waited for in real time.
  io.restart();
  io.run();
  REQUIRE(by_future.wait_for(10s) == std::future_status::ready);
  CHECK(by_future.get().verdict() == verdict::executed);

  auto deferred = payments.async_call("tenant", third, test_net::deferred);
  completion<outcome> by_deferred;
  CHECK(*handler.charges == 2);  // a deferred operation starts only when it is given a handler
  std::move(deferred)(by_deferred.handler());
  run_until(io, clock, [&] { return by_deferred.done; });
  CHECK(by_deferred.take().verdict() == verdict::executed);
  CHECK(*handler.charges == 3);
}

TEST_CASE("a handler's own exception is the completion's, after the key was released") {
  asio::io_context io;
  idem::manual_clock clock;
  bool fail = true;
  auto handler = [&](idem::async_handler_context&,
                     const idem::http_request&) -> asio::awaitable<idem::http_response> {
    if (fail) throw std::runtime_error("card declined");
    co_return idem::http_response{200, {}, "charged"};
  };
  using throwing = idem::async_idempotent<decltype(handler), test_async::manual_policies>;
  throwing::options parts;
  parts.clock = clock;
  throwing payments{io.get_executor(), handler, parts};
  const idem::http_request request = charge();

  completion<outcome> failed;
  payments.async_call("tenant", request, failed.handler());
  run_until(io, clock, [&] { return failed.done; });
  CHECK_THROWS_WITH(failed.take(), "card declined");
  CHECK_FALSE(payments.store().find("tenant", "order-1", clock.wall_now()));
  fail = false;
  CHECK(run_to_end(io, clock, payments.async_call("tenant", request, asio::use_awaitable))
            .verdict() == verdict::executed);
}

// The original holds the key while its downstream call takes three leases; a duplicate comes
// after the first lease has run out.
struct long_call {
  outcome original;
  outcome duplicate;
  int charges = 0;
};

long_call charge_for_three_leases(bool heartbeat) {
  asio::io_context io;
  idem::manual_clock clock;
  charging_handler handler{clock, 3 * 30s};
  guard::options parts = on(clock);
  parts.lease = 30s;
  parts.heartbeat = heartbeat;
  guard payments{io.get_executor(), handler, parts};
  const idem::http_request request = charge();

  completion<outcome> original;
  completion<outcome> duplicate;
  asio::co_spawn(io, payments.async_call("tenant", request, asio::use_awaitable),
                 original.handler());
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<outcome> {
        co_await downstream(clock, 40s);
        co_return co_await payments.async_call("tenant", request, asio::use_awaitable);
      },
      duplicate.handler());
  run_until(io, clock, [&] { return original.done && duplicate.done; });
  CHECK(clock.waiting_wakes() == 0);
  return long_call{original.take(), duplicate.take(), *handler.charges};
}

TEST_CASE("with the heartbeat a downstream call of three leases has one effect and no takeover") {
  const long_call run = charge_for_three_leases(true);
  CHECK(run.original.verdict() == verdict::executed);
  CHECK(run.original.fence() == 1);
  CHECK_FALSE(run.original.resumed());
  CHECK(run.duplicate.verdict() == verdict::in_progress);
  CHECK(run.charges == 1);
}

TEST_CASE("without the heartbeat the same call is taken over after its lease") {
  const long_call run = charge_for_three_leases(false);
  CHECK(run.duplicate.verdict() == verdict::executed);
  CHECK(run.duplicate.resumed());
  CHECK(run.duplicate.fence() == 2);
  CHECK(run.original.verdict() == verdict::in_progress);  // its fence was lost
  CHECK(run.charges == 2);
}

TEST_CASE("a takeover resumes after the last async_step without running it again") {
  asio::io_context io;
  idem::manual_clock clock;
  int charges = 0;
  auto handler = [&](idem::async_handler_context& ctx,
                     const idem::http_request&) -> asio::awaitable<idem::http_response> {
    const std::string id = co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
      ++charges;
      co_return "ch_" + std::to_string(ctx.fence());
    });
    if (ctx.fence() == 1) co_await downstream(clock, 90s);  // the first holder stalls
    co_return idem::http_response{201, {}, id + " fence " + std::to_string(ctx.fence())};
  };
  using resuming = idem::async_idempotent<decltype(handler), test_async::manual_policies>;
  resuming::options parts;
  parts.clock = clock;
  parts.heartbeat = false;
  resuming payments{io.get_executor(), handler, parts};
  const idem::http_request request = charge();

  completion<outcome> stalled;
  payments.async_call("tenant", request, stalled.handler());
  run_until(io, clock, [&] { return clock.waiting_wakes() == 1; });
  clock.advance(31s);
  const outcome taken =
      run_to_end(io, clock, payments.async_call("tenant", request, asio::use_awaitable));
  CHECK(taken.verdict() == verdict::executed);
  CHECK(taken.resumed());
  CHECK(taken->body == "ch_1 fence 2");
  run_until(io, clock, [&] { return stalled.done; });
  CHECK(stalled.take().verdict() == verdict::replayed);
  CHECK(charges == 1);
}

namespace {

// A call whose handler is 90 s into its downstream call when its fence is stolen.
struct robbed_call {
  outcome lost;
  std::chrono::nanoseconds took{};
  int emails = 0;
  std::size_t wakes_left = 0;
};

robbed_call rob_a_call(bool isolate, bool hears_lease_lost) {
  asio::io_context io;
  idem::manual_clock clock;
  using thief_policies = test_async::store_policies<test_async::fence_thief_store>;
  charging_handler handler{clock, 90s};
  handler.hears_lease_lost = hears_lease_lost;
  using robbed = idem::async_idempotent<charging_handler, thief_policies>;
  test_async::fence_thief_store store;
  robbed::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.isolate_handler = isolate;
  robbed payments{io.get_executor(), handler, parts};
  const idem::http_request request = charge();

  completion<outcome> call;
  payments.async_call("tenant", request, call.handler());
  run_until(io, clock, [&] { return *handler.charges == 1; });
  store.steal();
  run_until(io, clock, [&] { return call.done; });
  return robbed_call{call.take(), clock.now() - idem::manual_clock::time_point{}, *handler.emails,
                     clock.waiting_wakes()};
}

}  // namespace

TEST_CASE("a heartbeat that finds the fence lost cancels the handler, whose next step never runs") {
  // On a coroutine of its own, whatever it awaits; in the call's, what it bound to the context's
  // lease_lost_slot().
  for (const auto& [isolate, hears] : {std::pair{true, false}, std::pair{false, true}}) {
    INFO("isolate_handler " << isolate << ", bound to lease_lost_slot " << hears);
    const robbed_call run = rob_a_call(isolate, hears);
    CHECK(run.lost.verdict() == verdict::in_progress);
    CHECK_THAT(std::string(run.lost.message()), Catch::Matchers::Contains("taken over"));
    CHECK(run.took < 90s);  // cancelled at the first renewal (10 s), not waited out
    CHECK(run.emails == 0);
    CHECK(run.wakes_left == 0);
  }
}

TEST_CASE(
    "a handler in the call's coroutine that ignores the lost lease finishes, its next step "
    "refused and nothing recorded") {
  const robbed_call run = rob_a_call(false, false);
  CHECK(run.lost.verdict() == verdict::in_progress);
  CHECK_THAT(std::string(run.lost.message()), Catch::Matchers::Contains("taken over"));
  CHECK(run.took >= 90s);  // its downstream call ran to its end
  CHECK(run.emails == 0);  // the step after it threw lease_lost
  CHECK(run.wakes_left == 0);
}

TEST_CASE("a handler that never suspends leaves no timer and the event loop runs out of work") {
  asio::io_context io;
  idem::manual_clock clock;
  for (const bool isolate : {false, true}) {
    INFO("isolate_handler " << isolate);
    charging_handler handler{clock};
    guard::options parts = on(clock);
    parts.isolate_handler = isolate;
    guard payments{io.get_executor(), handler, parts};
    const idem::http_request request = charge("");
    for (const char* key : {"k-1", "k-2", "k-3"}) {
      completion<outcome> call;
      payments.async_call("tenant", std::optional<std::string_view>(key), request, call.handler());
      io.restart();
      io.run();  // returns: neither a timer nor a watch is left behind
      REQUIRE(call.done);
      CHECK(call.take().verdict() == verdict::executed);
      CHECK(clock.waiting_wakes() == 0);
    }
    CHECK(*handler.charges == 3);
  }
}

namespace {

// A memory store that counts every key's fenced renewals (checkpoints), and refuses every
// fenced write of the keys a test steals, as a store whose record was taken over refuses them.
class renewal_counting_store : public idem_test::forwarding_store<idem::memory_store> {
 public:
  static constexpr bool never_blocks = true;
  static constexpr bool reads_completion_time = false;

  void steal(const std::string& key) { stolen_->insert(key); }
  std::size_t renewals(const std::string& key) const {
    const auto found = renewals_->find(key);
    return found == renewals_->end() ? 0 : found->second;
  }

  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    ++(*renewals_)[std::string(held.key)];
    if (stolen(held)) return false;
    return inner_.checkpoint(held, recovery, lease_until);
  }
  bool complete(const idem::fenced_key& held, std::string_view response, idem::store_time now) {
    if (stolen(held)) return false;
    return inner_.complete(held, response, now);
  }
  bool release(const idem::fenced_key& held) {
    if (stolen(held)) return false;
    return inner_.release(held);
  }

 private:
  bool stolen(const idem::fenced_key& held) const {
    return stolen_->contains(std::string(held.key));
  }
  std::shared_ptr<std::set<std::string>> stolen_ = std::make_shared<std::set<std::string>>();
  std::shared_ptr<std::map<std::string, std::size_t>> renewals_ =
      std::make_shared<std::map<std::string, std::size_t>>();
};

// A wrapper's options for the 100 s handlers: `store`, `clock`, a 30 s lease (a renewal every
// 10 s), the handler isolated or not.
template <class Guarded, class Store>
typename Guarded::options long_call_options(const Store& store, const idem::manual_clock& clock,
                                            bool isolate) {
  typename Guarded::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.lease = 30s;
  parts.isolate_handler = isolate;
  return parts;
}

// Starts one call of `request` a completion in `done`, each under a key of its own ("k-0",
// "k-1", ...), which `keys` keeps while the calls run.
template <class Guarded>
void start_keyed_calls(Guarded& payments, const idem::http_request& request,
                       std::vector<std::string>& keys, std::vector<completion<outcome>>& done) {
  keys.clear();
  for (std::size_t i = 0; i < done.size(); ++i)
    keys.push_back("k-" + std::to_string(i));
  for (std::size_t i = 0; i < done.size(); ++i) {
    payments.async_call("tenant", std::optional<std::string_view>(keys[i]), request,
                        done[i].handler());
  }
}

// A handler whose downstream call takes 100 s, more than three 30 s leases; notes who finished.
// `hears_lease_lost`: the downstream call is bound to the context's lease_lost_slot().
struct hundred_second_handler {
  idem::manual_clock clock;
  bool hears_lease_lost = true;
  std::shared_ptr<std::set<std::string>> finished = std::make_shared<std::set<std::string>>();

  asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                  const idem::http_request&) const {
    if (hears_lease_lost) {
      co_await downstream(clock, 100s, ctx.lease_lost_slot());
    } else {
      co_await downstream(clock, 100s);
    }
    finished->insert(std::string(ctx.key()));
    co_return idem::http_response{201, {}, "done"};
  }
};

}  // namespace

TEST_CASE(
    "one heartbeat renews 10,000 handlers in flight on one wrapper with one timer, and a lost "
    "fence cancels only its own handler") {
  // The handlers in their calls' coroutines, bound to lease_lost_slot(); or each on its own.
  const bool isolate = GENERATE(false, true);
  INFO("isolate_handler " << isolate);
  constexpr std::size_t calls = 10'000;
  asio::io_context io;
  idem::manual_clock clock;
  const auto epoch = clock.now();
  using counted_policies = test_async::store_policies<renewal_counting_store>;
  using guarded = idem::async_idempotent<hundred_second_handler, counted_policies>;
  renewal_counting_store store;
  hundred_second_handler handler{clock, !isolate};
  guarded payments{io.get_executor(), handler, long_call_options<guarded>(store, clock, isolate)};
  const idem::http_request request = charge("");

  std::vector<std::string> keys;
  std::vector<completion<outcome>> done(calls);
  start_keyed_calls(payments, request, keys, done);
  io.restart();
  io.poll();
  // Every handler waits on its downstream timer; the heartbeat adds one timer, not one a call.
  CHECK(clock.waiting_wakes() == calls + 1);

  const std::string lost = keys[4242];
  auto passed = [&](std::chrono::seconds when) {
    return [&, when] { return clock.now() - epoch >= when; };
  };
  run_until(io, clock, passed(20s));  // the clock stops at the heartbeat's wake at 20 s
  io.restart();
  io.poll();  // the renewals at 10 s and 20 s
  for (const std::string& key : {keys[0], lost, keys[calls - 1]}) {
    INFO(key);
    CHECK(store.renewals(key) == 2);
  }
  CHECK(clock.waiting_wakes() == calls + 1);
  store.steal(lost);  // the next renewal of this key finds its fence lost
  std::size_t ended = 0;
  run_until(io, clock, [&] {
    ended = 0;
    for (const auto& call : done)
      ended += call.done ? 1 : 0;
    return ended == calls;
  });

  // The stolen key's call ended at its next renewal (30 s): cancelled, not waited out.
  CHECK(store.renewals(lost) == 3);
  CHECK_FALSE(handler.finished->contains(lost));
  const outcome robbed = done[4242].take();
  CHECK(robbed.verdict() == verdict::in_progress);
  CHECK_THAT(std::string(robbed.message()), Catch::Matchers::Contains("taken over"));
  // Every other handler ran its 100 s under its first claim, renewed every 10 s: no takeover.
  CHECK(handler.finished->size() == calls - 1);
  std::size_t executed = 0;
  std::size_t renewed_enough = 0;
  for (std::size_t i = 0; i < calls; ++i) {
    if (i == 4242) continue;
    const outcome ran = done[i].take();
    executed += ran.verdict() == verdict::executed && ran.fence() == 1 ? 1 : 0;
    renewed_enough += store.renewals(keys[i]) >= 9 ? 1 : 0;  // at 10, 20, ..., 90 s
  }
  CHECK(executed == calls - 1);
  CHECK(renewed_enough == calls - 1);
  CHECK(clock.waiting_wakes() == 0);  // the heartbeat's timer stopped with the last call
}

namespace {

// The renewal-counting store made asynchronous (every operation posted), noting the size of
// every async_checkpoint_batch it is sent.
class batch_counting_store : public idem::testing::posted_store<renewal_counting_store> {
 public:
  using posted_store::posted_store;

  template <class Token>
  auto async_checkpoint_batch(std::span<const idem::batch_checkpoint> entries,
                              idem::store_time lease_until, Token&& token) {
    sizes_->push_back(entries.size());
    return posted_store::async_checkpoint_batch(entries, lease_until, std::forward<Token>(token));
  }
  std::vector<std::size_t> batch_sizes() const { return *sizes_; }

 private:
  std::shared_ptr<std::vector<std::size_t>> sizes_ = std::make_shared<std::vector<std::size_t>>();
};

static_assert(idem::AsyncCheckpointBatchStore<batch_counting_store>);

}  // namespace

TEST_CASE(
    "with a store that renews in batches, one heartbeat renews 10,000 leases with one store call "
    "a tick, and a lost fence in the batch cancels only its own handler",
    "[heartbeat]") {
  const bool isolate = GENERATE(false, true);
  INFO("isolate_handler " << isolate);
  constexpr std::size_t calls = 10'000;
  asio::io_context io;
  idem::manual_clock clock;
  const auto epoch = clock.now();
  using batched_policies = test_async::store_policies<batch_counting_store>;
  using guarded = idem::async_idempotent<hundred_second_handler, batched_policies>;
  batch_counting_store store{renewal_counting_store{}, io.get_executor()};
  hundred_second_handler handler{clock, !isolate};
  guarded payments{io.get_executor(), handler, long_call_options<guarded>(store, clock, isolate)};
  const idem::http_request request = charge("");

  std::vector<std::string> keys;
  std::vector<completion<outcome>> done(calls);
  start_keyed_calls(payments, request, keys, done);
  io.restart();
  io.poll();
  CHECK(clock.waiting_wakes() == calls + 1);  // one timer for the heartbeat

  const std::string lost = keys[4242];
  run_until(io, clock, [&] { return clock.now() - epoch >= 20s; });
  io.restart();
  io.poll();  // the renewals at 10 s and 20 s
  // Two ticks, two store calls, each renewing every lease.
  CHECK(store.batch_sizes() == std::vector<std::size_t>{calls, calls});
  CHECK(store.blocking().renewals(lost) == 2);
  store.blocking().steal(lost);  // the next batch finds this one fence lost
  run_until(io, clock, [&] {
    for (const auto& call : done)
      if (!call.done) return false;
    return true;
  });

  // Ticks at 10, 20, ..., 90 s (the handlers end at 100 s): one call each; the stolen key's
  // handler ended at the third, where its fence was found lost.
  const std::vector<std::size_t> sizes = store.batch_sizes();
  CHECK(sizes == std::vector<std::size_t>{calls, calls, calls, calls - 1, calls - 1, calls - 1,
                                          calls - 1, calls - 1, calls - 1});
  CHECK(store.blocking().renewals(lost) == 3);
  CHECK_FALSE(handler.finished->contains(lost));
  const outcome robbed = done[4242].take();
  CHECK(robbed.verdict() == verdict::in_progress);
  CHECK_THAT(std::string(robbed.message()), Catch::Matchers::Contains("taken over"));
  CHECK(handler.finished->size() == calls - 1);
  std::size_t executed = 0;
  std::size_t renewed_every_tick = 0;
  for (std::size_t i = 0; i < calls; ++i) {
    if (i == 4242) continue;
    executed += done[i].take().verdict() == verdict::executed ? 1 : 0;
    renewed_every_tick += store.blocking().renewals(keys[i]) == sizes.size() ? 1 : 0;
  }
  CHECK(executed == calls - 1);
  CHECK(renewed_every_tick == calls - 1);
  CHECK(clock.waiting_wakes() == 0);
}

TEST_CASE("a blocking store's calls never run on the event loop's thread") {
  asio::io_context io;
  asio::thread_pool pool{1};
  idem::manual_clock clock;
  using noting_policies = test_async::store_policies<test_async::thread_noting_store>;
  charging_handler handler{clock, 45s};  // long enough for heartbeats
  using offloaded = idem::async_idempotent<charging_handler, noting_policies>;
  test_async::thread_noting_store store;
  offloaded::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.store_executor = pool.get_executor();
  offloaded payments{io.get_executor(), handler, parts};
  const idem::http_request request = charge();

  for (const verdict expected : {verdict::executed, verdict::replayed}) {
    completion<outcome> call;
    payments.async_call("tenant", request, call.handler());
    run_until(
        io, clock, [&] { return call.done; }, true);
    CHECK(call.take().verdict() == expected);
  }
  // claim, renew and record for each step, heartbeats, complete; then the replay's claim.
  CHECK(store.calls() >= 8);
  CHECK_FALSE(store.threads().contains(std::this_thread::get_id()));
}

TEST_CASE("a blocking store without a store executor is refused when the wrapper is built") {
  asio::io_context io;
  using noting_policies = test_async::store_policies<test_async::thread_noting_store>;
  using offloaded = idem::async_idempotent<charging_handler, noting_policies>;
  CHECK_THROWS_WITH(offloaded(io.get_executor(), charging_handler{idem::manual_clock{}}),
                    Catch::Matchers::Contains("store_executor"));
  STATIC_REQUIRE(idem::never_blocks<idem::memory_store>);
  STATIC_REQUIRE(idem::never_blocks<idem::locked_store>);
  STATIC_REQUIRE_FALSE(idem::never_blocks<test_async::thread_noting_store>);
}

TEST_CASE("an async call whose caller has too little time left is refused and nothing is claimed") {
  asio::io_context io;
  idem::manual_clock clock;
  charging_handler handler{clock};
  guard::options parts = on(clock);
  parts.minimum_time_left = 100ms;
  guard payments{io.get_executor(), handler, std::move(parts)};
  const idem::http_request request = charge("order-1");

  for (const auto left : {std::chrono::nanoseconds{0}, std::chrono::nanoseconds{99ms}}) {
    const outcome refused =
        run_to_end(io, clock,
                   payments.async_call("tenant", "k", request, idem::caller_deadline{left},
                                       asio::use_awaitable));
    CHECK(refused.verdict() == verdict::deadline_exceeded);
    CHECK(refused.http_status() == 504);
  }
  CHECK(*handler.charges == 0);
  // Nothing was claimed: with time enough, the key runs.
  const outcome ran =
      run_to_end(io, clock,
                 payments.async_call("tenant", "k", request, idem::caller_deadline{100ms},
                                     asio::use_awaitable));
  CHECK(ran.verdict() == verdict::executed);
  CHECK(*handler.charges == 1);
}

TEST_CASE("an async handler sees what its caller has left, counting down as it awaits") {
  struct timed {
    idem::manual_clock clock;
    std::shared_ptr<std::vector<std::chrono::nanoseconds>> seen =
        std::make_shared<std::vector<std::chrono::nanoseconds>>();
    asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                    const idem::http_request&) const {
      seen->push_back(ctx.time_left().value_or(-1ns));
      co_await downstream(clock, 300ms);
      seen->push_back(ctx.time_left().value_or(-1ns));
      co_return idem::http_response{200, {}, "done"};
    }
  };
  asio::io_context io;
  idem::manual_clock clock;
  timed handler{clock};
  idem::async_idempotent<timed, test_async::manual_policies>::options parts;
  parts.clock = clock;
  idem::async_idempotent<timed, test_async::manual_policies> guarded{io.get_executor(), handler,
                                                                     std::move(parts)};
  const idem::http_request request = charge("order-1");
  const outcome ran = run_to_end(
      io, clock,
      guarded.async_call("tenant", "k", request, idem::caller_deadline{2s}, asio::use_awaitable));
  CHECK(ran.verdict() == verdict::executed);
  REQUIRE(handler.seen->size() == 2);
  CHECK((*handler.seen)[0] == 2s);
  CHECK((*handler.seen)[1] == 1700ms);
}

namespace {

// memory_store that counts the recovery points written; it never blocks, so its calls run
// inline on the loop.
class checkpoint_counting_store : public idem_test::forwarding_store<idem::memory_store> {
 public:
  static constexpr bool never_blocks = true;
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    ++*checkpoints_;
    return inner_.checkpoint(held, recovery, lease_until);
  }
  int checkpoints() const { return *checkpoints_; }

 private:
  std::shared_ptr<int> checkpoints_ = std::make_shared<int>(0);
};

// The charge kept for the claim's next write, then a receipt step that writes it.
struct keeping_handler {
  std::shared_ptr<int> charges = std::make_shared<int>(0);
  std::shared_ptr<int> checkpoints_after_charge = std::make_shared<int>(-1);
  checkpoint_counting_store store;

  asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                  const idem::http_request&) const {
    const std::string id = co_await ctx.async_step(
        "charge",
        [&]() -> asio::awaitable<std::string> { co_return "ch_" + std::to_string(++*charges); },
        idem::with_next_write);
    *checkpoints_after_charge = store.checkpoints();
    co_await ctx.async_step("receipt", [&]() -> asio::awaitable<int> { co_return 1; });
    co_return idem::http_response{201, {}, id};
  }
};

// One payment through a wrapper around keeping_handler (its first_step as given), then its
// repeat: the checkpoints written by the time the charge returned, and in all.
struct keeping_run {
  int after_charge = -1;
  int checkpoints = -1;
  int charges = -1;
};
keeping_run run_keeping(std::string first_step) {
  asio::io_context io;
  idem::manual_clock clock;
  using keeping_guard =
      idem::async_idempotent<keeping_handler,
                             test_async::store_policies<checkpoint_counting_store>>;
  keeping_handler handler;
  keeping_guard::options parts;
  parts.clock = clock;
  parts.store = handler.store;
  parts.first_step = std::move(first_step);
  keeping_guard payments{io.get_executor(), handler, parts};

  const idem::http_request request = charge();  // read until answered
  completion<outcome> first;
  payments.async_call("tenant", request, first.handler());
  run_until(io, clock, [&] { return first.done; });
  const outcome done = first.take();
  REQUIRE(done.verdict() == verdict::executed);
  CHECK(done->body == "ch_1");
  completion<outcome> again;
  payments.async_call("tenant", request, again.handler());
  run_until(io, clock, [&] { return again.done; });
  CHECK(again.take().verdict() == verdict::replayed);
  return {*handler.checkpoints_after_charge, handler.store.checkpoints(), *handler.charges};
}

}  // namespace

TEST_CASE("async_step with_next_write costs one fenced write, and the next step's writes it",
          "[with_next_write]") {
  const keeping_run ran = run_keeping("");
  CHECK(ran.after_charge == 1);  // the charge's start alone
  CHECK(ran.checkpoints == 3);   // then the receipt's start and result
  CHECK(ran.charges == 1);
}

TEST_CASE("async_step: the first step's start rides on the claim (options.first_step)",
          "[with_next_write][first_step]") {
  const keeping_run ran = run_keeping("charge");
  CHECK(ran.after_charge == 0);  // the claim wrote the charge's start
  CHECK(ran.checkpoints == 2);   // the receipt's start and result
  CHECK(ran.charges == 1);
}
