// The stream consumer's crash matrix (issue #29), with real processes: a consumer worker
// (idem_crash_consumer_worker, consumer_worker.cpp) whose transactional inbox is an SQLite file
// or a PostgreSQL table kills itself with SIGKILL while handling a chosen message
//   * after its effect, before the transaction that records the message commits;
//   * after that commit, before the XACK;
// then a fresh worker drains the stream (claiming what the dead one held once it is claim_idle
// old), and for every run:
//   * every message's effect is in the database exactly once: 0 lost, 0 duplicate effects,
//     though after_effect ran the victim's handler twice (the first run rolled back with the
//     kill);
//   * the group holds nothing pending;
//   * duplicate deliveries happened and were suppressed: after_commit, the victim was
//     recorded and never acknowledged, so the fresh worker meets it again (and the messages
//     the dead one recorded before it in the same poll, acknowledged with it at the poll's
//     end); after_effect, only those. They are counted, and must be more than zero.
// Runs per point per store: IDEM_CRASH_RUNS (crash_support.hpp), 50 by default; runs_at_once of
// them at a time, each with its own database and stream.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "crash/crash_support.hpp"
#include "stores/redis/stream_test_support.hpp"

using idem_crash::finished;
using idem_crash::on_postgres;
using idem_crash::on_sqlite;
using idem_stream_test::message;
using idem_stream_test::stream_fixture;

namespace {

constexpr int messages_per_run = 20;
constexpr int claim_idle_ms = 200;

template <class Store>
struct consumer_run {
  Store store;
  stream_fixture stream;
  std::string victim;
};

std::vector<std::string> consumer_arguments(const std::vector<std::string>& store,
                                            const stream_fixture& stream,
                                            const std::string& consumer) {
  std::vector<std::string> arguments = store;
  for (std::string option :
       {"--redis-host=" + stream.host(), "--redis-port=" + std::to_string(stream.port()),
        "--prefix=" + stream.prefix(), "--topic=" + stream.topic(), std::string("--group=billing"),
        "--consumer=" + consumer, "--claim-idle-ms=" + std::to_string(claim_idle_ms)}) {
    arguments.push_back(std::move(option));
  }
  return arguments;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "a consumer killed after its effect or after the inbox commit loses nothing and "
    "duplicates no effect, and a fresh consumer suppresses the redeliveries",
    "[crash][stream_consumer][concurrency]", on_sqlite, on_postgres) {
  const std::string point = GENERATE(as<std::string>{}, "after_effect", "after_commit");
  const int runs = idem_crash::runs_per_point();
  long long suppressed = 0;

  for (int first = 0; first < runs; first += idem_crash::runs_at_once) {
    const int count = std::min(idem_crash::runs_at_once, runs - first);
    std::vector<std::unique_ptr<consumer_run<TestType>>> round;
    std::vector<std::vector<std::string>> doomed;
    for (int i = 0; i < count; ++i) {
      const int run = first + i;
      auto& each = *round.emplace_back(std::make_unique<consumer_run<TestType>>());
      for (int m = 0; m < messages_per_run; ++m)
        each.stream.add(message("msg-" + std::to_string(m)));
      // A different message each run, so the kill lands early, mid-batch and late.
      each.victim = "msg-" + std::to_string((3 + 7 * run) % messages_per_run);
      std::vector<std::string> arguments =
          consumer_arguments(each.store.worker_arguments("inbox"), each.stream, "doomed");
      arguments.push_back("--die=" + point);
      arguments.push_back("--victim=" + each.victim);
      doomed.push_back(std::move(arguments));
    }
    const std::vector<finished> killed =
        idem_crash::run_together(IDEM_CRASH_CONSUMER_WORKER, doomed);
    std::vector<std::vector<std::string>> fresh;
    for (std::size_t i = 0; i < round.size(); ++i) {
      INFO(TestType::name << ", " << point << ", run " << first + static_cast<int>(i)
                          << ", killed at " << round[i]->victim << "; the doomed worker printed:\n"
                          << killed[i].text());
      REQUIRE(killed[i].killed());
      REQUIRE(killed[i].line_after("at ") == round[i]->victim);
      fresh.push_back(
          consumer_arguments(round[i]->store.worker_arguments("inbox"), round[i]->stream, "fresh"));
    }
    const std::vector<finished> drained =
        idem_crash::run_together(IDEM_CRASH_CONSUMER_WORKER, fresh);

    for (std::size_t i = 0; i < round.size(); ++i) {
      auto& each = *round[i];
      INFO(TestType::name << ", " << point << ", run " << first + static_cast<int>(i)
                          << ", killed at " << each.victim << "; the fresh worker printed:\n"
                          << drained[i].text());
      REQUIRE(drained[i].exited_ok());
      std::istringstream done(drained[i].line_after("done ").value_or(""));
      long long processed = -1, duplicates = -1, claimed = -1;
      done >> processed >> duplicates >> claimed;
      CHECK(claimed > 0);  // it took over what the dead one held

      const auto effects = each.store.effects();
      CHECK(effects.size() == static_cast<std::size_t>(messages_per_run));
      for (const auto& [id, copies] : effects) {
        INFO(id);
        CHECK(copies == 1);
      }
      CHECK(each.stream.pending("billing") == 0);
      if (point == "after_commit") {
        CHECK(duplicates > 0);  // the victim at least: recorded, never acknowledged
      }
      suppressed += duplicates;
    }
  }
  WARN(TestType::name << ", consumer killed " << point << ": " << runs << " runs, " << suppressed
                      << " duplicate deliveries suppressed");
  CHECK(suppressed > 0);
  if (point == "after_commit") CHECK(suppressed >= runs);
}
