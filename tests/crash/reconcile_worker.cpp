// idem_crash_reconcile_worker: one payment in a process of its own, for the reconciler's crash
// matrix (reconcile_crash_test.cpp). It runs the request of --key through a resumable
// idem::idempotent (payments_handler.hpp: three steps, each appending to the --ledger file, the
// request kept in the record from the claim on) on an SQLite, PostgreSQL or Redis store, and
// kills itself with SIGKILL at --die, one of the handler's recovery points:
//
//   idem_crash_reconcile_worker --store=sqlite --sqlite=FILE
//                             | --store=postgres --conninfo=INFO --table=TABLE
//                             | --store=redis --redis-host=HOST --redis-port=PORT --prefix=PREFIX
//                             --key=KEY --ledger=FILE --die=POINT
//
// POINT: before_charge; in_charge, in_record, in_notify (inside the step, after its ledger line
// is fsync'd, before its result is recorded); after_charge, after_record, after_notify (the
// step's result recorded, the next step not started; after_notify: before the response is
// stored). The stores keep their default time source (the server's clock, for PostgreSQL and
// Redis) and the claim's lease is payments_handler.hpp's worker_lease.
//
// Before dying it prints "at POINT" (one write(2): support/worker_io.hpp). A worker that gets to
// the end prints "survived VERDICT" and exits 6.
#include <chrono>
#include <string>

#include <idem/store/postgres.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/sqlite.hpp>

#include "crash/payments_handler.hpp"
#include "support/worker_io.hpp"

namespace {

using idem::testing::say;
using idem::testing::worker_arguments;
using idem::testing::worker_usage_error;

constexpr const char* usage =
    "idem_crash_reconcile_worker --store=sqlite|postgres|redis [--sqlite=FILE | --conninfo=INFO "
    "--table=TABLE | --redis-host=HOST --redis-port=PORT --prefix=PREFIX] --key=KEY "
    "--ledger=FILE --die=POINT (see tests/crash/reconcile_worker.cpp)";

template <class Store>
int pay(Store store, const worker_arguments& arguments, const std::string& point) {
  idem_crash::payments<Store> payments{
      idem_crash::payments_handler{arguments.option("ledger"), point},
      idem_crash::payments_options(std::move(store), idem_crash::worker_lease)};
  const std::string& key = arguments.option("key");
  const auto outcome = payments(idem_crash::payments_scope, key, idem_crash::payment_request(key));
  say("survived " + std::string(idem::to_string(outcome.verdict())));
  return 6;
}

int run(const worker_arguments& arguments) {
  arguments.expect_no_words();
  const std::string& point = arguments.option("die");
  try {
    (void)idem_crash::payment_point_named(point);
  } catch (const std::invalid_argument& error) {
    throw worker_usage_error(std::string("--die: ") + error.what());
  }
  (void)arguments.option("key");
  (void)arguments.option("ledger");
  const std::string& store = arguments.option("store");
  if (store == "sqlite")
    return pay(idem::sqlite_store(arguments.option("sqlite")), arguments, point);
  if (store == "postgres") {
    idem::postgres_store::options options;
    options.conninfo = arguments.option("conninfo");
    options.table = arguments.option("table");
    options.pool_size = 1;
    return pay(idem::postgres_store(options), arguments, point);
  }
  if (store == "redis") {
    idem::redis_store::options options;
    options.host = arguments.option("redis-host");
    options.port = static_cast<int>(arguments.number("redis-port"));
    options.prefix = arguments.option("prefix");
    options.pool_size = 1;
    return pay(idem::redis_store(options), arguments, point);
  }
  throw worker_usage_error("--store must be sqlite, postgres or redis, not '" + store + "'");
}

}  // namespace

int main(int argc, char** argv) {
  return idem::testing::worker_main("idem_crash_reconcile_worker", usage,
                                    [&] { return run(worker_arguments(argc, argv)); });
}
