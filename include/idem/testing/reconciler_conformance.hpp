// The reconciler conformance suite: issue #30's proofs (idem/reconciler.hpp) as Catch2 test
// cases, for any store, including your own: resumable records finished without their client
// with one effect a step, the report's rows against a ground truth the test holds, corrupt and
// oversized kept requests, lookups that throw, passes in batches, handlers failing again,
// reconcilers racing a retrying client, and lookup before retry against a downstream without
// idempotency keys.
//
//   #include <catch2/catch.hpp>                       // Catch2 v2, before this header
//   #include <idem/testing/reconciler_conformance.hpp>
//   IDEM_RECONCILER_CONFORMANCE_TESTS(my_store_factory) // the store conformance suite's factory
//
// Each case is named "reconciler conformance: <behaviour> - <factory>", tagged [reconciler]
// (or [lookup]); the race is also tagged [concurrency]. A "crash" here is a handler that throws
// idem::lease_lost after the steps it got through: the engine then leaves the claim as a dead
// process would (in progress, its recovery points recorded). tests/crash kills real processes.
// Time is a manual_clock.
#ifndef IDEM_TESTING_RECONCILER_CONFORMANCE_HPP
#define IDEM_TESTING_RECONCILER_CONFORMANCE_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/reconciler_conformance.hpp>."
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <idem/core/clock.hpp>
#include <idem/core/fingerprint/xxh3.hpp>
#include <idem/reconciler.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/testing/detail/conformance/registration.hpp>
#include <idem/testing/detail/conformance/support.hpp>

namespace idem::testing {

namespace reconciler_conformance {

using namespace std::chrono_literals;
using conformance::fresh;

template <class Factory>
struct policies_of : ::idem::default_policies {
  using store = conformance::store_of<Factory>;
  using clock = ::idem::manual_clock;
};

template <class Factory>
struct reconciler_policies_of : ::idem::default_reconciler_policies {
  using store = conformance::store_of<Factory>;
  using clock = ::idem::manual_clock;
  using observer = ::idem::counting_reconciler_observer;
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

  ::idem::http_response operator()(::idem::handler_context& ctx,
                                   const ::idem::http_request& request) const {
    const auto stop_here = [&](const std::string& where) {
      if (request.body == where && stops_left->fetch_sub(1) > 0) throw ::idem::lease_lost{};
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
    return ::idem::http_response{201, {}, receipt};
  }
};

// A bank without idempotency keys: a transfer made twice is two transfers. It can be told to lose
// the answer of a transfer that landed, to fail before landing, and to fail lookups.
class keyless_bank {
 public:
  explicit keyless_bank(std::uint64_t seed) : random_(seed) {}

  std::string transfer(const std::string& reference) {
    ++calls_;
    // Called again for a reference whose earlier call was not looked up since: what lookup
    // before retry exists to prevent.
    if (tried_.count(reference) != 0 && looked_up_.count(reference) == 0) ++unchecked_repeats_;
    tried_.insert(reference);
    looked_up_.erase(reference);
    const int roll = die();
    if (roll < 20) throw std::runtime_error("connection reset before the transfer");
    const std::string id = "tr_" + std::to_string(++next_id_);
    transfers_[reference].push_back(id);
    if (roll < 45) throw std::runtime_error("connection reset after the transfer");
    return id;
  }

  ::idem::lookup_answer<std::string> find(std::string_view reference) {
    ++lookups_;
    const std::string key(reference);
    if (die() < 15) throw std::runtime_error("the bank's search is down");
    looked_up_.insert(key);
    const auto found = transfers_.find(key);
    if (found == transfers_.end()) return ::idem::lookup_answer<std::string>::not_landed();
    return ::idem::lookup_answer<std::string>::landed(found->second.front());
  }

  ::idem::landing landed(std::string_view reference) const {
    return transfers_.count(std::string(reference)) ? ::idem::landing::landed
                                                    : ::idem::landing::not_landed;
  }
  std::size_t transfers_of(const std::string& reference) const {
    const auto found = transfers_.find(reference);
    return found == transfers_.end() ? 0 : found->second.size();
  }
  int calls() const { return calls_; }
  int lookups() const { return lookups_; }
  int unchecked_repeats() const { return unchecked_repeats_; }

