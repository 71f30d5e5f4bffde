// redis_cluster_store against the locked_store model, following the caller's (manual) clock, on
// a private cluster of three primaries (redis_cluster_support.hpp) with no append-only files:
// semantics, not durability, are under test. Each sequence gets a key prefix of its own, and its
// scopes fall in different slots, so a sequence's operations go to several primaries.
#include <catch2/catch.hpp>

#include <idem/store/redis/cluster.hpp>

#include "store_model.hpp"
#include "stores/redis/redis_cluster_support.hpp"

namespace {

// 200 sequences a property in the g++ build (10 s); 60 under the sanitizers, where a sequence
// costs five times as much (47 s a property at 200, in the ASan build at -O0; each sweep or stuck
// asks every primary about each of its slots' registries, 16,384 SCARDs in all). The g++ build
// searches the wider space.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int sequences = 60;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int sequences = 60;
#else
constexpr int sequences = 200;
#endif
#else
constexpr int sequences = 200;
#endif

}  // namespace

TEST_CASE("redis_cluster_store answers every operation sequence as the locked_store model does",
          "[model]") {
  const idem_redis_test::private_cluster cluster(3, 0);
  idem::testing::model::require_model_agreement(
      [&] { return idem::redis_cluster_store{cluster.options(idem::time_source::caller)}; },
      idem::testing::model::budget{sequences, 100});
}

TEST_CASE("redis_cluster_store caps each scope's records as the model does", "[model]") {
  const idem_redis_test::private_cluster cluster(3, 0);
  idem::testing::model::budget capped{sequences, 100};
  capped.scope_cap = 2;
  idem::testing::model::require_model_agreement(
      [&] {
        idem::redis_cluster_store::options options = cluster.options(idem::time_source::caller);
        options.max_records_per_scope = 2;
        return idem::redis_cluster_store{options};
      },
      capped);
}
