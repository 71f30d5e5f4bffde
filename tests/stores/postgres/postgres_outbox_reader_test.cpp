// The PostgreSQL outbox reader (idem::postgres_outbox::reader), against the real server: a batch
// is a claim (fetch, settle in one transaction, dropped: nothing changes), the hold-back rule
// that keeps a key's order, dead letters and their requeue, retention, the backlog, the wake-up
// hint, lost connections, a newer schema; and, with real threads, two readers sharing one
// outbox and per-key order under concurrent writers.
#include <catch2/catch.hpp>

#include <idem/outbox/relay.hpp>
#include <idem/outbox/source.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/outbox.hpp>
#include <idem/store/postgres/outbox_reader.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "postgres_test_support.hpp"
#include "support/outbox_test_sinks.hpp"

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::outbox_settlement;
using reader = idem::postgres_outbox::reader;
using kind = outbox_settlement::kind;

namespace {

// Rows are written with the server's clock; the relay's `now` is well past it, so they are due.
std::chrono::system_clock::time_point later(std::chrono::minutes ahead = 1min) {
  return std::chrono::system_clock::now() + ahead;
}

struct reader_fixture {
  pgtest::table_guard table{pgtest::unique_table("relay")};
  std::string outbox = "\"" + table.name + "_outbox\"";
  std::string dead = "\"" + table.name + "_outbox_dead\"";
  std::string application = "relay_" + table.name;
  idem::postgres_store store{pgtest::caller_time_options(table.name)};
  pgtest::connection check;

  reader::options options() const {
    reader::options config;
    config.conninfo = pgtest::conninfo() + " application_name=" + application;
    config.table = table.name;
    return config;
  }
  reader make_reader() const { return reader{options()}; }

  // Writes one message in a transaction of its own; answers its sequence.
  std::int64_t write(const std::string& id, const std::string& key,
                     const std::string& payload = "p") {
    check.exec("BEGIN");
    idem::postgres_outbox::publish(check.get(), id,
                                   {.topic = "orders",
                                    .partition_key = key,
                                    .payload = payload,
                                    .headers = {{"type", "placed"}}},
                                   store.outbox_target());
    check.exec("COMMIT");
    return check.scalar("SELECT sequence FROM " + outbox + " WHERE id = '" + id + "'");
  }
  long long count(const std::string& where) {
    return check.scalar("SELECT count(*) FROM " + outbox + " WHERE " + where);
  }
  // Ends the reader's session from the server's side: what a lost connection looks like.
  void cut_connection() {
    (void)check.exec(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
        "application_name = '" +
        application + "'");
  }
};

std::vector<std::string> ids(const reader::batch& batch) {
  std::vector<std::string> out;
  for (const idem::outbox_entry& entry : batch.entries())
    out.push_back(entry.id);
  return out;
}

std::vector<outbox_settlement> all(std::size_t n, kind what, std::string error = {},
                                   std::chrono::system_clock::time_point next = {}) {
  return std::vector<outbox_settlement>(n, outbox_settlement{what, std::move(error), next});
}

// The relay's policies for these tests: the system's clock (rows are stamped with the server's)
// and a short backoff without jitter, so a retried message is due again within 100 ms; no retry
// budget, whose spent bucket would park a message for minutes.
struct quick_relay_policies : idem::default_relay_policies {
  using backoff = idem::exponential_backoff;
  using budget = idem::unlimited_budget;
  using observer = idem::counting_relay_observer;
};
template <class Sink>
using relay_on = idem::outbox_relay<reader, Sink, quick_relay_policies>;

// One scripted sink shared by the relays of a test, so that what it acknowledged is one history,
// in the order a consumer would see it.
struct shared_sink {
  idem::testing::scripted_sink* inner;
  std::mutex* mutex;
  void publish(std::span<const idem::outbox_entry> batch, std::span<idem::sink_result> results) {
    const std::lock_guard lock(*mutex);
    inner->publish(batch, results);
  }
};

}  // namespace

static_assert(idem::Outbox<reader>);