 private:
  int die() { return static_cast<int>(random_() % 100); }

  std::mt19937_64 random_;
  std::map<std::string, std::vector<std::string>> transfers_;
  std::set<std::string> tried_, looked_up_;
  int next_id_ = 0;
  int calls_ = 0;
  int lookups_ = 0;
  int unchecked_repeats_ = 0;
};

template <class Factory>
using payments_of = ::idem::idempotent<three_steps, policies_of<Factory>>;

/// A payments wrapper's options on `store` and `clock`, keeping no requests.
template <class Factory>
typename payments_of<Factory>::options plain_options(conformance::store_of<Factory> store,
                                                     ::idem::manual_clock clock) {
  typename payments_of<Factory>::options options;
  options.store = std::move(store);
  options.clock = std::move(clock);
  return options;
}

/// The same, resumable: requests kept, under the name "payments".
template <class Factory>
typename payments_of<Factory>::options resumable_options(conformance::store_of<Factory> store,
                                                         ::idem::manual_clock clock) {
  typename payments_of<Factory>::options options =
      plain_options<Factory>(std::move(store), std::move(clock));
  options.max_kept_request_bytes = 4096;
  options.name = "payments";
  return options;
}

inline ::idem::http_request post(std::string body) {
  return ::idem::http_request{
      "POST", "/payments", {{"Content-Type", "text/plain"}}, std::move(body)};
}

inline std::string reference(std::string_view scope, std::string_view key, std::string_view step) {
  return std::string(::idem::downstream_key(scope, key, step).view());
}

template <class Factory>
void a_resumable_record_abandoned_at_each_recovery_point_is_finished_with_one_effect_a_step() {
  for (const char* where :
       {"stop:charge", "stop:record", "stop-in:charge", "stop-in:record", "stop-in:notify"}) {
    CAPTURE(where);
    Factory factory;
    auto store = fresh(factory);
    ::idem::manual_clock clock;
    ledger downstream;
    std::atomic<int> stops{1};
    payments_of<Factory> payments{three_steps{&downstream, &stops},
                                  resumable_options<Factory>(store, clock)};
    const auto first = payments("acct", "k1", post(where));
    REQUIRE(first.verdict() == ::idem::verdict::in_progress);  // the "process" died

    ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, {}, clock);
    reconciler.template resume_with<::idem::http_request>(payments);
    CHECK(reconciler.run_once().summary.resumed == 0);  // its lease still holds
    clock.advance(31s);
    const ::idem::reconcile_report report = reconciler.run_once();
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
    REQUIRE(again.verdict() == ::idem::verdict::replayed);
    CHECK(again.value() == ::idem::http_response{201, {}, "charge;record;notify;"});
    CHECK(reconciler.run_once().summary.examined == 0);
    CHECK(reconciler.observer().resumed() == 1);
  }
}

template <class Factory>
void a_record_of_a_wrapper_that_keeps_no_requests_is_reported_step_by_step() {
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{1};
  payments_of<Factory> payments{three_steps{&downstream, &stops},
                                plain_options<Factory>(store, clock)};
  REQUIRE(payments("acct", "k2", post("stop-in:record")).verdict() == ::idem::verdict::in_progress);
  clock.advance(40s);

  ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, {}, clock);
  // What the lookup was asked: copies, since the query's views last only the call.
  std::vector<std::vector<std::string>> asked;
  reconciler.lookup_with([&](const ::idem::lookup_query& query) {
    asked.push_back(
        {std::string(query.scope), std::string(query.step), std::string(query.reference)});
    return downstream.count(std::string(query.reference)) > 0 ? ::idem::landing::landed
                                                              : ::idem::landing::not_landed;
  });
  const ::idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.examined == 1);
  CHECK(report.summary.not_resumable == 1);
  CHECK(report.summary.resumed == 0);
  REQUIRE(report.rows.size() == 2);

  // The ground truth: charge recorded, record started (its effect landed, its answer lost).
  ::idem::discrepancy charge;
  charge.scope = "acct";
  charge.redacted_key = ::idem::redacted_key("k2").str();
  charge.age = 40s;
  charge.step = "charge";
  charge.downstream_key = reference("acct", "k2", "charge");
  charge.classification = ::idem::landing::landed;
  charge.source = ::idem::evidence::record;
  charge.reason = report.rows[0].reason;
  CHECK(report.rows[0] == charge);
  CHECK(report.rows[0].reason.find("not resumable") != std::string::npos);

