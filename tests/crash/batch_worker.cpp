// idem_crash_batch_worker: a consumer of batches in a process of its own, for the batched inbox's
// crash matrix (batch_crash_test.cpp). Its inbox is an SQLite file or a PostgreSQL store's
// table, and its effect a row of an effects table written by a transactional function, so the
// whole batch's rows commit with the batch's records (inbox::deduplicate_batch).
//
//   idem_crash_batch_worker --store=sqlite --inbox=FILE
//                           | --store=postgres --conninfo=INFO --inbox=TABLE
//                           --consumer=NAME --lease-ms=MS [--die=POINT --victim=ID]
//
// It delivers three overlapping batches of the event ids ev-0 ... ev-39 (ids 0-15, 12-27,
// 24-39, each with its first id once more at its end), in order, and delivers a batch again
// while any of its ids answers in_progress (a claim a killed worker left, until its lease ends).
// The effects table is `effects` in the SQLite file, `TABLE_effects` on PostgreSQL
// (message_id, consumer). POINT names where it kills itself with SIGKILL, after printing
// "at ID":
//   in_batch      in the function, after the victim's row, before the batch's transaction
//                 commits (the rows of the ids before it in the batch are written too);
//   after_commit  after the batch that ran the victim committed, before the next batch.
// Without --die it prints "done EXECUTED REPLAYED RESUMED"; a worker told to die that gets
// there prints "survived" and exits 6.
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/sqlite.hpp>

#include "crash/worker_postgres.hpp"
#include "support/worker_io.hpp"

namespace {

using idem::testing::say;
using idem::testing::worker_arguments;
using idem::testing::worker_usage_error;

constexpr const char* usage =
    "idem_crash_batch_worker --store=sqlite|postgres --inbox=FILE|TABLE [--conninfo=INFO] "
    "--consumer=NAME --lease-ms=MS [--die=in_batch|after_commit --victim=ID] (see "
    "tests/crash/batch_worker.cpp)";

std::string crash_point;
std::string crash_id;

void maybe_die(std::string_view point, std::string_view event_id) {
  if (point != crash_point || event_id != crash_id) return;
  say("at " + std::string(event_id));
  ::kill(::getpid(), SIGKILL);
}

std::vector<std::vector<std::string>> batches() {
  std::vector<std::vector<std::string>> all;
  for (int first : {0, 12, 24}) {
    std::vector<std::string> ids;
    for (int i = first; i < first + 16; ++i)
      ids.push_back("ev-" + std::to_string(i));
    ids.push_back(ids.front());  // a duplicate inside the batch
    all.push_back(std::move(ids));
  }
  return all;
}

template <class Store>
struct worker_policies : idem::default_policies {
  using store = Store;
};

template <class Store, class Write>
int consume(Store store, Write write, const worker_arguments& arguments) {
  using policies = worker_policies<Store>;
  typename idem::inbox<policies>::options options;
  options.store = std::move(store);
  options.lease = std::chrono::milliseconds{arguments.number("lease-ms")};
  idem::inbox<policies> inbox(std::move(options));
  long long executed = 0;
  long long replayed = 0;
  long long resumed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  for (const std::vector<std::string>& ids : batches()) {
    for (;;) {
      const auto answers = inbox.deduplicate_batch(
          "events", ids, [&](std::size_t index, typename Store::transaction& txn) {
            write(txn, ids[index]);
            maybe_die("in_batch", ids[index]);
          });
      bool waiting = false;
      bool ran_victim = false;
      for (std::size_t i = 0; i < answers.size(); ++i) {
        switch (answers[i].verdict()) {
          case idem::verdict::executed:
            ++executed;
            if (answers[i].resumed()) ++resumed;
            if (ids[i] == crash_id) ran_victim = true;
            break;
          case idem::verdict::replayed:
            ++replayed;
            break;
          case idem::verdict::in_progress:
            waiting = true;
            break;
          default:
            throw std::runtime_error("unexpected verdict for " + ids[i] + ": " +
                                     std::string(idem::to_string(answers[i].verdict())) + " " +
                                     std::string(answers[i].message()));
        }
      }
      if (ran_victim) maybe_die("after_commit", crash_id);
      if (!waiting) break;
      if (std::chrono::steady_clock::now() > deadline) {
        say("timeout");
        return 5;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
  }
  if (!crash_point.empty()) {
    say("survived");
    return 6;
  }
  say("done " + std::to_string(executed) + " " + std::to_string(replayed) + " " +
      std::to_string(resumed));
  return 0;
}

int consume_with_sqlite(const worker_arguments& arguments) {
  const std::string& path = arguments.option("inbox");
  idem::sqlite_store::options store_options;
  store_options.path = path;
  store_options.busy_timeout = std::chrono::seconds{30};
  idem::sqlite_store store(store_options);
  sqlite3* db = nullptr;
  const bool made = sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
                    sqlite3_exec(db,
                                 "CREATE TABLE IF NOT EXISTS effects (message_id TEXT NOT NULL, "
                                 "consumer TEXT NOT NULL)",
                                 nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_close(db);
  if (!made) throw std::runtime_error("cannot create the effects table in " + path);
  auto write = [consumer = arguments.option("consumer")](idem::sqlite_store::transaction& txn,
                                                         const std::string& id) {
    txn.exec("INSERT INTO effects (message_id, consumer) VALUES (?, ?)", id, consumer);
  };
  return consume(std::move(store), write, arguments);
}

int consume_with_postgres(const worker_arguments& arguments) {
  const std::string& table = arguments.option("inbox");
  idem::postgres_store::options store_options;
  store_options.conninfo = arguments.option("conninfo");
  store_options.table = table;
  store_options.pool_size = 2;
  idem::postgres_store store(store_options);
  const std::string effects = "\"" + table + "_effects\"";
  idem_crash::worker_postgres(store_options.conninfo)
      .exec("CREATE TABLE IF NOT EXISTS " + effects +
            " (message_id text NOT NULL, consumer text NOT NULL)");
  auto write = [insert = "INSERT INTO " + effects + " (message_id, consumer) VALUES ($1, $2)",
                consumer = arguments.option("consumer")](idem::postgres_store::transaction& txn,
                                                         const std::string& id) {
    txn.exec(insert, {id, consumer});
  };
  return consume(std::move(store), write, arguments);
}

int run(const worker_arguments& arguments) {
  arguments.expect_no_words();
  const std::string point = arguments.option_or("die", "");
  if (!point.empty()) {
    if (point != "in_batch" && point != "after_commit") {
      throw worker_usage_error("--die names no crash point: '" + point + "'");
    }
    crash_point = point;
    crash_id = arguments.option("victim");
  }
  const std::string& store = arguments.option("store");
  if (store == "sqlite") return consume_with_sqlite(arguments);
  if (store == "postgres") return consume_with_postgres(arguments);
  throw worker_usage_error("--store must be sqlite or postgres, not '" + store + "'");
}

}  // namespace

int main(int argc, char** argv) {
  return idem::testing::worker_main("idem_crash_batch_worker", usage,
                                    [&] { return run(worker_arguments(argc, argv)); });
}
