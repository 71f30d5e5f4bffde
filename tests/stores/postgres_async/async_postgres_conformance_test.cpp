// async_postgres_store against a real PostgreSQL server: the whole Store conformance suite
// (the 64-thread storm and the paused holder's fencing included) and the reconciler's, through
// blocking_store, with caller time so that the suites' manual clock rules.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/postgres/async.hpp>
#include <idem/testing/reconciler_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

#include "async_postgres_support.hpp"
#include "support/checkpoint_batch_cases.hpp"

using async_postgres_factory = idem::testing::postgres_async::factory;

static_assert(idem::AsyncStore<idem::async_postgres_store>);
static_assert(idem::Store<idem::blocking_store<idem::async_postgres_store>>);
static_assert(idem::AsyncCheckpointBatchStore<idem::async_postgres_store>);
static_assert(idem::CheckpointBatchStore<idem::blocking_store<idem::async_postgres_store>>);

IDEM_STORE_CONFORMANCE_TESTS(async_postgres_factory)
IDEM_RECONCILER_CONFORMANCE_TESTS(async_postgres_factory)

TEST_CASE("async_postgres_store renews a batch of leases in one statement, each on its own fence",
          "[postgres_async]") {
  async_postgres_factory make;
  auto store = make.make({});
  idem_test::checkpoint_batch_renews_each_held_record(
      store, idem::store_time{std::chrono::seconds{1'700'000'000}}, std::chrono::nanoseconds{0});
}
