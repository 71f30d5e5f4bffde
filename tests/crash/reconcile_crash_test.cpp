// The reconciler's crash matrix (issue #30), with real processes and real stores: a worker
// (idem_crash_reconcile_worker, reconcile_worker.cpp) runs one payment of three steps through a
// resumable idem::idempotent and kills itself with SIGKILL at one of the handler's seven recovery
// points (before the first step; inside each step, after its effect and before its recording;
// after each step's recording). Its client never retries. Then, in this process, the same
// wrapper (the same handler, writing to the same ledger) on the same store, and an
// idem::reconciler, once the dead worker's lease has run out:
//   * the kill landed where claimed: the worker printed its point and died of SIGKILL, the
//     ledger holds the effects it made before, and the record is still in progress;
//   * the reconciler finishes it: every killed record examined and resumed, no report row;
//   * exactly one effect a step: the ledger has one distinct line a step, under the step's
//     downstream key, and 3 calls, or 4 when the kill came inside a step after its effect (that
//     step is called again, under the same key, and the downstream deduplicates it);
//   * resumed from the recovery points: the response says the steps recorded before the kill
//     ran under the worker's fence (1), the others under the reconciler's (2);
//   * the record is completed, and a client retrying afterwards gets it replayed, identical to
//     the response the test expects.
// A second case lets the reconciler and a retrying client race (two threads, both taking the
// payments in the order they were killed) for the records killed at every point: exactly one of
// them runs each, the other changes nothing, still one effect a step; how often each side won,
// and how often the reconciler found the client holding a record, is printed.
//
// Stores: SQLite, PostgreSQL and Redis, each with its default time source (the database's or the
// Redis server's clock for the leases). The memory store dies with its process, so there is no
// record left for a reconciler to find after a kill -9: its version of this proof is in-process
// (tests/unit/server/reconciler_test.cpp, a handler that stops where a process would die).
//
// Each cell of the matrix (a store, a point) is one world: a fresh database (an SQLite file, a
// PostgreSQL table, a Redis key prefix) and a ledger, in which every run is one payment under its
// own key. The workers are killed runs_at_once at a time; the test then waits once for the last
// lease to run out (worker_lease: half a second) and runs one reconciler pass, which must find
// and finish every payment of the cell, as it would after a crash of a busy service.
//
// Runs per point per store: IDEM_CRASH_RUNS (crash_support.hpp) when set, else 20 (not the
// outbox matrix's 50: this one has 21 cells, and 20 runs keep it near a minute on two cores;
// docs/development.md, "Crash matrix").
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <idem/reconciler.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/sqlite.hpp>

#include "crash/crash_support.hpp"
#include "crash/payments_handler.hpp"
#include "stores/postgres/postgres_test_support.hpp"
#include "stores/redis/redis_test_support.hpp"
#include "support/temporary_directory.hpp"

using idem_crash::finished;
using idem_crash::payment_point;

namespace {

// A fresh SQLite file with idem's schema.
class records_on_sqlite {
 public:
  static constexpr const char* name = "SQLite";
  using store_type = idem::sqlite_store;

  records_on_sqlite() { (void)store(); }
  std::vector<std::string> worker_arguments() const {
    return {"--store=sqlite", "--sqlite=" + path_};
  }
  store_type store() const { return store_type(path_); }

 private:
  idem::testing::temporary_directory directory_{"idem-reconcile-crash"};
  std::string path_ = directory_.file("idem.sqlite3");
};

// A fresh table on the shared PostgreSQL server, dropped when the run ends.
class records_on_postgres {
 public:
  static constexpr const char* name = "PostgreSQL";
  using store_type = idem::postgres_store;

  records_on_postgres() { (void)store(); }
  std::vector<std::string> worker_arguments() const {
    return {"--store=postgres", "--conninfo=" + conninfo_, "--table=" + table_};
  }
  store_type store() const {
    idem::postgres_store::options options;
    options.conninfo = conninfo_;
    options.table = table_;
    options.pool_size = 2;  // the racing case's reconciler and client
    return store_type(options);
  }

 private:
  std::string conninfo_ = idem::testing::postgres::conninfo();
  std::string table_ = idem::testing::postgres::unique_table("reconcile");
  idem::testing::postgres::table_guard guard_{table_};
};

// A key prefix of its own on the shared Redis server, its keys removed when the run ends.
class records_on_redis {
 public:
  static constexpr const char* name = "Redis";
  using store_type = idem::redis_store;

