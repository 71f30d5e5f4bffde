// idem_crash_relay_worker: an outbox relay in a process of its own, for the relay's crash matrix
// (relay_crash_test.cpp). It relays the outbox of an SQLite file or of a PostgreSQL store's
// table into the real Redis Streams sink (idem::redis_streams::sink, a stream per topic under
// --prefix) and, when told to, kills itself with SIGKILL at one point of one pass: no unwinding,
// no flush, no rollback sent; what it leaves is what a crash leaves.
//
//   idem_crash_relay_worker --store=sqlite --outbox=FILE
//                           | --store=postgres --conninfo=INFO --outbox=TABLE
//                           --redis-host=HOST --redis-port=PORT --prefix=PREFIX --batch=N
//                           [--die=POINT --die-batch=B [--die-row=K]] [--clock-ahead-s=S]
//
// POINT, in the B-th batch the sink is handed (from 1):
//   after_fetch     the batch is fetched (SQLite: under the relay lease; PostgreSQL: its rows
//                   locked in the batch's open transaction) and the sink has not seen it;
//   after_publish   the sink returned: Redis acknowledged every XADD of the batch; the relay
//                   has not settled;
//   during_marking  inside the settle, its transaction open, while it marks the batch's row K
//                   (from 0) published. How that moment is reached without a hook in the
//                   library:
//                   * SQLite: an update hook (sqlite3_update_hook, installed on the reader's
//                     connection through sqlite3_auto_extension) sees each row the settle
//                     marks; at row K it checks that a transaction is open
//                     (sqlite3_get_autocommit) and dies: rows 0..K-1 are marked, uncommitted.
//                   * PostgreSQL: a second connection holds an advisory lock, and a trigger on
//                     the outbox table (BEFORE UPDATE, each row) waits for that lock at row K's
//                     sequence once the batch is published (the function is replaced then, so
//                     the earlier settles pass). A thread watches pg_stat_activity until the
//                     relay's backend is running the settle statement and blocked by the lock
//                     holder, and dies: the statement is mid-way, nothing committed.
// Before dying it prints "at POINT ID..." (the batch's message ids), and for during_marking
// first "marking SEQUENCE in the open settle transaction": the worker saw the settle there.
//
// Without --die it relays until nothing waits (waiting for rows a dead relay's transaction
// still holds, on PostgreSQL) and prints "done PUBLISHED"; a worker told to die that gets there
// prints "survived" and exits 6. --clock-ahead-s runs its relay's clock S seconds ahead, so that
// a successor takes over at once the SQLite lease a killed worker held (30 s).
//
// Each line is one write(2) (support/worker_io.hpp), so the test sees it even when the next
// instant is the SIGKILL.
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>

#include <idem/outbox/relay.hpp>
#include <idem/redis_streams/sink.hpp>
#include <idem/store/postgres/outbox_reader.hpp>
#include <idem/store/sqlite/outbox_reader.hpp>

#include "crash/worker_postgres.hpp"
#include "support/worker_io.hpp"