TEST_CASE("a batch holds the due unpublished rows in sequence order, with every field",
          "[postgres][outbox][relay]") {
  reader_fixture f;
  const std::int64_t first = f.write("m1", "acct-1", "one");
  f.write("m2", "acct-2", std::string("t\0o", 3));
  f.write("m3", "acct-1", "three");
  reader outbox = f.make_reader();
  reader::batch batch = outbox.fetch(10, later());
  REQUIRE(ids(batch) == std::vector<std::string>{"m1", "m2", "m3"});
  const idem::outbox_entry& entry = batch.entries()[0];
  CHECK(entry.sequence == first);
  CHECK(entry.message.topic == "orders");
  CHECK(entry.message.partition_key == "acct-1");
  CHECK(entry.message.payload == "one");
  CHECK(entry.message.headers == std::vector<idem::outbox_header>{{"type", "placed"}});
  CHECK(entry.attempts == 0);
  CHECK(entry.created_at > std::chrono::system_clock::now() - 1h);
  CHECK(batch.entries()[1].message.payload == std::string("t\0o", 3));
  CHECK(batch.entries()[1].sequence > first);

  const auto at = later();
  outbox.settle(batch, all(3, kind::published), at);
  CHECK(f.count("published_at = " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch())
                        .count())) == 3);
  CHECK(outbox.fetch(10, later()).entries().empty());
}

TEST_CASE("fetch takes at most the limit, and rows not yet due wait", "[postgres][outbox][relay]") {
  reader_fixture f;
  for (const char* id : {"a", "b", "c"})
    f.write(id, id);
  reader outbox = f.make_reader();
  {
    reader::batch batch = outbox.fetch(2, later());
    CHECK(ids(batch) == std::vector<std::string>{"a", "b"});
  }
  // Written with the server's clock now: an hour ago nothing was due.
  CHECK(outbox.fetch(10, std::chrono::system_clock::now() - 1h).entries().empty());
  CHECK(outbox.fetch(0, later()).entries().empty());
}

TEST_CASE("a batch dropped without settle changes nothing, and its rows are fetched again",
          "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("m1", "k");
  f.write("m2", "k");
  reader outbox = f.make_reader();
  {
    reader::batch batch = outbox.fetch(10, later());
    CHECK(batch.entries().size() == 2);
  }
  CHECK(f.count("published_at IS NULL AND attempts = 0 AND last_error IS NULL") == 2);
  reader::batch again = outbox.fetch(10, later());
  CHECK(ids(again) == std::vector<std::string>{"m1", "m2"});
}

TEST_CASE(
    "a settle that cannot be written writes nothing: a wrong count, a second settle, a "
    "batch whose transaction a later fetch ended",
    "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("m1", "k");
  reader outbox = f.make_reader();
  reader::batch batch = outbox.fetch(10, later());
  REQUIRE(batch.entries().size() == 1);
  CHECK_THROWS_AS(outbox.settle(batch, all(2, kind::published), later()), std::invalid_argument);
  // Still open and still this reader's: a corrected settle goes through.
  outbox.settle(batch, all(1, kind::retry, "boom", later(-1min)), later());
  CHECK(f.count("attempts = 1 AND last_error = 'boom'") == 1);
  CHECK_THROWS_AS(outbox.settle(batch, all(1, kind::published), later()), std::logic_error);
  CHECK(f.count("published_at IS NULL") == 1);

  reader::batch first = outbox.fetch(10, later());
  REQUIRE(first.entries().size() == 1);
  reader::batch second = outbox.fetch(10, later());  // rolls `first` back
  CHECK(second.entries().size() == 1);
  CHECK_THROWS_AS(outbox.settle(first, all(1, kind::published), later()), idem::outbox_claim_lost);
  CHECK(f.count("published_at IS NULL") == 1);
  reader other = f.make_reader();
  CHECK_THROWS_AS(other.settle(second, all(1, kind::published), later()), std::logic_error);
  outbox.settle(second, all(1, kind::published), later());
  CHECK(f.count("published_at IS NULL") == 0);
}

