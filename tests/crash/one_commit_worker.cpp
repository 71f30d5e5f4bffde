// idem_crash_one_commit_worker: one request through idempotent in commit_mode::one_commit, in a
// process of its own, for the one-commit crash matrix (one_commit_crash_test.cpp). Its store is
// an SQLite file or a PostgreSQL store's table; its effect a row of an effects table written in
// the transaction that claims and completes the record.
//
//   idem_crash_one_commit_worker --store=sqlite --db=FILE
//                                | --store=postgres --conninfo=INFO --db=TABLE
//                                --key=KEY [--die=POINT | --inspect]
//
// The effects table is `effects` in the SQLite file, `TABLE_effects` on PostgreSQL (message_id).
// POINT names where it kills itself (SIGKILL: no unwinding, no rollback sent), after printing
// "at POINT":
//   after_claim    in the handler, before its writes (the claim is made, in the transaction)
//   after_effect   in the handler, after its effect row
//   before_commit  after the record's completion, before COMMIT (SQLite: the commit hook;
//                  PostgreSQL: a NOTICE a trigger raises as the record completes, which the
//                  worker hears with its COMMIT in flight: claim_within pipelines the two)
//   after_commit   after the call returned executed, before it prints its answer
// Without --die it prints "answer VERDICT BODY" (a worker told to die that gets there prints
// "survived" and exits 6). --inspect prints "state none|in_progress|completed effects N".
//
// Each line is one write(2) (support/worker_io.hpp), so the test sees it even when the next
// instant is the SIGKILL.
#include <libpq-fe.h>
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

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
    "idem_crash_one_commit_worker --store=sqlite|postgres --db=FILE|TABLE [--conninfo=INFO] "
    "--key=KEY [--die=after_claim|after_effect|before_commit|after_commit | --inspect] (see "
    "tests/crash/one_commit_worker.cpp)";

constexpr std::string_view completed_notice = "idem-one-commit-completed";

std::string crash_point;

void maybe_die(std::string_view point) {
  if (point != crash_point) return;
  say("at " + std::string(point));
  ::kill(::getpid(), SIGKILL);
}

template <class Store>
struct worker_policies : idem::default_policies {
  using store = Store;
  static constexpr idem::commit_mode commit = idem::commit_mode::one_commit;
};

// The request, through idempotent in one commit: `write` adds the effect row in the transaction,
// `arm` sets up the before_commit point on the transaction's connection.
template <class Store, class Write, class Arm>
int request(Store store, const std::string& key, Write write, Arm arm) {
  auto handler = [&](idem::handler_context& context, const std::string& body,
                     typename Store::transaction& txn) -> std::string {
    maybe_die("after_claim");
    write(txn, std::string(context.key()));
    maybe_die("after_effect");
    if (crash_point == "before_commit") arm(txn);
    return "paid " + body;
  };
  typename idem::idempotent<decltype(handler), worker_policies<Store>>::options parts;
  parts.store = std::move(store);
  idem::idempotent<decltype(handler), worker_policies<Store>> guarded(handler, std::move(parts));
  const auto outcome = guarded("tenant", std::string_view{key}, std::string("10 EUR"));
  if (outcome.verdict() == idem::verdict::executed) maybe_die("after_commit");
  if (!crash_point.empty()) {
    say("survived");
    return 6;
  }
  say("answer " + std::string(idem::to_string(outcome.verdict())) + " " +
      (outcome ? outcome.value() : std::string(outcome.message())));
  return 0;
}

template <class Store>
int inspect(Store& store, const std::string& key, long long effects) {
  const std::optional<idem::record> found =
      store.find("tenant", key, std::chrono::system_clock::now());
  const std::string state = !found ? "none" : std::string(idem::to_string(found->state));
  say("state " + state + " effects " + std::to_string(effects));
  return 0;
}

