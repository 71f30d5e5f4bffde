// postgres_store on a replicated pair (a primary and its synchronous standby, started by the
// test through scripts/failover/postgres-replicated.sh): the store finds the new primary through a
// multi-host connection string after a failover, and a COMMIT whose answer was lost when the
// primary died is reported as ambiguous, never as "not applied", so that the retry after the
// failover is answered exactly once. The effect is a row written in the transaction that
// completes the record: the ledger each test reads to count effects.
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>

#include "postgres_replicated_support.hpp"
#include "postgres_test_support.hpp"

#include "support/records.hpp"

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;

namespace {

idem::postgres_store::options replicated_options(const pgtest::replicated_pair& pair,
                                                 const std::string& table) {
  idem::postgres_store::options config;
  config.conninfo = pair.conninfo();
  config.table = table;
  config.pool_size = 2;
  config.connect_timeout = 5s;
  return config;
}

// The ledger's checker: keys whose effect ran other than exactly once, among `keys`.
long long exactly_once_violations(pgtest::connection& on, const std::string& ledger,
                                  const std::vector<std::string>& keys) {
  long long violations = 0;
  for (const std::string& key : keys) {
    if (on.scalar("SELECT count(*) FROM " + ledger + " WHERE key = '" + key + "'") != 1) {
      ++violations;
    }
  }
  return violations;
}

struct failover_policies : idem::default_policies {
  using store = idem::postgres_store;
};

}  // namespace

TEST_CASE("a multi-host connection string follows the primary through a failover, same store",
          "[postgres][failover]") {
  pgtest::replicated_pair pair;
  const std::string table = pgtest::unique_table("failover");
  idem::postgres_store store{replicated_options(pair, table)};
  const idem::digest print = idem::testing::print(1);

  const auto first =
      store.claim({"tenant", "before", print, std::chrono::system_clock::now(), 30s, 1h});
  REQUIRE(first.status == idem::claim_status::claimed);
  REQUIRE(store.complete({"tenant", "before", first.fence}, "response before",
                         std::chrono::system_clock::now()));
  // Synchronous commit: the standby flushed the completion before complete returned (and
  // replays it a moment later, for reading).
  pgtest::replicated_pair::wait_for(pair.standby(),
                                    "SELECT count(*) FROM \"" + table + "\" WHERE state = 1", 1,
                                    10s, "the standby to replay the completion");

  pair.crash("primary");
  // Between the crash and the promotion there is no primary: the call says so, as a store
  // that cannot answer (the standby is refused by target_session_attrs=read-write).
  try {
    (void)store.find("tenant", "before", std::chrono::system_clock::now());
    FAIL("a call with no primary answered");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
  }
  pair.promote("standby");

  // The same store, its dead connections dropped, reconnects through the connection string to
  // the promoted standby: the record is there, and new claims work.
  const auto found = store.find("tenant", "before", std::chrono::system_clock::now());
  REQUIRE(found);
  CHECK(found->state == idem::record_state::completed);
  CHECK(found->response == "response before");
  const auto after =
      store.claim({"tenant", "after", print, std::chrono::system_clock::now(), 30s, 1h});
  REQUIRE(after.status == idem::claim_status::claimed);
  CHECK(store.complete({"tenant", "after", after.fence}, "response after",
                       std::chrono::system_clock::now()));
  pgtest::connection promoted(pair.standby());
  CHECK(promoted.scalar("SELECT count(*) FROM \"" + table + "\" WHERE state = 1") == 2);
}

