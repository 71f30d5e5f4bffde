// What publishing to the outbox costs a transactional handler on SQLite.
//
//   outbox_publish/with_publish/sqlite   a new key through idem::idempotent with a transactional
//                                        handler that writes its effect row and publishes one
//                                        message (a 64-byte payload, one header) in the same
//                                        transaction
//   outbox_publish/without/sqlite        the same handler without the publish
//
// The difference is one INSERT in the commit the record needed anyway: no second transaction,
// so no second fsync. The store runs as a deployment would (synchronous = full: every commit is
// durable), one pooled connection, in a temporary directory; keys are "order-<n>".
#include <benchmark/benchmark.h>

#include <sqlite3.h>

#include <stdexcept>
#include <string>

#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include "temporary_directory.hpp"

namespace {

struct sqlite_policies : idem::default_policies {
  using store = idem::sqlite_store;
};

template <bool Publish>
void outbox_publish_sqlite(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-bench-outbox"};
  const std::string path = directory.file("outbox.sqlite3");
  idem::sqlite_store::options options;
  options.path = path;
  options.pool_size = 1;
  idem::sqlite_store store{options};
  {
    sqlite3* app = nullptr;
    if (sqlite3_open(path.c_str(), &app) != SQLITE_OK ||
        sqlite3_exec(app, "CREATE TABLE charges (key TEXT NOT NULL, amount INTEGER NOT NULL)",
                     nullptr, nullptr, nullptr) != SQLITE_OK) {
      sqlite3_close(app);
      throw std::runtime_error("could not make the effects table");
    }
    sqlite3_close(app);
  }
  const idem::outbox_message message{.topic = "payments",
                                     .partition_key = "acct-7",
                                     .payload = std::string(64, 'p'),
                                     .headers = {{"type", "payment.succeeded"}}};
  auto charge = [&](idem::handler_context& ctx, const std::string& amount,
                    idem::sqlite_store::transaction& txn) {
    txn.exec("INSERT INTO charges (key, amount) VALUES (?, ?)", ctx.key(), std::stoi(amount));
    if constexpr (Publish) txn.publish("charged", message);
    return std::string("charged");
  };
  idem::idempotent<decltype(charge), sqlite_policies> payments{charge, {.store = store}};
  const std::string amount = "250";
  std::size_t n = 0;
  for (auto _ : state) {
    auto outcome = payments("bench", "order-" + std::to_string(n++), amount);
    if (outcome.verdict() != idem::verdict::executed) state.SkipWithError("not executed");
    benchmark::DoNotOptimize(outcome);
  }
}

}  // namespace

BENCHMARK(outbox_publish_sqlite<true>)->Name("outbox_publish/with_publish/sqlite")->UseRealTime();
BENCHMARK(outbox_publish_sqlite<false>)->Name("outbox_publish/without/sqlite")->UseRealTime();
