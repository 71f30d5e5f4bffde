// The batched inbox's crash matrix (issue #34), with real processes: a batch worker
// (idem_crash_batch_worker, batch_worker.cpp) whose transactional inbox is an SQLite file or a
// PostgreSQL table kills itself with SIGKILL
//   * in_batch: inside a batch, after the victim's effect row (and those of the ids before it
//     in the batch), before the batch's one transaction commits;
//   * after_commit: after the batch that ran the victim committed, before the next batch;
// then a fresh worker delivers the same batches again (waiting out the dead worker's leases), and
// for every run:
//   * every event's effect is in the database exactly once: 40 ids, one row each, though
//     in_batch ran the dying batch's function twice for the ids before the victim;
//   * in_batch: the fresh worker took over the dead worker's claims (resumed > 0), since the
//     claims committed before the batch's transaction began;
//   * after_commit: the redelivered ids that the dead worker recorded were replayed, not run.
// Runs per point per store: IDEM_CRASH_RUNS, 8 by default (one round of runs_at_once).
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "crash/crash_support.hpp"

using idem_crash::finished;
using idem_crash::on_postgres;
using idem_crash::on_sqlite;

namespace {

constexpr int events = 40;  // ev-0 ... ev-39, in the worker's three batches
constexpr const char* lease_ms = "--lease-ms=300";

}  // namespace

TEMPLATE_TEST_CASE(
    "a batch consumer killed mid-batch or after a batch's commit leaves each "
    "event's effect exactly once after the batches are delivered again",
    "[crash][batch_inbox][concurrency]", on_sqlite, on_postgres) {
  const std::string point = GENERATE(as<std::string>{}, "in_batch", "after_commit");
  const int runs = idem_crash::runs_per_point(8);
  for (int first = 0; first < runs; first += idem_crash::runs_at_once) {
    const int count = std::min(idem_crash::runs_at_once, runs - first);
    std::vector<std::unique_ptr<TestType>> stores;
    std::vector<std::string> victims;
    std::vector<std::vector<std::string>> doomed;
    for (int i = 0; i < count; ++i) {
      const int run = first + i;
      auto& store = *stores.emplace_back(std::make_unique<TestType>());
      // A different event each run: early, mid-batch, late, in an overlap of two batches.
      victims.push_back("ev-" + std::to_string((5 + 7 * run) % events));
      std::vector<std::string> arguments = store.worker_arguments("inbox");
      arguments.push_back("--consumer=doomed");
      arguments.push_back(lease_ms);
      arguments.push_back("--die=" + point);
      arguments.push_back("--victim=" + victims.back());
      doomed.push_back(std::move(arguments));
    }
    const std::vector<finished> killed = idem_crash::run_together(IDEM_CRASH_BATCH_WORKER, doomed);
    std::vector<std::vector<std::string>> fresh;
    for (std::size_t i = 0; i < stores.size(); ++i) {
      INFO(TestType::name << ", " << point << ", killed at " << victims[i]
                          << "; the doomed worker printed:\n"
                          << killed[i].text());
      REQUIRE(killed[i].killed());
      REQUIRE(killed[i].line_after("at ") == victims[i]);
      std::vector<std::string> arguments = stores[i]->worker_arguments("inbox");
      arguments.push_back("--consumer=fresh");
      arguments.push_back(lease_ms);
      fresh.push_back(std::move(arguments));
    }
    const std::vector<finished> drained = idem_crash::run_together(IDEM_CRASH_BATCH_WORKER, fresh);
    for (std::size_t i = 0; i < stores.size(); ++i) {
      INFO(TestType::name << ", " << point << ", killed at " << victims[i]
                          << "; the fresh worker printed:\n"
                          << drained[i].text());
      REQUIRE(drained[i].exited_ok());
      std::istringstream done(drained[i].line_after("done ").value_or(""));
      long long executed = -1, replayed = -1, resumed = -1;
      done >> executed >> replayed >> resumed;
      const auto effects = stores[i]->effects();
      CHECK(effects.size() == static_cast<std::size_t>(events));
      for (const auto& [id, copies] : effects) {
        INFO(id);
        CHECK(copies == 1);
      }
      if (point == "in_batch") {
        CHECK(resumed > 0);  // the dying batch's claims, taken over after their lease
      } else {
        CHECK(executed < events);  // what the dead worker recorded was replayed, not run
      }
      CHECK(replayed > 0);
    }
  }
}