TEST_CASE("a failed row holds back the later rows of its key, not other keys",
          "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("a1", "a");
  f.write("b1", "b");
  f.write("a2", "a");
  f.write("b2", "b");
  reader outbox = f.make_reader();
  reader::batch batch = outbox.fetch(10, later());
  REQUIRE(ids(batch) == std::vector<std::string>{"a1", "b1", "a2", "b2"});
  // The sink failed a1, so the relay did not hand it a2 (left untouched).
  const std::vector<outbox_settlement> settled{{kind::retry, "timeout", later(60min)},
                                               {kind::published},
                                               {kind::untouched},
                                               {kind::published}};
  outbox.settle(batch, settled, later());
  f.write("b3", "b");
  f.write("c1", "c");
  {
    // a1 waits for its retry, and a2 waits for a1; b and c go on.
    reader::batch next = outbox.fetch(10, later());
    CHECK(ids(next) == std::vector<std::string>{"b3", "c1"});
    outbox.settle(next, all(2, kind::published), later());
  }
  reader::batch retried = outbox.fetch(10, later(120min));
  CHECK(ids(retried) == std::vector<std::string>{"a1", "a2"});
  CHECK(retried.entries()[0].attempts == 1);
}

TEST_CASE("a row another reader holds back the later rows of its key, not other keys",
          "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("a1", "a");
  f.write("b1", "b");
  f.write("a2", "a");
  reader one = f.make_reader();
  reader two = f.make_reader();
  reader::batch held = one.fetch(1, later());
  REQUIRE(ids(held) == std::vector<std::string>{"a1"});
  reader::batch rest = two.fetch(10, later());
  CHECK(ids(rest) == std::vector<std::string>{"b1"});
  two.settle(rest, all(1, kind::published), later());
  one.settle(held, all(1, kind::published), later());
  reader::batch after = two.fetch(10, later());
  CHECK(ids(after) == std::vector<std::string>{"a2"});
}

TEST_CASE(
    "a row past the batch's end holds back nothing before it, and a later row of its "
    "key is left out until it is sent",
    "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("a1", "a");
  f.write("a2", "a");
  reader outbox = f.make_reader();
  reader::batch batch = outbox.fetch(1, later());
  CHECK(ids(batch) == std::vector<std::string>{"a1"});
  outbox.settle(batch, all(1, kind::published), later());
  reader::batch next = outbox.fetch(1, later());
  CHECK(ids(next) == std::vector<std::string>{"a2"});
}

TEST_CASE(
    "a dead row moves to the dead letters with its reason and stops holding back its key, and "
    "once requeued it is sent again under its id",
    "[postgres][outbox][relay]") {
  reader_fixture f;
  const std::int64_t buried = f.write("a1", "a", "first");
  f.write("a2", "a", "second");
  reader outbox = f.make_reader();
  {
    reader::batch batch = outbox.fetch(10, later());
    REQUIRE(batch.entries().size() == 2);
    const std::vector<outbox_settlement> settled{{kind::retry, "once", later()}, {kind::untouched}};
    outbox.settle(batch, settled, later());
  }
  const auto dead_at = later(2min);
  {
    reader::batch batch = outbox.fetch(10, later(2min));
    REQUIRE(ids(batch) == std::vector<std::string>{"a1", "a2"});
    const std::vector<outbox_settlement> settled{{kind::dead, "too large for the topic"},
                                                 {kind::untouched}};
    outbox.settle(batch, settled, dead_at);
  }
  CHECK(f.count("id = 'a1'") == 0);
  const std::vector<idem::postgres_outbox::dead_letter> letters = outbox.dead_letters(10);
  REQUIRE(letters.size() == 1);
  CHECK(letters[0].entry.sequence == buried);
  CHECK(letters[0].entry.id == "a1");
  CHECK(letters[0].entry.message.payload == "first");
  CHECK(letters[0].entry.message.partition_key == "a");
  CHECK(letters[0].entry.message.headers == std::vector<idem::outbox_header>{{"type", "placed"}});
  CHECK(letters[0].entry.attempts == 2);
  CHECK(letters[0].reason == "too large for the topic");
  CHECK(letters[0].dead_at == dead_at);
  CHECK(outbox.dead_letters(10, buried).empty());
  {
    reader::batch next = outbox.fetch(10, later(2min));
    CHECK(ids(next) == std::vector<std::string>{"a2"});
    outbox.settle(next, all(1, kind::published), later(2min));
  }
  const std::vector<std::int64_t> wanted{buried, 999999999};
  CHECK(outbox.requeue(wanted, later(2min)) == 1);
  CHECK(outbox.dead_letters(10).empty());
  reader::batch again = outbox.fetch(10, later(3min));
  REQUIRE(ids(again) == std::vector<std::string>{"a1"});
  CHECK(again.entries()[0].sequence > buried);
  CHECK(again.entries()[0].attempts == 0);
  CHECK(again.entries()[0].message.payload == "first");
}

