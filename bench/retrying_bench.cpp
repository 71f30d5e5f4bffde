// What retrying costs on the path that matters most: the first attempt succeeds.
//
//   retrying_success/direct       the call itself, a noinline function given a fixed key
//   retrying_success/hand_rolled  what a careful user writes by hand: a UUIDv4 key from a
//                                 thread's engine, a steady_clock deadline, a loop with one try
//   retrying_success/idem         the same call through idem::retrying with default policies
//   retrying_success/idem_tracked the same with a latency tracker (Policies::latency): each
//                                 attempt's timeout read from it, one attempt's duration in 16
//                                 recorded in it (latency_tracker::options::sample_every)
//
//   retrying_shared/{direct,idem}/threads:N   the same, one object called from N threads
//
// The allocs_per_op counter comes from the replaced operator new of tests/support.
#include <benchmark/benchmark.h>

#include <idem/idem.hpp>

#include <chrono>
#include <string_view>

#include "count_allocations.hpp"

namespace {

struct response {
  int status;
};

[[gnu::noinline]] response deliver(std::string_view key) {
  benchmark::DoNotOptimize(key.data());
  return {200};
}

void report_allocations(benchmark::State& state, std::size_t before) {
  state.counters["allocs_per_op"] =
      benchmark::Counter(static_cast<double>(idem_test::allocations_on_this_thread() - before),
                         benchmark::Counter::kAvgIterations);
}

void retrying_success_direct(benchmark::State& state) {
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    auto result = deliver("2f1e6c1c-3b9a-4f0e-9d6f-0c1d2e3f4a5b");
    benchmark::DoNotOptimize(result);
  }
  report_allocations(state, before);
}

void retrying_success_hand_rolled(benchmark::State& state) {
  thread_local idem::xoshiro256ss rng{idem::nondeterministic_seed()};
  idem::steady_clock wall;
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    const auto key = idem::uuid_v4{}.generate(rng, wall);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    response result{};
    for (int attempt = 1; attempt <= 3; ++attempt) {
      result = deliver(key);
      if (result.status < 400 || std::chrono::steady_clock::now() >= deadline) break;
    }
    benchmark::DoNotOptimize(result);
  }
  report_allocations(state, before);
}

void retrying_success_idem(benchmark::State& state) {
  idem::retrying call{[](const idem::attempt_context& attempt) { return deliver(attempt.key()); }};
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    auto outcome = call();
    benchmark::DoNotOptimize(outcome);
  }
  report_allocations(state, before);
}

struct tracked_policies : idem::default_policies {
  using latency = idem::latency_tracker;
};

void retrying_success_idem_tracked(benchmark::State& state) {
  auto call_once = [](const idem::attempt_context& attempt) {
    benchmark::DoNotOptimize(attempt.timeout());
    return deliver(attempt.key());
  };
  idem::retrying<decltype(call_once), tracked_policies> call{call_once};
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    auto outcome = call();
    benchmark::DoNotOptimize(outcome);
  }
  report_allocations(state, before);
}

// One retrying object shared by every thread, as a service shares one client: the success path
// writes nothing shared, so time per operation should stay flat as threads are added.
void retrying_shared_direct(benchmark::State& state) {
  for (auto _ : state) {
    auto result = deliver("2f1e6c1c-3b9a-4f0e-9d6f-0c1d2e3f4a5b");
    benchmark::DoNotOptimize(result);
  }
}

auto& shared_call() {
  static idem::retrying call{
      [](const idem::attempt_context& attempt) { return deliver(attempt.key()); }};
  return call;
}

void retrying_shared_idem(benchmark::State& state) {
  auto& call = shared_call();
  for (auto _ : state) {
    auto outcome = call();
    benchmark::DoNotOptimize(outcome);
  }
}

}  // namespace

BENCHMARK(retrying_shared_direct)->Name("retrying_shared/direct")->Threads(1)->Threads(2);
BENCHMARK(retrying_shared_idem)->Name("retrying_shared/idem")->Threads(1)->Threads(2);
BENCHMARK(retrying_success_direct)->Name("retrying_success/direct");
BENCHMARK(retrying_success_hand_rolled)->Name("retrying_success/hand_rolled");
BENCHMARK(retrying_success_idem)->Name("retrying_success/idem");
BENCHMARK(retrying_success_idem_tracked)->Name("retrying_success/idem_tracked");
