// What publishing to the outbox costs a transactional handler on PostgreSQL.
//
//   outbox_publish/with_publish/postgres   a new key through idem::idempotent with a
//                                          transactional handler that writes its effect row and
//                                          publishes one message (a 64-byte payload, one
//                                          header) in the same transaction
//   outbox_publish/without/postgres        the same handler without the publish
//
// The difference is one INSERT in the transaction the record needed anyway: no second commit,
// so no second WAL flush. Synchronous commits with fsync on, as a deployment would run; one
// pooled connection; the server scripts/servers/postgres.sh starts (IDEM_TEST_PG_CONNINFO).
#include <benchmark/benchmark.h>

#include <libpq-fe.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>

namespace {

struct postgres_policies : idem::default_policies {
  using store = idem::postgres_store;
};

void run_sql(const char* conninfo, const std::string& sql) {
  PGconn* admin = PQconnectdb(conninfo);
  PQsetNoticeProcessor(
      admin, [](void*, const char*) {}, nullptr);
  PQclear(PQexec(admin, sql.c_str()));
  PQfinish(admin);
}

template <bool Publish>
void outbox_publish_postgres(benchmark::State& state) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while benchmarks run
  const char* conninfo = std::getenv("IDEM_TEST_PG_CONNINFO");
  if (conninfo == nullptr) {
    state.SkipWithError("IDEM_TEST_PG_CONNINFO is not set (scripts/bench.sh sets it)");
    return;
  }
  const std::string table = "bench_outbox_" + std::to_string(::getpid());
  const std::string effects = "\"" + table + "_charges\"";
  const auto drop = [&] {
    run_sql(conninfo, "DROP TABLE IF EXISTS \"" + table + "\", \"" + table + "_meta\", \"" + table +
                          "_outbox\", \"" + table + "_outbox_dead\", " + effects);
  };
  drop();
  {
    idem::postgres_store::options options;
    options.conninfo = conninfo;
    options.table = table;
    options.pool_size = 1;
    idem::postgres_store store{options};
    run_sql(conninfo, "CREATE TABLE " + effects + " (key text NOT NULL)");
    const idem::outbox_message message{.topic = "payments",
                                       .partition_key = "acct-7",
                                       .payload = std::string(64, 'p'),
                                       .headers = {{"type", "payment.succeeded"}}};
    const std::string insert = "INSERT INTO " + effects + " VALUES ($1)";
    auto charge = [&](idem::handler_context& ctx, const std::string&,
                      idem::postgres_store::transaction& txn) {
      txn.exec(insert, {ctx.key()});
      if constexpr (Publish) txn.publish("charged", message);
      return std::string("charged");
    };
    idem::idempotent<decltype(charge), postgres_policies> payments{charge, {.store = store}};
    const std::string amount = "250";
    std::size_t n = 0;
    for (auto _ : state) {
      auto outcome = payments("bench", "order-" + std::to_string(n++), amount);
      if (outcome.verdict() != idem::verdict::executed) state.SkipWithError("not executed");
      benchmark::DoNotOptimize(outcome);
    }
  }
  drop();
}

}  // namespace

BENCHMARK(outbox_publish_postgres<true>)
    ->Name("outbox_publish/with_publish/postgres")
    ->UseRealTime();
BENCHMARK(outbox_publish_postgres<false>)->Name("outbox_publish/without/postgres")->UseRealTime();
