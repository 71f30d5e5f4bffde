// sqlite_store with real processes: a storm of worker processes on one database file, and a
// crash matrix that kills workers with SIGKILL at chosen points and then checks, after a
// restart and a recovery pass, that
//   * no key has two effects,
//   * no acknowledged completion is lost (a key whose response reached the client keeps it),
//   * nothing stays in progress once its lease has passed (the recovery pass takes it over and
//     completes it).
// The workers are idem_sqlite_worker (worker.cpp), forked and exec'd: small single-threaded
// processes, so a SIGKILL stops exactly one store user wherever it is.
//
// How a kill lands where it should: at its crash point the worker writes "at KEY" to its stdout
// pipe and blocks; the test reads that line and kills it. So each precise kill lands exactly at
// the point (the worker cannot move on). The timing runs, in addition, let the worker go on
// after the point and kill it a random few hundred microseconds later, anywhere after it.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "stores/sqlite/scenario.hpp"
#include "support/child_process.hpp"
#include "support/temporary_directory.hpp"

using namespace std::chrono_literals;
namespace scenario = idem::testing::scenario;
using scenario::point;

namespace {

// idem_sqlite_worker with pipes to its stdin and stdout.
struct worker : idem::testing::child_process {
  explicit worker(std::vector<std::string> arguments)
      : child_process(IDEM_SQLITE_WORKER, std::move(arguments)) {}
};

bool killed(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

std::string unhex(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(text.substr(i, 2)), nullptr, 16));
  return out;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string word;
  while (in >> word)
    out.push_back(word);
  return out;
}

// Queries of the test's own on the database file.
class inspector {
 public:
  explicit inspector(const std::string& path) {
    REQUIRE(sqlite3_open(path.c_str(), &db_) == SQLITE_OK);
    sqlite3_busy_timeout(db_, 10000);
  }
  inspector(const inspector&) = delete;
  inspector& operator=(const inspector&) = delete;
  ~inspector() { sqlite3_close(db_); }

