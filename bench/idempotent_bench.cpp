// What guarding a request costs end to end: a trivial handler behind idem::idempotent with the
// default policies (memory store, XXH3-128 fingerprint, steady/system clock), beside the least a
// hand-written guard must do.
//
//   idempotent_first/idem     payments(scope, key, body): a key never seen before, so the key is
//                             checked, the 256-byte body fingerprinted, the key claimed, the
//                             handler run, its response stored under the fence and returned.
//   idempotent_first/floor    the floor: XXH3-128 of the body (libxxhash), then, under one of 64
//                             std::mutex shards, try_emplace of (scope, key) into an
//                             absl::flat_hash_map, the handler run and its response copied into
//                             the map; the response is returned.
//   idempotent_replay/idem    the same call for a key whose response is stored: replayed.
//   idempotent_replay/floor   XXH3-128 of the body, find under the shard's mutex, compare the
//                             fingerprint, copy the response out.
//
// The floor is deliberately the least: it holds the shard's lock while the handler runs (one
// lock, not a claim and a completion), reads no clock, keeps no lease, fence or expiry, and
// cannot be taken over. Everything idem does beyond it is in the ratio.
//
// Both get the same (scope, key, body) and the handler returns the same 64-byte std::string.
// first: each thread claims its own range of UUID-shaped keys, made before the clock starts; the
// run is a fixed 60,000 claims in all (within memory_store's default expected_records, 65,536,
// and the floor's maps are reserved for as many). replay: 1,024 completed keys, cycled through.
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include <idem/idem.hpp>
#include <idem/store/memory/detail/bucket_hash.hpp>
#include <idem/store/memory/detail/epoch.hpp>
#include <idem/store/memory/detail/siphash.hpp>

#include <absl/container/flat_hash_map.h>
#include <absl/hash/hash.h>

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "count_allocations.hpp"
#include "page_faults.hpp"
#include "thread_counts.hpp"
#include "uuid_keys.hpp"

namespace {

constexpr std::string_view scope = "payments";
constexpr std::size_t body_size = 256;
constexpr std::size_t first_keys = 60'000;
constexpr std::size_t replay_keys = 1024;

const std::string& request_body() {
  static const std::string body = [] {
    std::string bytes(body_size, '\0');
    for (std::size_t i = 0; i < body_size; ++i)
      bytes[i] = static_cast<char>('a' + (i * 7) % 26);
    return bytes;
  }();
  return body;
}

constexpr std::string_view response_text =
    R"({"id":"ch_3MmlLrLkdIwHu7ix0snN0B1","status":"succeeded","amt":9})";
static_assert(response_text.size() == 64);

// The trivial handler both guard: the response is made fresh each time, as a real one would be.
std::string handle(const std::string& body) {
  benchmark::DoNotOptimize(body.data());
  return std::string(response_text);
}

const std::vector<std::string>& keys() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> made;
    made.reserve(first_keys + replay_keys);
    for (std::size_t i = 0; i < first_keys + replay_keys; ++i)
      made.push_back(idem_bench::uuid_shaped_key(i, 0x2545f4914f6cdd1d));
    return made;
  }();
  return all;
}

// --- the floor
// ------------------------------------------------------------------------------------

class floor_guard {
 public:
  explicit floor_guard(std::size_t expected_records) {
    const std::size_t per_shard = expected_records / shard_count;
    for (auto& one : shards_)
      one.map.reserve(per_shard + per_shard / 8 + 64);
  }

  // The response, or nothing when the key is held under another fingerprint.
  std::optional<std::string> operator()(std::string_view scope_part, std::string_view key,
                                        const std::string& body) {
    const XXH128_hash_t hash = XXH3_128bits(body.data(), body.size());
    const std::string_view id = composite_key(scope_part, key);
    const absl::string_view lookup{id.data(), id.size()};
    shard& owner = shards_[absl::Hash<absl::string_view>{}(lookup) >> 58];
    const std::lock_guard lock(owner.mutex);
    auto [found, inserted] = owner.map.try_emplace<absl::string_view>(lookup);
    stored& held = found->second;
    if (inserted) {
      held.low = hash.low64;
      held.high = hash.high64;
      std::string response = handle(body);
      held.response = response;
      return response;
    }
    if (held.low != hash.low64 || held.high != hash.high64) return std::nullopt;
    return held.response;
  }

 private:
  static constexpr std::size_t shard_count = 64;

  struct stored {
    std::uint64_t low = 0;
    std::uint64_t high = 0;
    std::string response;
  };
  struct alignas(64) shard {
    std::mutex mutex;
    absl::flat_hash_map<std::string, stored> map;
  };

  // The scope's length (8 bytes), the scope and the key, so ("a:b", "c") and ("a", "b:c") stay
  // apart; built into a buffer each thread reuses.
  static std::string_view composite_key(std::string_view scope_part, std::string_view key) {
    thread_local std::string buffer;
    buffer.clear();
    const std::uint64_t length = scope_part.size();
    char prefix[sizeof length];
    std::memcpy(prefix, &length, sizeof length);
    buffer.append(prefix, sizeof prefix);
    buffer.append(scope_part);
    buffer.append(key);
    return buffer;
  }

