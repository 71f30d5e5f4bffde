// sqlite_store's parts, each on a connection of its own to a fresh file, without the store
// around them: a record in and out of its statements (store/sqlite/detail/record.hpp), the write
// transaction (connection.hpp), the bounds (bounds.hpp) and the handler's own SQL
// (handler_sql.hpp).
#include <catch2/catch.hpp>

#include <idem/store/sqlite/detail/bounds.hpp>
#include <idem/store/sqlite/detail/connection.hpp>
#include <idem/store/sqlite/detail/handler_sql.hpp>
#include <idem/store/sqlite/detail/record.hpp>
#include <idem/store/sqlite/detail/statements.hpp>

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/records.hpp"
#include "support/temporary_directory.hpp"
#include "support/thread_errors.hpp"

using namespace std::chrono_literals;
using namespace std::string_view_literals;
using Catch::Matchers::Contains;
namespace detail = idem::detail;
using detail::sqlite_statement;

using idem::testing::print;
using idem::testing::start;

namespace {

// A fresh database file with idem's schema (and the usage row when `bounded`), and one
// connection to it.
struct database {
  explicit database(bool bounded = false) {
    settings.path = directory.file("parts.sqlite3");
    settings.synchronous_full = false;
    settings.busy_timeout = 0ms;
    settings.sweep_batch = 100;
    connection = detail::sqlite_connection::open(settings);
    connection->execute_script(detail::sqlite_schema_v1, "create the schema");
    if (bounded) connection->execute_script(detail::sqlite_usage_schema, "create the usage row");
  }

  // Claims `scope`/`key` under `fence` as create_record does.
  void create(std::string_view scope, std::string_view key, std::uint64_t fence,
              std::uint8_t seed = 1) {
    const idem::claim_request request{scope, key, print(seed), start, 30s, 24h};
    detail::sqlite_use insert(connection->statement(sqlite_statement::create_record));
    detail::sqlite_bind_new_record(*connection, insert.get(), request, fence);
    connection->step(insert.get(), "claim a record");
  }

  // The record as read_record reads it, or nothing.
  std::optional<idem::record> read(std::string_view scope, std::string_view key) {
    detail::sqlite_use read(connection->statement(sqlite_statement::read_record));
    detail::sqlite_bind_key(*connection, read.get(), scope, key);
    if (connection->step(read.get(), "read a record") != SQLITE_ROW) return std::nullopt;
    return detail::sqlite_snapshot(read.get(), 0, detail::sqlite_read_row(read.get(), 0));
  }

  std::int64_t count(const char* sql) { return std::stoll(connection->text_of(sql, "count")); }

  idem::testing::temporary_directory directory{"idem-sqlite-parts"};
  detail::sqlite_settings settings;
  std::unique_ptr<detail::sqlite_connection> connection;
};

detail::sqlite_row row_of(int state, std::int64_t lease_until, std::int64_t expires_at,
                          std::uint8_t seed = 1) {
  detail::sqlite_row row;
  row.state = state;
  row.fence = 3;
  row.lease_until = lease_until;
  row.expires_at = expires_at;
  row.fingerprint = print(seed);
  return row;
}

}  // namespace

TEST_CASE("record: a claim's values go in and come back exactly, any bytes as scope and key",
          "[sqlite][parts]") {
  database db;
  const std::string scope("t\0nant"sv);
  const std::string key("\xff\x00k"sv);
  db.create(scope, key, 7, 9);
  db.create("", "empty scope", 1);

  const std::optional<idem::record> found = db.read(scope, key);
  REQUIRE(found);
  CHECK(found->state == idem::record_state::in_progress);
  CHECK(found->fence == 7);
  CHECK(found->fingerprint == print(9));
  CHECK(found->created_at == start);
  CHECK(found->lease_until == start + 30s);
  CHECK(found->expires_at == start + 24h);
  CHECK(found->response.empty());
  CHECK(found->recovery.empty());
  CHECK(db.read("", "empty scope"));
  // The bytes are the key: a scope cut at its NUL, or another key, is another record.
  CHECK_FALSE(db.read("t", key));
  CHECK_FALSE(db.read(scope, "\xff"));
}

TEST_CASE("record: what a claim decides about the record it found", "[sqlite][parts]") {
  const idem::claim_request request{"s", "k", print(1), start, 30s, 24h};
  const std::int64_t now = detail::sqlite_nanoseconds(start);
  using decision = detail::sqlite_decision;
  // Released, or expired in any state: replaced by a new claim.
  CHECK(detail::sqlite_decide(row_of(detail::sqlite_released, now + 10, now + 99), request, now) ==
        decision::create);
  CHECK(detail::sqlite_decide(row_of(detail::sqlite_completed, now, now), request, now) ==
        decision::create);
  CHECK(detail::sqlite_decide(row_of(detail::sqlite_in_progress, now, now), request, now) ==
        decision::create);
  // In progress, its lease over, the same request: taken over.
  CHECK(detail::sqlite_decide(row_of(detail::sqlite_in_progress, now, now + 99), request, now) ==
        decision::take_over);
  // Still leased, another request's fingerprint, or completed: left as it is.
  CHECK(detail::sqlite_decide(row_of(detail::sqlite_in_progress, now + 1, now + 99), request,
                              now) == decision::existing);
  CHECK(detail::sqlite_decide(row_of(detail::sqlite_in_progress, now, now + 99, 2), request, now) ==
        decision::existing);
  CHECK(detail::sqlite_decide(row_of(detail::sqlite_completed, now, now + 99), request, now) ==
        decision::existing);
}

