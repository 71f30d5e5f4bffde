// The reconciler on the memory store: resumable records finished without their client, the
// report's rows against a ground truth the test holds, the lookup-before-retry step, races with
// retrying clients and other reconcilers, and bad input. A "crash" here is a handler that throws
// idem::lease_lost after the steps it got through: the engine then leaves the claim as a dead
// process would (in progress, recovery points recorded); tests/crash kills real processes.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

struct test_policies : idem::default_policies {
  using clock = idem::manual_clock;
};

struct test_reconciler_policies : idem::default_reconciler_policies {
  using clock = idem::manual_clock;
  using observer = idem::counting_reconciler_observer;
};

// A downstream that takes idempotency keys: a repeat of a reference is deduplicated, as a
// payment provider deduplicates a repeated Idempotency-Key. It counts effects (at most one a
// reference) and calls, the ground truth of "exactly once".
class ledger {
 public:
  void add(const std::string& reference) {
    const std::lock_guard lock(mutex_);
    ++calls_;
    effects_[reference] = 1;
  }
  int calls() const {
    const std::lock_guard lock(mutex_);
    return calls_;
  }
  int count(const std::string& reference) const {
    const std::lock_guard lock(mutex_);
    const auto found = effects_.find(reference);
    return found == effects_.end() ? 0 : found->second;
  }
  int total() const {
    const std::lock_guard lock(mutex_);
    int sum = 0;
    for (const auto& [reference, times] : effects_)
      sum += times;
    return sum;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int> effects_;
  int calls_ = 0;
};

// A three-step payment: charge, record, notify, each a recovery point calling the ledger with its
// downstream key. `stop_after` (from the request's body "stop:N") throws lease_lost once N steps
// are recorded, as a process that died there would leave it; "stop-in:N" stops inside step N,
// after its effect and before its recording.
struct three_steps {
  ledger* downstream;
  std::atomic<int>* stops_left;

  idem::http_response operator()(idem::handler_context& ctx,
                                 const idem::http_request& request) const {
    const auto stop_here = [&](const std::string& where) {
      if (request.body == where && stops_left->fetch_sub(1) > 0) throw idem::lease_lost{};
    };
    std::string receipt;
    for (const char* name : {"charge", "record", "notify"}) {
      receipt += ctx.step(name, [&] {
        const std::string reference(ctx.downstream_key(name).view());
        downstream->add(reference);
        stop_here(std::string("stop-in:") + name);
        return std::string(name) + ";";
      });
      stop_here(std::string("stop:") + name);
    }
    return idem::http_response{201, {}, receipt};
  }
};

using payments_type = idem::idempotent<three_steps, test_policies>;

payments_type::options resumable_options(idem::memory_store store, idem::manual_clock clock) {
  payments_type::options options;
  options.store = std::move(store);
  options.clock = std::move(clock);
  options.max_kept_request_bytes = 4096;
  options.name = "payments";
  return options;
}

idem::http_request post(std::string body) {
  return idem::http_request{"POST", "/payments", {{"Content-Type", "text/plain"}}, std::move(body)};
}

std::string reference(std::string_view scope, std::string_view key, std::string_view step) {
  return std::string(idem::downstream_key(scope, key, step).view());
}

}  // namespace

