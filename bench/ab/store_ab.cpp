// Two versions of idem's memory store in one process, compared on the claim of new keys: the
// claim_new workload (UUID-shaped keys into a fresh store sized for them), filled alternately
// by version A and version B, round after round. scripts/store_ab.sh builds it from two git
// revisions: A's headers come first on the include path, B's copy is included below under
// `#define idem idemB`, so both live in one binary and see the same heap, the same pages and
// the same neighbours. Full runs of scripts/bench.sh an hour apart moved a peer's claim_new
// time by a quarter; two versions measured side by side in one process differ by their code
// and a small bias, which a run of A against A shows.
//
// Prints the median time per claim of each version and the median, over rounds, of B's time
// less A's in the same round, with the middle half of those differences.
#include <idem/store/memory.hpp>

#define idem idemB
#include IDEM_AB_B_STORE
#undef idem

#include <uuid_keys.hpp>

#include <malloc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

struct options {
  int rounds = 16;
  std::size_t keys = 750'000;
  int threads = 1;
};

// The store's bounds for `expected_records`: its `options`, named `limits` before issue 50, so
// that a revision from before the rename compares with one after it.
template <class Store>
auto bounds_for(std::size_t expected_records) {
  if constexpr (requires { typename Store::options; }) {
    typename Store::options bounds;
    bounds.expected_records = expected_records;
    return bounds;
  } else {
    typename Store::limits bounds;
    bounds.expected_records = expected_records;
    return bounds;
  }
}

// One fill: every key claimed once, by `threads` threads taking equal parts; the wall time over
// the claims, as claim_new reports it.
template <class Store, class Request, class Time, class Digest>
double fill(const std::vector<std::string>& keys, std::size_t offset, int threads) {
  auto store = std::make_unique<Store>(bounds_for<Store>(keys.size()));
  std::array<std::uint8_t, 16> print{};
  for (std::size_t i = 0; i < print.size(); ++i)
    print[i] = static_cast<std::uint8_t>(0xa5 ^ i);
  const Digest fingerprint{std::span<const std::uint8_t>(print)};
  const Time now{std::chrono::seconds(1'700'000'000)};
  std::vector<std::size_t> wrong(static_cast<std::size_t>(threads), 0);
  const auto claim_part = [&](int part) {
    const auto parts = static_cast<std::size_t>(threads);
    const std::size_t from = keys.size() * static_cast<std::size_t>(part) / parts;
    const std::size_t to = keys.size() * static_cast<std::size_t>(part + 1) / parts;
    for (std::size_t i = from; i < to; ++i) {
      const auto result =
          store->claim(Request{"payments", keys[(i + offset) % keys.size()], fingerprint, now,
                               std::chrono::seconds(30), std::chrono::hours(24)});
      wrong[static_cast<std::size_t>(part)] += result.fence != 1 ? 1 : 0;
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> helpers;
  for (int part = 1; part < threads; ++part)
    helpers.emplace_back(claim_part, part);
  claim_part(0);
  for (std::thread& helper : helpers)
    helper.join();
  const auto stop = std::chrono::steady_clock::now();
  for (const std::size_t count : wrong) {
    if (count != 0) {
      std::fprintf(stderr, "store_ab: %zu new keys did not answer claimed\n", count);
      std::exit(1);
    }
  }
  return std::chrono::duration<double, std::nano>(stop - start).count() /
         static_cast<double>(keys.size());
}

double at_fraction(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const auto at = static_cast<std::size_t>(fraction * static_cast<double>(values.size() - 1) + 0.5);
  return values[at];
}

options parse(int argc, char** argv) {
  options given;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view name = argv[i];
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (value <= 0) {
      std::fprintf(stderr, "store_ab: %s wants a positive number\n", argv[i]);
      std::exit(2);
    }
    if (name == "--rounds") {
      given.rounds = static_cast<int>(value);
    } else if (name == "--keys") {
      given.keys = static_cast<std::size_t>(value);
    } else if (name == "--threads") {
      given.threads = static_cast<int>(value);
    } else {
      std::fprintf(stderr, "store_ab: unknown option %s\n", argv[i]);
      std::exit(2);
    }
  }
  return given;
}

}  // namespace

int main(int argc, char** argv) {
  const options given = parse(argc, argv);
  // Freed fills stay in the heap for the next one rather than going back to the kernel, so
  // no fill pays for page faults the other did not.
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::vector<std::string> keys;
  keys.reserve(given.keys);
  for (std::size_t i = 0; i < given.keys; ++i)
    keys.push_back(idem_bench::uuid_shaped_key(i));

  std::vector<double> a;
  std::vector<double> b;
  std::vector<double> b_less_a;
  const auto fill_a = [&](std::size_t offset) {
    return fill<idem::memory_store, idem::claim_request, idem::store_time, idem::digest>(
        keys, offset, given.threads);
  };
  const auto fill_b = [&](std::size_t offset) {
    return fill<idemB::memory_store, idemB::claim_request, idemB::store_time, idemB::digest>(
        keys, offset, given.threads);
  };
  for (int round = 0; round < given.rounds; ++round) {
    // Each round starts at another key, and the version that goes first alternates.
    const std::size_t offset = static_cast<std::size_t>(round) * 7919;
    double time_a = 0;
    double time_b = 0;
    if (round % 2 == 0) {
      time_a = fill_a(offset);
      time_b = fill_b(offset);
    } else {
      time_b = fill_b(offset);
      time_a = fill_a(offset);
    }
    a.push_back(time_a);
    b.push_back(time_b);
    b_less_a.push_back(time_b - time_a);
  }
  std::printf("claim of a new key, %zu keys, %d thread(s), %d rounds\n", given.keys, given.threads,
              given.rounds);
  std::printf("A: %.1f ns   B: %.1f ns   B - A: %+.1f ns (middle half %+.1f to %+.1f)\n",
              at_fraction(a, 0.5), at_fraction(b, 0.5), at_fraction(b_less_a, 0.5),
              at_fraction(b_less_a, 0.25), at_fraction(b_less_a, 0.75));
}