  std::int64_t number(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK);
    const int rc = sqlite3_step(statement);
    const std::int64_t value = rc == SQLITE_ROW ? sqlite3_column_int64(statement, 0) : -1;
    sqlite3_finalize(statement);
    return value;
  }
  std::string text(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK);
    std::string value;
    if (sqlite3_step(statement) == SQLITE_ROW) {
      const auto* text = sqlite3_column_text(statement, 0);
      if (text != nullptr) value = reinterpret_cast<const char*>(text);
    }
    sqlite3_finalize(statement);
    return value;
  }
  void exec(const std::string& sql) {
    REQUIRE(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  std::map<std::string, int> effects() {
    std::map<std::string, int> counts;
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, "SELECT key, count(*) FROM effects GROUP BY key", -1,
                               &statement, nullptr) == SQLITE_OK);
    while (sqlite3_step(statement) == SQLITE_ROW) {
      counts[reinterpret_cast<const char*>(sqlite3_column_text(statement, 0))] =
          sqlite3_column_int(statement, 1);
    }
    sqlite3_finalize(statement);
    return counts;
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace

TEST_CASE("a storm of 4 processes on 1000 shared keys has exactly one effect per key",
          "[sqlite][process]") {
  constexpr int processes = 4;
  constexpr int keys = 1000;
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("storm.sqlite3");
  // A new file: the workers also race to create the schema.
  std::vector<std::unique_ptr<worker>> workers;
  workers.reserve(processes);
  for (int i = 0; i < processes; ++i) {
    workers.push_back(std::make_unique<worker>(
        std::vector<std::string>{"storm", path, std::to_string(i), std::to_string(keys)}));
  }
  for (auto& w : workers)
    REQUIRE(w->line() == std::optional<std::string>("ready"));
  for (auto& w : workers)
    w->send('g');

  int executed = 0, replayed = 0, in_progress = 0, wrong = 0;
  for (auto& w : workers) {
    std::optional<std::string> result;
    while ((result = w->line()) && result->rfind("result ", 0) != 0) {
      UNSCOPED_INFO(*result);
      ++wrong;
    }
    REQUIRE(result);
    const std::vector<std::string> counts = words(*result);
    REQUIRE(counts.size() == 5);
    executed += std::stoi(counts[1]);
    replayed += std::stoi(counts[2]);
    in_progress += std::stoi(counts[3]);
    wrong += std::stoi(counts[4]);
    const int status = w->wait();
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  WARN("storm: " << executed << " executed, " << replayed << " replayed, " << in_progress
                 << " answered in progress (409)");
  CHECK(wrong == 0);
  CHECK(executed == keys);
  CHECK(executed + replayed + in_progress == processes * keys);

  inspector check(path);
  CHECK(check.number("SELECT count(*) FROM effects") == keys);
  CHECK(check.number("SELECT count(DISTINCT key) FROM effects") == keys);
  idem::sqlite_store store{path};
  int not_completed = 0;
  for (int i = 0; i < keys; ++i) {
    const std::string key = "key-" + std::to_string(i);
    const auto found = store.find("storm", key, scenario::epoch());
    if (!found || found->state != idem::record_state::completed ||
        found->response != "effect for " + scenario::body_for(key)) {
      ++not_completed;
    }
  }
  CHECK(not_completed == 0);
  CHECK(check.text("PRAGMA integrity_check") == "ok");
}

namespace {

struct crash_totals {
  int kills = 0;           // workers that died by SIGKILL
  int acknowledged = 0;    // responses the workers replied before they died
  int recovered = 0;       // keys the recovery pass took over or ran
  int repeated_calls = 0;  // keys whose provider was called twice (deduplicated by key)
  int stuck_before = 0;    // keys stuck(lease passed) listed before recovery
};

// Kills `iterations` workers at `where`. Each handles three keys and is stopped on one of them,
// so there are keys completed before the kill and keys it never reached. `block`: the kill lands
// exactly at the point; otherwise a random 0-1500 us after it.
crash_totals crash_at(point where, const std::string& handler, int iterations, bool block,
                      unsigned seed) {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("crash.sqlite3");
  { idem::sqlite_store created{path}; }
  scenario::create_effects_table(path);
  scenario::provider downstream(directory.path().string());
  std::mt19937 random(seed);
  crash_totals totals;
  const auto lease = scenario::policies::lease;

  for (int iteration = 0; iteration < iterations; ++iteration) {
    std::vector<std::string> keys;
    keys.reserve(3);
    for (int j = 0; j < 3; ++j)
      keys.push_back("k" + std::to_string(iteration) + "-" + std::to_string(j));
    const std::string crash_key = keys[random() % keys.size()];
    std::vector<std::string> arguments{"requests",
                                       path,
                                       directory.path().string(),
                                       handler,
                                       std::to_string(static_cast<int>(where)),
                                       crash_key,
                                       block ? "1" : "0"};
    arguments.insert(arguments.end(), keys.begin(), keys.end());
    worker process(arguments);
    std::map<std::string, std::string> acknowledged;
    bool reached = false;
    for (std::optional<std::string> line; (line = process.line());) {
      const std::vector<std::string> parts = words(*line);
      if (parts.size() == 3 && parts[0] == "ack") acknowledged[parts[1]] = unhex(parts[2]);
      if (!parts.empty() && parts[0] == "at") {
        reached = true;
        if (!block) std::this_thread::sleep_for(std::chrono::microseconds(random() % 1500));
        process.kill();
      }
    }
    const int status = process.wait();
    INFO("iteration " << iteration << ", crash key " << crash_key);
    REQUIRE(reached);
    if (block) REQUIRE(killed(status));
    if (killed(status)) ++totals.kills;
    totals.acknowledged += static_cast<int>(acknowledged.size());

    // Restart: a new store on the file, as the service would open it again.
    idem::sqlite_store store{path};
    std::set<std::string> stuck;
    for (const idem::record& r : store.stuck(scenario::epoch() + lease, 1000))
      stuck.insert(r.key);
    totals.stuck_before += static_cast<int>(stuck.size());
    if (block) {
      // The kill landed exactly where it was aimed: the file and the provider say so.
      const auto found = store.find("crash", crash_key, scenario::epoch());
      REQUIRE(found);
      CHECK(stuck.count(crash_key) == (where == point::after_complete ? 0U : 1U));
      const int charged = scenario::count_field(downstream.ledger(), 1)[crash_key];
      switch (where) {
        case point::after_claim:
          CHECK(found->recovery.empty());
          CHECK(charged == 0);
          break;
        case point::after_effect:
          // The step was recorded as started (what the reconciler reports), not as done.
          CHECK(idem::detail::find_started(found->recovery, "charge"));
          CHECK(idem::detail::count_steps(found->recovery) == 0);
          CHECK(charged == 1);
          break;
        case point::after_step:
          CHECK(idem::detail::count_steps(found->recovery) == 1);
          CHECK(charged == 1);
          break;
        case point::inside_transaction: {
          inspector check(path);
          CHECK(check.effects().count(crash_key) == 0);
          CHECK(found->state == idem::record_state::in_progress);
          break;
        }
        case point::after_complete:
          CHECK(found->state == idem::record_state::completed);
          break;
        default:
          break;
      }
    }
    // No acknowledged completion is lost.
    for (const auto& [key, response] : acknowledged) {
      const auto found = store.find("crash", key, scenario::epoch());
      REQUIRE(found);
      CHECK(found->state == idem::record_state::completed);
      CHECK(found->response == response);
    }

    // The recovery pass, once the lease has passed: every key of the iteration, again.
    const idem::store_time later = scenario::epoch() + lease + 1s;
    auto answer = [&](const auto& service) {
      for (const std::string& key : keys) {
        const auto outcome = (*service)("crash", key, scenario::body_for(key));
        CHECK(outcome.recorded());
        if (outcome.verdict() == idem::verdict::executed) ++totals.recovered;
        if (acknowledged.count(key) != 0) CHECK(outcome.value() == acknowledged[key]);
      }
    };
    if (handler == "external") {
      answer(scenario::make_service(store, scenario::external_handler{&downstream}, later));
    } else {
      answer(scenario::make_service(store, scenario::transactional_handler{}, later));
    }
    // Nothing stays in progress.
    CHECK(store.stuck(later + lease, 1000).empty());
    for (const std::string& key : keys) {
      const auto found = store.find("crash", key, later);
      REQUIRE(found);
      CHECK(found->state == idem::record_state::completed);
    }
  }

  // No key has two effects, and each has one.
  if (handler == "external") {
    const std::map<std::string, int> effects = scenario::count_field(downstream.ledger(), 1);
    const std::map<std::string, int> calls = scenario::count_field(downstream.calls(), 0);
    CHECK(effects.size() == static_cast<std::size_t>(iterations) * 3);
    for (const auto& [key, count] : effects) {
      INFO(key);
      CHECK(count == 1);
    }
    for (const auto& [key, count] : calls) {
      INFO(key);
      CHECK(count <= 2);
      if (count == 2) ++totals.repeated_calls;
    }
  } else {
    inspector check(path);
    const std::map<std::string, int> effects = check.effects();
    CHECK(effects.size() == static_cast<std::size_t>(iterations) * 3);
    for (const auto& [key, count] : effects) {
      INFO(key);
      CHECK(count == 1);
    }
  }
  inspector check(path);
  CHECK(check.text("PRAGMA integrity_check") == "ok");
  return totals;
}

void report(const char* name, const crash_totals& totals) {
  WARN(name << ": " << totals.kills << " workers killed, " << totals.acknowledged
            << " replies acknowledged, " << totals.stuck_before << " stuck before recovery, "
            << totals.recovered << " run by the recovery pass, " << totals.repeated_calls
            << " provider calls repeated (and deduplicated by the downstream key)");
}

constexpr int precise_kills = 50;
constexpr int timed_kills = 20;

}  // namespace

TEST_CASE("crash after claim: the claim is taken over after its lease and runs once",
          "[sqlite][process][crash]") {
  const crash_totals totals = crash_at(point::after_claim, "external", precise_kills, true, 1);
  report("after claim", totals);
  CHECK(totals.kills == precise_kills);
  CHECK(totals.repeated_calls == 0);
  report("after claim, timed", crash_at(point::after_claim, "external", timed_kills, false, 2));
}

TEST_CASE("crash after the effect, before its step is recorded: the provider deduplicates",
          "[sqlite][process][crash]") {
  const crash_totals totals = crash_at(point::after_effect, "external", precise_kills, true, 3);
  report("after the effect", totals);
  CHECK(totals.kills == precise_kills);
  // The guarantee, exactly: the takeover calls the provider again (the step was not recorded),
  // with the same downstream key, and the provider charges once.
  CHECK(totals.repeated_calls == precise_kills);
  report("after the effect, timed",
         crash_at(point::after_effect, "external", timed_kills, false, 4));
}

TEST_CASE("crash after the step is recorded, before complete: the takeover does not repeat it",
          "[sqlite][process][crash]") {
  const crash_totals totals = crash_at(point::after_step, "external", precise_kills, true, 5);
  report("after the step", totals);
  CHECK(totals.kills == precise_kills);
  CHECK(totals.repeated_calls == 0);
  report("after the step, timed", crash_at(point::after_step, "external", timed_kills, false, 6));
}

TEST_CASE("crash inside the completing transaction: the effect rolls back with it",
          "[sqlite][process][crash]") {
  const crash_totals totals =
      crash_at(point::inside_transaction, "transactional", precise_kills, true, 7);
  report("inside the transaction", totals);
  CHECK(totals.kills == precise_kills);
  report("inside the transaction, timed",
         crash_at(point::inside_transaction, "transactional", timed_kills, false, 8));
}

TEST_CASE("crash after complete, before the reply: a repeat replays the stored response",
          "[sqlite][process][crash]") {
  const crash_totals external =
      crash_at(point::after_complete, "external", precise_kills / 2, true, 9);
  const crash_totals transactional =
      crash_at(point::after_complete, "transactional", precise_kills - precise_kills / 2, true, 10);
  report("after complete (external)", external);
  report("after complete (transactional)", transactional);
  CHECK(external.kills + transactional.kills == precise_kills);
  CHECK(external.stuck_before + transactional.stuck_before == 0);
  report("after complete, timed",
         crash_at(point::after_complete, "transactional", timed_kills, false, 11));
}

TEST_CASE("crash during sweep: live records stay, expired ones go whole, sweep resumes",
          "[sqlite][process][crash]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("sweep.sqlite3");
  const idem::store_time now = scenario::epoch();
  constexpr int live = 200;
  constexpr int expired_each_time = 2000;
  constexpr int batch = 100;
  {
    // Live records, completed: what a sweep must never touch.
    idem::sqlite_store::options options;
    options.path = path;
    options.synchronous = idem::sqlite_store::synchronous_mode::normal;
    idem::sqlite_store store{options};
    for (int i = 0; i < live; ++i) {
      const std::string key = "live-" + std::to_string(i);
      const auto claimed = store.claim({"sweep", key, idem::digest{}, now, 30s, 24h});
      REQUIRE(store.complete({"sweep", key, claimed.fence}, "response " + key, now));
    }
  }
  inspector check(path);
  auto add_expired = [&](int round) {
    const std::int64_t past = idem::detail::sqlite_nanoseconds(now - 1h);
    check.exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < " +
               std::to_string(expired_each_time) +
               ") INSERT INTO idem_records SELECT CAST('sweep' AS BLOB), CAST('old-" +
               std::to_string(round) + "-' || i AS BLOB), 1, 1, " + std::to_string(past) + ", " +
               std::to_string(past) + ", " + std::to_string(past) +
               ", x'00', CAST('stale' AS BLOB), x'' FROM n");
  };
  auto expired_left = [&] {
    return check.number("SELECT count(*) FROM idem_records WHERE CAST(key AS TEXT) LIKE 'old-%'");
  };
  auto sweep_worker = [&] {
    return std::make_unique<worker>(std::vector<std::string>{
        "sweep", path, std::to_string(idem::detail::sqlite_nanoseconds(now)),
        std::to_string(batch)});
  };

  // One sweep left to finish: how long a whole one takes here, to aim the kills inside it.
  add_expired(0);
  auto timing = sweep_worker();
  REQUIRE(timing->line() == std::optional<std::string>("at"));
  const auto began = std::chrono::steady_clock::now();
  REQUIRE(timing->line() ==
          std::optional<std::string>("done " + std::to_string(expired_each_time)));
  const auto whole = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - began);
  (void)timing->wait();

  std::mt19937 random(12);
  int landed = 0, partial = 0, attempts = 0;
  // The kill lands at a random point of the window, which follows what the kills find: a sweep
  // that finished before its kill narrows it, one killed inside widens it again. One whole
  // sweep's time, measured once, can be far from the next ones' on a loaded machine (beside a
  // build, other tests), where a fixed window let most kills come after the sweep.
  std::int64_t window = std::max<std::int64_t>(1, whole.count());
  while (landed < precise_kills && attempts < 8 * precise_kills) {
    ++attempts;
    add_expired(attempts);
    auto process = sweep_worker();
    REQUIRE(process->line() == std::optional<std::string>("at"));
    std::this_thread::sleep_for(
        std::chrono::microseconds(random() % static_cast<std::uint64_t>(window)));
    process->kill();
    const std::optional<std::string> after = process->line();
    const int status = process->wait();
    const std::int64_t left = expired_left();
    INFO("attempt " << attempts << ", " << left << " expired records left");
    // Sweep removes whole batches: what is left is a multiple of the batch.
    CHECK(left % batch == 0);
    if (!after && killed(status)) {
      ++landed;
      if (left > 0 && left < expired_each_time) ++partial;
      window = std::min<std::int64_t>(window + window / 8 + 1, 2 * whole.count() + 1);
    } else {
      CHECK(left == 0);
      window = std::max<std::int64_t>(window * 2 / 3, 1);
    }
    // Live records are all there, as they were.
    CHECK(
        check.number(
            "SELECT count(*) FROM idem_records WHERE CAST(key AS TEXT) LIKE 'live-%' AND state = 1 "
            "AND response = CAST('response ' || CAST(key AS TEXT) AS BLOB)") == live);
    // The next sweep, after a restart, removes exactly what is left.
    idem::sqlite_store::options options;
    options.path = path;
    options.sweep_batch = batch;
    idem::sqlite_store restarted{options};
    CHECK(restarted.sweep(now) == static_cast<std::size_t>(left));
    CHECK(expired_left() == 0);
  }
  WARN("during sweep: " << landed << " kills landed inside sweep (" << partial
                        << " with some batches done and some not) in " << attempts
                        << " attempts; a whole sweep took " << whole.count()
                        << " us, the last window was " << window << " us");
  CHECK(landed >= precise_kills);
  CHECK(check.text("PRAGMA integrity_check") == "ok");
}
