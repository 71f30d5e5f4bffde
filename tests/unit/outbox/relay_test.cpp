// The relay's core, against an outbox kept in memory (the stores' readers have their own tests
// on real databases: tests/stores/<store>/*outbox_relay_test.cpp): the settle rules, the retry
// budget, outages and their back-off, a lost claim, the observer's counts, and the options'
// checks.
#include <catch2/catch.hpp>

#include <idem/outbox/detail/relay_rules.hpp>
#include <idem/outbox/relay.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include "support/outbox_test_sinks.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::outbox_entry;
using idem::outbox_settlement;
using idem::sink_result;
using idem::sink_status;
using time_point = std::chrono::system_clock::time_point;

namespace {

// An Outbox in memory with the hold-back rule of idem/outbox/source.hpp, for the relay's own
// logic. No claim between fetch and settle: one relay drives it.
struct memory_outbox {
  struct row {
    outbox_entry entry;
    time_point next_attempt_at{};
    std::optional<time_point> published_at{};
    std::string last_error{};
  };
  struct batch {
    std::vector<outbox_entry> list;
    std::span<const outbox_entry> entries() const noexcept { return list; }
  };
  std::vector<row> rows;
  std::vector<outbox_entry> dead;
  std::vector<std::string> dead_reasons;
  std::int64_t next_sequence = 1;
  bool claim_lost = false;           // settle throws outbox_claim_lost
  bool claim_lost_at_fetch = false;  // fetch does

  void write(const std::string& key, const std::string& payload, time_point at) {
    row added;
    added.entry.sequence = next_sequence++;
    added.entry.id = key + "/" + payload;
    added.entry.message = {.topic = "t", .partition_key = key, .payload = payload};
    added.entry.created_at = at;
    added.next_attempt_at = at;
    rows.push_back(added);
  }
  row& find(const std::string& id) {
    for (row& r : rows)
      if (r.entry.id == id) return r;
    throw std::logic_error("no row " + id);
  }

  batch fetch(std::size_t limit, time_point now) {
    if (claim_lost_at_fetch) throw idem::outbox_claim_lost("another relay holds the claim");
    batch out;
    std::vector<std::string> held;
    for (const row& r : rows) {
      if (r.published_at || out.list.size() == limit) continue;
      const std::string& key = r.entry.message.partition_key;
      if (std::find(held.begin(), held.end(), key) != held.end()) continue;
      if (r.next_attempt_at > now) {
        held.push_back(key);
        continue;
      }
      out.list.push_back(r.entry);
    }
    return out;
  }
  void settle(batch& settled, std::span<const outbox_settlement> settlements, time_point now) {
    if (claim_lost) throw idem::outbox_claim_lost("the lease was taken over");
    for (std::size_t i = 0; i < settlements.size(); ++i) {
      row& r = find(settled.list[i].id);
      switch (settlements[i].what) {
        case outbox_settlement::kind::published:
          r.published_at = now;
          break;
        case outbox_settlement::kind::retry:
          ++r.entry.attempts;
          r.next_attempt_at = settlements[i].next_attempt_at;
          r.last_error = settlements[i].error;
          break;
        case outbox_settlement::kind::dead:
          dead.push_back(r.entry);
          dead_reasons.push_back(settlements[i].error);
          std::erase_if(rows, [&](const row& x) { return x.entry.id == settled.list[i].id; });
          break;
        case outbox_settlement::kind::untouched:
          break;
      }
    }
  }
  std::size_t purge(time_point before, std::size_t limit) {
    std::size_t n = 0;
    std::erase_if(rows, [&](const row& r) {
      return n < limit && r.published_at && *r.published_at < before && ++n;
    });
    return n;
  }
  idem::outbox_backlog backlog(time_point) const {
    idem::outbox_backlog b;
    for (const row& r : rows) {
      if (r.published_at) continue;
      ++b.waiting;
      if (!b.oldest_created_at || r.entry.created_at < *b.oldest_created_at) {
        b.oldest_created_at = r.entry.created_at;
      }
    }
    return b;
  }
  void wait_for_rows(std::chrono::milliseconds) const noexcept {}
};

static_assert(idem::Outbox<memory_outbox>);
static_assert(idem::Sink<idem::testing::scripted_sink>);
static_assert(idem::Sink<idem::testing::recording_sink>);
static_assert(idem::RelayObserver<idem::no_relay_observer>);
static_assert(idem::RelayObserver<idem::counting_relay_observer>);

struct test_policies : idem::default_relay_policies {
  using clock = idem::manual_clock;
  using backoff = idem::exponential_backoff;  // 100 ms, 200 ms, ... : no jitter
  using observer = idem::counting_relay_observer;
};
using relay_type = idem::outbox_relay<memory_outbox, idem::testing::scripted_sink, test_policies>;

struct fixture {
  idem::manual_clock clock;
  idem::counting_relay_observer observer;
  memory_outbox outbox;
  idem::testing::scripted_sink sink;

