// sqlite_store with group commit on (store/sqlite/group_commit.hpp): the conformance suite, a
// storm of threads on shared keys, proof that groups form (fewer commits than operations), that
// one operation's failure stays its own while a failed COMMIT fails the whole group, the options
// it refuses, and kill -9 of a many-threaded worker in the middle of groups: every answered
// operation is on disk after the restart and nothing is half-applied.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <idem/store/sqlite.hpp>
#include <idem/testing/store_conformance.hpp>

#include "stores/sqlite/scenario.hpp"
#include "support/child_process.hpp"
#include "support/temporary_directory.hpp"

using namespace std::chrono_literals;
namespace scenario = idem::testing::scenario;

namespace {

idem::sqlite_store::options grouped_options(const std::string& path) {
  idem::sqlite_store::options options;
  options.path = path;
  options.group_commit.enabled = true;
  return options;
}

// Bounded (the usage row, checked inside each operation's savepoint), without the fsync.
struct grouped_sqlite_store_factory {
  static constexpr bool bounded = true;
  std::unique_ptr<idem::testing::temporary_directory> directory =
      std::make_unique<idem::testing::temporary_directory>();
  int made = 0;

  idem::sqlite_store make(const idem::testing::store_limits& limits) {
    idem::sqlite_store::options options =
        grouped_options(directory->file("store-" + std::to_string(made++) + ".sqlite3"));
    options.synchronous = idem::sqlite_store::synchronous_mode::normal;
    options.max_records = limits.max_records;
    options.max_bytes = limits.max_bytes;
    return idem::sqlite_store{options};
  }
};

// Unbounded, synchronous = full: the configuration group commit is for.
struct grouped_unbounded_sqlite_store_factory {
  static constexpr bool bounded = false;
  std::unique_ptr<idem::testing::temporary_directory> directory =
      std::make_unique<idem::testing::temporary_directory>();
  int made = 0;

  idem::sqlite_store make(const idem::testing::store_limits& /*limits*/) {
    return idem::sqlite_store{
        grouped_options(directory->file("store-" + std::to_string(made++) + ".sqlite3"))};
  }
};

const idem::store_time now{std::chrono::seconds{1767225600}};

idem::digest print_of(std::uint8_t seed) {
  std::uint8_t bytes[16] = {};
  for (std::uint8_t& byte : bytes)
    byte = seed;
  return idem::digest{bytes};
}

idem::claim_request request_for(const std::string& key, std::uint8_t print = 1) {
  return {"tenant", key, print_of(print), now, 30s, 24h};
}

// Sees every COMMIT of every connection opened while it lives: an auto extension gives each
// new connection a commit hook, which counts the commits and, while `failing` is set, turns
// each into a ROLLBACK (SQLITE_CONSTRAINT_COMMITHOOK), the way SQLite reports a commit it
// refused.
std::atomic<bool> failing{false};
std::atomic<int> commits{0};
// How long each commit takes in the hook, in microseconds (0: no time of its own). On tmpfs (a
// fresh root's /tmp) an fsync costs microseconds, the threads never overlap, and no group forms;
// a test of grouping makes each commit last as long as a disk's fsync instead.
std::atomic<int> commit_delay_us{0};

class commit_hooks {
 public:
  commit_hooks() {
    commits = 0;
    REQUIRE(sqlite3_auto_extension(reinterpret_cast<void (*)()>(&install)) == SQLITE_OK);
  }
  commit_hooks(const commit_hooks&) = delete;
  commit_hooks& operator=(const commit_hooks&) = delete;
  ~commit_hooks() {
    failing = false;
    commit_delay_us = 0;
    sqlite3_cancel_auto_extension(reinterpret_cast<void (*)()>(&install));
  }

 private:
  static int install(sqlite3* db, const char** /*error*/, const void* /*api*/) {
    sqlite3_commit_hook(db, &on_commit, nullptr);
    return SQLITE_OK;
  }
  static int on_commit(void* /*unused*/) {
    if (failing) return 1;
    ++commits;
    if (const int delay = commit_delay_us; delay > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay));
    }
    return 0;
  }
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(grouped_sqlite_store_factory)
IDEM_STORE_CONFORMANCE_TESTS(grouped_unbounded_sqlite_store_factory)