TEST_CASE("a sink's error is stored as text any database takes: other bytes escaped, cut at 4 KiB",
          "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("a1", "a");
  f.write("b1", "b");
  reader outbox = f.make_reader();
  reader::batch batch = outbox.fetch(10, later());
  const std::vector<outbox_settlement> settled{
      {kind::retry, std::string("nul\0 \xff caf\xc3\xa9 \\", 14), later()},
      {kind::dead, std::string(10000, 'x')}};
  outbox.settle(batch, settled, later());
  const idem::postgres_result error =
      f.check.exec("SELECT last_error FROM " + f.outbox + " WHERE id = 'a1'");
  CHECK(error.value(0, 0) == "nul\\x00 \\xff caf\\xc3\\xa9 \\\\");
  CHECK(outbox.dead_letters(1)[0].reason == std::string(4096, 'x') + "...");
}

TEST_CASE(
    "a row whose headers are not netstrings is buried with the decoder's message, and "
    "holds back nothing",
    "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("a1", "a");
  f.write("a2", "a");
  f.check.exec("UPDATE " + f.outbox + " SET headers = 'not netstrings' WHERE id = 'a1'");
  reader outbox = f.make_reader();
  {
    reader::batch batch = outbox.fetch(10, later());
    CHECK(ids(batch) == std::vector<std::string>{"a2"});
    outbox.settle(batch, all(1, kind::published), later());
  }
  const auto letters = outbox.dead_letters(10);
  REQUIRE(letters.size() == 1);
  CHECK(letters[0].entry.id == "a1");
  CHECK(letters[0].entry.message.headers.empty());
  CHECK_THAT(letters[0].reason, Contains("not netstrings") && Contains("a length expected"));

  // Alone in its batch: buried at once, the batch empty.
  f.write("b1", "b");
  f.check.exec("UPDATE " + f.outbox + " SET headers = '1:x' WHERE id = 'b1'");
  CHECK(outbox.fetch(10, later()).entries().empty());
  CHECK(outbox.dead_letters(10).size() == 2);
  CHECK(f.count("true") == 1);
}

TEST_CASE("purge removes rows published before the time, oldest first, never an unpublished one",
          "[postgres][outbox][relay]") {
  reader_fixture f;
  for (const char* id : {"m1", "m2", "m3", "m4"})
    f.write(id, id);
  reader outbox = f.make_reader();
  const auto base = later();
  for (int i = 0; i < 3; ++i) {
    reader::batch batch = outbox.fetch(1, base);
    outbox.settle(batch, all(1, kind::published), base + std::chrono::hours(i));
  }
  CHECK(outbox.purge(base + 90min, 1) == 1);
  CHECK(f.count("id = 'm1'") == 0);
  CHECK(outbox.purge(base + 90min, 10) == 1);
  CHECK(outbox.purge(base + 90min, 10) == 0);
  CHECK(outbox.purge(base + 10h, 10) == 1);
  CHECK(f.count("true") == 1);
  CHECK(f.count("id = 'm4' AND published_at IS NULL") == 1);
}

TEST_CASE("the backlog counts what waits, due or not, and says when the oldest was written",
          "[postgres][outbox][relay]") {
  reader_fixture f;
  reader outbox = f.make_reader();
  idem::outbox_backlog empty = outbox.backlog(later());
  CHECK(empty.waiting == 0);
  CHECK_FALSE(empty.oldest_created_at.has_value());
  f.write("m1", "a");
  f.write("m2", "b");
  f.write("m3", "c");
  {
    reader::batch batch = outbox.fetch(2, later());
    const std::vector<outbox_settlement> settled{{kind::published},
                                                 {kind::retry, "later", later(60min)}};
    outbox.settle(batch, settled, later());
  }
  const idem::outbox_backlog waiting = outbox.backlog(later());
  CHECK(waiting.waiting == 2);
  REQUIRE(waiting.oldest_created_at.has_value());
  CHECK(std::chrono::duration_cast<std::chrono::nanoseconds>(
            waiting.oldest_created_at->time_since_epoch())
            .count() == f.check.scalar("SELECT created_at FROM " + f.outbox + " WHERE id = 'm2'"));
}

