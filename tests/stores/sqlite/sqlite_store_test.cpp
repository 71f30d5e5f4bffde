// What is particular to sqlite_store: its file (schema, exact times, records surviving a
// reopen), its faults (each gives a clear error and loses nothing), transactional completion,
// and sharing one file between stores and threads.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include <grp.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "stores/sqlite/file_connection.hpp"
#include "support/records.hpp"
#include "support/temporary_directory.hpp"

namespace sqlite_store_test {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::claim_status;
using idem::record_state;
using idem::sqlite_store;
using idem::store_error;
using idem::store_failure;

using idem::testing::print;
using idem::testing::start;

using idem_sqlite_test::file_connection;

namespace {

idem::claim_request ask(std::string_view scope, std::string_view key, idem::store_time now) {
  return {scope, key, print(1), now, 30s, 24h};
}

sqlite_store::options quick(const std::string& path) {
  sqlite_store::options options;
  options.path = path;
  options.synchronous = sqlite_store::synchronous_mode::normal;
  return options;
}

template <class F>
store_error failure_of(F&& f) {
  try {
    f();
  } catch (const store_error& error) {
    return error;
  }
  FAIL("expected a store_error");
  throw std::logic_error("unreachable");
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// ---- the file ----------------------------------------------------------------------------

TEST_CASE("sqlite_store creates a versioned schema and leaves user_version to the application",
          "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  {
    file_connection app(path);
    app.exec("PRAGMA user_version = 42; CREATE TABLE orders (id INTEGER PRIMARY KEY)");
  }
  sqlite_store store{path};
  file_connection check(path);
  CHECK(check.text("PRAGMA journal_mode") == "wal");
  CHECK(check.text("PRAGMA user_version") == "42");
  CHECK(check.text("SELECT value FROM idem_meta WHERE name = 'schema_version'") == "4");
  CHECK(check.text("SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_schema WHERE "
                   "type = 'index' AND tbl_name = 'idem_records' AND sql IS NOT NULL ORDER BY "
                   "name)") == "idem_records_by_expiry idem_records_in_progress");
  // stuck() goes through the partial index of records in progress, not a scan of every record.
  CHECK_THAT(check.text("EXPLAIN QUERY PLAN SELECT scope FROM idem_records INDEXED BY "
                        "idem_records_in_progress WHERE state = 0 AND lease_until <= 5 AND "
                        "expires_at > 5 ORDER BY lease_until LIMIT 10",
                        3),
             Contains("USING INDEX idem_records_in_progress"));
  // Sweep goes through the expiry index, not a scan of every record.
  CHECK_THAT(check.text("EXPLAIN QUERY PLAN DELETE FROM idem_records WHERE (scope, key) IN "
                        "(SELECT scope, key FROM idem_records WHERE expires_at <= 5 LIMIT 10)",
                        3),
             Contains("SEARCH idem_records USING COVERING INDEX idem_records_by_expiry") &&
                 Contains("SEARCH idem_records USING PRIMARY KEY"));
  // An unbounded store keeps no usage row and adds no trigger to every write.
  CHECK(check.text("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'idem_usage%'") == "0");
  // Opening again (another process, a restart) finds the schema made and changes nothing.
  sqlite_store again{path};
  CHECK(check.text("SELECT count(*) FROM idem_meta") == "1");
}

TEST_CASE("sqlite_store keeps records across a reopen, with times exact to the nanosecond",
          "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  const idem::store_time now = start + 123456789ns;
  std::uint64_t fence = 0;
  {
    sqlite_store store{path};
    const auto claimed = store.claim({"tenant", "order-1", print(5), now, 30s + 7ns, 24h + 9ns});
    REQUIRE(claimed.status == claim_status::claimed);
    fence = claimed.fence;
    REQUIRE(store.checkpoint({"tenant", "order-1", fence}, "charged", now + 31s + 1ns));
  }
  sqlite_store reopened{path};
  const auto found = reopened.find("tenant", "order-1", now);
  REQUIRE(found);
  CHECK(found->fingerprint == print(5));
  CHECK(found->fence == fence);
  CHECK(found->created_at == now);
  CHECK(found->lease_until == now + 31s + 1ns);
  CHECK(found->expires_at == now + 24h + 9ns);
  CHECK(found->recovery == "charged");
  CHECK(reopened.complete({"tenant", "order-1", fence}, "done", now));
}

TEST_CASE("two stores on one file see each other's records and fences", "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  sqlite_store first{quick(path)};
  sqlite_store second{quick(path)};
  const auto claimed = first.claim(ask("tenant", "k", start));
  REQUIRE(claimed.status == claim_status::claimed);
  CHECK(second.claim(ask("tenant", "k", start)).status == claim_status::existing);
  const auto taken = second.claim(ask("tenant", "k", start + 30s));
  REQUIRE(taken.status == claim_status::taken_over);
  CHECK_FALSE(first.complete({"tenant", "k", claimed.fence}, "stale", start + 30s));
  CHECK(second.complete({"tenant", "k", taken.fence}, "fresh", start + 30s));
  const auto found = first.find("tenant", "k", start + 30s);
  REQUIRE(found);
  CHECK(found->response == "fresh");
}

TEST_CASE("sweep removes expired records in batches through the expiry index", "[sqlite]") {
  idem::testing::temporary_directory directory;
  sqlite_store::options options = quick(directory.file("idem.sqlite3"));
  options.sweep_batch = 64;
  sqlite_store store{options};
  for (int i = 0; i < 700; ++i) {
    const auto retention = i % 7 == 0 ? 24h : 1h;
    (void)store.claim({"s", "k" + std::to_string(i), print(1), start, 30s, retention});
  }
  CHECK(store.sweep(start + 1h) == 600);
  CHECK(store.sweep(start + 1h) == 0);
  CHECK(store.find("s", "k0", start + 1h));
  CHECK_FALSE(store.find("s", "k1", start));
  CHECK(store.sweep(start + 24h) == 100);
}

// ---- options and faults ------------------------------------------------------------------

TEST_CASE("options that can never work are refused at construction", "[sqlite]") {
  CHECK_THROWS_AS(sqlite_store{""}, std::invalid_argument);
  CHECK_THROWS_WITH(sqlite_store{":memory:"}, Contains("memory_store"));
  idem::testing::temporary_directory directory;
  sqlite_store::options options = quick(directory.file("idem.sqlite3"));
  options.pool_size = 0;
  CHECK_THROWS_AS(sqlite_store{options}, std::invalid_argument);
  options.pool_size = 1;
  options.sweep_batch = 0;
  CHECK_THROWS_AS(sqlite_store{options}, std::invalid_argument);
}

TEST_CASE("a default-constructed sqlite_store answers every call with a clear store_error",
          "[sqlite]") {
  sqlite_store nothing;
  const store_error error = failure_of([&] { (void)nothing.claim(ask("s", "k", start)); });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THAT(error.what(), Contains("construct it with a path"));
  CHECK_THROWS_AS(nothing.find("s", "k", start), store_error);
}

TEST_CASE("a path that cannot be opened is refused with the path and SQLite's reason", "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string missing = directory.file("no-such-directory/idem.sqlite3");
  const store_error error = failure_of([&] { sqlite_store store{missing}; });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THAT(error.what(), Contains(missing) && Contains("unable to open database file"));
  CHECK_FALSE(std::filesystem::exists(directory.file("no-such-directory")));

  // A directory is no database either.
  const store_error directory_error = failure_of([&] { sqlite_store store{directory.file("")}; });
  CHECK_THAT(directory_error.what(), Contains(directory.file("")));
}

TEST_CASE("a file that is not a database is refused and left as it was", "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("notes.txt");
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += "line " + std::to_string(i) + " of somebody's notes, not a database\n";
  std::ofstream(path, std::ios::binary) << text;
  const store_error error = failure_of([&] { sqlite_store store{path}; });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THAT(error.what(), Contains(path) && Contains("file is not a database"));
  CHECK(slurp(path) == text);
}

namespace {

// Opens `path` as a user who may not write it (this process, unless it is root: then a child
// that dropped to nobody) and answers what happened: "store_error: <what>", "other: <what>",
// or "opened".
std::string open_as_reader(const std::string& path) {
  const auto attempt = [&]() -> std::string {
    try {
      sqlite_store store{path};
      return "opened";
    } catch (const store_error& error) {
      return std::string("store_error: ") + error.what();
    } catch (const std::exception& error) {
      return std::string("other: ") + error.what();
    }
  };
  if (geteuid() != 0) return attempt();
  int channel[2];
  REQUIRE(pipe(channel) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(channel[0]);
    constexpr uid_t nobody = 65534;
    std::string answer = "other: could not drop privileges";
    if (setgroups(0, nullptr) == 0 && setgid(nobody) == 0 && setuid(nobody) == 0) {
      answer = attempt();
    }
    const ssize_t written = write(channel[1], answer.data(), answer.size());
    _exit(written == static_cast<ssize_t>(answer.size()) ? 0 : 1);
  }
  close(channel[1]);
  std::string answer;
  char buffer[512];
  ssize_t got = 0;
  while ((got = read(channel[0], buffer, sizeof buffer)) > 0) {
    answer.append(buffer, static_cast<std::size_t>(got));
  }
  close(channel[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return answer;
}

}  // namespace

TEST_CASE("a read-only database is refused at construction, its records untouched", "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  {
    sqlite_store store{quick(path)};
    const auto claimed = store.claim(ask("tenant", "kept", start));
    REQUIRE(store.complete({"tenant", "kept", claimed.fence}, "response", start));
  }
  // Opened read-only, as SQLite opens a file it may not write (mode=ro is what it falls back to
  // for a file without write permission; as root, permissions would not stop us).
  const std::string read_only = "file:" + path + "?mode=ro";
  const store_error error = failure_of([&] { sqlite_store store{read_only}; });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THAT(error.what(), Contains(path) && Contains("read-only"));
  // And a file its user may not write, for real: the tests run as root, whom permissions do
  // not stop, so a child process drops to nobody first.
  REQUIRE(chmod(directory.path().c_str(), 0755) == 0);
  REQUIRE(chmod(path.c_str(), 0444) == 0);
  const std::string denied = open_as_reader(path);
  CHECK_THAT(denied, Catch::StartsWith("store_error: ") && Contains(path));
  REQUIRE(chmod(path.c_str(), 0644) == 0);
  sqlite_store store{quick(path)};
  const auto found = store.find("tenant", "kept", start);
  REQUIRE(found);
  CHECK(found->response == "response");
}

TEST_CASE("a database locked past the busy timeout fails the write and half-writes nothing",
          "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  sqlite_store::options options = quick(path);
  options.busy_timeout = 50ms;
  sqlite_store store{options};
  const auto done = store.claim(ask("tenant", "done", start));
  REQUIRE(store.complete({"tenant", "done", done.fence}, "stored", start));
  const auto held = store.claim(ask("tenant", "held", start));

  file_connection other(path);
  other.exec("BEGIN IMMEDIATE; DELETE FROM idem_meta WHERE name = 'nothing'");
  // Writers wait out the busy timeout, then fail with the path and the reason.
  const store_error error = failure_of([&] { (void)store.claim(ask("tenant", "new", start)); });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THAT(error.what(), Contains(path) && Contains("locked") && Contains("50 ms"));
  CHECK_THROWS_AS(store.complete({"tenant", "held", held.fence}, "x", start), store_error);
  CHECK_THROWS_AS(store.sweep(start + 48h), store_error);
  // Readers never wait for a writer: finds and replays are still answered.
  CHECK(store.find("tenant", "done", start));
  const auto replay = store.claim(ask("tenant", "done", start + 1s));
  CHECK(replay.status == claim_status::existing);
  CHECK(replay.existing.response == "stored");
  other.exec("ROLLBACK");

  CHECK_FALSE(store.find("tenant", "new", start));
  const auto still = store.find("tenant", "held", start);
  REQUIRE(still);
  CHECK(still->state == record_state::in_progress);
  CHECK(store.claim(ask("tenant", "new", start)).status == claim_status::claimed);
  CHECK(store.complete({"tenant", "held", held.fence}, "x", start));
}

TEST_CASE(
    "the store's own writers wait for each other on its writer lock: one held past the busy "
    "timeout fails another thread's write with the reason, one held less is waited for",
    "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  sqlite_store::options options = quick(path);
  const bool past = GENERATE(true, false);
  options.busy_timeout = past ? 50ms : 5s;
  sqlite_store store{options};
  const auto held = store.claim(ask("tenant", "held", start));
  REQUIRE(held.status == claim_status::claimed);

  // A write transaction of the store's (a completion with the handler's writes) kept open for
  // 300 ms on another thread.
  std::atomic<bool> open{false};
  std::thread writer([&] {
    (void)store.complete_within({"tenant", "held", held.fence}, start,
                                [&](sqlite_store::transaction&) {
                                  open = true;
                                  std::this_thread::sleep_for(300ms);
                                  return std::string("done");
                                });
  });
  while (!open)
    std::this_thread::yield();
  std::optional<store_error> refused;
  std::optional<claim_status> claimed;
  try {
    claimed = store.claim(ask("tenant", "new", start)).status;
  } catch (const store_error& error) {
    refused = error;
  }
  writer.join();
  if (past) {
    // Refused by the store's writer lock, not by SQLite's: the words say which.
    REQUIRE(refused.has_value());
    CHECK(refused->failure() == store_failure::unavailable);
    CHECK_THAT(refused->what(),
               Contains(path) && Contains("another write of this store") && Contains("50 ms"));
    CHECK_FALSE(store.find("tenant", "new", start));
  } else {
    REQUIRE(claimed.has_value());
    CHECK(*claimed == claim_status::claimed);
  }
  const auto done = store.find("tenant", "held", start);
  REQUIRE(done);
  CHECK(done->state == record_state::completed);
  CHECK(store.claim(ask("tenant", "new", start + 1s)).status != claim_status::full);
}

TEST_CASE("a full database answers store_error(full) and keeps the record as it was", "[sqlite]") {
  idem::testing::temporary_directory directory;
  sqlite_store::options options = quick(directory.file("idem.sqlite3"));
  options.max_database_bytes = std::uint64_t{128} * 1024;
  sqlite_store store{options};
  const auto claimed = store.claim(ask("tenant", "big", start));
  REQUIRE(claimed.status == claim_status::claimed);
  const std::string huge(1 << 20, 'x');
  const store_error error = failure_of([&] {
    (void)store.complete({"tenant", "big", claimed.fence}, huge, start);
  });
  CHECK(error.failure() == store_failure::full);
  CHECK_THAT(error.what(), Contains("full"));
  const auto found = store.find("tenant", "big", start);
  REQUIRE(found);
  CHECK(found->state == record_state::in_progress);
  CHECK(found->response.empty());
  CHECK(store.complete({"tenant", "big", claimed.fence}, "fits", start));
  // A claim that does not fit is refused the same way, and the store goes on.
  const std::string long_scope(std::size_t{200} * 1024, 's');
  CHECK_THROWS_AS(store.claim(ask(long_scope, "k", start)), store_error);
  CHECK(store.claim(ask("tenant", "small", start)).status == claim_status::claimed);
}

TEST_CASE("a database written by a newer idem is refused, not downgraded", "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  { sqlite_store store{quick(path)}; }
  {
    file_connection other(path);
    other.exec("UPDATE idem_meta SET value = 99 WHERE name = 'schema_version'");
  }
  const store_error error = failure_of([&] { sqlite_store store{quick(path)}; });
  CHECK_THAT(error.what(), Contains(path) && Contains("version 99"));
}

TEST_CASE("a bounded store counts the usage of records every writer of the file makes",
          "[sqlite]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  // Records written before the store was ever bounded count too.
  sqlite_store unbounded{quick(path)};
  for (const char* key : {"a", "b"})
    (void)unbounded.claim(ask("t", key, start));
  sqlite_store::options options = quick(path);
  options.max_records = 3;
  options.max_bytes = 40;
  sqlite_store bounded{options};
  file_connection check(path);
  CHECK(check.text("SELECT records || ' ' || bytes FROM idem_usage") == "2 4");
  // An unbounded handle on the same file now keeps the usage row up to date as well.
  const auto c = unbounded.claim(ask("t", "c", start));
  REQUIRE(unbounded.complete({"t", "c", c.fence}, "0123456789", start));
  CHECK(check.text("SELECT records || ' ' || bytes FROM idem_usage") == "3 16");
  CHECK(bounded.claim(ask("t", "d", start)).status == claim_status::full);
  const auto a = bounded.claim(ask("t", "a", start + 30s));
  REQUIRE(a.status == claim_status::taken_over);
  CHECK_THROWS_AS(bounded.checkpoint({"t", "a", a.fence}, std::string(25, 'r'), start + 60s),
                  store_error);
  CHECK(bounded.checkpoint({"t", "a", a.fence}, std::string(24, 'r'), start + 60s));
  CHECK(check.text("SELECT records || ' ' || bytes FROM idem_usage") == "3 40");
  REQUIRE(bounded.release({"t", "a", a.fence}));
  CHECK(check.text("SELECT records || ' ' || bytes FROM idem_usage") == "3 16");
  CHECK(bounded.sweep(start + 24h) == 3);
  CHECK(check.text("SELECT records || ' ' || bytes FROM idem_usage") == "0 0");
}

// ---- transactional completion ------------------------------------------------------------

namespace {

struct transactional_fixture {
  idem::testing::temporary_directory directory;
  std::string path = directory.file("idem.sqlite3");
  sqlite_store store{quick(path)};

