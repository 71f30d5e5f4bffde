// What the asynchronous stores' benchmarks share (bench/stores/redis_asio/,
// bench/stores/postgres_asio/): the operation both sides measure, the threads that drive each
// side, and the counters every such benchmark reports.
//
// One operation is one claim+complete cycle of a key never used before: claim it (a 16-byte
// fingerprint, a 30 s lease, a day's retention; answered `claimed`), then complete it under the
// fence it got with a 64-byte response (answered true). The two steps run in sequence, each
// awaited. Anything else stops the benchmark with an error.
//
//   async_store_throughput   one iteration is a batch of operations, run with a fixed number in
//                            flight: `idem_sync` on a crew of threads, each calling the blocking
//                            store; `idem_async` as that many coroutines on an io_context run by
//                            a few threads. Wall time (real_time); ops_per_s counts operations per
//                            second of it.
//   async_store_single       one iteration is one operation, nothing else in flight: the
//                            blocking store called on the benchmark's thread, or the async store
//                            co_awaited in a coroutine on an io_context that thread runs.
//
// cpu_us_per_op is the whole process's CPU time (CLOCK_PROCESS_CPUTIME_ID: every thread, the
// driving ones, the io_context's and the store's own) over the timed loop, per operation. The
// server's CPU (redis-server, the PostgreSQL backends) is another process and not in it.
#pragma once

#include <benchmark/benchmark.h>

#include <idem/async/asio.hpp>
#include <idem/store/contract.hpp>

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace idem_bench::async_store {

namespace asio = idem::asio;
using namespace std::chrono_literals;

constexpr std::string_view scope = "bench";
inline const std::string response(64, 'r');

inline idem::digest fingerprint() {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(i * 13 + 5);
  return idem::digest{bytes};
}

/// Key `index` of a run: short and distinct (each store's run has a prefix or table of its own).
inline std::string key_of(std::uint64_t index) {
  return "key-" + std::to_string(index);
}

inline idem::claim_request claim_of(std::string_view key, const idem::digest& print) {
  return {scope, key, print, std::chrono::system_clock::now(), 30s, 24h};
}

[[noreturn]] inline void wrong_answer(const char* what) {
  throw std::runtime_error(std::string("an operation was not answered as expected: ") + what);
}

/// One operation on a blocking store.
template <class Store>
void sync_cycle(Store& store, std::uint64_t index, const idem::digest& print) {
  const std::string key = key_of(index);
  const idem::claim_result claimed = store.claim(claim_of(key, print));
  if (claimed.status != idem::claim_status::claimed) wrong_answer("claim");
  if (!store.complete({scope, key, claimed.fence}, response, std::chrono::system_clock::now())) {
    wrong_answer("complete");
  }
}

/// One operation on an asynchronous store, awaited step by step.
template <class Store>
asio::awaitable<void> async_cycle(Store& store, std::uint64_t index, const idem::digest& print) {
  const std::string key = key_of(index);
  const idem::claim_result claimed =
      co_await store.async_claim(claim_of(key, print), asio::use_awaitable);
  if (claimed.status != idem::claim_status::claimed) wrong_answer("claim");
  const bool completed = co_await store.async_complete(
      {scope, key, claimed.fence}, response, std::chrono::system_clock::now(), asio::use_awaitable);
  if (!completed) wrong_answer("complete");
}

/// The CPU time of every thread of this process so far.
inline double process_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

/// ops_per_s and cpu_us_per_op for `operations` done in the timed loop, which used
/// `cpu_seconds` of the process's CPU.
inline void report(benchmark::State& state, std::uint64_t operations, double cpu_seconds) {
  const auto count = static_cast<double>(operations);
  state.counters["ops_per_s"] = benchmark::Counter(count, benchmark::Counter::kIsRate);
  state.counters["cpu_us_per_op"] = count > 0 ? cpu_seconds * 1e6 / count : 0.0;
}

/// async_store_single's loop: one cycle at a time on `io` (run here), the first untimed (it
/// opens the connection and prepares the statements); the store's connections close as it goes.
/// `make()` makes the store on `io`.
template <class Make>
void run_single(benchmark::State& state, Make make) {
  const idem::digest print = fingerprint();
  asio::io_context io;
  {
    auto store = make(io);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          std::uint64_t next = 0;
          co_await async_cycle(store, next++, print);
          const double cpu_before = process_cpu_seconds();
          for (auto _ : state)
            co_await async_cycle(store, next++, print);
          report(state, next - 1, process_cpu_seconds() - cpu_before);
        },
        [&](std::exception_ptr error) {
          io.stop();  // the store's connections keep the loop busy
          if (!error) return;
          try {
            std::rethrow_exception(error);
          } catch (const std::exception& e) {
            state.SkipWithError(e.what());
          }
        });
    io.run();
    io.restart();
  }
  io.run_for(std::chrono::seconds{1});  // what the store left on the loop as it closed
}