TEST_CASE("group commit refuses options that cannot work", "[sqlite][group_commit]") {
  idem::testing::temporary_directory directory;
  const auto refused = [&](auto change, const std::string& says) {
    idem::sqlite_store::options options = grouped_options(directory.file("bad.sqlite3"));
    change(options.group_commit);
    CHECK_THROWS_WITH(idem::sqlite_store{options}, Catch::Contains(says));
  };
  refused([](auto& group) { group.max_operations = 0; }, "group_commit.max_operations");
  refused([](auto& group) { group.max_operations = 100001; }, "must be 1 to 100000");
  refused([](auto& group) { group.max_wait = -1us; }, "group_commit.max_wait must be 0 to 1 s");
  refused([](auto& group) { group.max_wait = 2s; }, "group_commit.max_wait must be 0 to 1 s");
  // Refused even when off: a setting that is wrong stays wrong when it is turned on later.
  refused(
      [](auto& group) {
        group.enabled = false;
        group.max_operations = 0;
      },
      "group_commit.max_operations");
}

TEST_CASE("16 threads with group commit share commits: fewer commits than operations",
          "[sqlite][group_commit][concurrency]") {
  constexpr int threads = 16;
  constexpr int cycles = 25;
  idem::testing::temporary_directory directory;
  const commit_hooks counting;  // SQLite's own count of the commits, beside the store's
  // synchronous = full: each commit waits for its fsync, and the others queue meanwhile; each
  // commit lasts a millisecond at least, as a disk's fsync does, so that the threads overlap
  // on any filesystem (tmpfs included).
  commit_delay_us = 1000;
  idem::sqlite_store store{grouped_options(directory.file("groups.sqlite3"))};
  const int opened = commits;  // the schema's
  std::atomic<int> wrong{0};
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      for (int n = 0; n < cycles; ++n) {
        const std::string key = "k-" + std::to_string(t) + "-" + std::to_string(n);
        const idem::claim_result claimed = store.claim(request_for(key));
        if (claimed.status != idem::claim_status::claimed || claimed.fence != 1) ++wrong;
        if (!store.complete({"tenant", key, 1}, "done " + key, now)) ++wrong;
      }
    });
  }
  for (std::thread& thread : running)
    thread.join();
  CHECK(wrong == 0);
  const idem::sqlite_group_commit_stats stats = store.group_commit_stats();
  const int committed = commits - opened;
  WARN("group commit: " << stats.operations << " operations in " << stats.groups
                        << " groups; SQLite's commit hook saw " << committed << " commits");
  CHECK(stats.operations == 2U * threads * cycles);
  CHECK(stats.groups < stats.operations);
  CHECK(stats.groups > 0U);
  // Without group commit SQLite would see one commit per operation: 800.
  CHECK(committed < 2 * threads * cycles);
  CHECK(committed == static_cast<int>(stats.groups));
  for (int t = 0; t < threads; ++t) {
    const std::string key = "k-" + std::to_string(t) + "-" + std::to_string(cycles - 1);
    const auto found = store.find("tenant", key, now);
    REQUIRE(found);
    CHECK(found->response == "done " + key);
  }
}

TEST_CASE("a storm of 16 threads on shared keys with group commit has one winner per key",
          "[sqlite][group_commit][concurrency]") {
  constexpr int threads = 16;
  constexpr int keys = 150;
  idem::testing::temporary_directory directory;
  idem::sqlite_store::options options = grouped_options(directory.file("storm.sqlite3"));
  options.synchronous = idem::sqlite_store::synchronous_mode::normal;
  options.pool_size = 4;
  idem::sqlite_store store{options};
  std::vector<std::atomic<int>> winners(keys);
  std::atomic<int> wrong{0};
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      std::vector<int> order(keys);
      for (int i = 0; i < keys; ++i)
        order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(t % 4)));
      for (const int index : order) {
        const std::string key = "key-" + std::to_string(index);
        const std::string response = "response " + key;
        const idem::claim_result claimed = store.claim(request_for(key));
        if (claimed.status == idem::claim_status::claimed) {
          ++winners[static_cast<std::size_t>(index)];
          if (claimed.fence != 1) ++wrong;
          // A recovery point, then the completion: both under the fence just won.
          if (!store.checkpoint({"tenant", key, 1}, "step of " + key, now + 30s)) ++wrong;
          if (!store.complete({"tenant", key, 1}, response, now)) ++wrong;
        } else if (claimed.status == idem::claim_status::existing) {
          const idem::record& seen = claimed.existing;
          if (seen.fence != 1 || seen.fingerprint != print_of(1)) ++wrong;
          if (seen.state == idem::record_state::completed && seen.response != response) ++wrong;
          // Not the holder: every fenced write under another fence is refused.
          if (store.complete({"tenant", key, 2}, "stolen", now)) ++wrong;
          if (store.checkpoint({"tenant", key, 0}, "stolen", now)) ++wrong;
        } else {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : running)
    thread.join();
  CHECK(wrong == 0);
  int not_one = 0;
  for (int i = 0; i < keys; ++i) {
    if (winners[static_cast<std::size_t>(i)] != 1) ++not_one;
    const std::string key = "key-" + std::to_string(i);
    const auto found = store.find("tenant", key, now);
    REQUIRE(found);
    CHECK(found->state == idem::record_state::completed);
    CHECK(found->response == "response " + key);
  }
  CHECK(not_one == 0);
  CHECK(store.group_commit_stats().groups > 0U);
}

