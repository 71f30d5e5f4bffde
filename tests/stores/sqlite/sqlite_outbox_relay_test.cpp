// The relay on an SQLite file: the outbox conformance check (idem/testing/outbox_conformance.hpp)
// on idem::sqlite_outbox::reader, then idem::outbox_relay driving that reader into the test
// sinks: published only after the sink acknowledged; failed messages retried after their backoff
// and dead-lettered after max_attempts with the last error; rejected ones at once; a sink down
// for 10 s of manual time changes nothing and shows as lag; one key's order kept through a
// failure while other keys flow; retention; one relay at a time under the fenced lease; bad
// settles; schema 3 and its indexes; run() against live writers.
#include <catch2/catch.hpp>

#include <idem/outbox/relay.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/outbox.hpp>
#include <idem/store/sqlite/outbox_reader.hpp>
#include <idem/testing/outbox_conformance.hpp>

#include <sqlite3.h>

#include <array>
#include <chrono>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "stores/sqlite/file_connection.hpp"
#include "support/outbox_test_sinks.hpp"
#include "support/temporary_directory.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::outbox_settlement;
using idem::sqlite_store;
using idem::sqlite_outbox::reader;

using idem_sqlite_test::file_connection;

namespace {

struct relay_policies : idem::default_relay_policies {
  using clock = idem::manual_clock;
  // No jitter, so a test knows when a retry is due: 100 ms, then 200 ms, 400 ms ...
  using backoff = idem::exponential_backoff;
  using observer = idem::counting_relay_observer;
};

using scripted_relay = idem::outbox_relay<reader, idem::testing::scripted_sink, relay_policies>;

reader::options quick_reader(const std::string& holder = "first") {
  reader::options options;
  options.holder = holder;
  options.synchronous = sqlite_store::synchronous_mode::normal;
  return options;
}

// A store's file (the schema), the application's connection writing messages, a reader, a
// scripted sink and a manual clock. The clock starts a minute ahead of the system clock, which
// stamps the messages' created_at, so every message written during the test is due at once.
struct relay_fixture {
  idem::testing::temporary_directory directory;
  std::string path = directory.file("idem.sqlite3");
  sqlite_store store{[this] {
    sqlite_store::options options;
    options.path = path;
    options.synchronous = sqlite_store::synchronous_mode::normal;
    return options;
  }()};
  file_connection app{path};
  idem::manual_clock clock{std::chrono::system_clock::now() + 1min};
  idem::counting_relay_observer observer;
  idem::testing::scripted_sink sink;
  reader outbox{path, quick_reader()};

  scripted_relay relay(idem::relay_options options = {}) { return relay_on(outbox, sink, options); }
  template <class Sink>
  idem::outbox_relay<reader, Sink, relay_policies> relay_on(reader& on, Sink& to,
                                                            idem::relay_options options = {}) {
    return idem::outbox_relay<reader, Sink, relay_policies>(
        on, to, options, {.clock = clock, .observer = observer, .seed = idem::seed_from(7)});
  }

  // Writes a message in its own transaction.
  void publish(const std::string& id, const idem::outbox_message& message) {
    app.exec("BEGIN IMMEDIATE");
    idem::sqlite_outbox::publish(app.get(), id, message);
    app.exec("COMMIT");
  }
  // Writes a message of `key`; its id is key/payload.
  std::string write(const std::string& key, const std::string& payload) {
    const std::string id = key + "/" + payload;
    publish(id, {.topic = "events", .partition_key = key, .payload = payload});
    return id;
  }
  std::string column(const std::string& column, const std::string& id) {
    return app.text("SELECT " + column + " FROM idem_outbox WHERE id = '" + id + "'");
  }
  // The outbox's rows as the relay may change them, and the dead letters' count.
  std::string rows() {
    return app.text(
               "SELECT group_concat(x, '|') FROM (SELECT sequence || ',' || attempts || "
               "',' || next_attempt_at || ',' || coalesce(published_at, '-') || ',' || "
               "coalesce(last_error, '-') AS x FROM idem_outbox ORDER BY sequence)") +
           "/" + app.text("SELECT count(*) FROM idem_outbox_dead");
  }
  // Everything the relay may change, the lease included, for before/after comparisons.
  std::string snapshot() {
    return rows() + "/" + app.text("SELECT holder || fence || lease_until FROM idem_outbox_relay");
  }
};

// A sink that, while it holds the batch, checks that nothing of it is marked published yet.
struct checking_sink {
  file_connection* app;
  std::vector<std::string> unpublished_while_sent;
  void publish(std::span<const idem::outbox_entry> batch, std::span<idem::sink_result> results) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      unpublished_while_sent.push_back(app->text(
          "SELECT published_at IS NULL FROM idem_outbox WHERE id = '" + batch[i].id + "'"));
      results[i].status = idem::sink_status::acknowledged;
    }
  }
};

