// The one-commit conformance suite: commit_mode::one_commit (idem/store/one_commit.hpp) as
// Catch2 test cases, for any OneCommitStore, through idempotent and inbox, with a real effect
// table written in the transaction.
//
//   #include <catch2/catch.hpp>                       // Catch2 v2, before this header
//   #include <idem/testing/one_commit_conformance.hpp>
//
//   struct my_fixture {                                // one per test case; owns its database
//     using store_type = my_store;                     // a OneCommitStore
//     store_type make(std::chrono::milliseconds lock_wait);  // a fresh store on the caller's
//                                                      // time (the `now` it is given), whose
//                                                      // wait for a key's transaction is lock_wait
//     void write_effect(store_type::transaction&, const std::string& id) const;  // one row
//     long long effects(const std::string& id);        // rows written for `id`, committed
//   };
//   IDEM_ONE_COMMIT_CONFORMANCE_TESTS(my_fixture)
//
// Each behaviour is one test case named "one commit: <behaviour> - <fixture>", tagged
// [one_commit]; the cases with threads are also tagged [concurrency].
#ifndef IDEM_TESTING_ONE_COMMIT_CONFORMANCE_HPP
#define IDEM_TESTING_ONE_COMMIT_CONFORMANCE_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/one_commit_conformance.hpp>."
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <idem/core/clock.hpp>
#include <idem/policies.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/server/inbox.hpp>
#include <idem/server/lookup.hpp>
#include <idem/store/one_commit.hpp>
#include <idem/testing/detail/conformance/registration.hpp>