TEST_CASE("a resumable record abandoned at each recovery point is finished with one effect a step",
          "[reconciler]") {
  for (const char* where :
       {"stop:charge", "stop:record", "stop-in:charge", "stop-in:record", "stop-in:notify"}) {
    CAPTURE(where);
    idem::memory_store store;
    idem::manual_clock clock;
    ledger downstream;
    std::atomic<int> stops{1};
    payments_type payments{three_steps{&downstream, &stops}, resumable_options(store, clock)};
    const auto first = payments("acct", "k1", post(where));
    REQUIRE(first.verdict() == idem::verdict::in_progress);  // the "process" died

    idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
    reconciler.resume_with<idem::http_request>(payments);
    CHECK(reconciler.run_once().summary.resumed == 0);  // its lease still holds
    clock.advance(31s);
    const idem::reconcile_report report = reconciler.run_once();
    CHECK(report.summary.examined == 1);
    CHECK(report.summary.resumed == 1);
    CHECK(report.rows.empty());
    CHECK(report.summary.exit_status() == 0);
    for (const char* step : {"charge", "record", "notify"})
      CHECK(downstream.count(reference("acct", "k1", step)) == 1);
    CHECK(downstream.total() == 3);
    // A step stopped inside, after its effect, is called again, under the same downstream key.
    CHECK(downstream.calls() == (std::string_view(where).starts_with("stop-in:") ? 4 : 3));

    // The client that comes back gets the replay, byte for byte.
    const auto again = payments("acct", "k1", post(where));
    REQUIRE(again.verdict() == idem::verdict::replayed);
    CHECK(again.value() == idem::http_response{201, {}, "charge;record;notify;"});
    CHECK(reconciler.run_once().summary.examined == 0);
    CHECK(reconciler.observer().resumed() == 1);
  }
}

TEST_CASE("a record of a wrapper that keeps no requests is reported, step by step",
          "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{1};
  payments_type::options options;
  options.store = store;
  options.clock = clock;
  payments_type payments{three_steps{&downstream, &stops}, options};
  REQUIRE(payments("acct", "k2", post("stop-in:record")).verdict() == idem::verdict::in_progress);
  clock.advance(40s);

  idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
  std::vector<idem::lookup_query> asked;
  reconciler.lookup_with([&](const idem::lookup_query& query) {
    asked.push_back(query);
    return downstream.count(std::string(query.reference)) > 0 ? idem::landing::landed
                                                              : idem::landing::not_landed;
  });
  const idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.examined == 1);
  CHECK(report.summary.not_resumable == 1);
  CHECK(report.summary.resumed == 0);
  REQUIRE(report.rows.size() == 2);

  // The ground truth: charge recorded, record started (its effect landed, its answer lost).
  idem::discrepancy charge;
  charge.scope = "acct";
  charge.redacted_key = idem::redacted_key("k2").str();
  charge.age = 40s;
  charge.step = "charge";
  charge.downstream_key = reference("acct", "k2", "charge");
  charge.classification = idem::landing::landed;
  charge.source = idem::evidence::record;
  charge.reason = report.rows[0].reason;
  CHECK(report.rows[0] == charge);
  CHECK(report.rows[0].reason.find("not resumable") != std::string::npos);

  idem::discrepancy record = charge;
  record.step = "record";
  record.downstream_key = reference("acct", "k2", "record");
  record.source = idem::evidence::lookup;
  record.reason = report.rows[1].reason;
  CHECK(report.rows[1] == record);
  CHECK(report.rows[1].reason.find("the lookup answered landed") != std::string::npos);
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].step == "record");
  CHECK(asked[0].scope == "acct");

  CHECK(report.summary.landed == 2);
  CHECK(report.summary.exit_status() == 1);
  CHECK(report.summary.needs_person());
  // The key itself is nowhere in the report.
  const std::string lines = idem::json_lines(report.rows);
  CHECK(lines.find("k2\"") == std::string::npos);
  CHECK(lines.find(idem::redacted_key("k2").str()) != std::string::npos);
  CHECK(idem::summary_table(report.summary).find("a person is needed") != std::string::npos);

  // Held by the reconciler for its lease: reported once a pass, not twice.
  CHECK(reconciler.run_once().summary.examined == 0);
  clock.advance(31s);
  CHECK(reconciler.run_once().summary.not_resumable == 1);
  // Nothing ran again.
  CHECK(downstream.total() == 2);
  CHECK(reconciler.observer().reported() == 2);
  CHECK(reconciler.observer().rows(idem::landing::landed) == 4);
}