// What `f` threw as an E; fails the test when it threw nothing or something else.
template <class E, class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& error) {
    return error.what();
  }
  FAIL("nothing was thrown");
  return {};
}

}  // namespace

namespace {

// The outbox conformance check (idem/testing/outbox_conformance.hpp) on a file of its own; each
// reader it makes is a lease holder of its own.
struct sqlite_outbox_factory {
  sqlite_outbox_factory() {}  // not an aggregate: T{} then default-initializes the fixture
  relay_fixture fixture;
  int readers = 0;
  reader make() {
    return reader{fixture.path, quick_reader("reader-" + std::to_string(++readers))};
  }
  void write(const std::string& id, const std::string& key, const std::string& payload) {
    fixture.publish(id, {.topic = "orders",
                         .partition_key = key,
                         .payload = payload,
                         .headers = {{"type", "placed"}}});
  }
  void corrupt_headers(const std::string& id) {
    // A netstring's length with no payload behind it.
    fixture.app.exec("UPDATE idem_outbox SET headers = x'393a' WHERE id = '" + id + "'");
  }
};

}  // namespace

IDEM_OUTBOX_CONFORMANCE_TESTS(sqlite_outbox_factory)

// ---- publishing ----------------------------------------------------------------------------

TEST_CASE("a message is marked published only after the sink acknowledged it",
          "[sqlite][outbox][relay]") {
  relay_fixture f;
  const std::string id = f.write("acct-1", "charged");
  checking_sink sink{&f.app, {}};
  auto relay = f.relay_on(f.outbox, sink);
  const idem::relay_pass pass = relay.run_once();
  CHECK(pass.fetched == 1);
  CHECK(pass.published == 1);
  CHECK(sink.unpublished_while_sent == std::vector<std::string>{"1"});
  CHECK(f.column("published_at IS NOT NULL", id) == "1");
  CHECK(relay.run_once().fetched == 0);  // never sent again
}

TEST_CASE(
    "a failed message is sent again after its backoff and dead-lettered after "
    "max_attempts with the last error",
    "[sqlite][outbox][relay]") {
  relay_fixture f;
  const std::string id = f.write("acct-1", "charged");
  f.sink.fail(id, 100);
  idem::relay_options options;
  options.max_attempts = 3;
  auto relay = f.relay(options);

  CHECK(relay.run_once().retried == 1);
  CHECK(f.column("attempts || ' ' || last_error", id) == "1 scripted failure 100");
  CHECK(relay.run_once().fetched == 0);  // not due before its backoff (100 ms)
  f.clock.advance(99ms);
  CHECK(relay.run_once().fetched == 0);
  f.clock.advance(1ms);
  CHECK(relay.run_once().retried == 1);
  CHECK(f.column("attempts", id) == "2");
  f.clock.advance(199ms);
  CHECK(relay.run_once().fetched == 0);  // then 200 ms
  f.clock.advance(1ms);
  const idem::relay_pass last = relay.run_once();
  CHECK(last.dead_lettered == 1);

  CHECK(f.app.text("SELECT count(*) FROM idem_outbox") == "0");
  const auto dead = f.outbox.dead_letters(10);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].entry.id == id);
  CHECK(dead[0].entry.message.payload == "charged");
  CHECK(dead[0].entry.attempts == 3);
  CHECK(dead[0].reason == "scripted failure 98");
  CHECK(f.observer.retried() == 2);
  CHECK(f.observer.dead_lettered() == 1);
  CHECK(f.sink.offered.size() == 3);
}