namespace {

using idem::testing::say;
using idem::testing::worker_arguments;
using idem::testing::worker_usage_error;

constexpr const char* usage =
    "idem_crash_relay_worker --store=sqlite|postgres --outbox=FILE|TABLE [--conninfo=INFO] "
    "--redis-host=HOST --redis-port=PORT --prefix=PREFIX --batch=N [--die=after_fetch|"
    "after_publish|during_marking --die-batch=B [--die-row=K]] [--clock-ahead-s=S] (see "
    "tests/crash/relay_worker.cpp)";

enum class point : std::uint8_t { none, after_fetch, after_publish, during_marking };

point point_named(std::string_view name) {
  if (name == "none") return point::none;
  if (name == "after_fetch") return point::after_fetch;
  if (name == "after_publish") return point::after_publish;
  if (name == "during_marking") return point::during_marking;
  throw worker_usage_error("--die names no crash point: '" + std::string(name) + "'");
}

std::string ids_of(std::span<const idem::outbox_entry> batch) {
  std::string ids;
  for (const idem::outbox_entry& entry : batch)
    ids += " " + entry.id;
  return ids;
}

void die(std::string_view where, const std::string& ids) {
  say("at " + std::string(where) + ids);
  ::kill(::getpid(), SIGKILL);
  for (;;)
    ::pause();  // SIGKILL cannot be caught: this is never passed
}

// --- SQLite: the update hook ------------------------------------------------------------------

// Set by the sink once the doomed batch is published; read by the hook on the same thread.
std::int64_t sqlite_marked_sequence = 0;
std::string sqlite_doomed_ids;

void on_sqlite_update(void* db, int operation, const char* /*database*/, const char* table,
                      sqlite3_int64 rowid) {
  // idem_outbox's rowid is its sequence (INTEGER PRIMARY KEY); the settle's UPDATEs are the
  // only ones that touch it in this process.
  if (operation != SQLITE_UPDATE || sqlite_marked_sequence == 0 ||
      rowid != sqlite_marked_sequence || std::strcmp(table, "idem_outbox") != 0) {
    return;
  }
  if (sqlite3_get_autocommit(static_cast<sqlite3*>(db)) != 0) {
    say("marking " + std::to_string(rowid) + " outside a transaction");
    std::_Exit(7);
  }
  say("marking " + std::to_string(rowid) + " in the open settle transaction");
  die("during_marking", sqlite_doomed_ids);
}

int install_update_hook(sqlite3* db, char** /*error*/, const sqlite3_api_routines* /*api*/) {
  sqlite3_update_hook(db, &on_sqlite_update, db);
  return SQLITE_OK;
}

// --- PostgreSQL: the lock holder ---------------------------------------------------------------

// A connection of its own that holds the advisory lock the trigger waits for, and replaces the
// trigger's function when the doomed batch is published. The trigger and its function stay in
// the database (the test drops them with the table): a successor's settle finds the lock free
// (its holder died with this process) and passes.
class pg_lock_holder {
 public:
  pg_lock_holder(const std::string& conninfo, const std::string& table)
      : connection_(conninfo), table_(table) {
    connection_.exec("SELECT pg_advisory_lock(" + lock_key() + ")");
    connection_.exec(function_sql("RETURN NEW;"));
    connection_.exec("CREATE TRIGGER \"" + table_ + "_crash\" BEFORE UPDATE ON \"" + table_ +
                     "_outbox\" FOR EACH ROW EXECUTE FUNCTION \"" + table_ + "_crash\"()");
  }

  // From now on, the settle that marks `sequence` waits for the lock; a thread dies once the
  // relay's backend is seen waiting there, inside the settle statement.
  void arm(std::int64_t sequence, std::string ids) {
    connection_.exec(function_sql("IF NEW.sequence = " + std::to_string(sequence) +
                                  " THEN PERFORM pg_advisory_xact_lock(" + lock_key() +
                                  "); END IF; RETURN NEW;"));
    watcher_ = std::jthread([this, sequence, doomed = std::move(ids)](std::stop_token stop) {
      // Blocked by this connection's backend (the only lock it holds is the advisory one) and
      // running the settle statement (outbox_settle_sql starts so).
      const std::string blocked =
          "SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = "
          "ANY(pg_blocking_pids(pid)) AND state = 'active' AND query LIKE 'WITH s AS (%'";
      while (!stop.stop_requested()) {
        if (connection_.exec(blocked) != "0") {
          say("marking " + std::to_string(sequence) + " in the open settle transaction");
          die("during_marking", doomed);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
      }
    });
  }

 private:
  std::string lock_key() const { return "4242, hashtext('" + table_ + "')"; }
  std::string function_sql(const std::string& body) const {
    return "CREATE OR REPLACE FUNCTION \"" + table_ +
           "_crash\"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " + body + " END $$";
  }

  idem_crash::worker_postgres connection_;
  std::string table_;
  // Declared last, so stopped and joined (a worker that survived) before the connection goes.
  std::jthread watcher_;
};

// --- the relay -----------------------------------------------------------------------------------

struct crash_plan {
  point where = point::none;
  int batch = 0;
  std::size_t row = 0;
  pg_lock_holder* holder = nullptr;  // PostgreSQL's during_marking
};

// The real Redis Streams sink, with the crash points around it.
struct dying_sink {
  idem::redis_streams::sink& real;
  const crash_plan& plan;
  int batches = 0;