  relay_type relay(idem::relay_options options = {},
                   idem::token_bucket budget = idem::token_bucket{}) {
    return relay_type(outbox, sink, options,
                      {.clock = clock,
                       .budget = std::move(budget),
                       .observer = observer,
                       .seed = idem::seed_from(1)});
  }
  void write(const std::string& key, const std::string& payload) {
    outbox.write(key, payload, clock.wall_now());
  }
};

std::vector<idem::detail::relay_verdict> verdicts_of(const std::vector<outbox_entry>& entries,
                                                     const std::vector<sink_result>& results,
                                                     std::uint32_t max_attempts) {
  std::vector<idem::detail::relay_verdict> out;
  idem::detail::relay_verdicts(entries, results, max_attempts, out);
  return out;
}

outbox_entry entry_of(const std::string& key, std::uint32_t attempts = 0) {
  outbox_entry entry;
  entry.message.partition_key = key;
  entry.attempts = attempts;
  return entry;
}

}  // namespace

TEST_CASE(
    "the relay's rules: acknowledged is published, rejected dead, failed retried until "
    "max_attempts, and a failure behind a failed key is held back",
    "[outbox][relay]") {
  using idem::detail::relay_verdict;
  const std::vector<outbox_entry> entries{entry_of("a"), entry_of("b", 2), entry_of("a"),
                                          entry_of("c"), entry_of("b"),    entry_of("d", 1)};
  const std::vector<sink_result> results{
      {sink_status::failed, "x"},   {sink_status::failed, "y"}, {sink_status::failed, ""},
      {sink_status::rejected, "z"}, {sink_status::failed, ""},  {sink_status::acknowledged, ""}};
  CHECK(verdicts_of(entries, results, 3) ==
        std::vector<relay_verdict>{relay_verdict::retry, relay_verdict::dead_failed,
                                   relay_verdict::held_back, relay_verdict::dead_rejected,
                                   relay_verdict::held_back, relay_verdict::publish});
  // max_attempts = 1: the first failure is the last.
  CHECK(verdicts_of({entry_of("a")}, {{sink_status::failed, ""}}, 1) ==
        std::vector<relay_verdict>{relay_verdict::dead_failed});
}

TEST_CASE(
    "a failed message waits its backoff, and the spent budget's longer wait once the "
    "budget is spent",
    "[outbox][relay]") {
  fixture f;
  f.write("a", "1");
  f.write("b", "1");
  f.sink.fail_everything = true;
  // One retry's worth of tokens and no refill: the first failure retries on its backoff, the
  // second finds the bucket empty.
  idem::token_bucket::options tight;
  tight.max_tokens = 5;
  tight.retry_ratio = 0;
  idem::relay_options options;
  options.spent_budget_wait = 7min;
  auto relay = f.relay(options, idem::token_bucket(tight));
  const idem::relay_pass pass = relay.run_once();
  CHECK(pass.retried == 2);
  const time_point now = f.clock.wall_now();
  CHECK(f.outbox.find("a/1").next_attempt_at == now + 100ms);
  CHECK(f.outbox.find("b/1").next_attempt_at == now + 7min);
  CHECK(f.outbox.find("b/1").entry.attempts == 1);  // counted either way
  CHECK(f.observer.retried() == 2);
}

TEST_CASE(
    "a sink that throws anything is unavailable: nothing settled, no attempt, a back-off "
    "that grows to its cap",
    "[outbox][relay]") {
  fixture f;
  f.write("a", "1");
  struct throwing_sink {
    void publish(std::span<const outbox_entry>, std::span<sink_result>) { throw 42; }
  } sink;
  idem::outbox_relay<memory_outbox, throwing_sink, test_policies> relay(
      f.outbox, sink, {.unavailable_base = 100ms, .unavailable_cap = 1s},
      {.clock = f.clock, .observer = f.observer, .seed = idem::seed_from(2)});
  std::chrono::nanoseconds previous{};
  for (int i = 0; i < 8; ++i) {
    const idem::relay_pass pass = relay.run_once();
    CHECK(pass.sink_unavailable);
    // Equal jitter: at least half the doubling wait, never past the cap.
    const std::chrono::nanoseconds doubling =
        std::min<std::chrono::nanoseconds>(100ms * (1 << i), 1s);
    CHECK(pass.back_off >= doubling / 2);
    CHECK(pass.back_off <= doubling);
    previous = pass.back_off;
  }
  CHECK(previous >= 500ms);
  CHECK(f.outbox.find("a/1").entry.attempts == 0);
  CHECK_FALSE(f.outbox.find("a/1").published_at);
  CHECK(f.observer.sink_unavailable() == 8);
  CHECK(relay.drain().sink_unavailable);  // drain stops at an outage instead of spinning
}

