// Replicas as real processes sharing one PostgreSQL store: killed with kill -9 at random points
// mid-request, and paused with SIGSTOP past their lease. The effect is a row written in the
// transaction that completes the record, so "exactly once" is counted in the database.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <idem/store/postgres.hpp>

#include "postgres_test_support.hpp"

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;

namespace {

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string program = IDEM_POSTGRES_REPLICA;
  argv.push_back(program.data());
  std::vector<std::string> copies = args;
  for (std::string& arg : copies)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  return pid;
}

// The table, and the effects table the replicas write their rows into.
struct replica_tables {
  std::string table = pgtest::unique_table("replica");
  std::string effects = "\"" + table + "_effects\"";
  pgtest::connection check;
  replica_tables() {
    // Created (and migrated) once here, so the replicas find it ready.
    idem::postgres_store::options config;
    config.conninfo = pgtest::conninfo();
    config.table = table;
    idem::postgres_store store{config};
    check.exec("CREATE TABLE " + effects +
               " (scope text NOT NULL, key text NOT NULL, fence int8 NOT NULL, pid int4)");
  }
  replica_tables(const replica_tables&) = delete;
  replica_tables& operator=(const replica_tables&) = delete;
  ~replica_tables() {
    pgtest::drop_table(pgtest::conninfo(), table);
    pgtest::drop_table(pgtest::conninfo(), table + "_effects");
  }
};

}  // namespace

TEST_CASE("replicas killed -9 mid-request: another completes the work, once, and no ack is lost",
          "[postgres][crash]") {
  constexpr int replicas = 4;
  constexpr int keys = 300;
  constexpr int wanted_kills = 50;
  replica_tables tables;
  const std::string ack_file = "/tmp/" + tables.table + ".acks";
  std::mt19937 random(20261130);
  int kills = 0;
  int rounds = 0;
  int bad_exits = 0;
  long long takeovers = 0;
  pgtest::connection& check = tables.check;
  const std::string table = "\"" + tables.table + "\"";
  // Rounds of fresh keys until at least 50 kills have landed, and at least 50 of them while the
  // victim held a claim (each such kill leaves a key that another replica takes over, under
  // fence 2 or more): how fast a round goes depends on the machine and the build.
  while ((kills < wanted_kills || takeovers < wanted_kills) && rounds < 40) {
    const std::string scope = "round-" + std::to_string(rounds++);
    const std::vector<std::string> args{
        "work", pgtest::conninfo(), tables.table, scope, std::to_string(keys), "300", ack_file};
    struct replica {
      pid_t pid = 0;
      std::chrono::steady_clock::time_point born;
    };
    std::array<replica, replicas> running{};
    for (replica& r : running)
      r = {spawn(args), std::chrono::steady_clock::now()};
    int alive = replicas;
    int round_kills = 0;
    while (alive > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + random() % 40));
      alive = 0;
      for (replica& r : running) {
        if (r.pid == 0) continue;
        int status = 0;
        if (::waitpid(r.pid, &status, WNOHANG) == r.pid) {
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++bad_exits;
          r.pid = 0;
        } else {
          ++alive;
        }
      }
      // A random live replica past its start-up (connected, at work) dies wherever it is:
      // claiming, inside its transaction, committing, acknowledging. A fresh one replaces it.
      std::vector<replica*> at_work;
      for (replica& r : running) {
        if (r.pid != 0 && std::chrono::steady_clock::now() - r.born > 50ms) at_work.push_back(&r);
      }
      if (at_work.empty() || round_kills == 30) continue;  // then the round runs to its end
      replica& victim = *at_work[random() % at_work.size()];
      ::kill(victim.pid, SIGKILL);
      ::waitpid(victim.pid, nullptr, 0);
      ++kills;
      ++round_kills;
      victim = {spawn(args), std::chrono::steady_clock::now()};
    }
    takeovers = check.scalar("SELECT count(*) FROM " + table + " WHERE fence > 1");
  }
  CHECK(bad_exits == 0);
  REQUIRE(kills >= wanted_kills);

  // Every key of every round: completed, with exactly one effect, written under the fence that
  // completed it.
  CHECK(check.scalar("SELECT count(*) FROM " + table) == static_cast<long long>(rounds) * keys);
  CHECK(check.scalar("SELECT count(*) FROM " + table + " WHERE state <> 1") == 0);
  CHECK(check.scalar("SELECT count(*) FROM (SELECT scope, key FROM " + tables.effects +
                     " GROUP BY scope, key HAVING count(*) <> 1) doubled") == 0);
  CHECK(check.scalar("SELECT count(*) FROM " + tables.effects) ==
        static_cast<long long>(rounds) * keys);
  CHECK(check.scalar("SELECT count(*) FROM " + table + " r JOIN " + tables.effects +
                     " e ON convert_from(r.scope, 'UTF8') = e.scope AND convert_from(r.key, "
                     "'UTF8') = e.key AND r.fence = e.fence") ==
        static_cast<long long>(rounds) * keys);
  // Kills that landed while a replica held a claim left work that a takeover finished.
  CHECK(takeovers >= wanted_kills);

  // Nothing acknowledged is lost: each ack names a key and fence that the database holds as
  // completed under that fence. (Acks of one round's scope are checked by key and fence.)
  std::ifstream acks(ack_file);
  std::string key;
  std::uint64_t fence = 0;
  long long acknowledged = 0;
  long long missing = 0;
  while (acks >> key >> fence) {
    ++acknowledged;
    const long long held =
        check.scalar("SELECT count(*) FROM " + tables.effects + " WHERE key = '" + key +
                     "' AND fence = " + std::to_string(fence));
    if (held < 1) ++missing;
  }
  CHECK(missing == 0);
  CHECK(acknowledged > 0);
  std::remove(ack_file.c_str());
  WARN("replicas: " << kills << " kill -9 over " << rounds << " rounds of " << keys << " keys; "
                    << takeovers << " keys finished by a takeover; " << acknowledged
                    << " acknowledgements, all held");
}