TEST_CASE("a rejected message is dead-lettered at once and no longer holds back its key",
          "[sqlite][outbox][relay]") {
  relay_fixture f;
  const std::string poison = f.write("acct-1", "too-large");
  f.write("acct-1", "after");
  f.sink.reject(poison, "larger than the stream allows");
  auto relay = f.relay();
  const idem::relay_pass pass = relay.drain();
  CHECK(pass.dead_lettered == 1);
  CHECK(pass.published == 1);
  CHECK(f.sink.payloads_of("acct-1") == std::vector<std::string>{"after"});
  const auto dead = f.outbox.dead_letters(10);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].entry.attempts == 1);
  CHECK(dead[0].reason == "larger than the stream allows");
  CHECK(dead[0].dead_at == f.clock.wall_now());
}

TEST_CASE(
    "a row the reader buries at fetch reaches the dead letters but not the relay's counts or "
    "observer",
    "[sqlite][outbox][relay]") {
  relay_fixture f;
  const std::string damaged = f.write("acct-1", "damaged");
  f.write("acct-1", "after");
  f.app.exec("UPDATE idem_outbox SET headers = x'393a' WHERE id = '" + damaged + "'");
  auto relay = f.relay();
  const idem::relay_pass pass = relay.run_once();
  CHECK(pass.fetched == 1);
  CHECK(pass.published == 1);
  CHECK(pass.dead_lettered == 0);
  CHECK(f.observer.dead_lettered() == 0);
  const auto dead = f.outbox.dead_letters(10);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].entry.id == damaged);
  CHECK(dead[0].entry.attempts == 1);
  CHECK_THAT(dead[0].reason, Contains("idem::sqlite_outbox::reader: the row cannot be read:"));
}

TEST_CASE(
    "an operator's reader requeues while a relay holds the lease, without taking or moving it",
    "[sqlite][outbox][relay]") {
  relay_fixture f;
  const std::string poison = f.write("acct-1", "poison");
  f.sink.reject(poison, "rejected");
  auto relay = f.relay();
  CHECK(relay.run_once().dead_lettered == 1);
  REQUIRE(f.outbox.lease().mine);
  const std::int64_t fence = f.outbox.lease().fence;
  const std::int64_t sequence = f.outbox.dead_letters(10)[0].entry.sequence;
  reader operator_reader{f.path, quick_reader("operator")};
  const std::array<std::int64_t, 1> wanted{sequence};
  CHECK(operator_reader.requeue(wanted, f.clock.wall_now()) ==
        idem::outbox_requeue_report{{sequence, idem::outbox_requeue_status::requeued}});
  CHECK(f.outbox.lease().mine);
  CHECK(f.outbox.lease().fence == fence);
  CHECK(operator_reader.lease().holder == "first");
  // The relay sends it at its next pass, under its own lease.
  f.sink.rejections.clear();
  CHECK(relay.run_once().published == 1);
  CHECK(f.sink.payloads_of("acct-1") == std::vector<std::string>{"poison"});
}