  ::idem::discrepancy record = charge;
  record.step = "record";
  record.downstream_key = reference("acct", "k2", "record");
  record.source = ::idem::evidence::lookup;
  record.reason = report.rows[1].reason;
  CHECK(report.rows[1] == record);
  CHECK(report.rows[1].reason.find("the lookup answered landed") != std::string::npos);
  REQUIRE(asked.size() == 1);
  CHECK(asked[0] == std::vector<std::string>{"acct", "record", reference("acct", "k2", "record")});

  CHECK(report.summary.landed == 2);
  CHECK(report.summary.exit_status() == 1);
  CHECK(report.summary.needs_person());
  // The key itself is nowhere in the report.
  const std::string lines = ::idem::json_lines(report.rows);
  CHECK(lines.find("k2\"") == std::string::npos);
  CHECK(lines.find(::idem::redacted_key("k2").str()) != std::string::npos);
  CHECK(::idem::summary_table(report.summary).find("a person is needed") != std::string::npos);

  // Held by the reconciler for its lease: reported once a pass, not twice.
  CHECK(reconciler.run_once().summary.examined == 0);
  clock.advance(31s);
  CHECK(reconciler.run_once().summary.not_resumable == 1);
  // Nothing ran again.
  CHECK(downstream.total() == 2);
  CHECK(reconciler.observer().reported() == 2);
  CHECK(reconciler.observer().rows(::idem::landing::landed) == 4);
}

template <class Factory>
void a_record_that_never_started_a_step_is_one_not_landed_row_which_needs_nobody() {
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  const ::idem::digest print = ::idem::xxh3_128::hash(std::string_view{"x"});
  REQUIRE(store.claim(::idem::claim_request{"s", "k", print, clock.wall_now(), 30s, 24h}).status ==
          ::idem::claim_status::claimed);
  clock.advance(2h);
  ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, {}, clock);
  const ::idem::reconcile_report report = reconciler.run_once();
  REQUIRE(report.rows.size() == 1);
  CHECK(report.rows[0].step.empty());
  CHECK(report.rows[0].classification == ::idem::landing::not_landed);
  CHECK(report.summary.stuck_by_age[3] == 1);  // under a day
  CHECK(reconciler.observer().stuck(3) == 1);
  CHECK(report.summary.exit_status() == 0);
}

template <class Factory>
void a_kept_request_over_the_cap_is_refused_at_claim_time_and_nothing_is_stored() {
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{0};
  auto options = resumable_options<Factory>(store, clock);
  options.max_kept_request_bytes = 64;
  payments_of<Factory> payments{three_steps{&downstream, &stops}, options};
  const auto refused = payments("acct", "big", post(std::string(100, 'x')));
  CHECK(refused.verdict() == ::idem::verdict::body_too_large);
  CHECK(refused.http_status() == 413);
  CHECK(std::string(refused.message()).find("max_kept_request_bytes (64)") != std::string::npos);
  CHECK_FALSE(store.find("acct", "big", clock.wall_now()));
  CHECK(downstream.total() == 0);
  // One that fits runs, and its record keeps it until it completes.
  CHECK(payments("acct", "small", post("x")).verdict() == ::idem::verdict::executed);
  const auto done = store.find("acct", "small", clock.wall_now());
  REQUIRE(done);
  CHECK(done->recovery.empty());
}

template <class Factory>
void a_corrupt_kept_request_is_reported_and_never_resumed() {
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{1};
  payments_of<Factory> payments{three_steps{&downstream, &stops},
                                resumable_options<Factory>(store, clock)};
  REQUIRE(payments("acct", "k", post("stop:charge")).verdict() == ::idem::verdict::in_progress);
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
  ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, {}, clock);
  reconciler.template resume_with<::idem::http_request>(payments);
  const ::idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.resumed == 0);
  CHECK(report.summary.not_resumable == 1);
  REQUIRE_FALSE(report.rows.empty());
  CHECK(downstream.total() == 1);  // the charge, from the first run; nothing ran again
  const auto still = store.find("acct", "k", clock.wall_now());
  REQUIRE(still);
  CHECK(still->state == ::idem::record_state::in_progress);
}

