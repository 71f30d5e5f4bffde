// postgres_store's batches (store/postgres/detail/batch.hpp) and inbox::deduplicate_batch over
// them, against the real server: one statement claims a batch with the single claim's semantics per
// id, and a transactional consumer's writes for the whole batch commit with its records.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>

#include "postgres_test_support.hpp"
#include "support/batch_inbox_cases.hpp"
#include "support/checkpoint_batch_cases.hpp"

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
namespace pgt = idem::testing::postgres;

namespace {

struct pg_policies : idem::default_policies {
  using store = idem::postgres_store;
};
using pg_inbox = idem::inbox<pg_policies>;

static_assert(idem::BatchStore<idem::postgres_store>);
static_assert(idem::CheckpointBatchStore<idem::postgres_store>);

struct fixture {
  std::string table = pgt::unique_table("batch");
  pgt::table_guard guard{table};
  idem::postgres_store store{pgt::caller_time_options(table)};
  pgt::connection check;
  std::string effects = "\"" + table + "_effects\"";

  fixture() { check.exec("CREATE TABLE " + effects + " (key text NOT NULL, fence int8 NOT NULL)"); }

  pg_inbox inbox() {
    pg_inbox::options parts;
    parts.store = store;
    return pg_inbox(std::move(parts));
  }
  long long effects_of(const std::string& key) {
    return check.scalar("SELECT count(*) FROM " + effects + " WHERE key = '" + key + "'");
  }
  long long all_effects() { return check.scalar("SELECT count(*) FROM " + effects); }
};

idem::claim_request ask(std::string_view key, idem::store_time now) {
  return idem::claim_request{"tenant", key, idem::digest{}, now, 30s, 24h};
}

}  // namespace

TEST_CASE("a postgres batch runs each event once, duplicates inside it and across batches") {
  fixture f;
  pg_inbox inbox = f.inbox();
  idem_test::batch::duplicates_inside_and_across(inbox, "orders");
}

TEST_CASE("a postgres batch answers bad input, a throwing function and a held id plainly") {
  fixture f;
  pg_inbox inbox = f.inbox();
  idem_test::batch::bad_input(inbox, "orders");
  idem_test::batch::throwing_function(inbox, "orders");
  idem_test::batch::held_elsewhere(inbox, "orders");
}

TEST_CASE(
    "postgres claim_batch claims new, released and expired records and takes over abandoned "
    "claims in one statement") {
  fixture f;
  const auto start = std::chrono::system_clock::now();
  // "done": completed; "held": a live claim; "abandoned": its lease passed; "released";
  // "expired": its retention passed; "new": no record.
  REQUIRE(f.store.claim(ask("done", start)).status == idem::claim_status::claimed);
  REQUIRE(f.store.complete({"tenant", "done", 1}, "stored", start));
  REQUIRE(f.store.claim(ask("held", start)).status == idem::claim_status::claimed);
  REQUIRE(f.store.claim(ask("abandoned", start - 1min)).status == idem::claim_status::claimed);
  REQUIRE(f.store.claim(ask("released", start)).status == idem::claim_status::claimed);
  REQUIRE(f.store.release({"tenant", "released", 1}));
  REQUIRE(f.store.claim(ask("expired", start - 25h)).status == idem::claim_status::claimed);
  const std::vector<idem::claim_request> batch{ask("abandoned", start), ask("done", start),
                                               ask("expired", start),   ask("held", start),
                                               ask("new", start),       ask("released", start)};
  const std::vector<idem::claim_result> got = f.store.claim_batch(batch);
  REQUIRE(got.size() == batch.size());
  CHECK(got[0].status == idem::claim_status::taken_over);
  CHECK(got[0].fence == 2);
  CHECK(got[1].status == idem::claim_status::existing);
  CHECK(got[1].existing.state == idem::record_state::completed);
  CHECK(got[1].existing.response == "stored");
  CHECK(got[2].status == idem::claim_status::claimed);
  CHECK(got[2].fence == 2);
  CHECK(got[3].status == idem::claim_status::existing);
  CHECK(got[3].existing.state == idem::record_state::in_progress);
  CHECK(got[4].status == idem::claim_status::claimed);
  CHECK(got[4].fence == 1);
  CHECK(got[5].status == idem::claim_status::claimed);
  CHECK(got[5].fence == 2);
  // complete_batch: fenced per entry; the stale fence of "held" does not apply.
  const std::vector<idem::batch_completion> done{
      {{"tenant", "new", 1}, "n"}, {{"tenant", "held", 7}, "h"}, {{"tenant", "released", 2}, "r"}};
  const std::vector<bool> applied = f.store.complete_batch(done, start);
  CHECK(applied == std::vector<bool>{true, false, true});
  CHECK(f.store.find("tenant", "new", start)->response == "n");
  CHECK(f.store.find("tenant", "held", start)->state == idem::record_state::in_progress);
  // Two entries for one key are refused plainly.
  const std::vector<idem::claim_request> twice{ask("x", start), ask("x", start)};
  CHECK_THROWS_AS(f.store.claim_batch(twice), std::invalid_argument);
}

