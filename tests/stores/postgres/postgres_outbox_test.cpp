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

#include "support/records.hpp"

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::postgres_store;

using idem::testing::print;
using idem::testing::start;

namespace {

struct outbox_fixture {
  pgtest::table_guard table{pgtest::unique_table("outbox")};
  std::string outbox_table = "\"" + table.name + "_outbox\"";
  std::string effects = "\"" + table.name + "_effects\"";
  postgres_store store;
  pgtest::connection check;

  explicit outbox_fixture(std::size_t max_payload = idem::default_max_outbox_payload_bytes) {
    postgres_store::options config = pgtest::caller_time_options(table.name);
    config.max_outbox_payload_bytes = max_payload;
    store = postgres_store{config};
    check.exec("CREATE TABLE " + effects + " (key text NOT NULL)");
  }
  long long rows() { return check.scalar("SELECT count(*) FROM " + outbox_table); }
  long long effects_count() { return check.scalar("SELECT count(*) FROM " + effects); }
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
};

idem::outbox_message charged(std::string payload = "{\"amount\":250}") {
  return {.topic = "payments",
          .partition_key = "acct-7",
          .payload = std::move(payload),
          .headers = {{"type", "charged"}}};
}

struct policies : idem::default_policies {
  using store = postgres_store;
  using clock = idem::manual_clock;
};

struct simulated_crash : std::runtime_error {
  simulated_crash() : std::runtime_error("the process died here") {}
};

}  // namespace

TEST_CASE(
    "the store's migration makes <table>_outbox and what the relay needs, and a version 1 or 2 "
    "table is migrated",
    "[postgres][outbox]") {
  outbox_fixture f;
  const std::string meta = "\"" + f.table.name + "_meta\"";
  const std::string dead = "\"" + f.table.name + "_outbox_dead\"";
  const std::string relay_parts = "DROP TABLE " + dead + "; DROP FUNCTION \"" + f.table.name +
                                  "_notify\"() CASCADE; DROP INDEX " + "\"" + f.table.name +
                                  "_outbox_partition_key_sequence_idx\", " + "\"" + f.table.name +
                                  "_outbox_published_at_idx\"; ";
  CHECK(f.check.scalar("SELECT version FROM " + meta) == 3);
  CHECK(f.rows() == 0);
  CHECK(f.check.scalar("SELECT count(*) FROM " + dead) == 0);
  // A table an idem of schema version 2 made: the outbox, without the relay's parts.
  f.check.exec(relay_parts + "UPDATE " + meta + " SET version = 2");
  f.check.exec("INSERT INTO " + f.outbox_table +
               " (id, topic, partition_key, created_at, next_attempt_at, headers, payload) "
               "VALUES ('kept', 't', '\\x6b', 1, 1, '', '\\x70')");
  {
    postgres_store reopened{pgtest::caller_time_options(f.table.name)};
    CHECK(f.check.scalar("SELECT version FROM " + meta) == 3);
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
  CHECK(f.check.scalar("SELECT version FROM " + meta) == 3);
  CHECK(f.rows() == 0);
  CHECK(f.check.scalar("SELECT count(*) FROM " + dead) == 0);
}

TEST_CASE("a table whose outbox a newer idem wrote is refused at construction, saying so",
          "[postgres][outbox]") {
  outbox_fixture f;
  f.check.exec("UPDATE \"" + f.table.name + "_meta\" SET version = 4");
  try {
    postgres_store newer{pgtest::caller_time_options(f.table.name)};
    FAIL("a table from a newer schema was accepted");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("schema version 4") && Contains(f.table.name + "_outbox") &&
                                 Contains("upgrade idem"));
  }
  CHECK(f.check.scalar("SELECT version FROM \"" + f.table.name + "_meta\"") == 4);
}

TEST_CASE("a transactional handler's message commits with its effect and its record",
          "[postgres][outbox]") {
  outbox_fixture f;
  std::string published;
  auto charge = [&](idem::handler_context& ctx, const std::string& amount,
                    postgres_store::transaction& txn) {
    txn.exec("INSERT INTO " + f.effects + " VALUES ($1)", {ctx.key()});
    published = txn.publish("charged", charged());
    return "charged " + amount;
  };
  idem::idempotent<decltype(charge), policies> payments{
      charge, {.store = f.store, .clock = idem::manual_clock{start}}};
  REQUIRE(payments("tenant", "order-1", std::string("250")).verdict() == idem::verdict::executed);
  CHECK(published == idem::outbox_message_id("tenant", "order-1", "charged"));
  CHECK(f.column("id") == published);
  CHECK(f.column("topic") == "payments");
  CHECK(f.column("convert_from(partition_key, 'UTF8')") == "acct-7");
  CHECK(f.column("convert_from(payload, 'UTF8')") == "{\"amount\":250}");
  CHECK(f.column("convert_from(headers, 'UTF8')") == "4:type,7:charged,");
  CHECK(
      f.column("created_at") ==
      std::to_string(
          std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count()));
  CHECK(f.column("published_at IS NULL AND attempts = 0 AND next_attempt_at = created_at") == "t");
  CHECK(payments("tenant", "order-1", std::string("250")).verdict() == idem::verdict::replayed);
  CHECK(f.rows() == 1);
  CHECK(f.effects_count() == 1);
}

