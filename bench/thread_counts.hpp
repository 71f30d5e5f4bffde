// The thread counts the threaded benchmarks run at: 1, 2, 4, and on, doubling, up to
// IDEM_BENCH_MAX_THREADS (4 when unset: the suite's usual machine has 2 cores, and 4 threads
// show how it holds up oversubscribed). scripts/bench.sh --max-threads N sets it, for a scaling
// run on a machine with more cores.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace idem_bench {

inline int max_threads() {
  static const int most = [] {
    const char* text = std::getenv("IDEM_BENCH_MAX_THREADS");
    if (text == nullptr || *text == '\0') return 4;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end != '\0' || value < 1 || value > 256) {
      throw std::invalid_argument(std::string("IDEM_BENCH_MAX_THREADS must be 1 to 256, not \"") +
                                  text + "\"");
    }
    return static_cast<int>(value);
  }();
  return most;
}

inline std::vector<int> thread_counts() {
  std::vector<int> counts;
  for (int threads = 1; threads <= max_threads(); threads *= 2)
    counts.push_back(threads);
  if (counts.back() != max_threads()) counts.push_back(max_threads());
  return counts;
}

}  // namespace idem_bench