namespace {

// A replica claims a key and stops itself (SIGSTOP) before completing, or inside its
// transaction after writing its effect. Past its lease, this process takes the key over and
// completes it; then the paused replica is continued and must not complete.
void paused_holder(const char* where) {
  replica_tables tables;
  idem::postgres_store::options config;
  config.conninfo = pgtest::conninfo();
  config.table = tables.table;
  idem::postgres_store store{config};

  const pid_t holder = spawn({where, pgtest::conninfo(), tables.table, "pause", "k", "300"});
  int status = 0;
  REQUIRE(::waitpid(holder, &status, WUNTRACED) == holder);
  REQUIRE(WIFSTOPPED(status));
  std::this_thread::sleep_for(500ms);  // past the 300 ms lease, on any clock

  const std::uint8_t replica_print[16] = {7, 7, 7};  // the replicas' fingerprint
  const idem::digest print{replica_print};
  // Inside a transaction, the paused holder keeps the record locked: this claim waits until
  // the server ends the idle transaction (the replica's idle_in_transaction_timeout).
  const auto taken = store.claim({"pause", "k", print, std::chrono::system_clock::now(), 30s, 1h});
  REQUIRE(taken.status == idem::claim_status::taken_over);
  CHECK(taken.fence == 2);
  REQUIRE(store.complete_within({"pause", "k", taken.fence}, std::chrono::system_clock::now(),
                                [&](idem::postgres_store::transaction& txn) {
                                  txn.exec("INSERT INTO " + tables.effects +
                                           " VALUES ('pause', 'k', 2, 0)");
                                  return std::string("response of the takeover");
                                }));

  ::kill(holder, SIGCONT);
  REQUIRE(::waitpid(holder, &status, 0) == holder);
  REQUIRE(WIFEXITED(status));
  // 0: refused by the fence; 2: its connection was ended by the server. Never 1 (completed).
  CHECK(WEXITSTATUS(status) != 1);
  if (std::string(where) == "pause-before-completing") CHECK(WEXITSTATUS(status) == 0);

  CHECK(tables.check.scalar("SELECT count(*) FROM " + tables.effects) == 1);
  CHECK(tables.check.scalar("SELECT fence FROM " + tables.effects) == 2);
  const auto found = store.find("pause", "k", std::chrono::system_clock::now());
  REQUIRE(found);
  CHECK(found->state == idem::record_state::completed);
  CHECK(found->fence == 2);
  CHECK(found->response == "response of the takeover");
}

}  // namespace

TEST_CASE("a holder paused with SIGSTOP past its lease cannot complete after a takeover",
          "[postgres][crash]") {
  paused_holder("pause-before-completing");
}

TEST_CASE("a holder paused inside its transaction cannot complete after a takeover",
          "[postgres][crash]") {
  paused_holder("pause-inside-transaction");
}