TEST_CASE("after an outage the back-off starts again from its base", "[outbox][relay]") {
  fixture f;
  f.write("a", "1");
  auto relay = f.relay({.unavailable_base = 100ms, .unavailable_cap = 10s});
  f.sink.down = true;
  for (int i = 0; i < 5; ++i)
    (void)relay.run_once();
  f.sink.down = false;
  CHECK(relay.run_once().published == 1);
  f.write("a", "2");
  f.sink.down = true;
  CHECK(relay.run_once().back_off <= 100ms);
}

TEST_CASE("a lost claim is an answer: nothing settled, reported, and drain stops",
          "[outbox][relay]") {
  fixture f;
  f.write("a", "1");
  f.outbox.claim_lost = true;
  auto relay = f.relay();
  const idem::relay_pass pass = relay.drain();
  CHECK(pass.claim_lost);
  CHECK(pass.published == 0);
  CHECK(f.observer.claims_lost() == 1);
  CHECK_FALSE(f.outbox.find("a/1").published_at);

  f.outbox.claim_lost = false;
  f.outbox.claim_lost_at_fetch = true;  // the outbox may say so at fetch too
  const idem::relay_pass at_fetch = relay.run_once();
  CHECK(at_fetch.claim_lost);
  CHECK(at_fetch.fetched == 0);
  CHECK(f.observer.claims_lost() == 2);
}

TEST_CASE("the counting observer sees passes, publications, retries, dead letters and the lag",
          "[outbox][relay]") {
  fixture f;
  f.write("a", "1");
  f.write("b", "1");
  f.write("c", "1");
  f.sink.fail("b/1", 1);
  f.sink.reject("c/1");
  auto relay = f.relay();
  f.clock.advance(3s);
  (void)relay.backlog();
  CHECK(f.observer.waiting() == 3);
  CHECK(f.observer.lag() == 3s);
  (void)relay.drain();
  CHECK(f.observer.published() == 1);
  CHECK(f.observer.retried() == 1);
  CHECK(f.observer.dead_lettered() == 1);
  CHECK(f.outbox.dead_reasons == std::vector<std::string>{"scripted rejection"});
  f.clock.advance(1s);
  (void)relay.drain();
  (void)relay.backlog();
  CHECK(f.observer.published() == 2);
  CHECK(f.observer.waiting() == 0);
  CHECK(f.observer.lag() == 0ns);
  CHECK(f.observer.max_lag() == 3s);
}

TEST_CASE("purge deletes what was published before the retention window, batch by batch",
          "[outbox][relay]") {
  fixture f;
  for (int i = 0; i < 5; ++i)
    f.write("a", std::to_string(i));
  auto relay = f.relay({.retention = 1h, .purge_batch = 2});
  (void)relay.drain();
  CHECK(relay.purge() == 0);
  f.clock.advance(1h + 1s);
  CHECK(relay.purge() == 5);
  CHECK(f.outbox.rows.empty());
}

TEST_CASE("relay options that cannot work are refused, saying which", "[outbox][relay]") {
  fixture f;
  const auto refused = [&](idem::relay_options options) {
    try {
      (void)f.relay(options);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refused({.batch_size = 0}), Contains("batch_size"));
  CHECK_THAT(refused({.max_attempts = 0}), Contains("max_attempts"));
  CHECK_THAT(refused({.purge_batch = 0}), Contains("purge_batch"));
  CHECK_THAT(refused({.idle_wait = -1ms}), Contains("negative"));
  CHECK(refused({}) == "accepted");
}

TEST_CASE("run reports the backlog on time while a long backlog drains, and stops when asked",
          "[outbox][relay]") {
  fixture f;
  for (int i = 0; i < 100; ++i)
    f.write("k" + std::to_string(i % 7), std::to_string(i));
  // A slow sink: each batch takes 100 ms of the manual clock; it asks the loop to stop once it
  // has everything.
  struct slow_sink {
    idem::manual_clock clock;
    std::stop_source* stop;
    std::size_t delivered = 0;
    void publish(std::span<const outbox_entry> batch, std::span<sink_result> results) {
      clock.advance(100ms);
      for (sink_result& result : results)
        result.status = sink_status::acknowledged;
      delivered += batch.size();
      if (delivered == 100) stop->request_stop();
    }
  };
  std::stop_source stop;
  slow_sink sink{f.clock, &stop};
  idem::outbox_relay<memory_outbox, slow_sink, test_policies> relay(
      f.outbox, sink, {.batch_size = 1, .idle_wait = 1s},
      {.clock = f.clock, .observer = f.observer, .seed = idem::seed_from(3)});
  relay.run(stop.get_token());
  CHECK(sink.delivered == 100);
  CHECK(f.observer.published() == 100);
  // 10 s of draining: a report at the start and one a second after, not one at the end only.
  CHECK(f.observer.backlog_reports() >= 10);
  CHECK(f.observer.max_lag() >= 9s);
}
