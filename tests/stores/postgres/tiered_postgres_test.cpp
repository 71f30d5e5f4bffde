// tiered_store over postgres_store: the store conformance suite, the tier's cases
// (tests/support/tiered_cases.hpp), transactional completion through the tier, and two real
// processes (this one and idem_tiered_worker) sharing one table, each through its own tier.
#include <catch2/catch.hpp>

#include <idem/store/postgres.hpp>
#include <idem/store/tiered.hpp>
#include <idem/testing/store_conformance.hpp>

#include <memory>
#include <string>
#include <vector>

#include "postgres_test_support.hpp"

#include "support/child_process.hpp"
#include "support/tiered_cases.hpp"

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;

namespace {

using tiered_postgres = idem::tiered_store<idem::postgres_store>;

// The tables this executable's tiered cases made, dropped when it exits.
struct made_tables {
  std::vector<std::string> names;
  ~made_tables() {
    for (const std::string& name : names)
      pgtest::drop_table(pgtest::conninfo(), name);
  }
};
made_tables& tables() {
  static made_tables all;
  return all;
}

idem::postgres_store make_postgres() {
  idem::postgres_store::options config = pgtest::caller_time_options(pgtest::unique_table("tier"));
  config.pool_size = 16;
  tables().names.push_back(config.table);
  return idem::postgres_store{config};
}

struct tiered_postgres_factory {
  static constexpr bool bounded = false;
  std::vector<std::string> made;
  tiered_postgres make(const idem::testing::store_limits& /*limits*/) {
    idem::postgres_store::options config = pgtest::caller_time_options(pgtest::unique_table("tc"));
    config.pool_size = 64;  // the suite's storm runs 64 threads
    made.push_back(config.table);
    return tiered_postgres{idem::postgres_store{config}};
  }
  tiered_postgres_factory() = default;
  tiered_postgres_factory(const tiered_postgres_factory&) = delete;
  tiered_postgres_factory& operator=(const tiered_postgres_factory&) = delete;
  ~tiered_postgres_factory() {
    for (const std::string& table : made)
      pgtest::drop_table(pgtest::conninfo(), table);
  }
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(tiered_postgres_factory)
IDEM_TIERED_CASES("tiered_store over postgres_store", make_postgres, 100, 8)

TEST_CASE("tiered_store over postgres_store is transactional and completes within the transaction",
          "[tiered]") {
  STATIC_REQUIRE(idem::TransactionalStore<tiered_postgres>);
  STATIC_REQUIRE(std::is_same_v<tiered_postgres::transaction, idem::postgres_store::transaction>);
  STATIC_REQUIRE(idem::reads_completion_time<tiered_postgres> ==
                 idem::reads_completion_time<idem::postgres_store>);
  STATIC_REQUIRE(!idem::never_blocks<tiered_postgres>);
  tiered_postgres store{make_postgres()};
  const idem::store_time t = idem::testing::start;
  const idem::claim_result claimed = store.claim(idem_tiered_test::ask("k", t));
  REQUIRE(claimed.status == idem::claim_status::claimed);
  int produced = 0;
  CHECK(store.complete_within({"tenant", "k", claimed.fence}, t,
                              [&](idem::postgres_store::transaction&) {
                                ++produced;
                                return std::string("within");
                              }));
  CHECK(produced == 1);
  CHECK(store.claim(idem_tiered_test::ask("k", t + 1s)).existing.response == "within");
  CHECK(store.claim(idem_tiered_test::ask("k", t + 2s)).existing.response == "within");
  CHECK(store.tier_statistics().hits == 1);
  // A fence that is gone: produce is not called.
  CHECK_FALSE(store.complete_within({"tenant", "k", claimed.fence + 1}, t,
                                    [&](idem::postgres_store::transaction&) {
                                      ++produced;
                                      return std::string("never");
                                    }));
  CHECK(produced == 1);
}

namespace {

// The worker process, and its answer to one command.
class worker {
 public:
  explicit worker(const std::string& table)
      : process_(IDEM_TIERED_WORKER, {"--conninfo=" + pgtest::conninfo(), "--table=" + table}) {
    REQUIRE(process_.line() == std::optional<std::string>("ready"));
  }
  std::string ask(const std::string& command) {
    for (const char c : command + "\n")
      process_.send(c);
    const std::optional<std::string> answer = process_.line();
    REQUIRE(answer);
    return *answer;
  }

 private:
  idem::testing::child_process process_;
};

std::string described(const std::optional<idem::record>& r) {
  if (!r) return "none";
  return std::string(idem::to_string(r->state)) + " " + std::to_string(r->fence) + " " +
         (r->response.empty() ? "-" : r->response);
}

}  // namespace

TEST_CASE("two processes share one PostgreSQL table, each through its own tier", "[tiered]") {
  const std::string table = pgtest::unique_table("tier_procs");
  const pgtest::table_guard guard(table);
  idem::postgres_store::options config = pgtest::caller_time_options(table);
  tiered_postgres here{idem::postgres_store{config}};
  worker there(table);
  const idem::store_time t = idem::testing::start;
  const auto seconds = [&](std::int64_t s) { return t + std::chrono::seconds{s}; };

  const idem::claim_result first = here.claim(idem_tiered_test::ask("k", t));
  REQUIRE(first.status == idem::claim_status::claimed);
  // The other process sees the claim in progress and keeps nothing.
  CHECK(there.ask("claim k 1 1") == "existing in_progress 1 -");
  REQUIRE(here.complete({"tenant", "k", first.fence}, "first", t));
  CHECK(there.ask("find k 2") == "completed 1 first");
  CHECK(there.ask("find k 3") == "completed 1 first");
  CHECK(there.ask("claim k 2 4") == "existing completed 1 first");  // a mismatch for the engine
  CHECK(there.ask("hits") == "2");
  CHECK(described(here.find("tenant", "k", seconds(5))) == "completed 1 first");
  CHECK(described(here.find("tenant", "k", seconds(6))) == "completed 1 first");
  CHECK(here.tier_statistics().hits == 1);

  // Expiry: the other process claims the key anew; this one, whose tier holds the old record,
  // must see the new one.
  CHECK(there.ask("claim k 2 3600") == "claimed 2");
  CHECK(described(here.find("tenant", "k", seconds(3600))) == "in_progress 2 -");
  CHECK(there.ask("complete k 2 second 3600") == "applied");
  CHECK(here.claim(idem_tiered_test::ask("k", seconds(3601), 2)).existing.response == "second");
  CHECK(here.claim(idem_tiered_test::ask("k", seconds(3602), 2)).existing.response == "second");
  // And the other way round: this process renews it after expiry, the other one follows.
  CHECK(there.ask("find k 3603") == "completed 2 second");
  const idem::claim_result third = here.claim(idem_tiered_test::ask("k", seconds(7200), 3));
  REQUIRE(third.status == idem::claim_status::claimed);
  CHECK(third.fence == 3);
  CHECK(there.ask("find k 7200") == "in_progress 3 -");
  REQUIRE(here.complete({"tenant", "k", third.fence}, "third", seconds(7200)));
  CHECK(there.ask("claim k 3 7201") == "existing completed 3 third");
}
