// checkpoint_batch (idem/store/batch.hpp), the heartbeat's renewals in one call, against any
// CheckpointBatchStore: each entry applied on its own fence, exactly as checkpoint would apply
// it, answered in the order sent. Included by each store's tests.
#ifndef IDEM_TESTS_SUPPORT_CHECKPOINT_BATCH_CASES_HPP
#define IDEM_TESTS_SUPPORT_CHECKPOINT_BATCH_CASES_HPP

#include <catch2/catch.hpp>

#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace idem_test {

/// `now`: the store's idea of the present (the caller's clock, or the server's for a store on
/// its own: a lease is then checked to within `slack`).
template <idem::CheckpointBatchStore Store>
void checkpoint_batch_renews_each_held_record(Store& store, idem::store_time now,
                                              std::chrono::nanoseconds slack) {
  using namespace std::chrono_literals;
  const auto claim = [&](std::string_view key) {
    const idem::claim_result claimed =
        store.claim(idem::claim_request{"tenant", key, idem::digest{}, now, 30s, 24h, "start"});
    REQUIRE(claimed.status == idem::claim_status::claimed);
    return claimed.fence;
  };
  const std::uint64_t held = claim("held");
  // Released, then claimed again: the entry names the fence the record had before.
  const std::uint64_t moved = claim("moved");
  REQUIRE(store.release(idem::fenced_key{"tenant", "moved", moved}));
  const std::uint64_t moved_now = claim("moved");
  REQUIRE(moved_now != moved);
  const std::uint64_t done = claim("done");
  REQUIRE(store.complete(idem::fenced_key{"tenant", "done", done}, "response", now));
  const std::uint64_t also = claim("also");

  const std::vector<idem::batch_checkpoint> entries{
      {{"tenant", "held", held}, "r-held"},
      {{"tenant", "moved", moved}, "r-moved"},
      {{"tenant", "done", done}, "r-done"},
      {{"tenant", "also", also}, ""},
  };
  const idem::store_time lease_until = now + 90s;
  // The completed record's fence still matches: as checkpoint, the entry applies (the contract
  // checks the fence only), and the response stays.
  CHECK(store.checkpoint_batch(entries, lease_until) == std::vector<bool>{true, false, true, true});

  const std::optional<idem::record> renewed = store.find("tenant", "held", now);
  REQUIRE(renewed);
  CHECK(renewed->recovery == "r-held");
  CHECK(renewed->fence == held);
  CHECK(renewed->lease_until >= lease_until - slack);
  CHECK(renewed->lease_until <= lease_until + slack);
  const std::optional<idem::record> emptied = store.find("tenant", "also", now);
  REQUIRE(emptied);
  CHECK(emptied->recovery.empty());
  // The stale fence's record is left as it was; the completed one keeps its response.
  const std::optional<idem::record> taken = store.find("tenant", "moved", now);
  REQUIRE(taken);
  CHECK(taken->fence == moved_now);
  CHECK(taken->recovery == "start");
  const std::optional<idem::record> completed = store.find("tenant", "done", now);
  REQUIRE(completed);
  CHECK(completed->state == idem::record_state::completed);
  CHECK(completed->response == "response");

  CHECK(store.checkpoint_batch(std::vector<idem::batch_checkpoint>{}, lease_until).empty());
}

}  // namespace idem_test

#endif  // IDEM_TESTS_SUPPORT_CHECKPOINT_BATCH_CASES_HPP