  transactional_fixture() {
    file_connection app(path);
    app.exec("CREATE TABLE charges (key TEXT NOT NULL, amount INTEGER NOT NULL, note BLOB)");
  }
  std::string charges() {
    file_connection check(path);
    return check.text("SELECT key || ':' || amount FROM charges ORDER BY rowid");
  }
};

}  // namespace

TEST_CASE("complete_within commits the handler's writes and the response together", "[sqlite]") {
  transactional_fixture fixture;
  const auto claimed = fixture.store.claim(ask("tenant", "order-1", start));
  const idem::fenced_key held{"tenant", "order-1", claimed.fence};
  const bool completed =
      fixture.store.complete_within(held, start, [&](sqlite_store::transaction& txn) {
        CHECK(txn.exec("INSERT INTO charges (key, amount, note) VALUES (?1, ?2, ?3)", "order-1",
                       250, sqlite_store::blob{std::string_view("a\0b", 3)}) == 1);
        CHECK(sqlite3_get_autocommit(txn.connection()) == 0);
        std::int64_t total = 0;
        CHECK(txn.query(
                  "SELECT amount FROM charges WHERE key = ?1",
                  [&](sqlite3_stmt* row) { total += sqlite3_column_int64(row, 0); },
                  std::string("order-1")) == 1);
        return "charged " + std::to_string(total);
      });
  CHECK(completed);
  CHECK(fixture.charges() == "order-1:250");
  const auto found = fixture.store.find("tenant", "order-1", start);
  REQUIRE(found);
  CHECK(found->state == record_state::completed);
  CHECK(found->response == "charged 250");
}

TEST_CASE("complete_within does not run the handler for a record it does not hold", "[sqlite]") {
  transactional_fixture fixture;
  auto& store = fixture.store;
  int runs = 0;
  auto produce = [&](sqlite_store::transaction& txn) {
    ++runs;
    txn.exec("INSERT INTO charges (key, amount) VALUES ('x', 1)");
    return std::string("response");
  };
  // Unknown key; then an old fence after a takeover; then a released and a completed record.
  CHECK_FALSE(store.complete_within({"tenant", "nobody", 1}, start, produce));
  const auto paused = store.claim(ask("tenant", "k", start));
  const auto taken = store.claim(ask("tenant", "k", start + 30s));
  REQUIRE(taken.status == claim_status::taken_over);
  CHECK_FALSE(store.complete_within({"tenant", "k", paused.fence}, start, produce));
  const auto released = store.claim(ask("tenant", "r", start));
  REQUIRE(store.release({"tenant", "r", released.fence}));
  CHECK_FALSE(store.complete_within({"tenant", "r", released.fence}, start, produce));
  REQUIRE(store.complete({"tenant", "k", taken.fence}, "done", start));
  CHECK_FALSE(store.complete_within({"tenant", "k", taken.fence}, start, produce));
  CHECK(runs == 0);
  CHECK(fixture.charges().empty());
  CHECK(store.find("tenant", "k", start)->response == "done");
}

TEST_CASE("a handler that throws inside complete_within rolls back everything it wrote",
          "[sqlite]") {
  transactional_fixture fixture;
  auto& store = fixture.store;
  const auto claimed = store.claim(ask("tenant", "k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  struct declined : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  try {
    (void)store.complete_within(held, start, [&](sqlite_store::transaction& txn) -> std::string {
      txn.exec("INSERT INTO charges (key, amount) VALUES ('k', 100)");
      REQUIRE(txn.checkpoint(held, "step recorded", start + 60s));
      throw declined("card declined");
    });
    FAIL("the handler's exception did not pass through");
  } catch (const declined& error) {
    CHECK(std::string(error.what()) == "card declined");
  }
  CHECK(fixture.charges().empty());
  const auto found = store.find("tenant", "k", start);
  REQUIRE(found);
  CHECK(found->state == record_state::in_progress);
  CHECK(found->recovery.empty());
  CHECK(found->lease_until == start + 30s);
  // The holder still holds the claim and can complete it.
  CHECK(store.complete_within(
      held, start, [](sqlite_store::transaction&) { return std::string("second try"); }));
}

TEST_CASE("a transaction's checkpoint is fenced and commits with the response", "[sqlite]") {
  transactional_fixture fixture;
  auto& store = fixture.store;
  const auto claimed = store.claim(ask("tenant", "k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  CHECK(store.complete_within(held, start, [&](sqlite_store::transaction& txn) {
    CHECK_FALSE(txn.checkpoint({"tenant", "k", claimed.fence + 1}, "wrong fence", start));
    CHECK(txn.checkpoint(held, "step", start + 60s));
    return std::string("ok");
  }));
  const auto found = store.find("tenant", "k", start);
  REQUIRE(found);
  CHECK(found->response == "ok");
  CHECK(found->lease_until == start + 60s);
}

TEST_CASE("the handler's SQL errors are sqlite_error with SQLite's code, and roll back",
          "[sqlite]") {
  transactional_fixture fixture;
  auto& store = fixture.store;
  const auto claimed = store.claim(ask("tenant", "k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  try {
    (void)store.complete_within(held, start, [&](sqlite_store::transaction& txn) {
      txn.exec("INSERT INTO charges (key, amount) VALUES ('k', 1)");
      txn.exec("INSERT INTO charges (key, amount) VALUES (NULL, 2)");
      return std::string("unreachable");
    });
    FAIL("a NOT NULL violation passed");
  } catch (const idem::sqlite_error& error) {
    CHECK(error.code() == SQLITE_CONSTRAINT_NOTNULL);
    CHECK_THAT(error.what(), Contains("NOT NULL"));
  }
  CHECK_THROWS_AS(store.complete_within(held, start,
                                        [&](sqlite_store::transaction& txn) {
                                          txn.exec("SELEC nonsense");
                                          return std::string();
                                        }),
                  idem::sqlite_error);
  CHECK(fixture.charges().empty());
  CHECK(store.find("tenant", "k", start)->state == record_state::in_progress);
}

TEST_CASE("a handler that ends complete_within's transaction itself is a logic_error", "[sqlite]") {
  transactional_fixture fixture;
  auto& store = fixture.store;
  const auto claimed = store.claim(ask("tenant", "k", start));
  CHECK_THROWS_AS(store.complete_within({"tenant", "k", claimed.fence}, start,
                                        [](sqlite_store::transaction& txn) {
                                          txn.exec("ROLLBACK");
                                          return std::string("x");
                                        }),
                  std::logic_error);
  CHECK(store.find("tenant", "k", start)->state == record_state::in_progress);
}

TEST_CASE("a response past max_bytes fails complete_within with full and rolls back", "[sqlite]") {
  idem::testing::temporary_directory directory;
  sqlite_store::options options = quick(directory.file("idem.sqlite3"));
  options.max_bytes = 100;
  sqlite_store store{options};
  {
    file_connection app(options.path);
    app.exec("CREATE TABLE effects (key TEXT)");
  }
  const auto claimed = store.claim(ask("tenant", "k", start));
  const idem::fenced_key held{"tenant", "k", claimed.fence};
  const store_error error = failure_of([&] {
    (void)store.complete_within(held, start, [](sqlite_store::transaction& txn) {
      txn.exec("INSERT INTO effects VALUES ('k')");
      return std::string(200, 'x');
    });
  });
  CHECK(error.failure() == store_failure::full);
  file_connection check(options.path);
  CHECK(check.text("SELECT count(*) FROM effects") == "0");
  CHECK(store.find("tenant", "k", start)->state == record_state::in_progress);
}

TEST_CASE("a call that waits for a connection gives up after the busy timeout", "[sqlite]") {
  idem::testing::temporary_directory directory;
  sqlite_store::options options = quick(directory.file("idem.sqlite3"));
  options.pool_size = 1;
  options.busy_timeout = 20ms;
  sqlite_store store{options};
  const auto claimed = store.claim(ask("tenant", "k", start));
  // Inside complete_within the one connection is taken: calling the store again would wait for
  // it forever; instead it fails after the busy timeout.
  CHECK(
      store.complete_within({"tenant", "k", claimed.fence}, start, [&](sqlite_store::transaction&) {
        const store_error error = failure_of([&] { (void)store.find("tenant", "k", start); });
        CHECK_THAT(error.what(), Contains("connections"));
        return std::string("ok");
      }));
}

// ---- many threads ------------------------------------------------------------------------

TEST_CASE("threads on two stores sharing one file claim each key once", "[sqlite][concurrency]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  sqlite_store::options options = quick(path);
  options.pool_size = 3;
  sqlite_store first{options};
  sqlite_store second{options};
  constexpr int threads = 8;
  constexpr int keys = 200;
  std::vector<std::atomic<int>> claims(keys);
  std::atomic<int> errors{0};
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      sqlite_store& store = t % 2 == 0 ? first : second;
      for (int i = 0; i < keys; ++i) {
        const int index = (i * 7 + t * 13) % keys;
        const std::string key = "key-" + std::to_string(index);
        try {
          const auto result = store.claim(ask("tenant", key, start));
          if (result.status != claim_status::claimed) continue;
          claims[static_cast<std::size_t>(index)].fetch_add(1);
          const bool done =
              store.complete_within({"tenant", key, result.fence}, start,
                                    [&](sqlite_store::transaction&) { return "response " + key; });
          if (!done) errors.fetch_add(1);
        } catch (const std::exception&) {
          errors.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : pool)
    thread.join();
  CHECK(errors == 0);
  int not_once = 0;
  for (int i = 0; i < keys; ++i) {
    if (claims[static_cast<std::size_t>(i)] != 1) ++not_once;
    const auto found = first.find("tenant", "key-" + std::to_string(i), start);
    if (!found || found->response != "response key-" + std::to_string(i)) ++not_once;
  }
  CHECK(not_once == 0);
}

// ---- through idempotent and inbox --------------------------------------------------------

static_assert(idem::TransactionalStore<sqlite_store>,
              "sqlite_store completes records inside the handler's transaction");

namespace {

struct sqlite_policies : idem::default_policies {
  using store = sqlite_store;
  using clock = idem::manual_clock;
};

}  // namespace

TEST_CASE("a transactional handler's rows commit with its record, or roll back with a throw",
          "[sqlite]") {
  transactional_fixture fixture;
  auto transfer = [](idem::handler_context& context, const std::string& amount,
                     sqlite_store::transaction& txn) {
    if (amount == "declined") throw std::runtime_error("declined");
    txn.exec("INSERT INTO charges (key, amount) VALUES (?, ?)", context.key(), std::stoi(amount));
    return std::string("charged ") + amount;
  };
  idem::idempotent<decltype(transfer), sqlite_policies>::options parts;
  parts.store = fixture.store;
  idem::idempotent<decltype(transfer), sqlite_policies> payments(transfer, std::move(parts));

  const auto first = payments("tenant", "order-1", std::string("250"));
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first.recorded());
  const auto again = payments("tenant", "order-1", std::string("250"));
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again.value() == "charged 250");
  CHECK_THROWS_AS(payments("tenant", "order-2", std::string("declined")), std::runtime_error);
  CHECK(fixture.charges() == "order-1:250");
  // The throw released the key: a corrected retry runs.
  CHECK(payments("tenant", "order-2", std::string("100")).verdict() == idem::verdict::executed);
  CHECK(fixture.charges() == "order-1:250\norder-2:100");
}

TEST_CASE("a transactional inbox records the event and the consumer's rows together", "[sqlite]") {
  transactional_fixture fixture;
  idem::inbox<sqlite_policies>::options parts;
  parts.store = fixture.store;
  idem::inbox<sqlite_policies> consumed(std::move(parts));
  for (int delivery = 0; delivery < 3; ++delivery) {
    const auto outcome =
        consumed.deduplicate("orders", "evt-1", [](sqlite_store::transaction& txn) {
          txn.exec("INSERT INTO charges (key, amount) VALUES ('evt-1', 5)");
        });
    CHECK(outcome.verdict() == (delivery == 0 ? idem::verdict::executed : idem::verdict::replayed));
  }
  CHECK(fixture.charges() == "evt-1:5");
}

// ---- commit_with: the charge outside the transaction, the writes in the one completing ----

namespace {

using committed = idem::commit_with<std::string, sqlite_store::transaction>;

// Whether another connection can take SQLite's write lock at once: no transaction holds it.
bool write_lock_free(const std::string& path) {
  sqlite3* other = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &other) == SQLITE_OK);
  const bool free = sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
  if (free) sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  return free;
}

// The writes of one charge row, and its message in the outbox.
std::function<void(sqlite_store::transaction&)> charge_row(std::string key, int amount) {
  return [key = std::move(key), amount](sqlite_store::transaction& txn) {
    txn.exec("INSERT INTO charges (key, amount) VALUES (?1, ?2)", key, amount);
    (void)txn.publish("charged", idem::outbox_message{"charges", key, std::to_string(amount), {}});
  };
}

}  // namespace

TEST_CASE(
    "a handler answering commit_with runs with no write lock held, its step once, and its "
    "writes and message commit with the record",
    "[sqlite][commit_with]") {
  transactional_fixture fixture;
  int runs = 0;
  int charged = 0;
  bool lock_free = false;
  auto handler = [&](idem::handler_context& ctx, const std::string& amount) -> committed {
    ++runs;
    const int charge = ctx.step("charge", [&] { return ++charged; });
    // Where the processor would answer: other writers go on meanwhile.
    lock_free = write_lock_free(fixture.path);
    return {"charge " + std::to_string(charge),
            charge_row(std::string(ctx.key()), std::stoi(amount))};
  };
  idem::idempotent<decltype(handler), sqlite_policies>::options parts;
  parts.store = fixture.store;
  idem::idempotent<decltype(handler), sqlite_policies> payments(handler, std::move(parts));

  const auto first = payments("tenant", "order-1", std::string("250"));
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first.recorded());
  CHECK(first.value() == "charge 1");
  CHECK(lock_free);
  const auto again = payments("tenant", "order-1", std::string("250"));
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again.value() == "charge 1");
  CHECK(runs == 1);
  CHECK(charged == 1);
  CHECK(fixture.charges() == "order-1:250");
  file_connection check(fixture.path);
  CHECK(check.text("SELECT count(*) FROM idem_outbox") == "1");
  const auto recorded = fixture.store.find("tenant", "order-1", start);
  REQUIRE(recorded);
  CHECK(recorded->state == record_state::completed);

  // The control: a handler taking the transaction runs inside it, holding the write lock.
  auto inside = [&](idem::handler_context&, const std::string&, sqlite_store::transaction&) {
    lock_free = write_lock_free(fixture.path);
    return std::string("inside");
  };
  idem::idempotent<decltype(inside), sqlite_policies>::options inside_parts;
  inside_parts.store = fixture.store;
  idem::idempotent<decltype(inside), sqlite_policies> held(inside, std::move(inside_parts));
  CHECK(held("tenant", "order-2", std::string("1")).verdict() == idem::verdict::executed);
  CHECK_FALSE(lock_free);
}

