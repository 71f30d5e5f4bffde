// What async_retrying costs on an event loop, beside what a careful user writes by hand.
//
//   async_retrying_success/hand_rolled   a coroutine that makes the key (UUIDv4 from a thread's
//                                        engine), reads the clock and co_awaits the operation,
//                                        started as its own operation (co_spawn), as
//                                        async_call starts one
//   async_retrying_success/idem          co_await retry.async_call(use_awaitable) over the same
//                                        operation, default policies
//   async_retrying_success/hand_rolled_inline   the hand-written coroutine co_awaited in the
//                                        caller's own coroutine, with no operation of its own
//                                        (for scale: what co_spawn itself costs)
//
//   async_backoff_10k/idem_async  10,000 operations, each failing once and waiting 100 ms before
//                                 its second attempt, on an io_context run by 2 threads: the
//                                 waits are timers, so the wall time is about one wait
//   async_backoff_10k/idem_sync   the blocking retrying doing the same on 2 threads: each wait
//                                 holds a thread. It runs 20 operations and reports the time
//                                 scaled to 10,000 (manual time; the waits are sequential per
//                                 thread, so the time grows linearly with the count)
//
// allocs_per_op counts heap allocations on the benchmark's thread (tests/support's replaced
// operator new); Asio recycles coroutine frames per thread, so both sides settle to the same.
#include <benchmark/benchmark.h>

#include <idem/asio.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <string_view>
#include <thread>
#include <vector>

#include "count_allocations.hpp"

namespace {

namespace asio = idem::asio;
using namespace std::chrono_literals;

struct response {
  int status;
};

[[gnu::noinline]] asio::awaitable<response> deliver(std::string_view key) {
  benchmark::DoNotOptimize(key.data());
  co_return response{200};
}

void report_allocations(benchmark::State& state, std::size_t before) {
  state.counters["allocs_per_op"] =
      benchmark::Counter(static_cast<double>(idem_test::allocations_on_this_thread() - before),
                         benchmark::Counter::kAvgIterations);
}

// Runs `body(state)` as one coroutine on a fresh io_context, on this thread.
template <class Body>
void on_event_loop(benchmark::State& state, Body body) {
  asio::io_context io{1};
  asio::co_spawn(io, body(state), asio::detached);
  io.run();
}

asio::awaitable<response> hand_rolled() {
  thread_local idem::xoshiro256ss rng{idem::nondeterministic_seed()};
  idem::coarse_clock clock;
  const auto key = idem::uuid_v4{}.generate(rng, clock);
  const auto deadline = clock.now() + std::chrono::seconds{10};
  response result = co_await deliver(key);
  if (result.status >= 400 && clock.now() < deadline) result = co_await deliver(key);
  co_return result;
}

void async_retrying_success_hand_rolled(benchmark::State& state) {
  on_event_loop(state, [](benchmark::State& s) -> asio::awaitable<void> {
    const auto executor = co_await asio::this_coro::executor;
    const auto before = idem_test::allocations_on_this_thread();
    for (auto _ : s) {
      response result = co_await asio::co_spawn(executor, hand_rolled(), asio::use_awaitable);
      benchmark::DoNotOptimize(result);
    }
    report_allocations(s, before);
  });
}

void async_retrying_success_hand_rolled_inline(benchmark::State& state) {
  on_event_loop(state, [](benchmark::State& s) -> asio::awaitable<void> {
    const auto before = idem_test::allocations_on_this_thread();
    for (auto _ : s) {
      response result = co_await hand_rolled();
      benchmark::DoNotOptimize(result);
    }
    report_allocations(s, before);
  });
}

void async_retrying_success_idem(benchmark::State& state) {
  on_event_loop(state, [](benchmark::State& s) -> asio::awaitable<void> {
    auto call = [](const idem::attempt_context& attempt) { return deliver(attempt.key()); };
    idem::async_retrying retry{co_await asio::this_coro::executor, call};
    const auto before = idem_test::allocations_on_this_thread();
    for (auto _ : s) {
      auto outcome = co_await retry.async_call(asio::use_awaitable);
      benchmark::DoNotOptimize(outcome);
    }
    report_allocations(s, before);
  });
}

struct backoff_policies : idem::default_policies {
  using backoff = idem::constant_backoff;
  using budget = idem::unlimited_budget;
};

constexpr int backoff_operations = 10'000;

void async_backoff_10k_idem_async(benchmark::State& state) {
  // Each operation's first attempt fails; its second, 100 ms later, succeeds.
  auto call = [](const idem::attempt_context& attempt) -> asio::awaitable<response> {
    co_return response{attempt.attempt() == 1 ? 503 : 200};
  };
  for (auto _ : state) {
    asio::io_context io{2};
    idem::async_retrying<decltype(call), backoff_policies>::options o;
    o.backoff = idem::constant_backoff{100ms};
    idem::async_retrying<decltype(call), backoff_policies> retry{io.get_executor(), call, o};
    std::atomic<int> succeeded{0};
    for (int i = 0; i < backoff_operations; ++i) {
      retry.async_call([&](std::exception_ptr, idem::retry_outcome<response> outcome) {
        if (outcome.succeeded()) succeeded.fetch_add(1, std::memory_order_relaxed);
      });
    }
    std::thread second{[&] { io.run(); }};
    io.run();
    second.join();
    if (succeeded.load() != backoff_operations) state.SkipWithError("an operation failed");
  }
  state.counters["operations"] = backoff_operations;
}

void async_backoff_10k_idem_sync(benchmark::State& state) {
  constexpr int sampled = 20;  // of the 10,000; see the header
  auto call = [](const idem::attempt_context& attempt) {
    return response{attempt.attempt() == 1 ? 503 : 200};
  };
  idem::retrying<decltype(call), backoff_policies>::options o;
  o.backoff = idem::constant_backoff{100ms};
  idem::retrying<decltype(call), backoff_policies> retry{call, o};
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    std::atomic<int> succeeded{0};
    auto worker = [&] {
      for (int i = 0; i < sampled / 2; ++i) {
        if (retry().succeeded()) succeeded.fetch_add(1, std::memory_order_relaxed);
      }
    };
    std::thread second{worker};
    worker();
    second.join();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(took.count() * backoff_operations / sampled);
    if (succeeded.load() != sampled) state.SkipWithError("an operation failed");
  }
  state.counters["operations"] = backoff_operations;
}

}  // namespace

BENCHMARK(async_retrying_success_hand_rolled)->Name("async_retrying_success/hand_rolled");
BENCHMARK(async_retrying_success_idem)->Name("async_retrying_success/idem");
BENCHMARK(async_retrying_success_hand_rolled_inline)
    ->Name("async_retrying_success/hand_rolled_inline");
BENCHMARK(async_backoff_10k_idem_async)
    ->Name("async_backoff_10k/idem_async")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK(async_backoff_10k_idem_sync)
    ->Name("async_backoff_10k/idem_sync")
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(1);