template <class Factory>
void a_lookup_that_throws_is_unknown_and_the_pass_goes_on() {
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{3};
  payments_of<Factory> payments{three_steps{&downstream, &stops},
                                plain_options<Factory>(store, clock)};
  for (const char* key : {"a", "b", "c"})
    REQUIRE(payments("acct", key, post("stop-in:charge")).verdict() ==
            ::idem::verdict::in_progress);
  clock.advance(31s);
  ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, {}, clock);
  int calls = 0;
  reconciler.lookup_with([&](const ::idem::lookup_query&) -> ::idem::landing {
    if (++calls == 2) throw std::runtime_error("the ledger is down");
    return ::idem::landing::landed;
  });
  const ::idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.not_resumable == 3);
  CHECK(report.summary.landed == 2);
  CHECK(report.summary.unknown == 1);
  int unknown = 0;
  for (const ::idem::discrepancy& row : report.rows) {
    if (row.classification != ::idem::landing::unknown) continue;
    ++unknown;
    CHECK(row.reason.find("the lookup threw: the ledger is down") != std::string::npos);
  }
  CHECK(unknown == 1);
}

template <class Factory>
void a_pass_walks_every_stuck_record_once_batch_by_batch() {
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{300};
  payments_of<Factory> payments{three_steps{&downstream, &stops},
                                resumable_options<Factory>(store, clock)};
  for (int i = 0; i < 300; ++i) {
    REQUIRE(payments("acct", "key-" + std::to_string(i), post("stop:charge")).verdict() ==
            ::idem::verdict::in_progress);
  }
  for (int i = 0; i < 50; ++i)
    REQUIRE(payments("acct", "done-" + std::to_string(i), post("x")).verdict() ==
            ::idem::verdict::executed);
  clock.advance(31s);
  ::idem::reconciler_options options;
  options.batch_size = 32;
  ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, options, clock);
  reconciler.template resume_with<::idem::http_request>(payments);
  const ::idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.examined == 300);
  CHECK(report.summary.resumed == 300);
  CHECK(downstream.total() == 300 * 3 + 50 * 3);
  CHECK(downstream.calls() == downstream.total());  // no step of a resumed run ran twice
}

template <class Factory>
void a_handler_that_fails_again_keeps_its_claim_and_is_reported() {
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  int charges = 0;
  int runs = 0;
  auto handler = [&](::idem::handler_context& ctx, const ::idem::http_request&) {
    ctx.step("charge", [&] { return ++charges; });
    ++runs;
    if (runs == 1) throw ::idem::lease_lost{};                      // the first run dies
    if (runs == 2) throw std::runtime_error("the mailer is down");  // the resumed one fails
    return ::idem::http_response{200, {}, "ok"};
  };
  using wrapper = ::idem::idempotent<decltype(handler), policies_of<Factory>>;
  typename wrapper::options options;
  options.store = store;
  options.clock = clock;
  options.max_kept_request_bytes = 1024;
  wrapper guarded{handler, options};
  REQUIRE(guarded("s", "k", post("x")).verdict() == ::idem::verdict::in_progress);
  clock.advance(31s);

  ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, {}, clock);
  reconciler.template resume_with<::idem::http_request>(guarded);
  const ::idem::reconcile_report failed = reconciler.run_once();
  CHECK(failed.summary.failed == 1);
  REQUIRE(failed.rows.size() == 1);
  CHECK(failed.rows[0].step == "charge");
  CHECK(failed.rows[0].classification == ::idem::landing::landed);
  CHECK(failed.rows[0].reason.find("the mailer is down") != std::string::npos);
  // Kept, not released: a client's retry now waits for the lease, it does not start over.
  CHECK(guarded("s", "k", post("x")).verdict() == ::idem::verdict::in_progress);
  const auto held = store.find("s", "k", clock.wall_now());
  REQUIRE(held);
  CHECK(held->state == ::idem::record_state::in_progress);
  CHECK_FALSE(held->recovery.empty());

  clock.advance(31s);
  const ::idem::reconcile_report finished = reconciler.run_once();
  CHECK(finished.summary.resumed == 1);
  CHECK(charges == 1);
  CHECK(guarded("s", "k", post("x")).verdict() == ::idem::verdict::replayed);
}

