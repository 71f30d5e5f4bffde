// What a record costs in memory_store: measured on the heap, beside what the header promises.
#include <catch2/catch.hpp>

#include <idem/store/memory.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "count_allocations.hpp"

using namespace std::chrono_literals;

TEST_CASE("a completed record costs its bytes plus a bounded overhead", "[memory_store]") {
  constexpr int records = 20'000;
  constexpr std::size_t response_size = 100;
  idem::memory_store::options bounds;
  bounds.expected_records = records;
  idem::memory_store store{bounds};
  const idem::store_time now{std::chrono::seconds{1767225600}};
  const std::string response(response_size, 'r');
  std::uint8_t bytes[16] = {};
  const idem::digest print{bytes};

  std::vector<std::string> keys;
  for (int i = 0; i < records; ++i)
    keys.push_back("key-" + std::to_string(1'000'000 + i));
  const std::ptrdiff_t before = idem_test::live_heap_bytes();
  const std::size_t allocations_before = idem_test::allocations_on_this_thread();
  for (const std::string& key : keys) {
    const auto claimed = store.claim({"tenant", key, print, now, 30s, 24h});
    REQUIRE(store.complete({"tenant", key, claimed.fence}, response, now));
  }
  // Replaced nodes wait for epoch reclamation, which collects in amortised batches; with no
  // other thread pinned, three collections advance the epoch far enough to free them all.
  for (int i = 0; i < 3; ++i)
    idem::detail::epoch_participant<>::local().collect();
  const std::ptrdiff_t held = idem_test::live_heap_bytes() - before;

  const std::size_t payload =
      std::string("tenant").size() + keys[0].size() + print.size() + response_size;
  const double per_record = static_cast<double>(held) / records;
  const double overhead = per_record - static_cast<double>(payload);
  std::printf(
      "memory_store: %.1f heap bytes a record, %.1f beyond scope+key+fingerprint+response"
      " (%zu in headers; %.2f allocations a record while writing)\n",
      per_record, overhead, idem::memory_store::record_overhead_bytes(),
      static_cast<double>(idem_test::allocations_on_this_thread() - allocations_before) / records);
  CHECK(store.statistics().records == records);
  // The header and the expiry ticket, plus the allocator's own: one block a record, so one
  // chunk header and its rounding (at most 8 + 15 bytes), and the ticket log's block headers.
  // Measured, not assumed.
  CHECK(overhead <= static_cast<double>(idem::memory_store::record_overhead_bytes() + 32));
  // One block makes a new key's claim, one more completes it; the claim's block, replaced,
  // goes back to this thread's block cache once reclaimed and makes a later claim.
  CHECK(static_cast<double>(idem_test::allocations_on_this_thread() - allocations_before) /
            records <
        1.1);
}