int on_sqlite(const worker_arguments& arguments, const std::string& key, bool inspecting) {
  const std::string& path = arguments.option("db");
  idem::sqlite_store::options options;
  options.path = path;
  options.busy_timeout = std::chrono::seconds{30};
  idem::sqlite_store store(options);
  sqlite3* db = nullptr;
  const bool made =
      sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
      sqlite3_busy_timeout(db, 30000) == SQLITE_OK &&
      sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS effects (message_id TEXT NOT NULL)", nullptr,
                   nullptr, nullptr) == SQLITE_OK;
  long long effects = 0;
  if (made && inspecting) {
    sqlite3_stmt* count = nullptr;
    sqlite3_prepare_v2(db, "SELECT count(*) FROM effects WHERE message_id = ?1", -1, &count,
                       nullptr);
    sqlite3_bind_text(count, 1, key.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(count) == SQLITE_ROW) effects = sqlite3_column_int64(count, 0);
    sqlite3_finalize(count);
  }
  sqlite3_close(db);
  if (!made) throw std::runtime_error("cannot create the effects table in " + path);
  if (inspecting) return inspect(store, key, effects);
  return request(
      std::move(store), key,
      [](idem::sqlite_store::transaction& txn, const std::string& id) {
        txn.exec("INSERT INTO effects (message_id) VALUES (?1)", id);
      },
      [](idem::sqlite_store::transaction& txn) {
        // Called as COMMIT begins, before anything of it is durable.
        sqlite3_commit_hook(
            txn.connection(),
            [](void*) -> int {
              maybe_die("before_commit");
              return 0;
            },
            nullptr);
      });
}

int on_postgres(const worker_arguments& arguments, const std::string& key, bool inspecting) {
  const std::string& table = arguments.option("db");
  idem::postgres_store::options options;
  options.conninfo = arguments.option("conninfo");
  options.table = table;
  options.pool_size = 2;
  idem::postgres_store store(options);
  const std::string effects = "\"" + table + "_effects\"";
  idem_crash::worker_postgres admin(options.conninfo);
  admin.exec("CREATE TABLE IF NOT EXISTS " + effects + " (message_id text NOT NULL)");
  if (inspecting) {
    const std::string counted =
        admin.exec("SELECT count(*) FROM " + effects + " WHERE message_id = '" + key + "'");
    return inspect(store, key, std::stoll(counted));
  }
  if (crash_point == "before_commit") {
    // The record's completion raises a NOTICE (on_postgres drops "TABLE_crash" with its trigger).
    admin.exec("CREATE OR REPLACE FUNCTION \"" + table +
               "_crash\"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE NOTICE '" +
               std::string(completed_notice) + "'; RETURN NEW; END $$");
    admin.exec("CREATE OR REPLACE TRIGGER crash_on_complete AFTER UPDATE ON \"" + table +
               "\" FOR EACH ROW WHEN (NEW.state = 1) EXECUTE FUNCTION \"" + table + "_crash\"()");
  }
  return request(
      std::move(store), key,
      [insert = "INSERT INTO " + effects + " (message_id) VALUES ($1)"](
          idem::postgres_store::transaction& txn, const std::string& id) {
        txn.exec(insert, {id});
      },
      [](idem::postgres_store::transaction& txn) {
        // Heard while the completion is answered; the COMMIT behind it is already sent.
        PQsetNoticeReceiver(
            txn.connection(),
            [](void*, const PGresult* notice) {
              const char* text = PQresultErrorField(notice, PG_DIAG_MESSAGE_PRIMARY);
              if (text != nullptr && std::string_view(text) == completed_notice) {
                maybe_die("before_commit");
              }
            },
            nullptr);
      });
}

int run(const worker_arguments& arguments) {
  arguments.expect_no_words();
  const std::string point = arguments.option_or("die", "");
  if (!point.empty()) {
    if (point != "after_claim" && point != "after_effect" && point != "before_commit" &&
        point != "after_commit") {
      throw worker_usage_error("--die names no crash point: '" + point + "'");
    }
    crash_point = point;
  }
  const bool inspecting = arguments.option_or("inspect", "no") != "no";
  const std::string& key = arguments.option("key");
  const std::string& store = arguments.option("store");
  if (store == "sqlite") return on_sqlite(arguments, key, inspecting);
  if (store == "postgres") return on_postgres(arguments, key, inspecting);
  throw worker_usage_error("--store must be sqlite or postgres, not '" + store + "'");
}

}  // namespace

int main(int argc, char** argv) {
  return idem::testing::worker_main("idem_crash_one_commit_worker", usage,
                                    [&] { return run(worker_arguments(argc, argv)); });
}