TEST_CASE(
    "with the hint turned on, wait_for_rows returns on a writer's commit, and at its "
    "timeout without one",
    "[postgres][outbox][relay]") {
  reader_fixture f;
  f.check.exec("ALTER TABLE " + f.outbox + " ENABLE TRIGGER idem_outbox_notify");
  reader outbox = f.make_reader();
  outbox.wait_for_rows(0ms);
  outbox.wait_for_rows(10ms);  // nothing written: the timeout
  f.write("m1", "a");
  // The notification came at the commit; a wait far longer than any test returns at once. (A
  // behaviour, not a timing: without the hint this case would take ten minutes.)
  const auto started = std::chrono::steady_clock::now();
  outbox.wait_for_rows(600s);
  CHECK(std::chrono::steady_clock::now() - started < 300s);
  CHECK(outbox.fetch(10, later()).entries().size() == 1);
}

TEST_CASE(
    "a lost connection throws store_error(unavailable), releases the batch, and the next "
    "fetch reconnects",
    "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("m1", "a");
  reader outbox = f.make_reader();
  reader::batch batch = outbox.fetch(10, later());
  REQUIRE(batch.entries().size() == 1);
  f.cut_connection();
  try {
    outbox.settle(batch, all(1, kind::published), later());
    FAIL("settle on a lost connection succeeded");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
  }
  CHECK(f.count("published_at IS NULL AND attempts = 0") == 1);
  reader::batch again = outbox.fetch(10, later());
  CHECK(ids(again) == std::vector<std::string>{"m1"});
  outbox.settle(again, all(1, kind::published), later());

  f.cut_connection();
  CHECK_THROWS_AS(outbox.fetch(10, later()), idem::store_error);
  CHECK(outbox.fetch(10, later()).entries().empty());
  CHECK(outbox.backlog(later()).waiting == 0);
}

TEST_CASE("a reader refuses an outbox a newer idem wrote, saying so", "[postgres][outbox][relay]") {
  reader_fixture f;
  f.check.exec("UPDATE \"" + f.table.name + "_meta\" SET version = 4");
  try {
    reader outbox = f.make_reader();
    FAIL("a newer schema was accepted");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("schema version 4") && Contains(f.table.name + "_outbox") &&
                                 Contains("upgrade idem"));
  }
  reader::options lazy = f.options();
  lazy.connect_at_start = false;
  reader later_outbox{lazy};
  CHECK_THROWS_AS(later_outbox.fetch(1, later()), idem::store_error);
  CHECK(f.check.scalar("SELECT version FROM \"" + f.table.name + "_meta\"") == 4);
}

TEST_CASE("a reader's names are checked as the store's", "[postgres][outbox][relay]") {
  reader::options config;
  config.table = "no;such table";
  config.connect_at_start = false;
  CHECK_THROWS_AS(reader{config}, std::invalid_argument);
}

// ---- several relays ------------------------------------------------------------------------

TEST_CASE(
    "two readers fetching at once never get the same row, and together publish every row "
    "exactly once",
    "[postgres][outbox][relay][concurrency]") {
  reader_fixture f;
  constexpr int rows = 600;
  f.check.exec("INSERT INTO " + f.outbox +
               " (id, topic, partition_key, created_at, next_attempt_at, headers, payload) "
               "SELECT 'm' || i, 't', int8send(i % 50), 0, 0, '', '' FROM generate_series(1, " +
               std::to_string(rows) + ") i");
  std::mutex mutex;
  std::map<std::int64_t, int> published;  // sequence -> times handed to a sink
  std::atomic<int> failures{0};
  const auto relay = [&] {
    try {
      reader outbox = f.make_reader();
      for (int idle = 0; idle < 100000;) {
        reader::batch batch = outbox.fetch(8, later());
        if (batch.entries().empty()) {
          if (outbox.backlog(later()).waiting == 0) return;
          ++idle;
          std::this_thread::yield();
          continue;
        }
        {
          const std::lock_guard lock(mutex);
          for (const idem::outbox_entry& entry : batch.entries())
            ++published[entry.sequence];
        }
        outbox.settle(batch, all(batch.entries().size(), kind::published), later());
      }
      ++failures;  // gave up waiting: rows were held back for good
    } catch (const std::exception& error) {
      UNSCOPED_INFO(error.what());
      ++failures;
    }
  };
  std::thread one(relay);
  std::thread two(relay);
  one.join();
  two.join();
  CHECK(failures == 0);
  CHECK(published.size() == static_cast<std::size_t>(rows));
  const auto twice = std::count_if(published.begin(), published.end(),
                                   [](const auto& row) { return row.second != 1; });
  CHECK(twice == 0);
  CHECK(f.count("published_at IS NULL") == 0);
}