template <class Factory>
void reconcilers_racing_a_retrying_client_finish_each_record_once() {
  constexpr int records = 200;
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  ledger downstream;
  std::atomic<int> stops{records};
  payments_of<Factory> payments{three_steps{&downstream, &stops},
                                resumable_options<Factory>(store, clock)};
  std::vector<std::string> keys;
  for (int i = 0; i < records; ++i) {
    keys.push_back("key-" + std::to_string(i));
    // Half die after the charge, half inside the notification (after its effect).
    REQUIRE(
        payments("acct", keys.back(), post(i % 2 ? "stop:charge" : "stop-in:notify")).verdict() ==
        ::idem::verdict::in_progress);
  }
  clock.advance(31s);

  std::atomic<int> resumed{0}, lost{0}, client_ran{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      ::idem::reconciler_options options;
      options.batch_size = 16;
      ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, options, clock);
      reconciler.template resume_with<::idem::http_request>(payments);
      while (!go)
        std::this_thread::yield();
      const ::idem::reconcile_report report = reconciler.run_once();
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
      if (outcome.verdict() == ::idem::verdict::executed) ++client_ran;
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
    CHECK(found->state == ::idem::record_state::completed);
  }
}

template <class Factory>
void a_keyless_downstream_that_loses_answers_is_never_charged_twice() {
  Factory factory;
  auto store = fresh(factory);
  ::idem::manual_clock clock;
  keyless_bank bank(20261203);
  auto handler = [&](::idem::handler_context& ctx, const ::idem::http_request&) {
    const std::string reference(ctx.downstream_key("transfer").view());
    const std::string id = ctx.step(
        "transfer", [&] { return bank.transfer(reference); },
        [&](std::string_view ref) { return bank.find(ref); });
    return ::idem::http_response{201, {}, id};
  };
  using wrapper = ::idem::idempotent<decltype(handler), policies_of<Factory>>;
  typename wrapper::options options;
  options.store = store;
  options.clock = clock;
  wrapper transfers{handler, options};

  constexpr int keys = 400;
  int completed = 0;
  std::vector<std::string> open;
  for (int i = 0; i < keys; ++i) {
    const std::string key = "t-" + std::to_string(i);
    // A client that retries a few times, each after the lease, then gives up.
    bool done = false;
    for (int attempt = 0; attempt < 3 && !done; ++attempt) {
      try {
        const auto outcome = transfers("acct", key, ::idem::http_request{"POST", "/t", {}, "9"});
        done = outcome.verdict() == ::idem::verdict::executed ||
               outcome.verdict() == ::idem::verdict::replayed;
      } catch (const std::exception&) {
        // the step threw (in doubt: the claim is kept) or its lookup could not tell
      }
      clock.advance(31s);
    }
    if (done) {
      ++completed;
    } else {
      open.push_back(key);
    }
  }
  // The bank never moved money twice under one reference, and never was called again for a
  // reference whose earlier call had not been looked up since.
  for (int i = 0; i < keys; ++i) {
    const std::string reference(
        ::idem::downstream_key("acct", "t-" + std::to_string(i), "transfer").view());
    CHECK(bank.transfers_of(reference) <= 1);
  }
  CHECK(bank.unchecked_repeats() == 0);
  CHECK(bank.lookups() > 0);
  CHECK(completed > keys / 2);
  REQUIRE_FALSE(open.empty());  // the seed leaves some in doubt

  // What the clients gave up on is in the report: each open key, one row, with what the bank
  // says (unknown when its search is down).
  ::idem::reconciler<reconciler_policies_of<Factory>> reconciler(store, {}, clock);
  reconciler.lookup_with(
      [&](const ::idem::lookup_query& query) { return bank.find(query.reference).status(); });
  const ::idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.not_resumable == open.size());
  std::set<std::string> reported;
  for (const ::idem::discrepancy& row : report.rows) {
    reported.insert(row.redacted_key);
    CHECK(row.step == "transfer");
    CHECK(row.source == ::idem::evidence::lookup);
  }
  for (const std::string& key : open)
    CHECK(reported.count(::idem::redacted_key(key).str()) == 1);
  CHECK(report.summary.landed + report.summary.not_landed + report.summary.unknown ==
        report.rows.size());
}

}  // namespace reconciler_conformance
}  // namespace idem::testing