TEST_CASE("an operation that fails in a group is rolled back alone and the others commit",
          "[sqlite][group_commit][concurrency]") {
  idem::testing::temporary_directory directory;
  idem::sqlite_store::options options = grouped_options(directory.file("alone.sqlite3"));
  options.synchronous = idem::sqlite_store::synchronous_mode::normal;
  options.max_bytes = 4000;
  // The leader waits (up to 500 ms) until three operations are queued: the three below form
  // one group, whatever the scheduler does.
  options.group_commit.max_operations = 3;
  options.group_commit.max_wait = 500ms;
  idem::sqlite_store store{options};
  for (const char* key : {"small-1", "large", "small-2"}) {
    REQUIRE(store.claim(request_for(key)).status == idem::claim_status::claimed);
  }
  const idem::sqlite_group_commit_stats before = store.group_commit_stats();
  std::map<std::string, std::string> outcome;
  std::mutex outcome_mutex;
  std::vector<std::thread> running;
  for (const std::string key : {"small-1", "large", "small-2"}) {
    running.emplace_back([&, key] {
      const std::string response(key == "large" ? 5000 : 100, 'r');
      std::string said;
      try {
        said = store.complete({"tenant", key, 1}, response, now) ? "completed" : "refused";
      } catch (const idem::store_error& error) {
        said = error.failure() == idem::store_failure::full ? "full" : "unavailable";
      }
      const std::lock_guard<std::mutex> lock(outcome_mutex);
      outcome[key] = said;
    });
  }
  for (std::thread& thread : running)
    thread.join();
  const idem::sqlite_group_commit_stats after = store.group_commit_stats();
  CHECK(after.groups == before.groups + 1);  // one group, one commit
  CHECK(after.operations == before.operations + 3);
  CHECK(outcome["small-1"] == "completed");
  CHECK(outcome["small-2"] == "completed");
  CHECK(outcome["large"] == "full");
  CHECK(store.find("tenant", "small-1", now)->response == std::string(100, 'r'));
  CHECK(store.find("tenant", "small-2", now)->response == std::string(100, 'r'));
  const auto large = store.find("tenant", "large", now);
  REQUIRE(large);
  CHECK(large->state == idem::record_state::in_progress);
  CHECK(large->response.empty());
}

TEST_CASE("a group whose COMMIT fails fails every operation and writes none of them",
          "[sqlite][group_commit][concurrency]") {
  idem::testing::temporary_directory directory;
  const commit_hooks refuse;
  idem::sqlite_store::options options = grouped_options(directory.file("commit.sqlite3"));
  options.synchronous = idem::sqlite_store::synchronous_mode::normal;
  options.group_commit.max_operations = 4;
  options.group_commit.max_wait = 500ms;
  idem::sqlite_store store{options};
  REQUIRE(store.claim(request_for("held")).status == idem::claim_status::claimed);
  const idem::sqlite_group_commit_stats before = store.group_commit_stats();
  failing = true;
  std::atomic<int> unavailable{0};
  std::atomic<int> answered{0};
  std::vector<std::thread> running;
  for (int t = 0; t < 4; ++t) {
    running.emplace_back([&, t] {
      try {
        if (t == 0) {
          (void)store.complete({"tenant", "held", 1}, "lost", now);
        } else {
          (void)store.claim(request_for("new-" + std::to_string(t)));
        }
        ++answered;
      } catch (const idem::store_error& error) {
        if (error.failure() == idem::store_failure::unavailable &&
            std::string(error.what()).find("group commit") != std::string::npos) {
          ++unavailable;
        }
      }
    });
  }
  for (std::thread& thread : running)
    thread.join();
  failing = false;
  CHECK(answered == 0);
  CHECK(unavailable == 4);
  CHECK(store.group_commit_stats().groups == before.groups);
  // Nothing of the group is there: no new claim, and the held record is still in progress.
  for (int t = 1; t < 4; ++t)
    CHECK_FALSE(store.find("tenant", "new-" + std::to_string(t), now));
  const auto held = store.find("tenant", "held", now);
  REQUIRE(held);
  CHECK(held->state == idem::record_state::in_progress);
  // And the store goes on: the same operations succeed once commits do.
  CHECK(store.complete({"tenant", "held", 1}, "kept", now));
  CHECK(store.claim(request_for("new-1")).status == idem::claim_status::claimed);
  CHECK(store.find("tenant", "held", now)->response == "kept");
}