TEST_CASE(
    "a sink down for 10 s changes nothing, counts no attempt, shows a growing lag, and "
    "everything drains after",
    "[sqlite][outbox][relay]") {
  relay_fixture f;
  f.write("acct-1", "a1");
  f.write("acct-1", "a2");
  f.write("acct-2", "b1");
  auto relay = f.relay();
  const std::string before = f.rows();
  (void)relay.backlog();
  const auto lag_at_start = f.observer.lag();

  f.sink.down = true;
  const auto outage_end = f.clock.now() + 10s;
  int passes = 0;
  while (f.clock.now() < outage_end) {
    const idem::relay_pass pass = relay.run_once();
    REQUIRE(pass.sink_unavailable);
    CHECK(pass.fetched == 3);
    CHECK(pass.published + pass.retried + pass.dead_lettered == 0);
    CHECK(pass.back_off > 0ns);
    CHECK(pass.back_off <= relay.settings().unavailable_cap);
    (void)relay.backlog();
    f.clock.advance(pass.back_off);
    ++passes;
  }
  (void)relay.backlog();
  // The batch was left as it was each time: no attempt, no error, no dead letter. (The lease
  // moved on: fetch renews it.)
  CHECK(f.rows() == before);
  CHECK(f.app.text("SELECT max(attempts) FROM idem_outbox") == "0");
  CHECK(f.observer.sink_unavailable() == passes);
  CHECK(f.observer.waiting() == 3);
  CHECK(f.observer.lag() >= lag_at_start + 10s);
  CHECK(f.observer.retried() == 0);
  CHECK(f.observer.dead_lettered() == 0);

  f.sink.down = false;
  const idem::relay_pass after = relay.drain();
  CHECK(after.published == 3);
  CHECK(f.sink.payloads_of("acct-1") == std::vector<std::string>{"a1", "a2"});
  CHECK(f.sink.payloads_of("acct-2") == std::vector<std::string>{"b1"});
  (void)relay.backlog();
  CHECK(f.observer.waiting() == 0);
  CHECK(f.observer.lag() == 0ns);
  CHECK(f.outbox.dead_letters(10).empty());
}

// ---- order ---------------------------------------------------------------------------------

TEST_CASE(
    "a failed message holds back the later messages of its key, in order, while other "
    "keys flow",
    "[sqlite][outbox][relay]") {
  relay_fixture f;
  const std::string head = f.write("acct-1", "a1");
  f.write("acct-1", "a2");
  f.write("acct-2", "b1");
  f.write("acct-1", "a3");
  f.write("acct-2", "b2");
  f.sink.fail(head, 2);
  auto relay = f.relay();

  const idem::relay_pass first = relay.drain();
  CHECK(f.sink.payloads_of("acct-2") == std::vector<std::string>{"b1", "b2"});
  CHECK(f.sink.payloads_of("acct-1").empty());
  CHECK(first.retried == 1);
  CHECK(first.held_back == 2);  // a2 and a3 answered failed behind a1: no attempt counted
  CHECK(f.column("attempts", "acct-1/a2") == "0");
  CHECK(f.column("attempts", "acct-1/a3") == "0");

  // While a1 waits for its retry, a2 and a3 are not handed out at all.
  const std::size_t offered = f.sink.offered.size();
  CHECK(relay.drain().fetched == 0);
  CHECK(f.sink.offered.size() == offered);

  for (int i = 0; i < 10 && !f.sink.payloads_of("acct-1").size(); ++i) {
    f.clock.advance(1s);
    relay.drain();
  }
  CHECK(f.sink.payloads_of("acct-1") == std::vector<std::string>{"a1", "a2", "a3"});
  CHECK(f.column("count(*)", "acct-1/a1") == "1");
  CHECK(f.app.text("SELECT count(*) FROM idem_outbox WHERE published_at IS NULL") == "0");
}

TEST_CASE("published rows are purged after the retention window, unpublished ones never",
          "[sqlite][outbox][relay]") {
  relay_fixture f;
  f.write("acct-1", "sent");
  const std::string stuck = f.write("acct-2", "failing");
  f.sink.fail(stuck, 1000);
  idem::relay_options options;
  options.retention = 1h;
  options.max_attempts = 1000;
  options.purge_batch = 1;  // purge loops batch by batch
  auto relay = f.relay(options);
  relay.drain();
  CHECK(relay.purge() == 0);
  f.clock.advance(1h);
  CHECK(relay.purge() == 0);  // published exactly an hour ago: still kept
  f.clock.advance(1ms);
  CHECK(relay.purge() == 1);
  CHECK(f.app.text("SELECT id FROM idem_outbox") == stuck);
  CHECK(f.observer.purged() == 1);
}

// ---- one relay at a time -------------------------------------------------------------------