TEST_CASE(
    "the relay drives the PostgreSQL reader: a failed message is retried in its key's "
    "order, a rejected one is dead-lettered, published rows are purged after retention",
    "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("a1", "a", "1");
  f.write("b1", "b", "1");
  f.write("a2", "a", "2");
  reader outbox = f.make_reader();
  idem::testing::scripted_sink sink;
  sink.fail("a1", 1);
  sink.reject("b1", "no such topic");
  struct manual_policies : quick_relay_policies {
    using clock = idem::manual_clock;
  };
  idem::manual_clock clock{later()};
  idem::outbox_relay<reader, idem::testing::scripted_sink, manual_policies> relay(outbox, sink, {},
                                                                                  {.clock = clock});
  const idem::relay_pass first = relay.drain();
  CHECK(first.retried == 1);
  CHECK(first.held_back == 1);
  CHECK(first.dead_lettered == 1);
  CHECK(sink.delivered.empty());
  REQUIRE(outbox.dead_letters(10).size() == 1);
  CHECK(outbox.dead_letters(10)[0].reason == "no such topic");
  clock.advance(1s);  // past the first retry's 100 ms
  const idem::relay_pass second = relay.drain();
  CHECK(second.published == 2);
  CHECK(sink.payloads_of("a") == std::vector<std::string>{"1", "2"});
  CHECK(relay.backlog().waiting == 0);
  CHECK(relay.purge() == 0);
  clock.advance(25h);
  CHECK(relay.purge() == 2);
  CHECK(f.count("true") == 0);
}

TEST_CASE("two relays on PostgreSQL: no row reaches both sinks, and none is skipped",
          "[postgres][outbox][relay][concurrency]") {
  reader_fixture f;
  constexpr int rows = 600;
  f.check.exec("INSERT INTO " + f.outbox +
               " (id, topic, partition_key, created_at, next_attempt_at, headers, payload) "
               "SELECT 'm' || i, 't', int8send(i % 50), 0, 0, '', '' FROM generate_series(1, " +
               std::to_string(rows) + ") i");
  std::array<idem::testing::recording_sink, 2> sinks;
  std::atomic<int> failures{0};
  const auto run = [&](idem::testing::recording_sink& sink) {
    try {
      reader outbox = f.make_reader();
      relay_on<idem::testing::recording_sink> relay(outbox, sink, {.batch_size = 8});
      while (relay.backlog().waiting > 0) {
        (void)relay.drain();
        outbox.wait_for_rows(1ms);
      }
    } catch (const std::exception& error) {
      UNSCOPED_INFO(error.what());
      ++failures;
    }
  };
  std::thread one(run, std::ref(sinks[0]));
  std::thread two(run, std::ref(sinks[1]));
  one.join();
  two.join();
  CHECK(failures == 0);
  std::map<std::string, int> seen;
  for (const auto& sink : sinks)
    for (const std::string& id : sink.ids())
      ++seen[id];
  CHECK(seen.size() == static_cast<std::size_t>(rows));
  CHECK(std::count_if(seen.begin(), seen.end(), [](const auto& id) { return id.second != 1; }) ==
        0);
  // Both took part (the rows are many and the batches small); not a promise, what sharing looks
  // like.
  UNSCOPED_INFO("first relay " << sinks[0].delivered.size() << ", second "
                               << sinks[1].delivered.size());
  CHECK(f.count("published_at IS NULL") == 0);
}

