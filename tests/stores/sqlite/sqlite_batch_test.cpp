// sqlite_store's batches (store/sqlite/detail/batch.hpp) and inbox::deduplicate_batch over them, on
// real database files: a batch's claims in one write transaction with the single claim's
// semantics per id, and a transactional consumer's writes for the whole batch committed with its
// records in one transaction.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include "file_connection.hpp"
#include "support/batch_inbox_cases.hpp"
#include "support/temporary_directory.hpp"

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using idem::sqlite_store;
using idem_sqlite_test::file_connection;

namespace {

struct sqlite_policies : idem::default_policies {
  using store = sqlite_store;
};
using sqlite_inbox = idem::inbox<sqlite_policies>;

static_assert(idem::TransactionalBatchStore<sqlite_store>);

struct fixture {
  idem::testing::temporary_directory directory;
  std::string path = directory.file("idem.sqlite3");
  sqlite_store store{options()};

  fixture() {
    file_connection app(path);
    app.exec("CREATE TABLE effects (key TEXT NOT NULL)");
  }
  sqlite_store::options options() const {
    sqlite_store::options config;
    config.path = path;
    config.synchronous = sqlite_store::synchronous_mode::normal;
    return config;
  }
  sqlite_inbox inbox() {
    sqlite_inbox::options parts;
    parts.store = store;
    return sqlite_inbox(std::move(parts));
  }
  std::string effects_of(const std::string& key) {
    file_connection check(path);
    return check.text("SELECT count(*) FROM effects WHERE key = '" + key + "'");
  }
};

idem::claim_request ask(std::string_view key, idem::store_time now) {
  return idem::claim_request{"tenant", key, idem::digest{}, now, 30s, 24h};
}

}  // namespace

TEST_CASE("a sqlite batch runs each event once, duplicates inside it and across batches",
          "[sqlite]") {
  fixture f;
  sqlite_inbox inbox = f.inbox();
  idem_test::batch::duplicates_inside_and_across(inbox, "orders");
}

TEST_CASE("a sqlite batch answers bad input, a throwing function and a held id plainly",
          "[sqlite]") {
  fixture f;
  sqlite_inbox inbox = f.inbox();
  idem_test::batch::bad_input(inbox, "orders");
  idem_test::batch::throwing_function(inbox, "orders");
  idem_test::batch::held_elsewhere(inbox, "orders");
}

TEST_CASE(
    "sqlite claim_batch claims new, released and expired records and takes over abandoned "
    "claims in one transaction",
    "[sqlite]") {
  fixture f;
  const auto start = std::chrono::system_clock::now();
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
  CHECK(got[1].existing.response == "stored");
  CHECK(got[2].status == idem::claim_status::claimed);
  CHECK(got[2].fence == 2);
  CHECK(got[3].status == idem::claim_status::existing);
  CHECK(got[3].existing.state == idem::record_state::in_progress);
  CHECK(got[4].status == idem::claim_status::claimed);
  CHECK(got[4].fence == 1);
  CHECK(got[5].status == idem::claim_status::claimed);
  CHECK(got[5].fence == 2);
  const std::vector<idem::batch_completion> done{
      {{"tenant", "new", 1}, "n"}, {{"tenant", "held", 7}, "h"}, {{"tenant", "released", 2}, "r"}};
  CHECK(f.store.complete_batch(done, start) == std::vector<bool>{true, false, true});
  CHECK(f.store.find("tenant", "new", start)->response == "n");
  CHECK(f.store.find("tenant", "held", start)->state == idem::record_state::in_progress);
}

TEST_CASE("a bounded sqlite store claims a batch one record at a time within its bounds",
          "[sqlite]") {
  fixture f;
  sqlite_store::options config = f.options();
  config.path = f.directory.file("bounded.sqlite3");
  config.max_records = 2;
  sqlite_store bounded{config};
  const auto start = std::chrono::system_clock::now();
  const std::vector<idem::claim_request> batch{ask("a", start), ask("b", start), ask("c", start)};
  const std::vector<idem::claim_result> got = bounded.claim_batch(batch);
  CHECK(got[0].status == idem::claim_status::claimed);
  CHECK(got[1].status == idem::claim_status::claimed);
  CHECK(got[2].status == idem::claim_status::full);
}

TEST_CASE("a transactional sqlite batch commits the consumer's writes with all its records",
          "[sqlite]") {
  fixture f;
  sqlite_inbox inbox = f.inbox();
  const std::vector<std::string> ids{"a", "b", "a", "c"};
  auto write = [&](const std::vector<std::string>& batch) {
    return [&f, &batch](std::size_t index, sqlite_store::transaction& txn) {
      (void)f;
      txn.exec("INSERT INTO effects (key) VALUES (?1)", batch[index]);
      return batch[index] + "!";
    };
  };
  const auto first = inbox.deduplicate_batch("events", ids, write(ids));
  CHECK(first[0].verdict() == idem::verdict::executed);
  CHECK(first[2].verdict() == idem::verdict::replayed);
  CHECK(first[2].value() == "a!");
  const std::vector<std::string> again{"c", "d", "b"};
  const auto second = inbox.deduplicate_batch("events", again, write(again));
  CHECK(second[0].verdict() == idem::verdict::replayed);
  CHECK(second[1].verdict() == idem::verdict::executed);
  CHECK(second[2].verdict() == idem::verdict::replayed);
  for (const char* key : {"a", "b", "c", "d"})
    CHECK(f.effects_of(key) == "1");

  const std::vector<std::string> failing{"e", "f", "g"};
  CHECK_THROWS_WITH(inbox.deduplicate_batch("events", failing,
                                            [&](std::size_t index, sqlite_store::transaction& txn) {
                                              txn.exec("INSERT INTO effects (key) VALUES (?1)",
                                                       failing[index]);
                                              if (index == 2) throw std::runtime_error("g failed");
                                            }),
                    "g failed");
  CHECK(f.effects_of("e") == "0");
  CHECK(f.effects_of("f") == "0");
  const auto redelivered = inbox.deduplicate_batch("events", failing, write(failing));
  for (const auto& answer : redelivered)
    CHECK(answer.verdict() == idem::verdict::executed);
  for (const std::string& key : failing)
    CHECK(f.effects_of(key) == "1");
}

TEST_CASE("overlapping sqlite batches from many threads run each event once",
          "[sqlite][concurrency]") {
  fixture f;
  idem_test::batch::overlapping_batches([&] { return f.inbox(); }, "orders", 4, 6, 48);
}
