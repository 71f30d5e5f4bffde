// async_redis_store against the locked_store model, through blocking_store, following the
// caller's (manual) clock, on a private redis-server with no append-only file (as
// redis_model_test.cpp does for redis_store). A pool of two threads runs the stores' executor;
// each sequence gets a store, and a key prefix, of its own.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/redis/async.hpp>

#include "store_model.hpp"
#include "stores/redis/redis_test_support.hpp"

namespace {

idem::async_redis_store::options async_options(const idem_redis_test::private_redis& server) {
  const idem::redis_store::options blocking = server.options(idem::time_source::caller);
  idem::async_redis_store::options options;
  options.host = blocking.host;
  options.port = blocking.port;
  options.prefix = blocking.prefix;
  options.clock = blocking.clock;
  return options;
}

}  // namespace

TEST_CASE("async_redis_store answers every operation sequence as the locked_store model does",
          "[model]") {
  const idem_redis_test::private_redis server({"--appendonly", "no"});
  idem::asio::thread_pool pool(2);
  idem::testing::model::require_model_agreement(
      [&] {
        return idem::blocking_store<idem::async_redis_store>(
            idem::async_redis_store(pool.get_executor(), async_options(server)));
      },
      idem::testing::model::budget{300, 100});
  pool.join();
}

TEST_CASE("async_redis_store caps each scope's records as the model does", "[model]") {
  const idem_redis_test::private_redis server({"--appendonly", "no"});
  idem::asio::thread_pool pool(2);
  idem::testing::model::budget capped{300, 100};
  capped.scope_cap = 2;
  idem::testing::model::require_model_agreement(
      [&] {
        idem::async_redis_store::options options = async_options(server);
        options.max_records_per_scope = 2;
        return idem::blocking_store<idem::async_redis_store>(
            idem::async_redis_store(pool.get_executor(), options));
      },
      capped);
  pool.join();
}