  records_on_redis() = default;
  records_on_redis(const records_on_redis&) = delete;
  records_on_redis& operator=(const records_on_redis&) = delete;
  ~records_on_redis() {
    idem_redis_test::remove_keys(options_.host, options_.port, options_.prefix);
  }

  std::vector<std::string> worker_arguments() const {
    return {"--store=redis", "--redis-host=" + options_.host,
            "--redis-port=" + std::to_string(options_.port), "--prefix=" + options_.prefix};
  }
  store_type store() const { return store_type(options_); }

 private:
  idem::redis_store::options options_ = idem_redis_test::shared_options(idem::time_source::server);
};

template <class Store>
struct reconciler_policies : idem::default_reconciler_policies {
  using store = Store;
};

// One matrix cell's world: a store and a ledger of their own, and its runs (each a payment under
// its own key, killed at its point). The runs share the store, so that one reconciler pass finds
// every record they left, as it would after a crash of a busy service.
template <class Where>
struct payment_world {
  struct run {
    std::string key;
    payment_point point;
  };

  Where where;
  idem::testing::temporary_directory directory{"idem-reconcile-ledger"};
  std::string ledger = directory.file("ledger");
  std::vector<run> runs;
};

// The response the payment must end with: the steps recorded before the kill ran under the
// worker's fence, the others under the fence of whoever took the record over.
idem::http_response expected_response(const std::string& key, const payment_point& point) {
  std::string body;
  for (std::size_t step = 0; step < idem_crash::payment_steps.size(); ++step) {
    const int fence = static_cast<int>(step) < point.recorded ? 1 : 2;
    body += idem_crash::ledger_line(key, idem_crash::payment_steps[step]) + " fence " +
            std::to_string(fence) + "\n";
  }
  return idem::http_response{201, {{"Content-Type", "text/plain"}}, body};
}

// The ledger's lines of the payment under `key` (its calls, by distinct line).
std::map<std::string, int> lines_of(const std::map<std::string, int>& ledger,
                                    const std::string& key) {
  std::map<std::string, int> lines;
  for (const std::string_view step : idem_crash::payment_steps) {
    const auto found = ledger.find(idem_crash::ledger_line(key, step));
    if (found != ledger.end()) lines.insert(*found);
  }
  return lines;
}

// Lines and their counts as text, so that a failed comparison shows them.
std::string text_of(const std::map<std::string, int>& lines) {
  std::string text;
  for (const auto& [line, times] : lines)
    text += line + " x" + std::to_string(times) + "\n";
  return text;
}

// A response as text, for the same reason.
std::string text_of(const idem::http_response& response) {
  return std::to_string(response.status) + "\n" + response.body;
}

// The ledger after the payment finished: one effect a step, and one more call when the worker
// died inside a step, after its effect.
void check_one_effect_a_step(const std::map<std::string, int>& ledger, const std::string& key,
                             const payment_point& point) {
  std::map<std::string, int> expected;
  for (const std::string_view step : idem_crash::payment_steps)
    expected[idem_crash::ledger_line(key, step)] = 1;
  if (point.inside) {
    ++expected[idem_crash::ledger_line(
        key, idem_crash::payment_steps[static_cast<std::size_t>(point.recorded)])];
  }
  CHECK(text_of(lines_of(ledger, key)) == text_of(expected));
}

// The calls the ledger holds, all payments together.
int calls_in(const std::map<std::string, int>& ledger) {
  int calls = 0;
  for (const auto& [line, times] : ledger)
    calls += times;
  return calls;
}

// Makes `count` runs, run i killed at point_of(i); kills their workers, runs_at_once at a time;
// checks that each kill landed where claimed (its words, its death, its effects); and waits until
// the last dead worker's lease has run out.
template <class Where, class PointOf>
void kill_workers(payment_world<Where>& world, int count, PointOf point_of) {
  for (int i = 0; i < count; ++i)
    world.runs.push_back({"pay-" + std::to_string(i), point_of(i)});
  auto last_death = std::chrono::steady_clock::now();
  for (std::size_t first = 0; first < world.runs.size(); first += idem_crash::runs_at_once) {
    const std::size_t round =
        std::min(static_cast<std::size_t>(idem_crash::runs_at_once), world.runs.size() - first);
    std::vector<std::vector<std::string>> doomed;
    for (std::size_t i = first; i < first + round; ++i) {
      std::vector<std::string> arguments = world.where.worker_arguments();
      arguments.push_back("--key=" + world.runs[i].key);
      arguments.push_back("--ledger=" + world.ledger);
      arguments.push_back("--die=" + std::string(world.runs[i].point.name));
      doomed.push_back(std::move(arguments));
    }
    const std::vector<finished> killed =
        idem_crash::run_together(IDEM_CRASH_RECONCILE_WORKER, doomed);
    last_death = std::chrono::steady_clock::now();
    const std::map<std::string, int> ledger = idem_crash::read_ledger(world.ledger);
    for (std::size_t i = 0; i < round; ++i) {
      const auto& run = world.runs[first + i];
      INFO(Where::name << ", " << run.point.name << ", " << run.key << "; the worker printed:\n"
                       << killed[i].text());
      REQUIRE(killed[i].killed());
      REQUIRE(killed[i].line_after("at ") == std::string(run.point.name));
      // The effects it made before it died, once each: one a step it got into.
      const int made = run.point.recorded + (run.point.inside ? 1 : 0);
      const std::map<std::string, int> lines = lines_of(ledger, run.key);
      CHECK(lines.size() == static_cast<std::size_t>(made));
      CHECK(calls_in(lines) == made);
    }
  }
  // Every lease was last renewed before its worker died; a margin for the coarse wall clock.
  std::this_thread::sleep_until(last_death + idem_crash::worker_lease +
                                std::chrono::milliseconds{100});
}

// The record a killed worker left: in progress, held by the worker's fence, its lease run out.
template <class Store>
void check_left_stuck(Store& store, const std::string& key) {
  const auto left = store.find(idem_crash::payments_scope, key, idem::coarse_clock{}.wall_now());
  REQUIRE(left);
  CHECK(left->state == idem::record_state::in_progress);
  CHECK(left->fence == 1);
}

// The record a payment ended with: completed, by the attempt that took it over.
template <class Store>
void check_completed(Store& store, const std::string& key) {
  const auto done = store.find(idem_crash::payments_scope, key, idem::coarse_clock{}.wall_now());
  REQUIRE(done);
  CHECK(done->state == idem::record_state::completed);
  CHECK(done->fence == 2);
}

// The lease this process's wrapper takes a record over with: long, so that a slow run (a
// sanitizer build on a busy machine) is never taken over in turn.
constexpr std::chrono::seconds takeover_lease{30};

// Runs per point per store when IDEM_CRASH_RUNS is not set (see the top of this file).
constexpr int default_runs = 20;

// The calls the payments of `world` must have made: one a step, one more for each killed inside
// a step after its effect.
template <class Where>
int expected_calls(const payment_world<Where>& world) {
  int calls = 0;
  for (const auto& run : world.runs)
    calls += run.point.inside ? 4 : 3;
  return calls;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "a payment killed at each recovery point, its client never retrying, is finished by the "
    "reconciler with one effect a step, and a client retrying afterwards gets the replay",
    "[crash][reconciler][concurrency]", records_on_sqlite, records_on_postgres, records_on_redis) {
  using store_type = typename TestType::store_type;
  const std::string name = GENERATE(as<std::string>{}, "before_charge", "in_charge", "after_charge",
                                    "in_record", "after_record", "in_notify", "after_notify");
  const payment_point point = idem_crash::payment_point_named(name);
  const int runs = idem_crash::runs_per_point(default_runs);
  payment_world<TestType> world;
  kill_workers(world, runs, [&](int) { return point; });

  store_type store = world.where.store();
  for (const auto& run : world.runs)
    check_left_stuck(store, run.key);
  idem_crash::payments<store_type> payments{idem_crash::payments_handler{world.ledger, {}},
                                            idem_crash::payments_options(store, takeover_lease)};
  idem::reconciler<reconciler_policies<store_type>> reconciler(store);
  reconciler.template resume_with<idem::http_request>(payments);
  const idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.examined == static_cast<std::size_t>(runs));
  CHECK(report.summary.resumed == static_cast<std::size_t>(runs));
  CHECK(report.rows.empty());
  CHECK(report.summary.exit_status() == 0);

