// The outbox in PostgreSQL: <table>_outbox in the store's schema (migrated, and refused when a
// newer idem wrote it), messages published in a transactional handler's and an inbox
// consumer's transaction (committed with the record, rolled back with it, written once across
// a takeover), the payload limit, and the same writer in an application's own transaction.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/outbox/message.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/outbox.hpp>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "postgres_test_support.hpp"

#include "support/outbox_writer_cases.hpp"
#include "support/records.hpp"

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::postgres_store;
using idem::testing::outbox_writer_cases::charged;

namespace {

// A store on a table of its own, with a table of effects the handlers write beside their
// messages (the fixture of tests/support/outbox_writer_cases.hpp).
struct outbox_fixture {
  using store_type = postgres_store;
  static constexpr const char* publish_who = "idem::postgres_store::transaction::publish";
  pgtest::table_guard table{pgtest::unique_table("outbox")};
  std::string outbox_table = "\"" + table.name + "_outbox\"";
  std::string effects_table = "\"" + table.name + "_effects\"";
  postgres_store store;
  pgtest::connection check;

  explicit outbox_fixture(std::size_t max_payload = idem::default_max_outbox_payload_bytes) {
    postgres_store::options config = pgtest::caller_time_options(table.name);
    config.max_outbox_payload_bytes = max_payload;
    store = postgres_store{config};
    check.exec("CREATE TABLE " + effects_table + " (n serial, key text NOT NULL)");
  }
  long long rows() { return check.scalar("SELECT count(*) FROM " + outbox_table); }
  // One column of the rows, in order, as text (bytea columns decoded).
  std::string column(const std::string& expression) {
    const idem::postgres_result result =
        check.exec("SELECT " + expression + " FROM " + outbox_table + " ORDER BY sequence");
    std::string out;
    for (int row = 0; row < result.rows(); ++row) {
      if (row > 0) out += "\n";
      out += result.value(row, 0);
    }
    return out;
  }

  void effect(postgres_store::transaction& txn, const std::string& key) {
    txn.exec("INSERT INTO " + effects_table + " (key) VALUES ($1)", {key});
  }
  std::vector<std::string> effects() {
    const idem::postgres_result result =
        check.exec("SELECT key FROM " + effects_table + " ORDER BY n");
    std::vector<std::string> keys;
    for (int row = 0; row < result.rows(); ++row)
      keys.emplace_back(result.value(row, 0));
    return keys;
  }
  std::vector<idem::testing::stored_message> outbox() {
    const idem::postgres_result result = check.exec(
        "SELECT id, topic, convert_from(partition_key, 'UTF8'), convert_from(payload, 'UTF8'), "
        "convert_from(headers, 'UTF8'), created_at, published_at IS NULL AND attempts = 0 AND "
        "next_attempt_at = created_at FROM " +
        outbox_table + " ORDER BY sequence");
    std::vector<idem::testing::stored_message> messages;
    for (int row = 0; row < result.rows(); ++row) {
      messages.push_back({.id = std::string(result.value(row, 0)),
                          .message = {.topic = std::string(result.value(row, 1)),
                                      .partition_key = std::string(result.value(row, 2)),
                                      .payload = std::string(result.value(row, 3)),
                                      .headers = idem::decode_outbox_headers(result.value(row, 4))},
                          .created_at_ns = std::stoll(std::string(result.value(row, 5))),
                          .fresh = result.value(row, 6) == "t"});
    }
    return messages;
  }
};

}  // namespace

IDEM_OUTBOX_WRITER_CASES(outbox_fixture, "[postgres][outbox]")