TEST_CASE(
    "commit_with writes that throw roll back with the record, the call throws, and the retry "
    "writes once",
    "[sqlite][commit_with]") {
  transactional_fixture fixture;
  int runs = 0;
  auto handler = [&](idem::handler_context& ctx, const std::string& amount) -> committed {
    const bool fail = ++runs == 1;
    auto writes = [row = charge_row(std::string(ctx.key()), std::stoi(amount)),
                   fail](sqlite_store::transaction& txn) {
      row(txn);  // made, then rolled back with the throw
      if (fail) throw std::runtime_error("the writes said no");
    };
    return {"charged", writes};
  };
  idem::idempotent<decltype(handler), sqlite_policies>::options parts;
  parts.store = fixture.store;
  idem::idempotent<decltype(handler), sqlite_policies> payments(handler, std::move(parts));

  CHECK_THROWS_WITH(payments("tenant", "order-1", std::string("5")), "the writes said no");
  CHECK(fixture.charges().empty());
  file_connection check(fixture.path);
  CHECK(check.text("SELECT count(*) FROM idem_outbox") == "0");
  // The failure policy released the key, as for a handler that threw: the retry runs.
  const auto retried = payments("tenant", "order-1", std::string("5"));
  CHECK(retried.verdict() == idem::verdict::executed);
  CHECK(runs == 2);
  CHECK(fixture.charges() == "order-1:5");
  CHECK(check.text("SELECT count(*) FROM idem_outbox") == "1");
}

