// What every store's reconciler benchmark shares (bench/reconciler_bench.cpp for the memory
// store, bench/stores/<adapter>/<adapter>_reconciler_bench.cpp for the others).
//
//   reconciler_pass/idem/<store>/records:N       idem::reconciler<...>::run_once() over a store
//                                                of N records, 1,000 of them stuck
//   reconciler_pass/full_scan/<store>/records:N  the same pass written by hand without a lease
//                                                index: one read of every record (what each
//                                                store's file says) to find the stuck ones, then
//                                                the same takeover (store.claim) of each
//
// N is 10^4, 10^5 and 10^6; the stuck count stays 1,000 (1% of 10^5), spread evenly through the
// keys (every N/1000th). The other records are completed (a 64-byte response), as most of a
// store is. The stuck records keep no request, so the reconciler takes each over and reports it
// (one row each); both sides take over the same records with the same claim. Time is a
// manual_clock shared by the store and both sides: each iteration first moves it past the
// takeovers' lease (31 s), so the records the previous pass took over are stuck again and
// nothing is set up again between iterations. An iteration that does not take over exactly the
// 1,000 records fails the benchmark.
//
// Filling a store is not timed; each store's file fills one store per size, shared by the two
// sides, and keeps it until a benchmark of another size asks (fixture_cache below).
#ifndef IDEM_BENCH_RECONCILER_BENCH_HPP
#define IDEM_BENCH_RECONCILER_BENCH_HPP

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <idem/idem.hpp>

namespace idem_bench::reconciler {

using namespace std::chrono_literals;

inline constexpr std::size_t stuck_records = 1000;
inline constexpr std::int64_t sizes[] = {10'000, 100'000, 1'000'000};
inline constexpr std::chrono::nanoseconds lease = 30s;
// Long enough that no record expires however many passes a benchmark makes (31 s each).
inline constexpr std::chrono::nanoseconds retention = std::chrono::hours{24 * 3650};
inline constexpr const char* scope = "bench";

// Every (records / stuck_records)th key is stuck.
inline bool is_stuck(std::size_t i, std::size_t records) {
  return i % (records / stuck_records) == 0;
}

inline std::string key_of(std::size_t i) {
  return "key-" + std::to_string(i);
}

inline const std::string& response() {
  static const std::string bytes(64, 'r');
  return bytes;
}

inline idem::digest fingerprint() {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(i * 13 + 5);
  return idem::digest{bytes};
}

template <class Store>
struct policies : idem::default_reconciler_policies {
  using store = Store;
  using clock = idem::manual_clock;
};

// One store of `records` records and the clock it was filled at. Store-specific fixtures derive
// from it and fill it.
template <class Store>
struct filled {
  std::size_t records = 0;
  idem::manual_clock clock;
  Store store;
};

// The fixture of the size asked for: kept while benchmarks of one size follow each other (each
// size's idem and full_scan are registered side by side), filled anew for another size.
template <class Fixture>
Fixture& fixture_cache(std::size_t records) {
  static std::unique_ptr<Fixture> current;
  if (!current || current->records != records) {
    current.reset();  // the old one goes first: two million-record stores need not coexist
    current = std::make_unique<Fixture>(records);
  }
  return *current;
}

// Fails the benchmark unless a pass took over exactly the stuck records.
inline bool took_all(benchmark::State& state, std::size_t taken, const char* side) {
  if (taken == stuck_records) return true;
  state.SkipWithError((std::string(side) + ": a pass took over " + std::to_string(taken) +
                       " records, not " + std::to_string(stuck_records))
                          .c_str());
  return false;
}

inline void add_counters(benchmark::State& state, std::size_t records) {
  state.counters["records"] = static_cast<double>(records);
  state.counters["stuck"] = static_cast<double>(stuck_records);
  // Time per stuck record taken over: flat across sizes when a pass costs what is stuck.
  state.counters["per_stuck"] = benchmark::Counter(
      static_cast<double>(stuck_records),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// idem's side: one reconciler pass per iteration.
template <class Store>
void run_idem(benchmark::State& state, filled<Store>& fixture) {
  idem::reconciler<policies<Store>> reconciler(fixture.store, {}, fixture.clock);
  for (auto _ : state) {
    fixture.clock.advance(lease + 1s);
    const idem::reconcile_report report = reconciler.run_once();
    if (!took_all(state, report.summary.not_resumable, "idem")) break;
    benchmark::DoNotOptimize(report.rows.data());
  }
  add_counters(state, fixture.records);
}

// The hand-written side: `scan(now)` reads every record and answers the stuck ones (their keys);
// each is then taken over with the claim the reconciler makes.
template <class Store, class Scan>
void run_full_scan(benchmark::State& state, filled<Store>& fixture, Scan&& scan) {
  const idem::digest print = fingerprint();
  for (auto _ : state) {
    fixture.clock.advance(lease + 1s);
    const idem::store_time now = fixture.clock.wall_now();
    const std::vector<std::string> keys = scan(now);
    std::size_t taken = 0;
    for (const std::string& key : keys) {
      const idem::claim_result claimed =
          fixture.store.claim(idem::claim_request{scope, key, print, now, lease, 24h});
      taken += claimed.status == idem::claim_status::taken_over ? 1 : 0;
    }
    if (!took_all(state, taken, "full_scan")) break;
  }
  add_counters(state, fixture.records);
}

// Registers both sides at every size, idem first, a size at a time.
template <class Idem, class FullScan>
void register_pair(const std::string& store, Idem idem_side, FullScan full_scan_side) {
  for (const std::int64_t records : sizes) {
    const std::string arg = "/" + store + "/records:" + std::to_string(records);
    benchmark::RegisterBenchmark(("reconciler_pass/idem" + arg).c_str(), idem_side, records)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("reconciler_pass/full_scan" + arg).c_str(), full_scan_side,
                                 records)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

}  // namespace idem_bench::reconciler

#endif  // IDEM_BENCH_RECONCILER_BENCH_HPP
