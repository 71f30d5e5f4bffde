// sqlite_store with synchronous = full, the durable default, with and without group commit
// (store/sqlite/group_commit.hpp): one iteration claims a new key and completes it with a
// 64-byte response, from 1 and from 16 threads sharing one store.
//
//   sqlite_full_cycle/idem_single/threads:N      today's store: each operation its own commit and
//                                                fsync; 16 threads take turns at the write lock.
//   sqlite_full_cycle/idem_group/threads:N       group commit on (no wait): a leader commits for
//                                                whatever queued while the last group committed.
//   sqlite_full_cycle/idem_group_wait/threads:N  group commit with max_wait = 100 us: does
//                                                waiting for more operations help?
//   sqlite_full_cycle/paired                     1 thread, both stores side by side (two files in
//                                                one directory), a cycle on each per iteration
//                                                in alternating order: single_us, group_us and
//                                                their ratio group_over_single, each cycle timed
//                                                alone, so that the disk's fsync times, which
//                                                drift by milliseconds between repetitions, fall
//                                                on both sides alike.
//   sqlite_group_overhead/{idem_group,idem_single}/threads:1
//                                                the same cycle with synchronous = normal (no
//                                                fsync): what group commit costs one thread in
//                                                CPU, without a disk's fsync times, which vary
//                                                by milliseconds, drowning it.
//
// The file lives on a real disk, not tmpfs, for the fsync is the point: a new directory under
// $IDEM_BENCH_DISK_DIR, or /var/tmp. Every thread uses keys of its own ("t<thread>-<n>"); each
// run gets a new database. Real time throughout (UseRealTime): with threads, what a caller waits.
#include <benchmark/benchmark.h>

#include <stdlib.h>

#include <idem/store/sqlite.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

namespace {

using namespace std::chrono_literals;

const idem::store_time now{std::chrono::seconds{1767225600}};
const std::string response(64, 'r');

// A directory on a disk (never /dev/shm or /tmp, which may be tmpfs), removed at the end.
class disk_directory {
 public:
  disk_directory() {
    const char* base = std::getenv("IDEM_BENCH_DISK_DIR");
    // mkdtemp's template: six trailing X characters it replaces.
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/var/tmp") +
                          "/idem-full-cycle-" + std::string(6, 'X');
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot create a directory from " + pattern);
    }
    path_ = pattern;
  }
  disk_directory(const disk_directory&) = delete;
  disk_directory& operator=(const disk_directory&) = delete;
  ~disk_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const char* name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

struct shared_store {
  disk_directory directory;
  idem::sqlite_store store;
  shared_store(idem::sqlite_group_commit_options group, bool full) {
    idem::sqlite_store::options options;
    options.path = directory.file("full.sqlite3");
    options.synchronous = full ? idem::sqlite_store::synchronous_mode::full
                               : idem::sqlite_store::synchronous_mode::normal;
    options.group_commit = group;
    store = idem::sqlite_store{options};
  }
};

// Made by thread 0 before the loop and dropped after it; Google Benchmark holds every thread at
// the loop's start and end, so the others see it whole.
std::unique_ptr<shared_store> current;

void full_cycle(benchmark::State& state, idem::sqlite_group_commit_options group,
                bool full = true) {
  if (state.thread_index() == 0) current = std::make_unique<shared_store>(group, full);
  const std::uint8_t bytes[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const idem::digest print{bytes};
  const std::string prefix = "t" + std::to_string(state.thread_index()) + "-";
  std::uint64_t next = 0;
  for (auto _ : state) {
    idem::sqlite_store& store = current->store;
    const std::string key = prefix + std::to_string(next++);
    const idem::claim_result claimed = store.claim({"tenant", key, print, now, 30s, 24h});
    if (claimed.status != idem::claim_status::claimed) state.SkipWithError("not claimed");
    if (!store.complete({"tenant", key, claimed.fence}, response, now)) {
      state.SkipWithError("not completed");
    }
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    const idem::sqlite_group_commit_stats stats = current->store.group_commit_stats();
    if (stats.groups != 0) {
      state.counters["ops_per_commit"] =
          static_cast<double>(stats.operations) / static_cast<double>(stats.groups);
    }
    current.reset();
  }
}

void sqlite_full_cycle_single(benchmark::State& state) {
  full_cycle(state, {});
}

void sqlite_full_cycle_group(benchmark::State& state) {
  full_cycle(state, {.enabled = true, .max_operations = 256, .max_wait = 0us});
}

void sqlite_full_cycle_group_wait(benchmark::State& state) {
  full_cycle(state, {.enabled = true, .max_operations = 256, .max_wait = 100us});
}

void cycle(benchmark::State& state, idem::sqlite_store& store, const idem::digest& print,
           const std::string& key) {
  const idem::claim_result claimed = store.claim({"tenant", key, print, now, 30s, 24h});
  if (claimed.status != idem::claim_status::claimed) state.SkipWithError("not claimed");
  if (!store.complete({"tenant", key, claimed.fence}, response, now)) {
    state.SkipWithError("not completed");
  }
}

void sqlite_full_cycle_paired(benchmark::State& state) {
  shared_store single({}, true);
  shared_store grouped({.enabled = true, .max_operations = 256, .max_wait = 0us}, true);
  const std::uint8_t bytes[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const idem::digest print{bytes};
  std::chrono::nanoseconds single_time{}, group_time{};
  std::uint64_t next = 0;
  for (auto _ : state) {
    const std::string key = "k-" + std::to_string(next);
    const bool single_first = next++ % 2 == 0;
    for (int side = 0; side < 2; ++side) {
      const bool on_single = (side == 0) == single_first;
      const auto start = std::chrono::steady_clock::now();
      cycle(state, on_single ? single.store : grouped.store, print, key);
      (on_single ? single_time : group_time) += std::chrono::steady_clock::now() - start;
    }
  }
  const auto per = [&](std::chrono::nanoseconds total) {
    return static_cast<double>(total.count()) / 1000.0 / static_cast<double>(state.iterations());
  };
  state.counters["single_us"] = per(single_time);
  state.counters["group_us"] = per(group_time);
  state.counters["group_over_single"] =
      static_cast<double>(group_time.count()) / static_cast<double>(single_time.count());
}

void sqlite_group_overhead_single(benchmark::State& state) {
  full_cycle(state, {}, false);
}

void sqlite_group_overhead_group(benchmark::State& state) {
  full_cycle(state, {.enabled = true, .max_operations = 256, .max_wait = 0us}, false);
}

}  // namespace

BENCHMARK(sqlite_full_cycle_single)
    ->Name("sqlite_full_cycle/idem_single")
    ->Threads(1)
    ->Threads(16)
    ->UseRealTime();
BENCHMARK(sqlite_full_cycle_group)
    ->Name("sqlite_full_cycle/idem_group")
    ->Threads(1)
    ->Threads(16)
    ->UseRealTime();
BENCHMARK(sqlite_full_cycle_group_wait)
    ->Name("sqlite_full_cycle/idem_group_wait")
    ->Threads(1)
    ->Threads(16)
    ->UseRealTime();
BENCHMARK(sqlite_full_cycle_paired)->Name("sqlite_full_cycle/paired")->UseRealTime();
BENCHMARK(sqlite_group_overhead_single)
    ->Name("sqlite_group_overhead/idem_single")
    ->Threads(1)
    ->UseRealTime();
BENCHMARK(sqlite_group_overhead_group)
    ->Name("sqlite_group_overhead/idem_group")
    ->Threads(1)
    ->UseRealTime();