  std::map<std::string, int> ledger = idem_crash::read_ledger(world.ledger);
  int replayed = 0;
  for (const auto& run : world.runs) {
    INFO(TestType::name << ", " << point.name << ", " << run.key);
    check_one_effect_a_step(ledger, run.key, point);
    check_completed(store, run.key);
    const auto again =
        payments(idem_crash::payments_scope, run.key, idem_crash::payment_request(run.key));
    REQUIRE(again.verdict() == idem::verdict::replayed);
    CHECK(again.value() == expected_response(run.key, point));
    CHECK(text_of(again.value()) == text_of(expected_response(run.key, point)));
    ++replayed;
  }
  // Nothing else called the downstream; the replays called nothing.
  ledger = idem_crash::read_ledger(world.ledger);
  CHECK(ledger.size() == world.runs.size() * idem_crash::payment_steps.size());
  CHECK(calls_in(ledger) == expected_calls(world));
  CHECK(reconciler.run_once().summary.examined == 0);
  WARN(TestType::name << ", killed " << point.name << ": " << runs << " runs, "
                      << report.summary.resumed << " finished by the reconciler, " << replayed
                      << " replayed to a retrying client");
  CHECK(replayed == runs);
}

TEMPLATE_TEST_CASE(
    "a reconciler racing a retrying client for killed payments: one of them runs each, one "
    "effect a step",
    "[crash][reconciler][concurrency]", records_on_sqlite, records_on_postgres, records_on_redis) {
  using store_type = typename TestType::store_type;
  const int runs = idem_crash::runs_per_point(default_runs);
  payment_world<TestType> world;
  kill_workers(world, runs, [](int run) {
    return idem_crash::payment_points[static_cast<std::size_t>(run) %
                                      idem_crash::payment_points.size()];
  });

  store_type store = world.where.store();
  for (const auto& run : world.runs)
    check_left_stuck(store, run.key);
  idem_crash::payments<store_type> payments{idem_crash::payments_handler{world.ledger, {}},
                                            idem_crash::payments_options(store, takeover_lease)};
  idem::reconciler_options options;
  options.batch_size = 4;  // the pass lists a few at a time, so the client meets it mid-way
  idem::reconciler<reconciler_policies<store_type>> reconciler(store, options);
  reconciler.template resume_with<idem::http_request>(payments);

  // The reconciler walks the records while a client retries every payment, in the order they were
  // killed (the order their leases ran out, which is the order the reconciler lists them in), so
  // that the two meet on record after record.
  using outcome_type = decltype(payments(idem_crash::payments_scope, world.runs[0].key,
                                         idem_crash::payment_request(world.runs[0].key)));
  std::vector<std::optional<outcome_type>> client(world.runs.size());
  idem::reconcile_report report;
  std::atomic<bool> go{false};
  std::thread reconciling([&] {
    while (!go)
      std::this_thread::yield();
    report = reconciler.run_once();
  });
  std::thread retrying([&] {
    while (!go)
      std::this_thread::yield();
    for (std::size_t i = 0; i < world.runs.size(); ++i) {
      const std::string& key = world.runs[i].key;
      client[i].emplace(
          payments(idem_crash::payments_scope, key, idem_crash::payment_request(key)));
    }
  });
  go = true;
  reconciling.join();
  retrying.join();

  // Each payment was run by exactly one of them; the loser changed nothing.
  int client_ran = 0;
  const std::map<std::string, int> ledger = idem_crash::read_ledger(world.ledger);
  for (std::size_t i = 0; i < world.runs.size(); ++i) {
    const auto& run = world.runs[i];
    INFO(TestType::name << ", " << run.point.name << ", " << run.key);
    REQUIRE(client[i]);
    const idem::verdict verdict = client[i]->verdict();
    if (verdict == idem::verdict::executed) ++client_ran;
    // It ran the payment, found the reconciler running it (in_progress: coalesce is 0), or found
    // it done (the replay).
    CHECK((verdict == idem::verdict::executed || verdict == idem::verdict::in_progress ||
           verdict == idem::verdict::replayed));
    if (verdict != idem::verdict::in_progress)
      CHECK(text_of(client[i]->value()) == text_of(expected_response(run.key, run.point)));
    check_one_effect_a_step(ledger, run.key, run.point);
    check_completed(store, run.key);
    const auto again =
        payments(idem_crash::payments_scope, run.key, idem_crash::payment_request(run.key));
    REQUIRE(again.verdict() == idem::verdict::replayed);
    CHECK(again.value() == expected_response(run.key, run.point));
    CHECK(text_of(again.value()) == text_of(expected_response(run.key, run.point)));
  }
  CHECK(report.rows.empty());
  CHECK(report.summary.resumed + report.summary.lost + report.summary.settled ==
        report.summary.examined);
  CHECK(static_cast<int>(report.summary.resumed) + client_ran == runs);
  CHECK(calls_in(idem_crash::read_ledger(world.ledger)) == expected_calls(world));
  // Counted, so that a matrix in which one side always won is visible.
  WARN(TestType::name << ", a reconciler racing a retrying client: " << runs
                      << " killed payments, the reconciler ran " << report.summary.resumed
                      << ", the client ran " << client_ran << "; the reconciler lost "
                      << report.summary.lost << " and found " << report.summary.settled
                      << " settled");
}