TEST_CASE(
    "the store's migration makes <table>_outbox and what the relay needs, and a version 1 or 2 "
    "table is migrated",
    "[postgres][outbox]") {
  outbox_fixture f;
  const std::string meta = "\"" + f.table.name + "_meta\"";
  const std::string dead = "\"" + f.table.name + "_outbox_dead\"";
  // What version 4 changed: the lease index of every record, as versions 1 to 3 had it.
  const std::string lease_index_of_version_1 =
      "DROP INDEX \"" + f.table.name + "_in_progress\"; CREATE INDEX \"" + f.table.name +
      "_by_lease\" ON \"" + f.table.name + "\" (scope, lease_until); ";
  const std::string relay_parts = "DROP TABLE " + dead + "; DROP FUNCTION \"" + f.table.name +
                                  "_notify\"() CASCADE; DROP INDEX " + "\"" + f.table.name +
                                  "_outbox_partition_key_sequence_idx\", " + "\"" + f.table.name +
                                  "_outbox_published_at_idx\"; " + lease_index_of_version_1;
  CHECK(f.check.scalar("SELECT version FROM " + meta) == 4);
  CHECK(f.rows() == 0);
  CHECK(f.check.scalar("SELECT count(*) FROM " + dead) == 0);
  // A table an idem of schema version 2 made: the outbox, without the relay's parts.
  f.check.exec(relay_parts + "UPDATE " + meta + " SET version = 2");
  f.check.exec("INSERT INTO " + f.outbox_table +
               " (id, topic, partition_key, created_at, next_attempt_at, headers, payload) "
               "VALUES ('kept', 't', '\\x6b', 1, 1, '', '\\x70')");
  {
    postgres_store reopened{pgtest::caller_time_options(f.table.name)};
    CHECK(f.check.scalar("SELECT version FROM " + meta) == 4);
    CHECK(f.column("id") == "kept");
    CHECK(f.check.scalar("SELECT count(*) FROM " + dead) == 0);
    // The wake-up hint's trigger, off until an operator turns it on (docs/outbox_relay.md).
    CHECK(f.check.scalar("SELECT count(*) FROM pg_trigger WHERE tgrelid = '" + f.outbox_table +
                         "'::regclass AND tgname = 'idem_outbox_notify' AND tgenabled = 'D'") == 1);
  }
  // A table an idem of schema version 1 made: no outbox yet.
  f.check.exec(relay_parts + "DROP TABLE " + f.outbox_table + "; UPDATE " + meta +
               " SET version = 1");
  postgres_store reopened{pgtest::caller_time_options(f.table.name)};
  CHECK(f.check.scalar("SELECT version FROM " + meta) == 4);
  CHECK(f.rows() == 0);
  CHECK(f.check.scalar("SELECT count(*) FROM " + dead) == 0);
}

TEST_CASE("a table whose outbox a newer idem wrote is refused at construction, saying so",
          "[postgres][outbox]") {
  outbox_fixture f;
  f.check.exec("UPDATE \"" + f.table.name + "_meta\" SET version = 5");
  try {
    postgres_store newer{pgtest::caller_time_options(f.table.name)};
    FAIL("a table from a newer schema was accepted");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("schema version 5") && Contains(f.table.name + "_outbox") &&
                                 Contains("upgrade idem"));
  }
  CHECK(f.check.scalar("SELECT version FROM \"" + f.table.name + "_meta\"") == 5);
}

TEST_CASE(
    "postgres_outbox::publish writes in the application's transaction: commit keeps it, "
    "rollback drops it",
    "[postgres][outbox]") {
  outbox_fixture f;
  const idem::postgres_outbox::target where = f.store.outbox_target();
  pgtest::connection app;
  app.exec("BEGIN");
  app.exec("INSERT INTO " + f.effects_table + " (key) VALUES ('order-1')");
  CHECK(idem::postgres_outbox::publish(app.get(), "order-1/charged", charged(), where));
  CHECK_FALSE(idem::postgres_outbox::publish(app.get(), "order-1/charged", charged("x"), where));
  app.exec("COMMIT");
  CHECK(f.column("id") == "order-1/charged");
  CHECK(f.column("convert_from(payload, 'UTF8')") == "{\"amount\":250}");
  // created_at is the server's clock: no caller time here.
  CHECK(f.check.scalar("SELECT count(*) FROM " + f.outbox_table +
                       " WHERE abs(created_at - (extract(epoch FROM now()) * 1e9)::int8) < "
                       "60e9") == 1);

  app.exec("BEGIN");
  app.exec("INSERT INTO " + f.effects_table + " (key) VALUES ('order-2')");
  CHECK(idem::postgres_outbox::publish(app.get(), "order-2/charged", charged(), where));
  app.exec("ROLLBACK");
  CHECK(f.column("id") == "order-1/charged");
  CHECK(f.effects().size() == 1);
}

TEST_CASE("postgres_outbox::publish refuses bad input, no transaction, and a missing outbox",
          "[postgres][outbox]") {
  outbox_fixture f;
  idem::postgres_outbox::target where = f.store.outbox_target();
  pgtest::connection app;
  CHECK_THROWS_WITH(idem::postgres_outbox::publish(app.get(), "id", charged(), where),
                    Contains("not inside a transaction"));
  app.exec("BEGIN");
  where.max_payload_bytes = 4;
  CHECK_THROWS_WITH(idem::postgres_outbox::publish(app.get(), "id", charged("12345"), where),
                    Contains("max_outbox_payload_bytes (4)"));
  CHECK_THROWS_AS(idem::postgres_outbox::publish(app.get(), "", charged(), where),
                  std::invalid_argument);
  where = f.store.outbox_target();
  where.table = "no_store_here";
  try {
    idem::postgres_outbox::publish(app.get(), "id", charged(), where);
    FAIL("a missing outbox table was written to");
  } catch (const idem::postgres_error& error) {
    CHECK(error.sqlstate() == "42P01");
    CHECK_THAT(error.what(), Contains("idem::postgres_outbox::publish"));
  }
  app.exec("ROLLBACK");
  CHECK(f.rows() == 0);
}