/// Threads that run work(i) for each i of a batch between them, each taking the next index as
/// it finishes one: `threads` callers of a blocking store, each with one operation in flight.
class thread_crew {
 public:
  explicit thread_crew(int threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] { serve(); });
  }
  thread_crew(const thread_crew&) = delete;
  thread_crew& operator=(const thread_crew&) = delete;
  ~thread_crew() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& thread : threads_)
      thread.join();
  }

  /// Runs work(i) for i in [first, first + count); returns when every call has returned, and
  /// rethrows the first exception one threw (the others still ran).
  void run(std::uint64_t first, std::uint64_t count, std::function<void(std::uint64_t)> work) {
    std::unique_lock lock(mutex_);
    work_ = std::move(work);
    next_.store(first, std::memory_order_relaxed);
    end_ = first + count;
    error_ = nullptr;
    busy_ = threads_.size();
    ++generation_;
    wake_.notify_all();
    done_.wait(lock, [this] { return busy_ == 0; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void serve() {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t end = 0;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        end = end_;
      }
      std::exception_ptr failed;
      try {
        for (std::uint64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < end;)
          work_(i);
      } catch (...) {
        failed = std::current_exception();
      }
      const std::lock_guard lock(mutex_);
      if (failed && !error_) error_ = failed;
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void(std::uint64_t)> work_;
  std::atomic<std::uint64_t> next_{0};
  std::uint64_t end_ = 0;
  std::uint64_t generation_ = 0;
  std::size_t busy_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

/// An io_context run by `threads` threads of its own until destroyed.
class running_loop {
 public:
  explicit running_loop(int threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] { context_.run(); });
  }
  running_loop(const running_loop&) = delete;
  running_loop& operator=(const running_loop&) = delete;
  ~running_loop() {
    guard_.reset();
    for (std::thread& thread : threads_)
      thread.join();
  }
  asio::io_context& context() noexcept { return context_; }
  asio::any_io_executor executor() { return context_.get_executor(); }

 private:
  asio::io_context context_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_{context_.get_executor()};
  std::vector<std::thread> threads_;
};

/// Runs operation(l, i) for i in [first, first + count) on the loops of `loops`, `in_flight`
/// at a time on each: as many coroutines per loop, each taking the next index of the batch they
/// share as it finishes one, and `l` the index of its loop. Returns when all are done, and
/// rethrows the first exception one of them threw.
template <class Operation>
void run_in_flight_on(const std::vector<running_loop*>& loops, int in_flight, std::uint64_t first,
                      std::uint64_t count, const Operation& operation) {
  struct batch {
    std::atomic<std::uint64_t> next{0};
    std::uint64_t end = 0;
    int running = 0;
    std::mutex mutex;
    std::condition_variable finished;
    std::exception_ptr error;
  } shared;
  shared.next.store(first, std::memory_order_relaxed);
  shared.end = first + count;
  shared.running = in_flight * static_cast<int>(loops.size());
  const auto worker = [](batch& b, const Operation& op, std::size_t l) -> asio::awaitable<void> {
    for (std::uint64_t i; (i = b.next.fetch_add(1, std::memory_order_relaxed)) < b.end;)
      co_await op(l, i);
  };
  for (std::size_t l = 0; l < loops.size(); ++l) {
    for (int i = 0; i < in_flight; ++i) {
      // Notified under the lock: once the waiter has it back, `shared` may go.
      asio::co_spawn(loops[l]->context(), worker(shared, operation, l),
                     [&shared](std::exception_ptr error) {
                       const std::lock_guard lock(shared.mutex);
                       if (error && !shared.error) shared.error = error;
                       if (--shared.running == 0) shared.finished.notify_one();
                     });
    }
  }
  std::unique_lock lock(shared.mutex);
  shared.finished.wait(lock, [&shared] { return shared.running == 0; });
  if (shared.error) std::rethrow_exception(shared.error);
}

/// run_in_flight_on for one loop: operation(i).
template <class Operation>
void run_in_flight(running_loop& loop, int in_flight, std::uint64_t first, std::uint64_t count,
                   const Operation& operation) {
  const auto on_loop = [&operation](std::size_t, std::uint64_t index) { return operation(index); };
  run_in_flight_on({&loop}, in_flight, first, count, on_loop);
}

/// The timed loop of a throughput benchmark: each iteration runs `batch` operations through
/// run_batch(first, count), after `warm_up` untimed ones (enough to open every connection).
template <class RunBatch>
void throughput_loop(benchmark::State& state, std::uint64_t warm_up, std::uint64_t batch,
                     RunBatch&& run_batch) {
  std::uint64_t next = 0;
  try {
    run_batch(next, warm_up);  // connections opened, statements prepared
    next += warm_up;
    std::uint64_t done = 0;
    const double cpu_before = process_cpu_seconds();
    for (auto _ : state) {
      run_batch(next, batch);
      next += batch;
      done += batch;
    }
    report(state, done, process_cpu_seconds() - cpu_before);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

}  // namespace idem_bench::async_store
