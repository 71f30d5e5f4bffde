// redis_store's batches (store/redis/detail/batch.hpp) and inbox::deduplicate_batch over them,
// against the real server: the claim scripts of a batch pipelined in one round trip, each with the
// single claim's semantics.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/redis.hpp>

#include "redis_test_support.hpp"
#include "support/batch_inbox_cases.hpp"

#include <chrono>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using idem_redis_test::shared_options;

namespace {

struct redis_policies : idem::default_policies {
  using store = idem::redis_store;
};
using redis_inbox = idem::inbox<redis_policies>;

static_assert(idem::BatchStore<idem::redis_store>);

redis_inbox inbox_on(const idem::redis_store& store) {
  redis_inbox::options parts;
  parts.store = store;
  return redis_inbox(std::move(parts));
}

idem::claim_request ask(std::string_view key, idem::store_time now) {
  return idem::claim_request{"tenant", key, idem::digest{}, now, 30s, 24h};
}

}  // namespace

TEST_CASE("a redis batch runs each event once, duplicates inside it and across batches") {
  idem::redis_store store{shared_options(idem::time_source::server)};
  redis_inbox inbox = inbox_on(store);
  idem_test::batch::duplicates_inside_and_across(inbox, "orders");
}

TEST_CASE("a redis batch answers bad input, a throwing function and a held id plainly") {
  idem::redis_store store{shared_options(idem::time_source::server)};
  redis_inbox inbox = inbox_on(store);
  idem_test::batch::bad_input(inbox, "orders");
  idem_test::batch::throwing_function(inbox, "orders");
  idem_test::batch::held_elsewhere(inbox, "orders");
}

TEST_CASE(
    "redis claim_batch claims new, released and expired records and takes over abandoned "
    "claims in one round trip") {
  idem::redis_store store{shared_options(idem::time_source::caller)};
  const auto start = std::chrono::system_clock::now();
  REQUIRE(store.claim(ask("done", start)).status == idem::claim_status::claimed);
  REQUIRE(store.complete({"tenant", "done", 1}, "stored", start));
  REQUIRE(store.claim(ask("held", start)).status == idem::claim_status::claimed);
  REQUIRE(store.claim(ask("abandoned", start - 1min)).status == idem::claim_status::claimed);
  REQUIRE(store.claim(ask("released", start)).status == idem::claim_status::claimed);
  REQUIRE(store.release({"tenant", "released", 1}));
  const std::vector<idem::claim_request> batch{ask("abandoned", start), ask("done", start),
                                               ask("held", start), ask("new", start),
                                               ask("released", start)};
  const std::vector<idem::claim_result> got = store.claim_batch(batch);
  REQUIRE(got.size() == batch.size());
  CHECK(got[0].status == idem::claim_status::taken_over);
  CHECK(got[0].fence == 2);
  CHECK(got[1].status == idem::claim_status::existing);
  CHECK(got[1].existing.response == "stored");
  CHECK(got[2].status == idem::claim_status::existing);
  CHECK(got[2].existing.state == idem::record_state::in_progress);
  CHECK(got[3].status == idem::claim_status::claimed);
  CHECK(got[3].fence == 1);
  CHECK(got[4].status == idem::claim_status::claimed);
  CHECK(got[4].fence == 2);
  const std::vector<idem::batch_completion> done{
      {{"tenant", "new", 1}, "n"}, {{"tenant", "held", 7}, "h"}, {{"tenant", "released", 2}, "r"}};
  CHECK(store.complete_batch(done, start) == std::vector<bool>{true, false, true});
  CHECK(store.find("tenant", "new", start)->response == "n");
  CHECK(store.find("tenant", "held", start)->state == idem::record_state::in_progress);
  // The records a batch made are enrolled for sweep and stuck as a single claim's are.
  CHECK(store.stuck(start + 1h, 10).size() == 2);  // "abandoned" (taken over) and "held"
}

TEST_CASE("overlapping redis batches from many threads run each event once", "[concurrency]") {
  idem::redis_store store{shared_options(idem::time_source::server)};
  idem_test::batch::overlapping_batches([&] { return inbox_on(store); }, "orders", 8, 8, 48);
}