TEST_CASE(
    "a second relay on the same file stays idle while the lease is held and takes over "
    "after it expires",
    "[sqlite][outbox][relay][lease]") {
  relay_fixture f;
  reader second_outbox{f.path, quick_reader("second")};
  idem::testing::scripted_sink second_sink;
  auto first = f.relay();
  auto second = f.relay_on(second_outbox, second_sink);

  f.write("acct-1", "a1");
  CHECK(first.run_once().published == 1);
  CHECK(f.outbox.lease().mine);
  f.write("acct-1", "a2");
  f.clock.advance(29s);
  CHECK(second.run_once().fetched == 0);  // held: idle
  CHECK(second_outbox.lease().holder == "first");
  CHECK_FALSE(second_outbox.lease().mine);

  f.clock.advance(1s);  // the lease (30 s) ran out: nobody renewed it
  CHECK(second.run_once().published == 1);
  const idem::sqlite_outbox::lease_state lease = second_outbox.lease();
  CHECK(lease.holder == "second");
  CHECK(lease.fence == 2);
  CHECK(lease.mine);
  CHECK(second_sink.payloads_of("acct-1") == std::vector<std::string>{"a2"});
  f.write("acct-1", "a3");
  CHECK(first.run_once().fetched == 0);  // now the first one is idle
}

TEST_CASE("a stale lease holder's settle throws outbox_claim_lost and writes nothing",
          "[sqlite][outbox][relay][lease]") {
  relay_fixture f;
  reader second{f.path, quick_reader("second")};
  const std::string id = f.write("acct-1", "a1");
  auto stale = f.outbox.fetch(10, f.clock.wall_now());
  REQUIRE(stale.entries().size() == 1);
  f.clock.advance(31s);  // the first reader paused past its lease
  auto taken = second.fetch(10, f.clock.wall_now());
  REQUIRE(taken.entries().size() == 1);
  const std::string before = f.snapshot();

  const std::vector<outbox_settlement> published(1, {outbox_settlement::kind::published});
  CHECK_THAT(message_of<idem::outbox_claim_lost>(
                 [&] { f.outbox.settle(stale, published, f.clock.wall_now()); }),
             Contains("taken over"));
  CHECK(f.snapshot() == before);
  CHECK(f.column("published_at IS NULL", id) == "1");
  second.settle(taken, published, f.clock.wall_now());
  CHECK(f.column("published_at IS NULL", id) == "0");
}

TEST_CASE(
    "a relay that loses its lease while the sink holds the batch settles nothing and "
    "says so",
    "[sqlite][outbox][relay][lease]") {
  relay_fixture f;
  reader second{f.path, quick_reader("second")};
  f.write("acct-1", "a1");
  // The sink is slow: while it holds the batch the lease runs out and another relay takes it.
  struct slow_sink {
    relay_fixture* f;
    reader* second;
    void publish(std::span<const idem::outbox_entry> batch, std::span<idem::sink_result> results) {
      f->clock.advance(31s);
      (void)second->fetch(10, f->clock.wall_now());  // the takeover, abandoned at once
      for (std::size_t i = 0; i < batch.size(); ++i) {
        results[i].status = idem::sink_status::acknowledged;
      }
    }
  } sink{&f, &second};
  auto relay = f.relay_on(f.outbox, sink);
  const idem::relay_pass pass = relay.run_once();
  CHECK(pass.claim_lost);
  CHECK(pass.published == 0);
  CHECK(f.observer.claims_lost() == 1);
  CHECK(f.app.text("SELECT count(*) FROM idem_outbox WHERE published_at IS NULL") == "1");
}

