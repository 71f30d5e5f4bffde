// The reconciler's pass on the memory store, beside a pass that reads every record
// (bench/reconciler_bench.hpp says what both sides do and how they are named).
//
//   reconciler_pass/idem/memory/records:N       idem::reconciler over idem::memory_store
//   reconciler_pass/full_scan/memory/records:N  memory_store::find of every key the application
//                                               wrote (the store has no other way to walk its
//                                               records), keeping those in progress past their
//                                               lease; then the same takeovers
//
// The store is filled with claims (and completions) in a loop, sized for N records
// (limits::expected_records).
#include "reconciler_bench.hpp"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>
#include <vector>

#include <idem/idem.hpp>

namespace {

namespace bench = idem_bench::reconciler;

struct memory_fixture : bench::filled<idem::memory_store> {
  std::vector<std::string> keys;  // what the application wrote: all a full scan can walk

  explicit memory_fixture(std::size_t n) {
    records = n;
    idem::memory_store::options limits;
    limits.expected_records = n;
    store = idem::memory_store{limits};
    const idem::digest print = bench::fingerprint();
    const idem::store_time now = clock.wall_now();
    keys.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      keys.push_back(bench::key_of(i));
      const idem::claim_result claimed = store.claim(idem::claim_request{
          bench::scope, keys.back(), print, now, bench::lease, bench::retention});
      if (!bench::is_stuck(i, n)) {
        store.complete(idem::fenced_key{bench::scope, keys.back(), claimed.fence},
                       bench::response(), now);
      }
    }
  }
};

void reconciler_pass_idem_memory(benchmark::State& state, std::int64_t records) {
  auto& fixture = bench::fixture_cache<memory_fixture>(static_cast<std::size_t>(records));
  bench::run_idem(state, fixture);
}

void reconciler_pass_full_scan_memory(benchmark::State& state, std::int64_t records) {
  auto& fixture = bench::fixture_cache<memory_fixture>(static_cast<std::size_t>(records));
  bench::run_full_scan(state, fixture, [&](idem::store_time now) {
    std::vector<std::string> stuck;
    for (const std::string& key : fixture.keys) {
      const std::optional<idem::record> found = fixture.store.find(bench::scope, key, now);
      if (found && found->state == idem::record_state::in_progress && found->lease_until <= now)
        stuck.push_back(key);
    }
    return stuck;
  });
}

[[maybe_unused]] const bool registered =
    (bench::register_pair("memory", reconciler_pass_idem_memory, reconciler_pass_full_scan_memory),
     true);

}  // namespace
