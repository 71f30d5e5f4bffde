// The batched inbox (inbox::deduplicate_batch) beside one deduplicate per event, on PostgreSQL.
//
//   batch_inbox/idem_batch/postgres   256 new event ids a batch: one claim_batch statement, the
//                                     consumer function for each, one complete_batch statement
//   batch_inbox/idem_single/postgres  the same 256 events, one deduplicate each (a claim and a
//                                     complete: two round trips and two commits an event)
//
// events_per_second counts the events answered. Both use the same server, a table of their own
// made by the store, one pooled connection, and the server's fsync settings. The server is the
// one scripts/servers/postgres.sh starts; IDEM_TEST_PG_CONNINFO says where.
#include <benchmark/benchmark.h>

#include <libpq-fe.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>

namespace {

constexpr std::size_t batch_size = 256;

struct pg_policies : idem::default_policies {
  using store = idem::postgres_store;
};
using pg_inbox = idem::inbox<pg_policies>;

const char* conninfo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while benchmarks run
  return std::getenv("IDEM_TEST_PG_CONNINFO");
}

// An inbox on a table of its own, dropped when the benchmark ends.
class bench_inbox {
 public:
  explicit bench_inbox(const char* what)
      : table_(std::string("bench_batch_") + what + "_" + std::to_string(::getpid())) {
    idem::postgres_store::options config;
    config.conninfo = conninfo();
    config.table = table_;
    config.pool_size = 1;
    pg_inbox::options parts;
    parts.store = idem::postgres_store{config};
    inbox_.emplace(std::move(parts));
  }
  bench_inbox(const bench_inbox&) = delete;
  bench_inbox& operator=(const bench_inbox&) = delete;
  ~bench_inbox() {
    inbox_.reset();
    PGconn* admin = PQconnectdb(conninfo());
    PQsetNoticeProcessor(
        admin, [](void*, const char*) {}, nullptr);
    PQclear(PQexec(admin, ("DROP TABLE IF EXISTS \"" + table_ + "\", \"" + table_ + "_meta\", \"" +
                           table_ + "_outbox\", \"" + table_ +
                           "_outbox_dead\"; DROP FUNCTION IF "
                           "EXISTS \"" +
                           table_ + "_notify\"()")
                              .c_str()));
    PQfinish(admin);
  }
  pg_inbox& get() { return *inbox_; }

 private:
  std::string table_;
  std::optional<pg_inbox> inbox_;
};

// The next batch of event ids no run has seen.
void next_batch(std::vector<std::string>& ids, std::uint64_t& counter) {
  ids.resize(batch_size);
  for (std::string& id : ids)
    id = "event-" + std::to_string(counter++);
}

void batch_inbox_idem_batch_postgres(benchmark::State& state) {
  if (conninfo() == nullptr) {
    state.SkipWithError("IDEM_TEST_PG_CONNINFO not set");
    return;
  }
  bench_inbox inbox("many");
  std::vector<std::string> ids;
  std::uint64_t counter = 0;
  std::uint64_t effects = 0;
  for (auto _ : state) {
    state.PauseTiming();
    next_batch(ids, counter);
    state.ResumeTiming();
    const auto answers =
        inbox.get().deduplicate_batch("events", ids, [&](std::size_t) { ++effects; });
    benchmark::DoNotOptimize(answers.data());
  }
  if (effects != counter) state.SkipWithError("an event did not run exactly once");
  state.counters["events_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations() * batch_size), benchmark::Counter::kIsRate);
}

void batch_inbox_idem_single_postgres(benchmark::State& state) {
  if (conninfo() == nullptr) {
    state.SkipWithError("IDEM_TEST_PG_CONNINFO not set");
    return;
  }
  bench_inbox inbox("one");
  std::vector<std::string> ids;
  std::uint64_t counter = 0;
  std::uint64_t effects = 0;
  for (auto _ : state) {
    state.PauseTiming();
    next_batch(ids, counter);
    state.ResumeTiming();
    for (const std::string& id : ids) {
      const auto answer = inbox.get().deduplicate("events", id, [&] { ++effects; });
      benchmark::DoNotOptimize(&answer);
    }
  }
  if (effects != counter) state.SkipWithError("an event did not run exactly once");
  state.counters["events_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations() * batch_size), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(batch_inbox_idem_batch_postgres)
    ->Name("batch_inbox/idem_batch/postgres")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(batch_inbox_idem_single_postgres)
    ->Name("batch_inbox/idem_single/postgres")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
