// redis_cluster_store against the locked_store model, following the caller's (manual) clock, on
// a private cluster of three primaries (redis_cluster_support.hpp) with no append-only files:
// semantics, not durability, are under test. Each sequence gets a key prefix of its own, and its
// scopes fall in different slots, so a sequence's operations go to several primaries.
#include <catch2/catch.hpp>

#include <idem/store/redis_cluster.hpp>

#include "store_model.hpp"
#include "stores/redis/redis_cluster_support.hpp"

TEST_CASE("redis_cluster_store answers every operation sequence as the locked_store model does",
          "[model]") {
  const idem_redis_test::private_cluster cluster(3, 0);
  idem::testing::model::require_model_agreement(
      [&] { return idem::redis_cluster_store{cluster.options(idem::redis_time::caller)}; },
      idem::testing::model::budget{200, 100});
}

TEST_CASE("redis_cluster_store caps each scope's records as the model does", "[model]") {
  const idem_redis_test::private_cluster cluster(3, 0);
  idem::testing::model::budget capped{200, 100};
  capped.scope_cap = 2;
  idem::testing::model::require_model_agreement(
      [&] {
        idem::redis_cluster_store::options options = cluster.options(idem::redis_time::caller);
        options.max_records_per_scope = 2;
        return idem::redis_cluster_store{options};
      },
      capped);
}
