// The outbox in an SQLite file: its table in the store's schema (migrated, and refused when a
// newer idem wrote it), messages published in a transactional handler's and an inbox
// consumer's transaction (committed with the record, rolled back with it, written once across
// a takeover), the payload limit, and the same writer in an application's own transaction.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/outbox/message.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/outbox.hpp>

#include <sqlite3.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "stores/sqlite/file_connection.hpp"
#include "support/outbox_writer_cases.hpp"
#include "support/records.hpp"
#include "support/temporary_directory.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::sqlite_store;
using idem::testing::outbox_writer_cases::charged;

using idem::testing::print;
using idem::testing::start;

using idem_sqlite_test::file_connection;

namespace {

sqlite_store::options quick(const std::string& path) {
  sqlite_store::options options;
  options.path = path;
  options.synchronous = sqlite_store::synchronous_mode::normal;
  return options;
}

// A store on a fresh file, with a table of effects the handlers write beside their messages
// (the fixture of tests/support/outbox_writer_cases.hpp).
struct outbox_fixture {
  using store_type = sqlite_store;
  static constexpr const char* publish_who = "idem::sqlite_store::transaction::publish";
  idem::testing::temporary_directory directory;
  std::string path = directory.file("idem.sqlite3");
  sqlite_store store;
  file_connection app{path};

  explicit outbox_fixture(std::size_t max_payload = idem::default_max_outbox_payload_bytes) {
    sqlite_store::options options = quick(path);
    options.max_outbox_payload_bytes = max_payload;
    store = sqlite_store{options};
    app.exec("CREATE TABLE charges (key TEXT NOT NULL, amount INTEGER NOT NULL)");
  }
  std::string column(const std::string& column = "id") {
    return app.text("SELECT " + column + " FROM idem_outbox ORDER BY sequence");
  }
  std::string charges() { return app.text("SELECT key || ':' || amount FROM charges"); }

  void effect(sqlite_store::transaction& txn, const std::string& key) {
    txn.exec("INSERT INTO charges (key, amount) VALUES (?, 1)", key);
  }
  std::vector<std::string> effects() {
    std::vector<std::string> keys;
    for (const auto& row : app.rows("SELECT key FROM charges ORDER BY rowid"))
      keys.push_back(row[0]);
    return keys;
  }
  std::vector<idem::testing::stored_message> outbox() {
    std::vector<idem::testing::stored_message> messages;
    for (const auto& row : app.rows(
             "SELECT id, topic, partition_key, payload, headers, created_at, published_at IS NULL "
             "AND attempts = 0 AND next_attempt_at = created_at FROM idem_outbox ORDER BY "
             "sequence")) {
      messages.push_back({.id = row[0],
                          .message = {.topic = row[1],
                                      .partition_key = row[2],
                                      .payload = row[3],
                                      .headers = idem::decode_outbox_headers(row[4])},
                          .created_at_ns = std::stoll(row[5]),
                          .fresh = row[6] == "1"});
    }
    return messages;
  }
};

struct policies : idem::default_policies {
  using store = sqlite_store;
  using clock = idem::manual_clock;
};

}  // namespace

// ---- the table ---------------------------------------------------------------------------

IDEM_OUTBOX_WRITER_CASES(outbox_fixture, "[sqlite][outbox]")

TEST_CASE("the store's schema holds the outbox, and a version 1 file is migrated to it",
          "[sqlite][outbox]") {
  outbox_fixture f;
  CHECK(f.app.text("SELECT value FROM idem_meta WHERE name = 'schema_version'") == "4");
  CHECK(f.app.text("SELECT name FROM sqlite_schema WHERE tbl_name = 'idem_outbox' AND type = "
                   "'index' AND sql IS NOT NULL ORDER BY name") ==
        "idem_outbox_by_key\nidem_outbox_published\nidem_outbox_unpublished");
  // A file an idem of schema version 1 made: no outbox yet, nor the relay's tables.
  f.app.exec(
      "DROP TABLE idem_outbox_dead; DROP TABLE idem_outbox_relay; DROP TABLE idem_outbox; "
      "UPDATE idem_meta SET value = 1");
  { sqlite_store reopened{quick(f.path)}; }
  CHECK(f.app.text("SELECT value FROM idem_meta WHERE name = 'schema_version'") == "4");
  CHECK(f.app.text("SELECT count(*) FROM idem_outbox") == "0");
  CHECK(f.app.text("SELECT count(*) FROM idem_meta") == "1");
}

TEST_CASE("a file whose outbox a newer idem wrote is refused at construction, saying so",
          "[sqlite][outbox]") {
  outbox_fixture f;
  f.app.exec("UPDATE idem_meta SET value = 5");
  try {
    sqlite_store newer{quick(f.path)};
    FAIL("a file from a newer schema was opened");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Contains(f.path) && Contains("schema version 5") &&
                                 Contains("idem_outbox") && Contains("upgrade idem"));
  }
  CHECK(f.app.text("SELECT value FROM idem_meta") == "5");  // never downgraded
}