namespace idem::testing::one_commit {

template <class Store, commit_mode Mode = commit_mode::one_commit>
struct policies : default_policies {
  using store = Store;
  using clock = manual_clock;
  static constexpr commit_mode commit = Mode;
};

// A handler writing one effect row named by its key, answering from its request.
template <class Fixture>
struct effect_handler {
  using transaction = typename Fixture::store_type::transaction;
  const Fixture* fixture = nullptr;
  std::function<void()> before_effect{};  // a test's hook: block, throw
  std::function<void()> after_effect{};
  std::atomic<int>* runs = nullptr;
  std::string operator()(handler_context& context, const std::string& body,
                         transaction& txn) const {
    if (runs != nullptr) ++*runs;
    if (before_effect) before_effect();
    fixture->write_effect(txn, std::string(context.key()));
    if (after_effect) after_effect();
    return "paid " + body + " under fence " + std::to_string(context.fence());
  }
};

template <class Fixture, commit_mode Mode = commit_mode::one_commit>
using guarded = idempotent<effect_handler<Fixture>, policies<typename Fixture::store_type, Mode>>;

template <class Fixture, commit_mode Mode = commit_mode::one_commit>
guarded<Fixture, Mode> make_guarded(const Fixture& fixture, typename Fixture::store_type store,
                                    manual_clock clock, effect_handler<Fixture> handler = {}) {
  handler.fixture = &fixture;
  typename guarded<Fixture, Mode>::options parts;
  parts.store = std::move(store);
  parts.clock = std::move(clock);
  return guarded<Fixture, Mode>(std::move(handler), std::move(parts));
}

// A gate one thread waits at until another opens it.
class gate {
 public:
  void open() {
    {
      const std::lock_guard<std::mutex> hold(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> hold(mutex_);
    changed_.wait(hold, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
};

constexpr std::chrono::milliseconds generous_wait{30000};

template <class Fixture>
void a_new_key_commits_effect_and_record_together_and_repeats_replay() {
  Fixture fixture;
  auto store = fixture.make(generous_wait);
  manual_clock clock;
  auto guard = make_guarded<Fixture>(fixture, store, clock);
  const auto first = guard("tenant", std::string_view{"k1"}, std::string("10 EUR"));
  REQUIRE(first.verdict() == verdict::executed);
  REQUIRE(first.value() == "paid 10 EUR under fence 1");
  CHECK(first.recorded());
  CHECK(fixture.effects("k1") == 1);
  const std::optional<record> found = store.find("tenant", "k1", clock.wall_now());
  REQUIRE(found);
  CHECK(found->state == record_state::completed);
  const auto again = guard("tenant", std::string_view{"k1"}, std::string("10 EUR"));
  REQUIRE(again.verdict() == verdict::replayed);
  CHECK(again.value() == first.value());
  CHECK(fixture.effects("k1") == 1);
  const auto other = guard("tenant", std::string_view{"k1"}, std::string("99 EUR"));
  CHECK(other.verdict() == verdict::mismatch);
  CHECK(other.http_status() == 422);
  CHECK(fixture.effects("k1") == 1);
}

template <class Fixture>
void a_throwing_handler_leaves_neither_record_nor_effect() {
  Fixture fixture;
  auto store = fixture.make(generous_wait);
  manual_clock clock;
  effect_handler<Fixture> handler;
  bool fail = true;
  handler.after_effect = [&] {
    if (fail) throw std::runtime_error("card declined");
  };
  auto guard = make_guarded<Fixture>(fixture, store, clock, handler);
  CHECK_THROWS_WITH(guard("tenant", std::string_view{"k1"}, std::string("10 EUR")),
                    "card declined");
  CHECK(fixture.effects("k1") == 0);
  CHECK_FALSE(store.find("tenant", "k1", clock.wall_now()));
  fail = false;
  const auto retried = guard("tenant", std::string_view{"k1"}, std::string("10 EUR"));
  CHECK(retried.verdict() == verdict::executed);
  CHECK(fixture.effects("k1") == 1);
}

template <class Fixture>
void recovery_points_run_and_record_nothing() {
  Fixture fixture;
  auto store = fixture.make(generous_wait);
  manual_clock clock;
  int step_runs = 0;
  bool fail = true;
  auto handler = [&](handler_context& context, const std::string& body,
                     typename Fixture::store_type::transaction& txn) -> std::string {
    const int charged = context.step("charge", [&] { return ++step_runs; });
    fixture.write_effect(txn, std::string(context.key()));
    if (fail) throw std::runtime_error("after the step");
    return body + " charged " + std::to_string(charged);
  };
  using policies_type = policies<typename Fixture::store_type>;
  typename idempotent<decltype(handler), policies_type>::options parts;
  parts.store = store;
  parts.clock = clock;
  idempotent<decltype(handler), policies_type> guard(handler, std::move(parts));
  CHECK_THROWS(guard("tenant", std::string_view{"k1"}, std::string("x")));
  // The step's result was not recorded anywhere: the retry runs it again.
  CHECK_FALSE(store.find("tenant", "k1", clock.wall_now()));
  fail = false;
  const auto done = guard("tenant", std::string_view{"k1"}, std::string("x"));
  REQUIRE(done.verdict() == verdict::executed);
  CHECK(done.value() == "x charged 2");
  CHECK(step_runs == 2);
  CHECK(fixture.effects("k1") == 1);
}

template <class Fixture>
void a_live_claim_of_the_two_commit_path_is_honoured_and_an_expired_one_taken_over() {
  Fixture fixture;
  auto store = fixture.make(generous_wait);
  manual_clock clock;
  // What an attempt of the two-commit path left: a claim with one recorded step, and a second
  // step whose outcome it could not tell (in doubt: the claim is kept, as after a crash).
  auto crashed = [](handler_context& context, const std::string&) -> std::string {
    (void)context.step("charge", [] { return std::string("ch_1"); });
    context.step(
        "ship", []() -> int { throw std::runtime_error("connection lost"); },
        [](std::string_view) { return lookup_answer<int>::unknown("no answer"); });
    return "never";
  };
  using two_commit_policies = policies<typename Fixture::store_type, commit_mode::two_commits>;
  typename idempotent<decltype(crashed), two_commit_policies>::options earlier;
  earlier.store = store;
  earlier.clock = clock;
  idempotent<decltype(crashed), two_commit_policies> two_commit(crashed, std::move(earlier));
  CHECK_THROWS_WITH(two_commit("tenant", std::string_view{"k1"}, std::string("5")),
                    "connection lost");
  const std::optional<record> left = store.find("tenant", "k1", clock.wall_now());
  REQUIRE(left);
  REQUIRE(left->state == record_state::in_progress);
  int step_runs = 0;
  auto handler = [&](handler_context& context, const std::string& body,
                     typename Fixture::store_type::transaction& txn) -> std::string {
    const std::string charge = context.step("charge", [&] {
      ++step_runs;
      return std::string("ch_2");
    });
    fixture.write_effect(txn, std::string(context.key()));
    return body + " " + charge + (context.resumed() ? " resumed" : "");
  };
  using policies_type = policies<typename Fixture::store_type>;
  typename idempotent<decltype(handler), policies_type>::options parts;
  parts.store = store;
  parts.clock = clock;
  idempotent<decltype(handler), policies_type> guard(handler, std::move(parts));
  const auto live = guard("tenant", std::string_view{"k1"}, std::string("5"));
  CHECK(live.verdict() == verdict::in_progress);
  CHECK(live.http_status() == 409);
  CHECK(fixture.effects("k1") == 0);
  clock.advance(std::chrono::seconds{31});
  const auto taken = guard("tenant", std::string_view{"k1"}, std::string("5"));
  REQUIRE(taken.verdict() == verdict::executed);
  CHECK(taken.value() == "5 ch_1 resumed");
  CHECK(taken.fence() == left->fence + 1);
  CHECK(step_runs == 0);
  CHECK(fixture.effects("k1") == 1);
  // The old holder's fence no longer writes.
  CHECK_FALSE(store.complete(fenced_key{"tenant", "k1", left->fence}, "late", clock.wall_now()));
}

template <class Fixture>
void a_duplicate_waits_for_the_transaction_and_replays_it() {
  Fixture fixture;
  auto store = fixture.make(generous_wait);
  manual_clock clock;
  gate inside;
  gate finish;
  std::atomic<int> runs{0};
  effect_handler<Fixture> handler;
  handler.runs = &runs;
  handler.after_effect = [&] {
    if (runs.load() == 1) {
      inside.open();
      finish.wait();
    }
  };
  auto guard = make_guarded<Fixture>(fixture, store, clock, handler);
  std::string first_answer;
  verdict first_verdict = verdict::in_progress;  // Catch2's assertions stay on this thread
  std::thread first([&] {
    const auto outcome = guard("tenant", std::string_view{"k1"}, std::string("7"));
    first_verdict = outcome.verdict();
    if (outcome) first_answer = outcome.value();
  });
  inside.wait();
  std::atomic<bool> second_done{false};
  verdict second_verdict = verdict::executed;
  std::string second_answer;
  std::thread second([&] {
    const auto outcome = guard("tenant", std::string_view{"k1"}, std::string("7"));
    second_verdict = outcome.verdict();
    if (outcome) second_answer = outcome.value();
    second_done = true;
  });
  // The second waits on the first's transaction (no 409), however long it stays open.
  std::this_thread::sleep_for(std::chrono::milliseconds{300});
  CHECK_FALSE(second_done.load());
  finish.open();
  first.join();
  second.join();
  CHECK(first_verdict == verdict::executed);
  CHECK(second_verdict == verdict::replayed);
  CHECK(second_answer == first_answer);
  CHECK(runs.load() == 1);
  CHECK(fixture.effects("k1") == 1);
}

template <class Fixture>
void a_wait_past_the_lock_timeout_answers_in_progress() {
  Fixture fixture;
  auto store = fixture.make(std::chrono::milliseconds{200});
  manual_clock clock;
  gate inside;
  gate finish;
  std::atomic<int> runs{0};
  effect_handler<Fixture> handler;
  handler.runs = &runs;
  handler.after_effect = [&] {
    if (runs.load() == 1) {
      inside.open();
      finish.wait();
    }
  };
  auto guard = make_guarded<Fixture>(fixture, store, clock, handler);
  verdict first_verdict = verdict::in_progress;
  std::thread first(
      [&] { first_verdict = guard("tenant", std::string_view{"k1"}, std::string("7")).verdict(); });
  inside.wait();
  const auto waited = guard("tenant", std::string_view{"k1"}, std::string("7"));
  CHECK(waited.verdict() == verdict::in_progress);
  CHECK(waited.http_status() == 409);
  CHECK_FALSE(waited.has_value());
  finish.open();
  first.join();
  CHECK(first_verdict == verdict::executed);
  CHECK(runs.load() == 1);
  CHECK(guard("tenant", std::string_view{"k1"}, std::string("7")).verdict() == verdict::replayed);
  CHECK(fixture.effects("k1") == 1);
}

template <class Fixture>
void a_storm_on_one_key_has_one_effect_and_identical_replays() {
  constexpr int threads = 64;
  constexpr int rounds = 10;
  Fixture fixture;
  auto store = fixture.make(generous_wait);
  manual_clock clock;
  std::atomic<int> runs{0};
  effect_handler<Fixture> handler;
  handler.runs = &runs;
  auto guard = make_guarded<Fixture>(fixture, store, clock, handler);
  for (int round = 0; round < rounds; ++round) {
    const std::string key = "storm-" + std::to_string(round);
    std::atomic<int> executed{0};
    std::atomic<int> replayed{0};
    std::atomic<int> other{0};
    std::vector<std::string> answers(threads);
    std::atomic<int> ready{0};
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ++ready;
        while (ready.load() < threads)
          std::this_thread::yield();
        const auto outcome = guard("tenant", std::string_view{key}, std::string("42"));
        if (outcome.verdict() == verdict::executed) {
          ++executed;
        } else if (outcome.verdict() == verdict::replayed) {
          ++replayed;
        } else {
          ++other;
        }
        if (outcome) answers[static_cast<std::size_t>(t)] = outcome.value();
      });
    }
    for (std::thread& each : pool)
      each.join();
    CHECK(executed.load() == 1);
    CHECK(replayed.load() == threads - 1);
    CHECK(other.load() == 0);
    for (const std::string& answer : answers)
      CHECK(answer == "paid 42 under fence 1");
    CHECK(fixture.effects(key) == 1);
  }
  CHECK(runs.load() == rounds);
}

template <class Fixture>
void an_inbox_in_one_commit_acts_once_per_event() {
  Fixture fixture;
  auto store = fixture.make(generous_wait);
  manual_clock clock;
  typename inbox<policies<typename Fixture::store_type>>::options parts;
  parts.store = store;
  parts.clock = clock;
  inbox<policies<typename Fixture::store_type>> consumed(std::move(parts));
  int runs = 0;
  bool fail = true;
  const auto consume = [&](typename Fixture::store_type::transaction& txn) {
    ++runs;
    fixture.write_effect(txn, "event-1");
    if (fail) throw std::runtime_error("poison");
  };
  CHECK_THROWS_WITH(consumed.deduplicate("orders", "event-1", consume), "poison");
  CHECK(fixture.effects("event-1") == 0);
  fail = false;
  CHECK(consumed.deduplicate("orders", "event-1", consume).verdict() == verdict::executed);
  CHECK(consumed.deduplicate("orders", "event-1", consume).verdict() == verdict::replayed);
  CHECK(runs == 2);
  CHECK(fixture.effects("event-1") == 1);
}

}  // namespace idem::testing::one_commit

#define IDEM_ONE_COMMIT_CASE(Fixture, behaviour, tags, function) \
  TEMPLATE_TEST_CASE("one commit: " behaviour, tags, Fixture) {  \
    ::idem::testing::one_commit::function<TestType>();           \
  }

// IDEM_ONE_COMMIT_SERIAL_CASE: IDEM_ONE_COMMIT_CASE for a case not tagged [concurrency], which a
// build that defines IDEM_TESTING_CONCURRENCY_ONLY leaves out
// (idem/testing/detail/conformance/registration.hpp).
#define IDEM_ONE_COMMIT_SERIAL_CASE(Fixture, behaviour, tags, function) \
  IDEM_CONFORMANCE_SERIAL(IDEM_ONE_COMMIT_CASE(Fixture, behaviour, tags, function))

#define IDEM_ONE_COMMIT_CONFORMANCE_TESTS(Fixture)                                                 \
  IDEM_ONE_COMMIT_SERIAL_CASE(Fixture, "a new key commits its effect and record together",         \
                              "[one_commit]",                                                      \
                              a_new_key_commits_effect_and_record_together_and_repeats_replay)     \
  IDEM_ONE_COMMIT_SERIAL_CASE(Fixture, "a throwing handler leaves neither record nor effect",      \
                              "[one_commit]", a_throwing_handler_leaves_neither_record_nor_effect) \
  IDEM_ONE_COMMIT_SERIAL_CASE(Fixture, "recovery points run and record nothing", "[one_commit]",   \
                              recovery_points_run_and_record_nothing)                              \
  IDEM_ONE_COMMIT_SERIAL_CASE(                                                                     \
      Fixture, "a two-commit claim is honoured while live and taken over once expired",            \
      "[one_commit]",                                                                              \
      a_live_claim_of_the_two_commit_path_is_honoured_and_an_expired_one_taken_over)               \
  IDEM_ONE_COMMIT_CASE(Fixture, "a duplicate waits for the transaction and replays it",            \
                       "[one_commit][concurrency]",                                                \
                       a_duplicate_waits_for_the_transaction_and_replays_it)                       \
  IDEM_ONE_COMMIT_CASE(Fixture, "a wait past the lock timeout answers in_progress",                \
                       "[one_commit][concurrency]",                                                \
                       a_wait_past_the_lock_timeout_answers_in_progress)                           \
  IDEM_ONE_COMMIT_CASE(Fixture, "a storm of 64 threads on one key has one effect",                 \
                       "[one_commit][concurrency]",                                                \
                       a_storm_on_one_key_has_one_effect_and_identical_replays)                    \
  IDEM_ONE_COMMIT_SERIAL_CASE(Fixture, "an inbox in one commit acts once per event",               \
                              "[one_commit]", an_inbox_in_one_commit_acts_once_per_event)

#endif  // IDEM_TESTING_ONE_COMMIT_CONFORMANCE_HPP