TEST_CASE("a commit whose wait for the standby is cancelled is reported ambiguous, not done",
          "[postgres][failover]") {
  pgtest::replicated_pair pair;
  const std::string table = pgtest::unique_table("cancelled_wait");
  idem::postgres_store store{replicated_options(pair, table)};
  const auto claimed = store.claim(
      {"tenant", "k", idem::testing::print(1), std::chrono::system_clock::now(), 30s, 1h});
  REQUIRE(claimed.status == idem::claim_status::claimed);

  pair.pause_wal_receiver();
  std::optional<idem::store_error> thrown;
  bool applied = false;
  std::thread holder([&] {
    try {
      applied =
          store.complete({"tenant", "k", claimed.fence}, "done", std::chrono::system_clock::now());
    } catch (const idem::store_error& error) {
      thrown = error;
    }
  });
  pgtest::replicated_pair::wait_for(
      pair.primary(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'", 1, 30s,
      "the completion to wait for the standby");
  // An operator cancels the wait: PostgreSQL answers the UPDATE's commit as done, with a
  // WARNING, while the standby has not got it.
  pgtest::connection(pair.primary())
      .exec("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
  holder.join();
  CHECK_FALSE(applied);
  REQUIRE(thrown);
  CHECK(thrown->failure() == idem::store_failure::unavailable);
  CHECK_THAT(thrown->what(), Catch::Contains("wait for the synchronous standby was cancelled"));
  // On the primary the completion stands: which is why "done" would have been a promise the
  // standby cannot keep.
  CHECK(pgtest::connection(pair.primary())
            .scalar("SELECT count(*) FROM \"" + table + "\" WHERE state = 1") == 1);
  pair.resume_wal_receiver();
  // The connection was sound, and serves the next call.
  const auto found = store.find("tenant", "k", std::chrono::system_clock::now());
  REQUIRE(found);
  CHECK(found->state == idem::record_state::completed);
}

namespace {

// A completion's COMMIT is in flight (its backend waits for the synchronous standby) when the
// primary is killed with kill -9, and the standby is promoted. `survives`: the standby had
// streamed the commit before the kill (it was not the one the commit waited for), so the commit
// survives the failover; otherwise it was paused and never had it, so the commit is lost.
// Either way the client got no answer, the store must say "unavailable" (ambiguous), and the
// retries after the failover must end in one effect: a replay of the commit that survived, or a
// takeover, past the lease, of the claim whose commit was lost.
void lost_commit_answer(bool survives) {
  pgtest::replicated_pair pair;
  const std::string table = pgtest::unique_table("lost_commit");
  const std::string ledger = "\"" + table + "_effects\"";
  idem::postgres_store store{replicated_options(pair, table)};
  pgtest::connection(pair.conninfo())
      .exec("CREATE TABLE " + ledger + " (key text NOT NULL, fence int8 NOT NULL)");

  int runs = 0;
  bool nemesis_armed = true;
  // The first run sets the trap before its COMMIT: the commit will wait for a standby that
  // does not answer.
  auto handler = [&](idem::handler_context& ctx, const idem::http_request& /*request*/,
                     idem::postgres_store::transaction& txn) {
    ++runs;
    if (nemesis_armed) {
      nemesis_armed = false;
      if (survives) {
        // Commits now wait for a standby that does not exist; the real one streams on,
        // asynchronously, and replays the commit the primary never answers.
        pgtest::connection primary(pair.primary());
        primary.exec("ALTER SYSTEM SET synchronous_standby_names = 'idem_absent'");
        primary.exec("SELECT pg_reload_conf()");
        pgtest::replicated_pair::wait_for(
            pair.primary(), "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'async'",
            1, 30s, "the standby to turn asynchronous");
      } else {
        pair.pause_wal_receiver();
      }
    }
    txn.exec("INSERT INTO " + ledger + " VALUES ('" + std::string(ctx.key()) + "', " +
             std::to_string(ctx.fence()) + ")");
    return idem::http_response{201, {}, "charged under fence " + std::to_string(ctx.fence())};
  };
  idem::idempotent<decltype(handler), failover_policies> payments{handler,
                                                                  {.store = store, .lease = 2s}};
  const idem::http_request order{"POST", "/pay", {}, "100"};

  idem::idempotent_outcome<idem::http_response> first;
  std::thread client([&] { first = payments("tenant", "order-1", order); });
  // The nemesis: once the COMMIT waits on the primary for its standby, kill -9 the primary.
  pgtest::replicated_pair::wait_for(
      pair.primary(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'", 1, 30s,
      "the COMMIT to wait for the standby");
  if (survives) {
    pgtest::replicated_pair::wait_for(pair.standby(), "SELECT count(*) FROM " + ledger, 1, 30s,
                                      "the standby to replay the commit");
  }
  pair.crash("primary");
  client.join();
  if (!survives) {
    // The standby is crashed too, with whatever its paused receiver had not read, and comes
    // back without the commit.
    pair.crash("standby");
    pair.forget_paused();
    pair.restart("standby");
  }
  pair.promote("standby");

  // Ambiguous: the store threw store_error(unavailable) (the guard's store_unavailable), not
  // "not applied" (which the guard answers as a lost claim), and the claim stays.
  CHECK(first.verdict() == idem::verdict::store_unavailable);
  INFO("first answer: " << first.message());
  CHECK(runs == 1);

  // The client retries, as a client told 503 does, until it gets an answer.
  std::vector<idem::verdict> history;
  idem::idempotent_outcome<idem::http_response> answer;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    answer = payments("tenant", "order-1", order);
    history.push_back(answer.verdict());
    if (answer.verdict() == idem::verdict::executed ||
        answer.verdict() == idem::verdict::replayed ||
        std::chrono::steady_clock::now() > deadline) {
      break;
    }
    // Only these may come before the answer: no primary yet, or the claim's lease alive.
    REQUIRE((answer.verdict() == idem::verdict::store_unavailable ||
             answer.verdict() == idem::verdict::in_progress));
    std::this_thread::sleep_for(100ms);
  }
  const std::uint64_t fence = survives ? 1 : 2;
  if (survives) {
    // The commit survived: its response is replayed, and the handler did not run again.
    REQUIRE(answer.verdict() == idem::verdict::replayed);
    CHECK(runs == 1);
  } else {
    // The commit was lost with the primary (its effect with it): past the lease, the claim is
    // taken over under fence 2 and the handler runs once more, the only run that committed.
    REQUIRE(answer.verdict() == idem::verdict::executed);
    CHECK(answer.fence() == 2);
    CHECK(runs == 2);
  }
  CHECK(answer->body == "charged under fence " + std::to_string(fence));
  const auto repeat = payments("tenant", "order-1", order);
  CHECK(repeat.verdict() == idem::verdict::replayed);
  CHECK(repeat->body == answer->body);

  // The ledger, on the new primary: one effect, under the fence of the response every client
  // now gets.
  pgtest::connection promoted(pair.conninfo());
  CHECK(exactly_once_violations(promoted, ledger, {"order-1"}) == 0);
  CHECK(promoted.scalar("SELECT fence FROM " + ledger) == static_cast<long long>(fence));
  WARN((survives ? "commit survived the failover" : "commit lost with the primary")
       << ": first answer " << idem::to_string(first.verdict()) << ", then " << history.size()
       << " retries until " << idem::to_string(answer.verdict()) << " under fence " << fence
       << "; effects in the ledger: " << promoted.scalar("SELECT count(*) FROM " + ledger));

  if (survives) {
    // What a misclassification would do, and that the checker sees it: a store that answered
    // the lost COMMIT as "not applied" leads its caller to release the claim, as after a
    // handler that failed before any effect. Under the fence it held, that release succeeds
    // on the record the surviving commit completed, and the next retry runs the effect again.
    CHECK(store.release({"tenant", "order-1", 1}));
    const auto misled = payments("tenant", "order-1", order);
    CHECK(misled.verdict() == idem::verdict::executed);
    CHECK(exactly_once_violations(promoted, ledger, {"order-1"}) == 1);
    CHECK(promoted.scalar("SELECT count(*) FROM " + ledger) == 2);
  }
}

}  // namespace

TEST_CASE("a COMMIT whose answer is lost at failover, and the commit with it: one takeover runs it",
          "[postgres][failover]") {
  lost_commit_answer(false);
}

TEST_CASE("a COMMIT whose answer is lost at failover, but that survived: the retry replays it",
          "[postgres][failover]") {
  lost_commit_answer(true);
}
