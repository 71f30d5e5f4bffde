// What a rate limiter's permit costs, beside the lock a hand-written one would take:
//
//   limiter_acquire/idem_token/threads:N    token_bucket_limiter::try_acquire (GCRA: one CAS)
//   limiter_acquire/idem_window/threads:N   sliding_window_limiter::try_acquire (one CAS)
//   limiter_acquire/mutex_bucket/threads:N  a token bucket of tokens and a refill time behind a
//                                           std::mutex, what a careful user writes by hand
//
// Every thread asks one shared limiter, at a rate far above anyone's limit, so that nearly
// every ask is admitted (the common case) and the shared word or lock is what is measured. The
// time is read once per 64 asks (a clock read would be most of the cost otherwise).
#include <benchmark/benchmark.h>

#include <idem/idem.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace {

using std::chrono::nanoseconds;

nanoseconds now() {
  return std::chrono::duration_cast<nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch());
}

// The hand-written peer: tokens refilled from the time since the last refill, under a lock.
class mutex_bucket {
 public:
  mutex_bucket(double rate, double burst)
      : rate_per_ns_(rate / 1e9), burst_(burst), tokens_(burst) {}
  bool try_acquire(nanoseconds at) {
    const std::lock_guard lock(mutex_);
    const auto since = static_cast<double>((at - refilled_).count());
    if (since > 0) {
      tokens_ = std::min(burst_, tokens_ + since * rate_per_ns_);
      refilled_ = at;
    }
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

 private:
  std::mutex mutex_;
  double rate_per_ns_;
  double burst_;
  double tokens_;
  nanoseconds refilled_{0};
};

constexpr double fast = 1e9;  // permits a second: never the bottleneck here

template <class Limiter>
void acquire(benchmark::State& state, Limiter& limiter) {
  std::int64_t admitted = 0;
  nanoseconds at = now();
  int until_clock = 0;
  for (auto _ : state) {
    if (++until_clock == 64) {
      until_clock = 0;
      at = now();
    }
    if constexpr (std::is_same_v<Limiter, mutex_bucket>) {
      admitted += limiter.try_acquire(at) ? 1 : 0;
    } else {
      admitted += limiter.try_acquire(at).admitted ? 1 : 0;
    }
  }
  state.counters["admitted"] =
      benchmark::Counter(static_cast<double>(admitted), benchmark::Counter::kAvgIterations);
}

idem::token_bucket_limiter token{{.rate = fast, .burst = 1'000'000}};
idem::sliding_window_limiter window{
    {.limit = (1 << 24) - 1, .window = std::chrono::milliseconds{1}}};
mutex_bucket locked{fast, 1'000'000};

void limiter_acquire_idem_token(benchmark::State& state) {
  acquire(state, token);
}
void limiter_acquire_idem_window(benchmark::State& state) {
  acquire(state, window);
}
void limiter_acquire_mutex_bucket(benchmark::State& state) {
  acquire(state, locked);
}

}  // namespace

BENCHMARK(limiter_acquire_idem_token)->Name("limiter_acquire/idem_token")->Threads(1)->Threads(2);
BENCHMARK(limiter_acquire_idem_window)->Name("limiter_acquire/idem_window")->Threads(1)->Threads(2);
BENCHMARK(limiter_acquire_mutex_bucket)
    ->Name("limiter_acquire/mutex_bucket")
    ->Threads(1)
    ->Threads(2);