  std::array<shard, shard_count> shards_;
};

// --- idem
// -----------------------------------------------------------------------------------------

using guarded = idem::idempotent<std::string (*)(const std::string&)>;

struct idem_guard {
  explicit idem_guard(std::size_t /*expected_records: the default store's 65,536 suffices*/)
      : guard(&handle) {}

  std::optional<std::string> operator()(std::string_view scope_part, std::string_view key,
                                        const std::string& body) {
    auto outcome = guard(scope_part, key, body);
    if (!outcome) return std::nullopt;
    return std::move(outcome).value();
  }

  guarded guard;
};

// --- runs
// -------------------------------------------------------------------------------------------

template <class Guard>
std::unique_ptr<Guard>& shared_guard() {
  static std::unique_ptr<Guard> guard;
  return guard;
}

void sync_threads(benchmark::State& state) {
  // Google Benchmark starts every thread's loop together; thread 0 prepared the guard before
  // its loop, and the others may only touch it after that, so they wait for it here.
  static std::mutex guard;
  static std::condition_variable ready;
  static int generation = 0;
  static int arrived = 0;
  std::unique_lock lock(guard);
  const int mine = generation;
  if (++arrived == state.threads()) {
    arrived = 0;
    ++generation;
    ready.notify_all();
  } else {
    ready.wait(lock, [&] { return generation != mine; });
  }
}

void report_allocations(benchmark::State& state, std::size_t before) {
  state.counters["allocs_per_op"] =
      benchmark::Counter(static_cast<double>(idem_test::allocations_on_this_thread() - before),
                         benchmark::Counter::kAvgIterations);
}

template <class Guard>
void idempotent_first(benchmark::State& state) {
  const auto& all = keys();
  if (state.thread_index() == 0) shared_guard<Guard>() = std::make_unique<Guard>(first_keys);
  sync_threads(state);
  Guard& guard = *shared_guard<Guard>();
  const std::string& body = request_body();
  const auto per_thread = static_cast<std::size_t>(state.max_iterations);
  std::size_t next = per_thread * static_cast<std::size_t>(state.thread_index());
  std::size_t wrong = 0;
  const auto before = idem_test::allocations_on_this_thread();
  const long faults_before = idem_bench::page_faults_on_this_thread();
  for (auto _ : state) {
    auto response = guard(scope, all[next++], body);
    wrong += response && response->size() == response_text.size() ? 0 : 1;
    benchmark::DoNotOptimize(response);
  }
  idem_bench::report_page_faults(state, faults_before);
  report_allocations(state, before);
  state.SetItemsProcessed(state.iterations());
  sync_threads(state);
  if (state.thread_index() == 0) shared_guard<Guard>().reset();
  if (wrong != 0) state.SkipWithError("a new key did not run the handler and answer");
}

template <class Guard>
void idempotent_replay(benchmark::State& state) {
  const auto& all = keys();
  const std::string& body = request_body();
  if (state.thread_index() == 0) {
    auto& guard = shared_guard<Guard>();
    guard = std::make_unique<Guard>(replay_keys);
    for (std::size_t i = 0; i < replay_keys; ++i)
      (void)(*guard)(scope, all[first_keys + i], body);
  }
  sync_threads(state);
  Guard& guard = *shared_guard<Guard>();
  std::size_t next = static_cast<std::size_t>(state.thread_index()) * 257;
  std::size_t wrong = 0;
  const auto before = idem_test::allocations_on_this_thread();
  for (auto _ : state) {
    auto response = guard(scope, all[first_keys + (next++ & (replay_keys - 1))], body);
    wrong += response && response->size() == response_text.size() ? 0 : 1;
    benchmark::DoNotOptimize(response);
  }
  report_allocations(state, before);
  state.SetItemsProcessed(state.iterations());
  sync_threads(state);
  if (state.thread_index() == 0) shared_guard<Guard>().reset();
  if (wrong != 0) state.SkipWithError("a stored key did not answer its response");
}

// --- where idempotent's time goes: its parts, one by one --------------------------------------
//
//   idempotent_cost/fingerprint   the default fingerprint of the request (the 256-byte body with
//                                 the framing: a tag, method, target, lengths): request_fingerprint
//                                 over xxh3_128
//   idempotent_cost/xxh3_body     what the floor hashes instead: XXH3_128bits of the body alone
//   idempotent_cost/key_check     is_valid_key on the 36-character key (the floor checks none)
//   idempotent_cost/wall_clock    one read of the default clock's wall time (coarse_clock: the
//                                 kernel's coarse real-time clock), as the guard reads it for
//                                 every claim (the floor reads none)
//   idempotent_cost/exact_wall_clock
//                                 one read of std::chrono::system_clock (steady_clock's wall
//                                 time), what the guard read before coarse_clock
//   idempotent_cost/bucket_hash   the memory store's keyed SipHash-1-3 of (scope, key), by which
//                                 it picks a bucket (detail::memory::bucket_hash), beside
//                                 absl::Hash of the scope-length-prefixed scope and key, as the
//                                 floor hashes
//   idempotent_cost/absl_hash
//   idempotent_cost/epoch_pin     one pin and unpin of epoch reclamation (detail::epoch_guard),
//                                 which every memory-store operation makes so that what it reads
//                                 is not freed under it (no peer keeps such a pin: the floor and
//                                 the locked tables free nothing a reader holds)
// They have no peer of their own: the ratio tables leave them out; docs/performance.md uses
// them to say where the end-to-end time goes.