  void publish(std::span<const idem::outbox_entry> batch, std::span<idem::sink_result> results) {
    const bool doomed = ++batches == plan.batch;
    if (doomed && plan.where == point::after_fetch) die("after_fetch", ids_of(batch));
    real.publish(batch, results);
    if (!doomed) return;
    for (const idem::sink_result& result : results) {
      if (result.status != idem::sink_status::acknowledged) {
        throw std::runtime_error("Redis did not acknowledge the doomed batch: " + result.error);
      }
    }
    if (plan.where == point::after_publish) die("after_publish", ids_of(batch));
    if (plan.where == point::during_marking) {
      const std::int64_t sequence = batch[std::min(plan.row, batch.size() - 1)].sequence;
      if (plan.holder != nullptr) {
        plan.holder->arm(sequence, ids_of(batch));
      } else {
        sqlite_doomed_ids = ids_of(batch);
        sqlite_marked_sequence = sequence;
      }
    }
  }
};

// The relay's clock, its wall time `ahead` in the future.
struct ahead_clock {
  using time_point = std::chrono::steady_clock::time_point;
  std::chrono::seconds ahead{0};
  time_point now() const noexcept { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point wall_now() const noexcept {
    return std::chrono::system_clock::now() + ahead;
  }
  void sleep_for(std::chrono::nanoseconds delay) const { std::this_thread::sleep_for(delay); }
};

struct worker_policies : idem::default_relay_policies {
  using clock = ahead_clock;
};

template <class Reader>
int relay(Reader& outbox, const worker_arguments& arguments, const crash_plan& plan) {
  idem::redis_streams::sink redis({
      .server = {.host = arguments.option("redis-host"),
                 .port = static_cast<int>(arguments.number("redis-port"))},
      .stream_prefix = arguments.option("prefix"),
  });
  dying_sink sink{redis, plan};
  idem::relay_options options;
  options.batch_size = static_cast<std::size_t>(arguments.number("batch"));
  idem::outbox_relay<Reader, dying_sink, worker_policies> relay(
      outbox, sink, options,
      {.clock = ahead_clock{std::chrono::seconds{arguments.number_or("clock-ahead-s", 0)}}});
  long long published = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  for (;;) {
    const idem::relay_pass pass = relay.run_once();
    published += static_cast<long long>(pass.published);
    if (pass.sink_unavailable || pass.claim_lost || pass.retried > 0 || pass.dead_lettered > 0) {
      say("unexpected pass: sink unavailable " + std::to_string(pass.sink_unavailable) +
          ", claim lost " + std::to_string(pass.claim_lost) + ", retried " +
          std::to_string(pass.retried) + ", dead " + std::to_string(pass.dead_lettered));
      return 4;
    }
    if (pass.fetched > 0) continue;
    // Nothing fetched: done when nothing waits. On PostgreSQL rows may still be locked by a
    // killed relay's transaction until its server session notices the death.
    if (relay.backlog().waiting == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      say("timeout: rows still wait after 60 s");
      return 5;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  if (plan.where != point::none) {
    say("survived");
    return 6;
  }
  say("done " + std::to_string(published));
  return 0;
}

int run(const worker_arguments& arguments) {
  arguments.expect_no_words();
  crash_plan plan;
  plan.where = point_named(arguments.option_or("die", "none"));
  if (plan.where != point::none) {
    plan.batch = static_cast<int>(arguments.number("die-batch"));
    plan.row = static_cast<std::size_t>(arguments.number_or("die-row", 0));
    if (plan.batch < 1) throw worker_usage_error("--die-batch counts from 1");
  }
  const std::string& store = arguments.option("store");
  const std::string& where = arguments.option("outbox");
  if (store == "sqlite") {
    if (plan.where == point::during_marking) {
      // Every connection opened from now on gets the hook: the reader's is the only one. The
      // cast to void(*)(void) is the one sqlite3_auto_extension asks for.
      sqlite3_auto_extension(reinterpret_cast<void (*)()>(&install_update_hook));
    }
    idem::sqlite_outbox::reader outbox(where,
                                       {.holder = "crash worker " + std::to_string(::getpid())});
    return relay(outbox, arguments, plan);
  }
  if (store == "postgres") {
    const std::string& conninfo = arguments.option("conninfo");
    std::unique_ptr<pg_lock_holder> holder;
    if (plan.where == point::during_marking) {
      holder = std::make_unique<pg_lock_holder>(conninfo, where);
      plan.holder = holder.get();
    }
    idem::postgres_outbox::reader outbox({.conninfo = conninfo, .table = where, .listen = false});
    return relay(outbox, arguments, plan);
  }
  throw worker_usage_error("--store must be sqlite or postgres, not '" + store + "'");
}

}  // namespace

int main(int argc, char** argv) {
  return idem::testing::worker_main("idem_crash_relay_worker", usage,
                                    [&] { return run(worker_arguments(argc, argv)); });
}