TEST_CASE("a report row is one line of JSON with every field", "[reconciler]") {
  idem::discrepancy row;
  row.scope = "acct \"7\"\n\xff";
  row.redacted_key = idem::redacted_key("secret").str();
  row.age = 3725s;
  row.handler = "payments";
  row.step = "charge";
  row.downstream_key = "abc";
  row.classification = idem::landing::unknown;
  row.source = idem::evidence::lookup;
  row.reason = "the lookup threw: down";
  CHECK(idem::json_line(row) ==
        "{\"scope\":\"acct \\\"7\\\"\\u000a\xef\xbf\xbd\",\"key\":\"" + row.redacted_key +
            "\",\"age_seconds\":3725,\"handler\":\"payments\",\"step\":\"charge\","
            "\"downstream_key\":\"abc\",\"classification\":\"unknown\",\"evidence\":\"lookup\","
            "\"reason\":\"the lookup threw: down\"}");
}

TEST_CASE("a record that never started a step is one not_landed row, which needs nobody",
          "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  const idem::digest print = idem::xxh3_128::hash(std::string_view{"x"});
  REQUIRE(store.claim(idem::claim_request{"s", "k", print, clock.wall_now(), 30s, 24h}).status ==
          idem::claim_status::claimed);
  clock.advance(2h);
  idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
  const idem::reconcile_report report = reconciler.run_once();
  REQUIRE(report.rows.size() == 1);
  CHECK(report.rows[0].step.empty());
  CHECK(report.rows[0].classification == idem::landing::not_landed);
  CHECK(report.summary.stuck_by_age[3] == 1);  // under a day
  CHECK(reconciler.observer().stuck(3) == 1);
  CHECK(report.summary.exit_status() == 0);
}

TEST_CASE("a kept request over the cap is refused at claim time and nothing is stored",
          "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{0};
  auto options = resumable_options(store, clock);
  options.max_kept_request_bytes = 64;
  payments_type payments{three_steps{&downstream, &stops}, options};
  const auto refused = payments("acct", "big", post(std::string(100, 'x')));
  CHECK(refused.verdict() == idem::verdict::body_too_large);
  CHECK(refused.http_status() == 413);
  CHECK(std::string(refused.message()).find("max_kept_request_bytes (64)") != std::string::npos);
  CHECK_FALSE(store.find("acct", "big", clock.wall_now()));
  CHECK(downstream.total() == 0);
  // One that fits runs, and its record keeps it until it completes.
  CHECK(payments("acct", "small", post("x")).verdict() == idem::verdict::executed);
  const auto done = store.find("acct", "small", clock.wall_now());
  REQUIRE(done);
  CHECK(done->recovery.empty());
}

TEST_CASE("a corrupt kept request is reported and never resumed", "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{1};
  payments_type payments{three_steps{&downstream, &stops}, resumable_options(store, clock)};
  REQUIRE(payments("acct", "k", post("stop:charge")).verdict() == idem::verdict::in_progress);
  const auto held = store.find("acct", "k", clock.wall_now());
  REQUIRE(held);

  SECTION("bytes that do not decode") {
    std::string bytes = held->recovery;
    const std::size_t at = bytes.find("Q\x01");
    REQUIRE(at != std::string::npos);
    bytes[at] = 'Z';
    REQUIRE(store.checkpoint({"acct", "k", held->fence}, bytes, held->lease_until));
  }
  SECTION("another request than the record's") {
    std::string bytes = held->recovery;
    const std::size_t at = bytes.find("stop:charge");
    REQUIRE(at != std::string::npos);
    bytes[at] = 'S';
    REQUIRE(store.checkpoint({"acct", "k", held->fence}, bytes, held->lease_until));
  }
  SECTION("recovery bytes that are not entries") {
    REQUIRE(store.checkpoint({"acct", "k", held->fence}, "\x7f", held->lease_until));
  }
  clock.advance(31s);
  idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
  reconciler.resume_with<idem::http_request>(payments);
  const idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.resumed == 0);
  CHECK(report.summary.not_resumable == 1);
  REQUIRE_FALSE(report.rows.empty());
  CHECK(downstream.total() == 1);  // the charge, from the first run; nothing ran again
  const auto still = store.find("acct", "k", clock.wall_now());
  REQUIRE(still);
  CHECK(still->state == idem::record_state::in_progress);
}