TEST_CASE("record: fenced writes apply under the holder's fence only, never after a release",
          "[sqlite][parts]") {
  database db;
  db.create("s", "k", 2);
  auto& c = *db.connection;

  CHECK_FALSE(detail::sqlite_fenced_write(c, sqlite_statement::checkpoint, {"s", "k", 1}, "step",
                                          start + 1min));
  REQUIRE(detail::sqlite_fenced_write(c, sqlite_statement::checkpoint, {"s", "k", 2}, "step",
                                      start + 1min));
  CHECK(db.read("s", "k")->recovery == "step");
  CHECK(db.read("s", "k")->lease_until == start + 1min);

  const std::optional<detail::sqlite_held_size> held = detail::sqlite_held_sizes(c, {"s", "k", 2});
  REQUIRE(held);
  CHECK(held->state == detail::sqlite_in_progress);
  CHECK(held->recovery == 4);
  CHECK_FALSE(detail::sqlite_held_sizes(c, {"s", "k", 3}));
  CHECK_FALSE(detail::sqlite_held_sizes(c, {"s", "absent", 2}));

  CHECK_FALSE(detail::sqlite_fenced_write(c, sqlite_statement::complete, {"s", "k", 3}, "late"));
  REQUIRE(detail::sqlite_fenced_write(c, sqlite_statement::complete, {"s", "k", 2}, "done"));
  const std::optional<idem::record> completed = db.read("s", "k");
  CHECK(completed->state == idem::record_state::completed);
  CHECK(completed->response == "done");
  CHECK(completed->recovery.empty());
  CHECK(detail::sqlite_held_sizes(c, {"s", "k", 2})->response == 4);

  REQUIRE(detail::sqlite_fenced_write(c, sqlite_statement::release, {"s", "k", 2}, {}));
  CHECK_FALSE(detail::sqlite_held_sizes(c, {"s", "k", 2}));
  CHECK_FALSE(detail::sqlite_fenced_write(c, sqlite_statement::release, {"s", "k", 2}, {}));
  CHECK_FALSE(detail::sqlite_fenced_write(c, sqlite_statement::complete, {"s", "k", 2}, "again"));
}

TEST_CASE("connection: a write transaction holds the write lock and rolls back unless committed",
          "[sqlite][parts]") {
  database db;
  {
    detail::sqlite_write_transaction writing(*db.connection);
    db.create("s", "rolled back", 1);
    // Another connection cannot write meanwhile (busy timeout 0: it gives up at once).
    const std::unique_ptr<detail::sqlite_connection> other =
        detail::sqlite_connection::open(db.settings);
    CHECK_THROWS_WITH(other->run(sqlite_statement::begin_immediate, "begin a write transaction"),
                      Contains("cannot begin a write transaction") && Contains("still locked"));
  }
  CHECK(sqlite3_get_autocommit(db.connection->db()) != 0);
  CHECK_FALSE(db.read("s", "rolled back"));
  {
    detail::sqlite_write_transaction writing(*db.connection);
    db.create("s", "committed", 1);
    writing.commit();
  }
  CHECK(db.read("s", "committed"));
}

TEST_CASE("bounds: the usage row counts records and bytes, and a write past max_bytes throws",
          "[sqlite][parts]") {
  database db(true);
  auto& c = *db.connection;
  db.create("ab", "cd", 1);  // 4 bytes of scope and key
  CHECK(detail::sqlite_usage(c) == std::pair<std::int64_t, std::int64_t>{1, 4});

  const idem::claim_request next{"ef", "gh", print(1), start, 30s, 24h};
  CHECK(detail::sqlite_has_room(c, {.max_records = 2, .max_bytes = 8}, next, false, 0));
  CHECK_FALSE(detail::sqlite_has_room(c, {.max_records = 1, .max_bytes = 8}, next, false, 0));
  CHECK_FALSE(detail::sqlite_has_room(c, {.max_records = 2, .max_bytes = 7}, next, false, 0));
  // Replacing the record found frees its place and its bytes.
  CHECK(detail::sqlite_has_room(c, {.max_records = 1, .max_bytes = 4}, next, true, 4));

  const detail::sqlite_bounds tight{.max_records = 10, .max_bytes = 10};
  CHECK_NOTHROW(detail::sqlite_reserve_bytes(c, tight, 6, 0));
  try {
    detail::sqlite_reserve_bytes(c, tight, 7, 0);
    FAIL("7 more bytes fit in 10 that hold 4");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::full);
    CHECK_THAT(error.what(), Contains("7 bytes do not fit") && Contains("max_bytes of 10"));
  }

  {
    detail::sqlite_write_transaction writing(c);
    CHECK_THROWS_AS(
        detail::sqlite_bounded_checkpoint(c, tight, {"ab", "cd", 1}, "1234567", start + 1min),
        idem::store_error);
  }
  CHECK(db.read("ab", "cd")->recovery.empty());
  CHECK(detail::sqlite_bounded_checkpoint(c, tight, {"ab", "cd", 1}, "123456", start + 1min));
  CHECK_FALSE(detail::sqlite_bounded_checkpoint(c, tight, {"ab", "cd", 2}, "1", start + 1min));
  CHECK(detail::sqlite_usage(c).second == 10);

  db.connection->execute_script("DELETE FROM idem_usage", "lose the usage row");
  CHECK_THROWS_WITH(detail::sqlite_usage(c), Contains("lost its usage row"));
}

