// redis_store against the locked_store model, following the caller's (manual) clock. On a
// private redis-server with no append-only file: semantics, not durability, are under test, and
// the shared server fsyncs every write (appendfsync always), which would make each sequence
// cost what the disk costs. Each sequence gets a key prefix of its own.
#include <catch2/catch.hpp>

#include <idem/store/redis.hpp>

#include "store_model.hpp"
#include "stores/redis/redis_test_support.hpp"

TEST_CASE("redis_store answers every operation sequence as the locked_store model does",
          "[model]") {
  const idem_redis_test::private_redis server({"--appendonly", "no"});
  idem::testing::model::require_model_agreement(
      [&] { return idem::redis_store{server.options(idem::time_source::caller)}; },
      idem::testing::model::budget{300, 100});
}

TEST_CASE("redis_store caps each scope's records as the model does", "[model]") {
  const idem_redis_test::private_redis server({"--appendonly", "no"});
  idem::testing::model::budget capped{300, 100};
  capped.scope_cap = 2;
  idem::testing::model::require_model_agreement(
      [&] {
        idem::redis_store::options options = server.options(idem::time_source::caller);
        options.max_records_per_scope = 2;
        return idem::redis_store{options};
      },
      capped);
}