TEST_CASE("a lookup that throws is unknown, and the pass goes on", "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{3};
  payments_type::options options;
  options.store = store;
  options.clock = clock;
  payments_type payments{three_steps{&downstream, &stops}, options};
  for (const char* key : {"a", "b", "c"})
    REQUIRE(payments("acct", key, post("stop-in:charge")).verdict() == idem::verdict::in_progress);
  clock.advance(31s);
  idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
  int calls = 0;
  reconciler.lookup_with([&](const idem::lookup_query&) -> idem::landing {
    if (++calls == 2) throw std::runtime_error("the ledger is down");
    return idem::landing::landed;
  });
  const idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.not_resumable == 3);
  CHECK(report.summary.landed == 2);
  CHECK(report.summary.unknown == 1);
  int unknown = 0;
  for (const idem::discrepancy& row : report.rows) {
    if (row.classification != idem::landing::unknown) continue;
    ++unknown;
    CHECK(row.reason.find("the lookup threw: the ledger is down") != std::string::npos);
  }
  CHECK(unknown == 1);
}

TEST_CASE("a pass walks every stuck record once, batch by batch", "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{300};
  payments_type payments{three_steps{&downstream, &stops}, resumable_options(store, clock)};
  for (int i = 0; i < 300; ++i) {
    REQUIRE(payments("acct", "key-" + std::to_string(i), post("stop:charge")).verdict() ==
            idem::verdict::in_progress);
  }
  for (int i = 0; i < 50; ++i)
    REQUIRE(payments("acct", "done-" + std::to_string(i), post("x")).verdict() ==
            idem::verdict::executed);
  clock.advance(31s);
  idem::reconciler_options options;
  options.batch_size = 32;
  idem::reconciler<test_reconciler_policies> reconciler(store, options, clock);
  reconciler.resume_with<idem::http_request>(payments);
  const idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.examined == 300);
  CHECK(report.summary.resumed == 300);
  CHECK(downstream.total() == 300 * 3 + 50 * 3);
  CHECK(downstream.calls() == downstream.total());  // no step of a resumed run ran twice
}

TEST_CASE("a handler that fails again keeps its claim and is reported", "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  int charges = 0;
  int runs = 0;
  auto handler = [&](idem::handler_context& ctx, const idem::http_request&) {
    ctx.step("charge", [&] { return ++charges; });
    ++runs;
    if (runs == 1) throw idem::lease_lost{};                        // the first run dies
    if (runs == 2) throw std::runtime_error("the mailer is down");  // the resumed one fails
    return idem::http_response{200, {}, "ok"};
  };
  using wrapper = idem::idempotent<decltype(handler), test_policies>;
  wrapper::options options;
  options.store = store;
  options.clock = clock;
  options.max_kept_request_bytes = 1024;
  wrapper guarded{handler, options};
  REQUIRE(guarded("s", "k", post("x")).verdict() == idem::verdict::in_progress);
  clock.advance(31s);

  idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
  reconciler.resume_with<idem::http_request>(guarded);
  const idem::reconcile_report failed = reconciler.run_once();
  CHECK(failed.summary.failed == 1);
  REQUIRE(failed.rows.size() == 1);
  CHECK(failed.rows[0].step == "charge");
  CHECK(failed.rows[0].classification == idem::landing::landed);
  CHECK(failed.rows[0].reason.find("the mailer is down") != std::string::npos);
  // Kept, not released: a client's retry now waits for the lease, it does not start over.
  CHECK(guarded("s", "k", post("x")).verdict() == idem::verdict::in_progress);
  const auto held = store.find("s", "k", clock.wall_now());
  REQUIRE(held);
  CHECK(held->state == idem::record_state::in_progress);
  CHECK_FALSE(held->recovery.empty());

  clock.advance(31s);
  const idem::reconcile_report finished = reconciler.run_once();
  CHECK(finished.summary.resumed == 1);
  CHECK(charges == 1);
  CHECK(guarded("s", "k", post("x")).verdict() == idem::verdict::replayed);
}