TEST_CASE(
    "commit_with after the fence was lost writes nothing, and the call answers as a lost fence",
    "[sqlite][commit_with]") {
  transactional_fixture fixture;
  idem::manual_clock clock{start};
  auto handler = [&](idem::handler_context& ctx, const std::string&) -> committed {
    // The holder pauses past its lease, and another caller takes the claim over.
    const auto mine = fixture.store.find(ctx.scope(), ctx.key(), start);
    REQUIRE(mine);
    const auto taken =
        fixture.store.claim({ctx.scope(), ctx.key(), mine->fingerprint, start + 1h, 30s, 24h});
    CHECK(taken.status == claim_status::taken_over);
    return {"late", charge_row(std::string(ctx.key()), 7)};
  };
  idem::idempotent<decltype(handler), sqlite_policies>::options parts;
  parts.store = fixture.store;
  parts.clock = clock;
  idem::idempotent<decltype(handler), sqlite_policies> payments(handler, std::move(parts));

  const auto answered = payments("tenant", "order-1", std::string("7"));
  CHECK_FALSE(answered.recorded());
  CHECK(answered.verdict() != idem::verdict::executed);
  CHECK(fixture.charges().empty());
  file_connection check(fixture.path);
  CHECK(check.text("SELECT count(*) FROM idem_outbox") == "0");
}

