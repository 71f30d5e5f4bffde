// Page faults taken by the calling thread: a benchmark that fills a fresh table pays the kernel
// for every page it touches first, and the faults_per_op counter says how much of its time that
// can be.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/resource.h>

namespace idem_bench {

inline long page_faults_on_this_thread() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt + usage.ru_majflt;
}

/// Sets the faults_per_op counter: the faults this thread took since `before`, per iteration.
inline void report_page_faults(benchmark::State& state, long before) {
  state.counters["faults_per_op"] =
      benchmark::Counter(static_cast<double>(page_faults_on_this_thread() - before),
                         benchmark::Counter::kAvgIterations);
}

}  // namespace idem_bench