TEST_CASE("a reconciler refuses options and wrappers that cannot work", "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  idem::reconciler_options none;
  none.batch_size = 0;
  CHECK_THROWS_AS(idem::reconciler<test_reconciler_policies>(store, none, clock),
                  std::invalid_argument);
  idem::reconciler_options short_retention;
  short_retention.retention = short_retention.lease;
  CHECK_THROWS_AS(idem::reconciler<test_reconciler_policies>(store, short_retention, clock),
                  std::invalid_argument);

  ledger downstream;
  std::atomic<int> stops{0};
  idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
  payments_type::options keeps_nothing;
  keeps_nothing.store = store;
  payments_type plain{three_steps{&downstream, &stops}, keeps_nothing};
  CHECK_THROWS_AS(reconciler.resume_with<idem::http_request>(plain), std::invalid_argument);
  payments_type one{three_steps{&downstream, &stops}, resumable_options(store, clock)};
  payments_type two{three_steps{&downstream, &stops}, resumable_options(store, clock)};
  reconciler.resume_with<idem::http_request>(one);
  CHECK_THROWS_AS(reconciler.resume_with<idem::http_request>(two), std::invalid_argument);
}

TEST_CASE("reconcilers racing a retrying client finish each record once",
          "[reconciler][concurrency]") {
  constexpr int records = 200;
  idem::memory_store store;
  idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{records};
  payments_type payments{three_steps{&downstream, &stops}, resumable_options(store, clock)};
  std::vector<std::string> keys;
  for (int i = 0; i < records; ++i) {
    keys.push_back("key-" + std::to_string(i));
    // Half die after the charge, half inside the notification (after its effect).
    REQUIRE(
        payments("acct", keys.back(), post(i % 2 ? "stop:charge" : "stop-in:notify")).verdict() ==
        idem::verdict::in_progress);
  }
  clock.advance(31s);

  std::atomic<int> resumed{0}, lost{0}, client_ran{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      idem::reconciler_options options;
      options.batch_size = 16;
      idem::reconciler<test_reconciler_policies> reconciler(store, options, clock);
      reconciler.resume_with<idem::http_request>(payments);
      while (!go)
        std::this_thread::yield();
      const idem::reconcile_report report = reconciler.run_once();
      resumed += static_cast<int>(report.summary.resumed);
      lost += static_cast<int>(report.summary.lost);
    });
  }
  threads.emplace_back([&] {
    while (!go)
      std::this_thread::yield();
    for (int i = records - 1; i >= 0; --i) {
      const auto outcome = payments("acct", keys[static_cast<std::size_t>(i)],
                                    post(i % 2 ? "stop:charge" : "stop-in:notify"));
      if (outcome.verdict() == idem::verdict::executed) ++client_ran;
    }
  });
  go = true;
  for (std::thread& thread : threads)
    thread.join();

  // Every record finished by exactly one of the three; every step's effect made once.
  CHECK(resumed + client_ran == records);
  CHECK(downstream.total() == records * 3);
  // Calls: one a step, and one more for each notification stopped after its effect.
  CHECK(downstream.calls() == records * 3 + records / 2);
  for (const std::string& key : keys) {
    const auto found = store.find("acct", key, clock.wall_now());
    REQUIRE(found);
    CHECK(found->state == idem::record_state::completed);
  }
}