TEST_CASE("a payload past max_outbox_payload_bytes throws at publish and rolls everything back",
          "[postgres][outbox]") {
  outbox_fixture f{16};
  auto charge = [&](idem::handler_context& ctx, const std::string& payload,
                    postgres_store::transaction& txn) {
    txn.exec("INSERT INTO " + f.effects + " VALUES ($1)", {ctx.key()});
    txn.publish("charged", charged(payload));
    return std::string("charged");
  };
  idem::idempotent<decltype(charge), policies> payments{
      charge, {.store = f.store, .clock = idem::manual_clock{start}}};
  CHECK_THROWS_WITH(payments("tenant", "big", std::string(17, 'p')),
                    Contains("idem::postgres_store::transaction::publish") &&
                        Contains("max_outbox_payload_bytes (16)"));
  CHECK(f.effects_count() == 0);
  CHECK(f.rows() == 0);
  CHECK_FALSE(f.store.find("tenant", "big", start));
  CHECK(payments("tenant", "big", std::string(16, 'p')).verdict() == idem::verdict::executed);
  CHECK(f.rows() == 1);
}

TEST_CASE("a run after a takeover publishes under the id the crashed run used, once",
          "[postgres][outbox]") {
  outbox_fixture f;
  const auto first = f.store.claim({"tenant", "order-1", print(1), start, 30s, 24h});
  std::string crashed_id;
  CHECK_THROWS_AS(f.store.complete_within({"tenant", "order-1", first.fence}, start,
                                          [&](postgres_store::transaction& txn) -> std::string {
                                            crashed_id = txn.publish("charged", charged());
                                            throw simulated_crash{};
                                          }),
                  simulated_crash);
  CHECK(f.rows() == 0);
  const auto second = f.store.claim({"tenant", "order-1", print(1), start + 31s, 30s, 24h});
  REQUIRE(second.status == idem::claim_status::taken_over);
  std::vector<std::string> ids;
  CHECK(f.store.complete_within({"tenant", "order-1", second.fence}, start + 31s,
                                [&](postgres_store::transaction& txn) {
                                  ids.push_back(txn.publish("charged", charged()));
                                  ids.push_back(txn.publish("charged", charged("other")));
                                  return std::string("charged");
                                }));
  CHECK(ids == std::vector<std::string>{crashed_id, crashed_id});
  CHECK(f.column("id") == crashed_id);
  CHECK(f.column("convert_from(payload, 'UTF8')") == "{\"amount\":250}");
}

TEST_CASE("a transactional inbox consumer's message commits with its event's record",
          "[postgres][outbox]") {
  outbox_fixture f;
  idem::inbox<policies> consumed{{.store = f.store, .clock = idem::manual_clock{start}}};
  auto ship = [&](idem::handler_context& ctx, postgres_store::transaction& txn) {
    txn.exec("INSERT INTO " + f.effects + " VALUES ($1)", {ctx.key()});
    txn.publish("shipped", {.topic = "shipping", .partition_key = "order-9", .payload = "go"});
  };
  for (int delivery = 0; delivery < 3; ++delivery) {
    CHECK(consumed.deduplicate("orders", "evt-1", ship).verdict() ==
          (delivery == 0 ? idem::verdict::executed : idem::verdict::replayed));
  }
  CHECK(f.column("id") == idem::outbox_message_id("orders", "evt-1", "shipped"));
  CHECK(f.effects_count() == 1);
  auto failing = [](postgres_store::transaction& txn) {
    txn.publish("shipped", {.topic = "shipping", .payload = "go"});
    throw std::runtime_error("the warehouse is closed");
  };
  CHECK_THROWS_AS(consumed.deduplicate("orders", "evt-2", failing), std::runtime_error);
  CHECK(f.rows() == 1);
}

TEST_CASE(
    "postgres_outbox::publish writes in the application's transaction: commit keeps it, "
    "rollback drops it",
    "[postgres][outbox]") {
  outbox_fixture f;
  const idem::postgres_outbox::target where = f.store.outbox_target();
  pgtest::connection app;
  app.exec("BEGIN");
  app.exec("INSERT INTO " + f.effects + " VALUES ('order-1')");
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
  app.exec("INSERT INTO " + f.effects + " VALUES ('order-2')");
  CHECK(idem::postgres_outbox::publish(app.get(), "order-2/charged", charged(), where));
  app.exec("ROLLBACK");
  CHECK(f.column("id") == "order-1/charged");
  CHECK(f.effects_count() == 1);
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