TEST_CASE("handler SQL: values bind by their type, and every failure names the statement",
          "[sqlite][parts]") {
  database db;
  auto& c = *db.connection;
  const auto type_of = [&](const auto& value) {
    const std::string_view sql = "SELECT typeof(?1), quote(?1)";
    detail::sqlite_write_transaction writing(c);
    detail::sqlite_use use(detail::sqlite_handler_statement(c, sql, value));
    REQUIRE(detail::sqlite_handler_step(c, use.get(), sql) == SQLITE_ROW);
    return std::string(reinterpret_cast<const char*>(sqlite3_column_text(use.get(), 0))) + " " +
           reinterpret_cast<const char*>(sqlite3_column_text(use.get(), 1));
  };
  CHECK(type_of(std::int64_t{-42}) == "integer -42");
  CHECK(type_of(true) == "integer 1");
  CHECK(type_of(2.5) == "real 2.5");
  CHECK(type_of(std::string("it's")) == "text 'it''s'");
  CHECK(type_of("text") == "text 'text'");
  CHECK(type_of(detail::sqlite_blob{"\x01\x02"sv}) == "blob X'0102'");
  CHECK(type_of(detail::sqlite_blob{}) == "blob X''");
  CHECK(type_of(nullptr) == "null NULL");

  // Prepared once per connection, kept by its text.
  CHECK(c.handler_statement("SELECT 1") == c.handler_statement("SELECT 1"));

  // Outside the record's transaction nothing runs: it would commit on its own.
  CHECK_THROWS_WITH(detail::sqlite_handler_statement(c, "SELECT 1"),
                    Contains("no longer open") && Contains("SELECT 1"));

  detail::sqlite_write_transaction writing(c);
  CHECK_THROWS_WITH(detail::sqlite_handler_statement(c, "SELECT ?1", 1, 2),
                    Contains("cannot bind value 2 of SELECT ?1"));
  CHECK_THROWS_WITH(detail::sqlite_handler_statement(c, "SELEKT 1"), Contains("SELEKT 1"));
  c.execute_script("CREATE TABLE t (id INTEGER PRIMARY KEY)", "create a table");
  const std::string_view insert = "INSERT INTO t VALUES (?1)";
  {
    detail::sqlite_use use(detail::sqlite_handler_statement(c, insert, 1));
    detail::sqlite_handler_step(c, use.get(), insert);
  }
  detail::sqlite_use again(detail::sqlite_handler_statement(c, insert, 1));
  try {
    detail::sqlite_handler_step(c, again.get(), insert);
    FAIL("a duplicate primary key was inserted");
  } catch (const idem::sqlite_error& error) {
    CHECK(error.code() == SQLITE_CONSTRAINT_PRIMARYKEY);
    CHECK_THAT(error.what(), Contains(std::string(insert)) && Contains("UNIQUE"));
  }
}

TEST_CASE("connection: connections opening a new file at once all switch it to WAL",
          "[sqlite][parts][concurrency]") {
  // SQLite answers SQLITE_BUSY at once, without the busy handler, to a connection that switches
  // a new file to WAL while another does: each must wait its turn rather than fail.
  constexpr int rounds = 40;
  constexpr int openers = 6;
  for (int round = 0; round < rounds; ++round) {
    idem::testing::temporary_directory directory{"idem-sqlite-wal"};
    detail::sqlite_settings settings;
    settings.path = directory.file("new.sqlite3");
    settings.busy_timeout = 5s;
    std::atomic<int> waiting{openers};
    idem::testing::thread_errors failed;
    std::vector<std::thread> threads;
    for (int i = 0; i < openers; ++i) {
      threads.emplace_back([&] {
        waiting.fetch_sub(1);
        while (waiting.load() > 0) {
        }
        try {
          detail::sqlite_connection::open(settings);
        } catch (const idem::store_error& error) {
          failed.add(error.what());
        }
      });
    }
    for (std::thread& thread : threads)
      thread.join();
    failed.report();
    REQUIRE(failed.count() == 0);
  }
}