// One Catch2 test case per behaviour, for the factory given.
#define IDEM_RECONCILER_CASE(Factory, behaviour, tags, function)                     \
  TEMPLATE_TEST_CASE("reconciler conformance: " behaviour, tags, Factory) {          \
    static_assert(::idem::testing::StoreFactory<TestType>,                           \
                  "A conformance factory must be default-constructible, provide "    \
                  "make(const idem::testing::store_limits&) returning a Store, and " \
                  "static constexpr bool bounded.");                                 \
    ::idem::testing::reconciler_conformance::function<TestType>();                   \
  }

// IDEM_RECONCILER_SERIAL_CASE: IDEM_RECONCILER_CASE for a case not tagged [concurrency], which a
// build that defines IDEM_TESTING_CONCURRENCY_ONLY leaves out
// (idem/testing/detail/conformance/registration.hpp).
#define IDEM_RECONCILER_SERIAL_CASE(Factory, behaviour, tags, function) \
  IDEM_CONFORMANCE_SERIAL(IDEM_RECONCILER_CASE(Factory, behaviour, tags, function))

#define IDEM_RECONCILER_CONFORMANCE_TESTS(Factory)                                                 \
  IDEM_RECONCILER_SERIAL_CASE(                                                                     \
      Factory,                                                                                     \
      "a resumable record abandoned at each recovery point is finished with one effect a step",    \
      "[reconciler]",                                                                              \
      a_resumable_record_abandoned_at_each_recovery_point_is_finished_with_one_effect_a_step)      \
  IDEM_RECONCILER_SERIAL_CASE(                                                                     \
      Factory, "a record of a wrapper that keeps no requests is reported, step by step",           \
      "[reconciler]", a_record_of_a_wrapper_that_keeps_no_requests_is_reported_step_by_step)       \
  IDEM_RECONCILER_SERIAL_CASE(                                                                     \
      Factory, "a record that never started a step is one not_landed row, which needs nobody",     \
      "[reconciler]", a_record_that_never_started_a_step_is_one_not_landed_row_which_needs_nobody) \
  IDEM_RECONCILER_SERIAL_CASE(                                                                     \
      Factory, "a kept request over the cap is refused at claim time and nothing is stored",       \
      "[reconciler]", a_kept_request_over_the_cap_is_refused_at_claim_time_and_nothing_is_stored)  \
  IDEM_RECONCILER_SERIAL_CASE(Factory, "a corrupt kept request is reported and never resumed",     \
                              "[reconciler]",                                                      \
                              a_corrupt_kept_request_is_reported_and_never_resumed)                \
  IDEM_RECONCILER_SERIAL_CASE(Factory, "a lookup that throws is unknown, and the pass goes on",    \
                              "[reconciler]",                                                      \
                              a_lookup_that_throws_is_unknown_and_the_pass_goes_on)                \
  IDEM_RECONCILER_SERIAL_CASE(Factory, "a pass walks every stuck record once, batch by batch",     \
                              "[reconciler]", a_pass_walks_every_stuck_record_once_batch_by_batch) \
  IDEM_RECONCILER_SERIAL_CASE(                                                                     \
      Factory, "a handler that fails again keeps its claim and is reported", "[reconciler]",       \
      a_handler_that_fails_again_keeps_its_claim_and_is_reported)                                  \
  IDEM_RECONCILER_CASE(Factory, "reconcilers racing a retrying client finish each record once",    \
                       "[reconciler][concurrency]",                                                \
                       reconcilers_racing_a_retrying_client_finish_each_record_once)               \
  IDEM_RECONCILER_SERIAL_CASE(                                                                     \
      Factory, "a keyless downstream that loses answers is never charged twice", "[lookup]",       \
      a_keyless_downstream_that_loses_answers_is_never_charged_twice)

#endif  // IDEM_TESTING_RECONCILER_CONFORMANCE_HPP