TEST_CASE("a transactional postgres batch commits the consumer's writes with all its records") {
  fixture f;
  pg_inbox inbox = f.inbox();
  const std::vector<std::string> ids{"a", "b", "a", "c"};
  int calls = 0;
  auto consume = [&](std::size_t index, idem::postgres_store::transaction& txn) {
    ++calls;
    txn.exec("INSERT INTO " + f.effects + " VALUES ($1, 0)", {ids[index]});
    return ids[index] + "!";
  };
  const auto first = inbox.deduplicate_batch("events", ids, consume);
  CHECK(first[0].verdict() == idem::verdict::executed);
  CHECK(first[2].verdict() == idem::verdict::replayed);
  CHECK(first[2].value() == "a!");
  CHECK(calls == 3);
  const std::vector<std::string> again{"c", "d", "b"};
  auto consume_again = [&](std::size_t index, idem::postgres_store::transaction& txn) {
    txn.exec("INSERT INTO " + f.effects + " VALUES ($1, 0)", {again[index]});
    return again[index] + "!";
  };
  const auto second = inbox.deduplicate_batch("events", again, consume_again);
  CHECK(second[0].verdict() == idem::verdict::replayed);
  CHECK(second[1].verdict() == idem::verdict::executed);
  CHECK(second[2].verdict() == idem::verdict::replayed);
  for (const char* key : {"a", "b", "c", "d"})
    CHECK(f.effects_of(key) == 1);

  // A throw anywhere rolls the whole batch back, and releases every id of it.
  const std::vector<std::string> failing{"e", "f", "g"};
  CHECK_THROWS_WITH(
      inbox.deduplicate_batch("events", failing,
                              [&](std::size_t index, idem::postgres_store::transaction& txn) {
                                txn.exec("INSERT INTO " + f.effects + " VALUES ($1, 0)",
                                         {failing[index]});
                                if (index == 2) throw std::runtime_error("g failed");
                              }),
      "g failed");
  CHECK(f.effects_of("e") == 0);
  CHECK(f.effects_of("f") == 0);
  const auto redelivered = inbox.deduplicate_batch(
      "events", failing, [&](std::size_t index, idem::postgres_store::transaction& txn) {
        txn.exec("INSERT INTO " + f.effects + " VALUES ($1, 0)", {failing[index]});
      });
  for (const auto& answer : redelivered)
    CHECK(answer.verdict() == idem::verdict::executed);
  for (const std::string& key : failing)
    CHECK(f.effects_of(key) == 1);
}

TEST_CASE("overlapping postgres batches from many threads run each event once", "[concurrency]") {
  fixture f;
  idem_test::batch::overlapping_batches([&] { return f.inbox(); }, "orders", 4, 8, 48);
}

TEST_CASE("overlapping transactional postgres batches write each effect once", "[concurrency]") {
  fixture f;
  const std::vector<std::string> all = idem_test::batch::ids_of("tx-", 0, 40);
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < 6; ++t) {
    workers.emplace_back([&, t] {
      pg_inbox inbox = f.inbox();
      std::vector<std::string> mine;
      for (std::size_t i = 0; i < all.size(); ++i)
        mine.push_back(all[(i * 7 + t * 5) % all.size()]);
      (void)inbox.deduplicate_batch(
          "events", mine, [&](std::size_t index, idem::postgres_store::transaction& txn) {
            txn.exec("INSERT INTO " + f.effects + " VALUES ($1, 0)", {mine[index]});
          });
    });
  }
  for (std::thread& worker : workers)
    worker.join();
  // Ids answered in_progress to one thread were run by another: every id ran, once.
  for (const std::string& key : all)
    CHECK(f.effects_of(key) == 1);
  CHECK(f.all_effects() == static_cast<long long>(all.size()));
}

TEST_CASE("a postgres store renews a batch of leases in one statement, each on its own fence") {
  fixture f;
  idem_test::checkpoint_batch_renews_each_held_record(
      f.store, idem::store_time{std::chrono::seconds{1'700'000'000}}, std::chrono::nanoseconds{0});
}

TEST_CASE("with the server's clock, a postgres store's batch of renewals leases from its clock") {
  const std::string table = pgt::unique_table("batch_server_time");
  pgt::table_guard guard{table};
  idem::postgres_store::options config;
  config.conninfo = pgt::conninfo();
  config.table = table;
  config.connect_timeout = std::chrono::seconds{60};
  idem::postgres_store store{config};
  idem_test::checkpoint_batch_renews_each_held_record(
      store, idem::store_time{std::chrono::system_clock::now()}, std::chrono::seconds{5});
}
