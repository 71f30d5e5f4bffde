// The PostgreSQL outbox reader (idem::postgres_outbox::reader), against the real server: the
// outbox conformance check (idem/testing/outbox_conformance.hpp: the batch, the hold-back rule,
// dead letters and their requeue, retention, the backlog, driven by the relay), then what is
// PostgreSQL's own: a batch ended by a later fetch, another reader's claim holding back a key,
// error text in any encoding, the wake-up hint, lost connections, a newer schema; and, with
// real threads, two readers sharing one outbox and per-key order under concurrent writers.
#include <catch2/catch.hpp>

#include <idem/outbox/relay.hpp>
#include <idem/outbox/source.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/outbox.hpp>
#include <idem/store/postgres/outbox_reader.hpp>
#include <idem/testing/outbox_conformance.hpp>

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
#include "support/thread_errors.hpp"

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

namespace {

// The outbox conformance check (idem/testing/outbox_conformance.hpp) on a table of its own.
struct postgres_outbox_factory {
  reader_fixture fixture;
  reader make() { return fixture.make_reader(); }
  void write(const std::string& id, const std::string& key, const std::string& payload) {
    fixture.write(id, key, payload);
  }
  void corrupt_headers(const std::string& id) {
    fixture.check.exec("UPDATE " + fixture.outbox + " SET headers = 'not netstrings' WHERE id = '" +
                       id + "'");
  }
};

}  // namespace

IDEM_OUTBOX_CONFORMANCE_TESTS(postgres_outbox_factory)

TEST_CASE("a batch whose transaction a later fetch of its reader ended is not settled",
          "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("m1", "k");
  reader outbox = f.make_reader();
  reader::batch first = outbox.fetch(10, later());
  REQUIRE(first.entries().size() == 1);
  reader::batch second = outbox.fetch(10, later());  // rolls `first` back
  CHECK(second.entries().size() == 1);
  CHECK_THROWS_AS(outbox.settle(first, all(1, kind::published), later()), idem::outbox_claim_lost);
  CHECK(f.count("published_at IS NULL") == 1);
  outbox.settle(second, all(1, kind::published), later());
  CHECK(f.count("published_at IS NULL") == 0);
}

TEST_CASE(
    "a requeue rolls back the reader's open batch first, so dropping that batch cannot undo it",
    "[postgres][outbox][relay]") {
  reader_fixture f;
  f.write("a1", "a");
  f.write("b1", "b");
  reader outbox = f.make_reader();
  {
    reader::batch batch = outbox.fetch(1, later());
    REQUIRE(ids(batch) == std::vector<std::string>{"a1"});
    outbox.settle(batch, all(1, kind::dead, "rejected"), later());
  }
  const std::int64_t a1 = outbox.dead_letters(10)[0].entry.sequence;
  reader::batch open = outbox.fetch(10, later());
  REQUIRE(ids(open) == std::vector<std::string>{"b1"});
  const std::array<std::int64_t, 1> wanted{a1};
  CHECK(outbox.requeue(wanted, later()) ==
        idem::outbox_requeue_report{{a1, idem::outbox_requeue_status::requeued}});
  CHECK_THROWS_AS(outbox.settle(open, all(1, kind::published), later()), idem::outbox_claim_lost);
  { reader::batch dropped = std::move(open); }
  // Seen from another connection: the requeue committed on its own.
  CHECK(f.check.scalar("SELECT count(*) FROM " + f.dead) == 0);
  CHECK(f.count("id = 'a1' AND published_at IS NULL") == 1);
  CHECK(f.count("id = 'b1' AND published_at IS NULL") == 1);
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
  f.check.exec("UPDATE \"" + f.table.name + "_meta\" SET version = 5");
  try {
    reader outbox = f.make_reader();
    FAIL("a newer schema was accepted");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == idem::store_failure::unavailable);
    CHECK_THAT(error.what(), Contains("schema version 5") && Contains(f.table.name + "_outbox") &&
                                 Contains("upgrade idem"));
  }
  reader::options lazy = f.options();
  lazy.connect_at_start = false;
  reader later_outbox{lazy};
  CHECK_THROWS_AS(later_outbox.fetch(1, later()), idem::store_error);
  CHECK(f.check.scalar("SELECT version FROM \"" + f.table.name + "_meta\"") == 5);
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
  idem::testing::thread_errors errors;
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
      errors.add("gave up waiting: rows were held back for good");
    } catch (const std::exception& error) {
      errors.add(error.what());
    }
  };
  std::thread one(relay);
  std::thread two(relay);
  one.join();
  two.join();
  errors.report();
  CHECK(errors.count() == 0);
  CHECK(published.size() == static_cast<std::size_t>(rows));
  const auto twice = std::count_if(published.begin(), published.end(),
                                   [](const auto& row) { return row.second != 1; });
  CHECK(twice == 0);
  CHECK(f.count("published_at IS NULL") == 0);
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
  idem::testing::thread_errors errors;
  const auto run = [&](idem::testing::recording_sink& sink) {
    try {
      reader outbox = f.make_reader();
      relay_on<idem::testing::recording_sink> relay(outbox, sink, {.batch_size = 8});
      while (relay.backlog().waiting > 0) {
        (void)relay.drain();
        outbox.wait_for_rows(1ms);
      }
    } catch (const std::exception& error) {
      errors.add(error.what());
    }
  };
  std::thread one(run, std::ref(sinks[0]));
  std::thread two(run, std::ref(sinks[1]));
  one.join();
  two.join();
  errors.report();
  CHECK(errors.count() == 0);
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
  idem::testing::thread_errors errors;
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
      errors.add(error.what());
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
      errors.add(error.what());
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w)
    threads.emplace_back(writer, 11U + static_cast<unsigned>(w));
  threads.emplace_back(relay);
  threads.emplace_back(relay);
  for (std::thread& thread : threads)
    thread.join();
  errors.report();
  CHECK(errors.count() == 0);
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