namespace {

struct group_worker : idem::testing::child_process {
  explicit group_worker(std::vector<std::string> arguments)
      : child_process(IDEM_SQLITE_WORKER, std::move(arguments)) {}
};

}  // namespace

TEST_CASE("kill -9 during group commits: every answered operation is on disk, none is half-done",
          "[sqlite][group_commit][process]") {
  constexpr int rounds = 3;
  constexpr int threads = 12;
  constexpr int completions_before_kill = 150;
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("crash.sqlite3");
  std::mt19937 random(34);
  std::map<std::string, std::uint64_t> claimed;  // answered claims, over all rounds
  std::set<std::string> completed;               // answered completions
  for (int round = 0; round < rounds; ++round) {
    group_worker process({"group", path, "r" + std::to_string(round), std::to_string(threads)});
    REQUIRE(process.line() == std::optional<std::string>("ready"));
    // Kill somewhere past a given number of completions, a random little later, so that the
    // kill lands at a different point of a group each round.
    const int kill_after = completions_before_kill + static_cast<int>(random() % 50);
    int seen = 0;
    bool sent_kill = false;
    for (std::optional<std::string> line; (line = process.line());) {
      std::istringstream words(*line);
      std::string what, key;
      words >> what >> key;
      if (what == "claimed") {
        std::uint64_t fence = 0;
        words >> fence;
        claimed[key] = fence;
      } else if (what == "completed") {
        completed.insert(key);
        if (++seen == kill_after && !sent_kill) {
          std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
          process.kill();
          sent_kill = true;
        }
      } else {
        FAIL("the worker said: " << *line);
      }
    }
    const int status = process.wait();
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
  }

  // The restart: a store on the file, and the file read directly.
  idem::sqlite_store store{path};
  int lost_claims = 0, lost_completions = 0;
  for (const auto& [key, fence] : claimed) {
    const auto found = store.find("group", key, scenario::epoch());
    if (!found || found->fence != fence) ++lost_claims;
  }
  for (const std::string& key : completed) {
    const auto found = store.find("group", key, scenario::epoch());
    if (!found || found->state != idem::record_state::completed ||
        found->response != scenario::group_response(key)) {
      ++lost_completions;
    }
  }
  WARN("kill -9: " << claimed.size() << " answered claims and " << completed.size()
                   << " answered completions over " << rounds << " kills");
  CHECK(lost_claims == 0);
  CHECK(lost_completions == 0);
  CHECK(completed.size() >= static_cast<std::size_t>(rounds * completions_before_kill));

  // Every record on disk is whole: in progress with its claim's recovery and no response, or
  // completed with its full response; never anything between.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* rows = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT key, state, fence, response, recovery FROM idem_records",
                             -1, &rows, nullptr) == SQLITE_OK);
  int records = 0, torn = 0, unanswered_but_committed = 0;
  const auto bytes = [&](int column) {
    const auto* data = static_cast<const char*>(sqlite3_column_blob(rows, column));
    return data == nullptr
               ? std::string{}
               : std::string(data, static_cast<std::size_t>(sqlite3_column_bytes(rows, column)));
  };
  while (sqlite3_step(rows) == SQLITE_ROW) {
    ++records;
    const std::string key = bytes(0);
    const int state = sqlite3_column_int(rows, 1);
    const bool whole =
        sqlite3_column_int64(rows, 2) == 1 &&
        ((state == 0 && bytes(3).empty() && bytes(4) == scenario::group_recovery(key)) ||
         (state == 1 && bytes(3) == scenario::group_response(key)));
    if (!whole) {
      ++torn;
      UNSCOPED_INFO("torn record " << key << " state " << state);
    }
    if (claimed.count(key) == 0) ++unanswered_but_committed;
  }
  sqlite3_finalize(rows);
  sqlite3_stmt* check = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &check, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(check) == SQLITE_ROW);
  const std::string integrity = reinterpret_cast<const char*>(sqlite3_column_text(check, 0));
  sqlite3_finalize(check);
  sqlite3_close(db);
  WARN(records << " records on disk, " << unanswered_but_committed
               << " of them committed but never answered (killed before the reply)");
  CHECK(torn == 0);
  CHECK(static_cast<std::size_t>(records) >= claimed.size());
  CHECK(integrity == "ok");
}