TEST_CASE(
    "under concurrent writers that lock their key's aggregate, two relays deliver each "
    "key's messages in write order, through failures and retries",
    "[postgres][outbox][relay][concurrency]") {
  reader_fixture f;
  const std::string aggregates = "\"" + f.table.name + "_effects\"";
  constexpr int keys = 4;
  constexpr int writers = 4;
  constexpr int per_writer = 50;
  f.check.exec("CREATE TABLE " + aggregates + " (key text PRIMARY KEY, version int8 NOT NULL)");
  idem::testing::scripted_sink sink;
  for (int k = 0; k < keys; ++k) {
    const std::string key = "k" + std::to_string(k);
    f.check.exec("INSERT INTO " + aggregates + " VALUES ('" + key + "', 0)");
    // Messages whose first sends fail, once or twice: each holds its key back for a while.
    for (int version = 1; version <= writers * per_writer; ++version) {
      if (version % 5 == 2) sink.fail(key + "/" + std::to_string(version), 1 + version % 2);
    }
  }
  std::mutex sink_mutex;
  std::atomic<int> failures{0};
  std::atomic<int> writing{writers};

  const auto writer = [&](unsigned seed) {
    try {
      pgtest::connection connection;
      std::mt19937 random(seed);
      for (int i = 0; i < per_writer; ++i) {
        const std::string key = "k" + std::to_string(random() % keys);
        connection.exec("BEGIN");
        // The aggregate's row, locked: writers of one key take turns, so its versions and its
        // messages' sequences rise together.
        const long long version =
            connection.scalar("UPDATE " + aggregates + " SET version = version + 1 WHERE key = '" +
                              key + "' RETURNING version");
        idem::postgres_outbox::publish(
            connection.get(), key + "/" + std::to_string(version),
            {.topic = "t", .partition_key = key, .payload = std::to_string(version)},
            f.store.outbox_target());
        connection.exec("COMMIT");
      }
    } catch (const std::exception& error) {
      UNSCOPED_INFO(error.what());
      ++failures;
    }
    --writing;
  };
  const auto relay = [&] {
    try {
      reader outbox = f.make_reader();
      shared_sink to{&sink, &sink_mutex};
      relay_on<shared_sink> driver(outbox, to, {.batch_size = 5});
      while (writing > 0 || driver.backlog().waiting > 0) {
        (void)driver.drain();
        outbox.wait_for_rows(5ms);
      }
    } catch (const std::exception& error) {
      UNSCOPED_INFO(error.what());
      ++failures;
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w)
    threads.emplace_back(writer, 11U + static_cast<unsigned>(w));
  threads.emplace_back(relay);
  threads.emplace_back(relay);
  for (std::thread& thread : threads)
    thread.join();
  CHECK(failures == 0);
  std::size_t total = 0;
  for (int k = 0; k < keys; ++k) {
    const std::string key = "k" + std::to_string(k);
    INFO("key " << key);
    const std::vector<std::string> payloads = sink.payloads_of(key);
    std::vector<std::string> in_order;
    for (std::size_t version = 1; version <= payloads.size(); ++version)
      in_order.push_back(std::to_string(version));
    CHECK(payloads == in_order);
    total += payloads.size();
  }
  CHECK(total == static_cast<std::size_t>(writers * per_writer));
  CHECK(sink.offered.size() > total);  // failures happened, and were retried
}

TEST_CASE("settlements travel as arrays in PostgreSQL's binary format", "[postgres][outbox]") {
  namespace pg = idem::detail::postgres;
  pg::binary_array numbers(pg::int8_oid);
  numbers.add(std::int64_t{1}).add(std::int64_t{-2});
  const std::string expected_numbers{
      "\0\0\0\1"
      "\0\0\0\0"
      "\0\0\0\x14"
      "\0\0\0\2"
      "\0\0\0\1"  // 1 dimension, int8, 2 from 1
      "\0\0\0\x08"
      "\0\0\0\0\0\0\0\1"  // 1
      "\0\0\0\x08"
      "\xff\xff\xff\xff\xff\xff\xff\xfe",  // -2
      44};
  CHECK(numbers.bytes() == expected_numbers);
  pg::binary_array texts(pg::text_oid);
  texts.add(std::string_view{"ab"}).add(std::string_view{});
  CHECK(texts.bytes() == std::string("\0\0\0\1\0\0\0\0\0\0\0\x19\0\0\0\2\0\0\0\1"
                                     "\0\0\0\2ab\0\0\0\0",
                                     30));
  // No elements: no dimensions, as PostgreSQL writes an empty array.
  CHECK(pg::binary_array(pg::int8_oid).bytes() == std::string("\0\0\0\0\0\0\0\0\0\0\0\x14", 12));
}