TEST_CASE(
    "settling a batch twice, with the wrong count, or through another reader is refused "
    "and writes nothing",
    "[sqlite][outbox][relay]") {
  relay_fixture f;
  reader other{f.path, quick_reader("other")};
  f.write("acct-1", "a1");
  auto batch = f.outbox.fetch(10, f.clock.wall_now());
  const std::vector<outbox_settlement> none;
  const std::vector<outbox_settlement> one(1, {outbox_settlement::kind::published});
  const std::string before = f.snapshot();
  CHECK_THAT(
      message_of<std::invalid_argument>([&] { f.outbox.settle(batch, none, f.clock.wall_now()); }),
      Contains("0 settlements for a batch of 1"));
  CHECK_THAT(
      message_of<std::invalid_argument>([&] { other.settle(batch, one, f.clock.wall_now()); }),
      Contains("another reader"));
  CHECK(f.snapshot() == before);
  f.outbox.settle(batch, one, f.clock.wall_now());
  CHECK_THAT(message_of<std::logic_error>([&] { f.outbox.settle(batch, one, f.clock.wall_now()); }),
             Contains("settled before"));
}

TEST_CASE(
    "a reader refuses a file without idem's schema or at another version, saying what to "
    "do",
    "[sqlite][outbox][relay]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("plain.sqlite3");
  CHECK_THAT(message_of<idem::store_error>([&] { (void)reader{path}; }),
             Contains("no idem schema") && Contains("open an idem::sqlite_store on it first"));
  { sqlite_store store{path}; }
  {
    file_connection app(path);
    app.exec("UPDATE idem_meta SET value = 5 WHERE name = 'schema_version'");
  }
  CHECK_THAT(message_of<idem::store_error>([&] { (void)reader{path}; }),
             Contains("schema version 5") && Contains("upgrade idem"));
  reader::options zero;
  zero.lease = 0ms;
  CHECK_THROWS_AS(reader(path, zero), std::invalid_argument);
}

TEST_CASE("a version 2 file is migrated to schema 3 on open, its outbox rows kept",
          "[sqlite][outbox][relay]") {
  relay_fixture f;
  f.write("acct-1", "a1");
  f.app.exec(
      "DROP TABLE idem_outbox_dead; DROP TABLE idem_outbox_relay; DROP INDEX idem_outbox_by_key; "
      "DROP INDEX idem_outbox_published; UPDATE idem_meta SET value = 2 WHERE name = "
      "'schema_version'");
  { sqlite_store reopened{f.path}; }
  CHECK(f.app.text("SELECT value FROM idem_meta WHERE name = 'schema_version'") == "4");
  CHECK(f.app.text("SELECT count(*) FROM idem_outbox_dead") == "0");
  CHECK(f.app.text("SELECT holder || '/' || fence FROM idem_outbox_relay") == "/0");
  reader migrated{f.path, quick_reader()};
  auto relay = f.relay_on(migrated, f.sink);
  CHECK(relay.drain().published == 1);
}

TEST_CASE("the reader's queries go through the outbox's partial indexes",
          "[sqlite][outbox][relay]") {
  relay_fixture f;
  const std::string due = f.app.plan(idem::detail::sqlite_outbox_sql::due);
  INFO(due);
  CHECK_THAT(due, Contains("idem_outbox_unpublished") && Contains("idem_outbox_by_key"));
  CHECK_THAT(f.app.plan(idem::detail::sqlite_outbox_sql::purge), Contains("idem_outbox_published"));
}

// ---- dead letters --------------------------------------------------------------------------

TEST_CASE("run publishes what writers commit while it runs, and stops when asked",
          "[sqlite][outbox][relay][concurrency]") {
  relay_fixture f;
  idem::testing::recording_sink sink;
  idem::relay_options options;
  options.idle_wait = 20ms;
  auto relay = f.relay_on(f.outbox, sink, options);
  {
    std::jthread worker([&](std::stop_token stop) { relay.run(stop); });
    for (int i = 0; i < 20; ++i)
      f.write("acct-" + std::to_string(i % 3), std::to_string(i));
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (f.observer.published() < 20 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(5ms);
    }
  }  // stop requested, joined
  CHECK(f.observer.published() == 20);
  CHECK(f.observer.backlog_reports() > 0);
  for (int key = 0; key < 3; ++key) {
    std::vector<std::string> expected;
    for (int i = key; i < 20; i += 3)
      expected.push_back(std::to_string(i));
    CHECK(sink.payloads_of("acct-" + std::to_string(key)) == expected);
  }
}