TEST_CASE("a handler answering commit_with needs a key: without one nothing runs",
          "[sqlite][commit_with]") {
  transactional_fixture fixture;
  int runs = 0;
  auto handler = [&](idem::handler_context& ctx, const std::string&) -> committed {
    ++runs;
    return {"ran", charge_row(std::string(ctx.key()), 1)};
  };
  idem::idempotent<decltype(handler), sqlite_policies>::options parts;
  parts.store = fixture.store;
  parts.require_key = false;
  idem::idempotent<decltype(handler), sqlite_policies> payments(handler, std::move(parts));
  const auto answered = payments("tenant", std::nullopt, std::string("1"));
  CHECK(answered.verdict() == idem::verdict::missing_key);
  CHECK_THAT(std::string(answered.message()), Contains("writes commit in the transaction"));
  CHECK(runs == 0);
  CHECK(fixture.charges().empty());
}

// ---- the WAL ------------------------------------------------------------------------------

namespace {

// The largest the WAL of `path` grew while 4 threads claimed and completed keys and 2 read
// records, their transactions always overlapping, for `run`.
std::uintmax_t largest_wal_under_load(const std::string& path, std::size_t max_wal_pages,
                                      std::chrono::milliseconds run) {
  sqlite_store::options options = quick(path);
  options.max_wal_pages = max_wal_pages;
  sqlite_store store{options};
  std::atomic<bool> stop{false};
  std::atomic<std::uintmax_t> largest{0};
  std::vector<std::thread> threads;
  for (int writer = 0; writer < 4; ++writer) {
    threads.emplace_back([&, writer] {
      for (int i = 0; !stop; ++i) {
        const std::string key = std::to_string(writer) + "-" + std::to_string(i);
        const auto claimed = store.claim(ask("tenant", key, start));
        (void)store.complete({"tenant", key, claimed.fence}, std::string(200, 'r'), start);
      }
    });
  }
  for (int reader = 0; reader < 2; ++reader) {
    threads.emplace_back([&] {
      while (!stop)
        (void)store.find("tenant", "0-1", start);
    });
  }
  const auto until = std::chrono::steady_clock::now() + run;
  while (std::chrono::steady_clock::now() < until) {
    std::error_code ignored;
    const std::uintmax_t size = std::filesystem::file_size(path + "-wal", ignored);
    if (!ignored && size > largest) largest = size;
    std::this_thread::sleep_for(5ms);
  }
  stop = true;
  for (std::thread& thread : threads)
    thread.join();
  return largest;
}

}  // namespace

TEST_CASE("under writers and readers that always overlap, the WAL restarts at max_wal_pages",
          "[sqlite][wal]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  // 400 pages of 4 KiB, and the frames written while a restart waits for the readers: 1.7 to
  // 3.8 MB here, where SQLite alone let it reach 267 to 308 MB in the same 1.5 s.
  const std::uintmax_t largest = largest_wal_under_load(path, 400, 1500ms);
  INFO("the WAL's largest size: " << largest << " bytes");
  CHECK(largest > 0);
  CHECK(largest < 16u * 1024 * 1024);  // without the restart: 267 to 308 MB here
}

TEST_CASE("max_wal_pages past what SQLite counts is refused at construction", "[sqlite][wal]") {
  idem::testing::temporary_directory directory;
  sqlite_store::options options = quick(directory.file("idem.sqlite3"));
  options.max_wal_pages = std::size_t{1} << 40;
  CHECK_THROWS_WITH(sqlite_store{options}, Contains("max_wal_pages"));
}

}  // namespace sqlite_store_test