void idempotent_cost_fingerprint(benchmark::State& state) {
  const idem::fingerprint_for<idem::xxh3_128> fingerprint;
  const std::string& body = request_body();
  for (auto _ : state) {
    const std::string* opaque = &body;
    benchmark::DoNotOptimize(opaque);
    benchmark::DoNotOptimize(fingerprint(idem::view_of(*opaque)));
  }
}

void idempotent_cost_xxh3_body(benchmark::State& state) {
  const std::string& body = request_body();
  for (auto _ : state) {
    const std::string* opaque = &body;
    benchmark::DoNotOptimize(opaque);
    benchmark::DoNotOptimize(XXH3_128bits(opaque->data(), opaque->size()));
  }
}

void idempotent_cost_key_check(benchmark::State& state) {
  const std::string& key = keys()[0];
  for (auto _ : state) {
    const std::string* opaque = &key;
    benchmark::DoNotOptimize(opaque);
    benchmark::DoNotOptimize(idem::is_valid_key(*opaque));
  }
}

void idempotent_cost_wall_clock(benchmark::State& state) {
  const idem::default_policies::clock clock;
  for (auto _ : state)
    benchmark::DoNotOptimize(clock.wall_now());
}

void idempotent_cost_exact_wall_clock(benchmark::State& state) {
  const idem::steady_clock clock;
  for (auto _ : state)
    benchmark::DoNotOptimize(clock.wall_now());
}

std::string scoped_key() {
  std::string id(8, '\0');
  id[0] = static_cast<char>(scope.size());
  id.append(scope);
  id.append(keys()[0]);
  return id;
}

void idempotent_cost_bucket_hash(benchmark::State& state) {
  const idem::detail::siphash_key key = idem::detail::process_hash_key();
  const std::string& id = keys()[0];
  for (auto _ : state) {
    const std::string* opaque = &id;
    benchmark::DoNotOptimize(opaque);
    benchmark::DoNotOptimize(idem::detail::memory::bucket_hash(key, scope, *opaque));
  }
}

void idempotent_cost_absl_hash(benchmark::State& state) {
  const std::string id = scoped_key();
  for (auto _ : state) {
    const std::string* opaque = &id;
    benchmark::DoNotOptimize(opaque);
    benchmark::DoNotOptimize(
        absl::Hash<absl::string_view>{}(absl::string_view{opaque->data(), opaque->size()}));
  }
}

void idempotent_cost_epoch_pin(benchmark::State& state) {
  for (auto _ : state) {
    const idem::detail::epoch_guard<> pinned;
    benchmark::ClobberMemory();
  }
}

BENCHMARK(idempotent_cost_fingerprint)->Name("idempotent_cost/fingerprint");
BENCHMARK(idempotent_cost_xxh3_body)->Name("idempotent_cost/xxh3_body");
BENCHMARK(idempotent_cost_key_check)->Name("idempotent_cost/key_check");
BENCHMARK(idempotent_cost_wall_clock)->Name("idempotent_cost/wall_clock");
BENCHMARK(idempotent_cost_exact_wall_clock)->Name("idempotent_cost/exact_wall_clock");
BENCHMARK(idempotent_cost_bucket_hash)->Name("idempotent_cost/bucket_hash");
BENCHMARK(idempotent_cost_absl_hash)->Name("idempotent_cost/absl_hash");
BENCHMARK(idempotent_cost_epoch_pin)->Name("idempotent_cost/epoch_pin");

template <class Guard>
void register_first(const std::string& name) {
  // A fixed count, split over the threads, so every run fills a table of the same size.
  for (const int threads : idem_bench::thread_counts()) {
    benchmark::RegisterBenchmark(("idempotent_first/" + name).c_str(), idempotent_first<Guard>)
        ->Iterations(static_cast<benchmark::IterationCount>(first_keys) / threads)
        // One run is 60,000 claims (some 40 ms) into a fresh store, and what it costs swings
        // with the state the allocator was left in (by the run before, of either guard): the
        // median of nine is steadier than of the three the rest of the suite makes, and
        // costs under a second.
        ->Repetitions(9)
        ->Threads(threads)
        ->UseRealTime();
  }
}

template <class Guard>
void register_replay(const std::string& name) {
  auto* replay =
      benchmark::RegisterBenchmark(("idempotent_replay/" + name).c_str(), idempotent_replay<Guard>);
  for (const int threads : idem_bench::thread_counts())
    replay->Threads(threads);
  replay->UseRealTime();
}

[[maybe_unused]] const bool registered =
    (register_first<idem_guard>("idem"), register_first<floor_guard>("floor"),
     register_replay<idem_guard>("idem"), register_replay<floor_guard>("floor"), true);

}  // namespace