// ---- a transactional handler's messages ---------------------------------------------------

TEST_CASE("publish refuses an empty name and a message without a topic, rolling back",
          "[sqlite][outbox]") {
  outbox_fixture f;
  const auto claimed = f.store.claim({"tenant", "k", print(1), start, 30s, 24h});
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  CHECK_THROWS_WITH(f.store.complete_within(held, start,
                                            [](sqlite_store::transaction& txn) {
                                              txn.publish("ok", charged());
                                              return txn.publish("", charged());
                                            }),
                    Contains("the message name is empty"));
  CHECK_THROWS_WITH(f.store.complete_within(held, start,
                                            [](sqlite_store::transaction& txn) {
                                              return txn.publish("no topic", {.payload = "x"});
                                            }),
                    Contains("no topic"));
  CHECK(f.app.text("SELECT count(*) FROM idem_outbox") == "0");
}

TEST_CASE(
    "sqlite_outbox::publish writes in the application's transaction: commit keeps it, "
    "rollback drops it",
    "[sqlite][outbox]") {
  outbox_fixture f;
  f.app.exec("BEGIN IMMEDIATE");
  f.app.exec("INSERT INTO charges (key, amount) VALUES ('order-1', 5)");
  CHECK(idem::sqlite_outbox::publish(f.app.get(), "order-1/charged", charged()));
  CHECK_FALSE(idem::sqlite_outbox::publish(f.app.get(), "order-1/charged", charged("again")));
  f.app.exec("COMMIT");
  CHECK(f.column() == "order-1/charged");
  CHECK(f.column("payload") == "{\"amount\":250}");

  f.app.exec("BEGIN IMMEDIATE");
  f.app.exec("INSERT INTO charges (key, amount) VALUES ('order-2', 5)");
  CHECK(idem::sqlite_outbox::publish(f.app.get(), "order-2/charged", charged()));
  f.app.exec("ROLLBACK");
  CHECK(f.column() == "order-1/charged");
  CHECK(f.charges() == "order-1:5");
}

TEST_CASE("sqlite_outbox::publish refuses bad input, no transaction, and a file without outbox",
          "[sqlite][outbox]") {
  outbox_fixture f;
  CHECK_THROWS_WITH(idem::sqlite_outbox::publish(f.app.get(), "order-1/charged", charged()),
                    Contains("not inside a transaction"));
  f.app.exec("BEGIN IMMEDIATE");
  CHECK_THROWS_WITH(idem::sqlite_outbox::publish(f.app.get(), "id", charged("12345"), 4),
                    Contains("max_outbox_payload_bytes (4)"));
  CHECK_THROWS_AS(idem::sqlite_outbox::publish(f.app.get(), "", charged()), std::invalid_argument);
  f.app.exec("ROLLBACK");
  CHECK(f.app.text("SELECT count(*) FROM idem_outbox") == "0");

  file_connection elsewhere{f.directory.file("no-idem.sqlite3")};
  elsewhere.exec("BEGIN");
  CHECK_THROWS_WITH(idem::sqlite_outbox::publish(elsewhere.get(), "id", charged()),
                    Contains("no such table: idem_outbox") && Contains("idem::sqlite_store"));
  elsewhere.exec("ROLLBACK");
}

TEST_CASE(
    "a handler that publishes in its own transaction and dies is taken over without a "
    "second message",
    "[sqlite][outbox]") {
  // The id is what makes this hold: the dead run's message committed with the application's
  // transaction, its record did not complete, and the takeover runs the handler again. A
  // message id that were random, or taken from the clock, would leave two rows.
  outbox_fixture f;
  idem::manual_clock clock{start};
  int runs = 0;
  std::function<idem::idempotent_outcome<std::string>()> take_over;
  auto handler = [&](idem::handler_context& ctx, const std::string& amount) {
    ++runs;
    f.app.exec("BEGIN IMMEDIATE");
    idem::sqlite_outbox::publish(
        f.app.get(), idem::outbox_message_id(ctx.scope(), ctx.key(), "charged"), charged(amount));
    f.app.exec("COMMIT");
    if (ctx.fence() == 1) {
      // This holder stalls past its lease; meanwhile another replica takes the key over.
      clock.advance(31s);
      const auto other = take_over();
      CHECK(other.verdict() == idem::verdict::executed);
      CHECK(other.resumed());
    }
    return "charged " + amount;
  };
  using guarded = idem::idempotent<decltype(handler), policies>;
  guarded::options parts{.store = f.store, .clock = clock};
  parts.lease = 30s;
  guarded payments{handler, parts};
  guarded replica{handler, parts};
  take_over = [&] { return replica("tenant", "order-1", std::string("250")); };

  (void)payments("tenant", "order-1", std::string("250"));
  CHECK(runs == 2);
  CHECK(f.app.text("SELECT count(*) FROM idem_outbox") == "1");
  CHECK(f.column() == idem::outbox_message_id("tenant", "order-1", "charged"));
}
