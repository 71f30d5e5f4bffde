// One retrying object shared by many threads: each operation keeps its own key, engine and
// history, and the shared budget, breaker and observer stay consistent. Run under TSan.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

struct response {
  int status;
};

struct shared_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using budget = idem::token_bucket;
  using breaker = idem::failure_rate_breaker;
  using observer = idem::counting_observer;
};

}  // namespace

TEST_CASE("operations on many threads keep their own key and share counters exactly",
          "[concurrency]") {
  constexpr int threads = 8;
  constexpr int operations_per_thread = 1'500;
  idem::manual_clock clock;
  std::atomic<long long> calls{0};
  std::atomic<long long> key_changes{0};

  // Fails the first attempt of every third operation; checks that the key never changes
  // between the attempts of one operation.
  auto dependency = [&](const idem::attempt_context& attempt) {
    calls.fetch_add(1, std::memory_order_relaxed);
    thread_local std::string first_key;
    if (attempt.attempt() == 1) {
      first_key = std::string(attempt.key());
    } else if (first_key != attempt.key()) {
      key_changes.fetch_add(1, std::memory_order_relaxed);
    }
    const bool fail = attempt.attempt() == 1 && attempt.key().back() < '6';
    return response{fail ? 503 : 200};
  };
  using call_type = idem::retrying<decltype(dependency), shared_policies>;
  call_type::options o;
  o.clock = clock;
  o.seed = 11;
  call_type call{dependency, o};

  std::vector<std::vector<std::string>> keys(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < operations_per_thread; ++i) {
        auto outcome = call();
        if (!outcome.succeeded()) continue;
        keys[static_cast<std::size_t>(t)].emplace_back(outcome.key());
      }
    });
  }
  for (auto& w : workers)
    w.join();

  CHECK(key_changes.load() == 0);
  const auto& counts = call.observer();
  CHECK(counts.operations() == threads * operations_per_thread);
  CHECK(counts.attempts() == calls.load());
  CHECK(counts.successes() + counts.give_ups() == counts.operations());
  // Every operation drew its own key: per-operation engines never collide across threads.
  std::set<std::string> distinct;
  std::size_t total = 0;
  for (const auto& list : keys) {
    total += list.size();
    distinct.insert(list.begin(), list.end());
  }
  CHECK(distinct.size() == total);
  CHECK(total > 0);
}

namespace {

struct nesting_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using budget = idem::unlimited_budget;
  // The threads share one manual clock, and every backoff sleep moves it for all of them: a
  // thread descheduled mid-call (TSan makes that common) could see the others' sleeps add up past
  // a 10 s deadline and stop after two attempts (seen once in CI: 2398 calls of 2400). The
  // deadline is not what this tests.
  static constexpr std::chrono::hours deadline{24};
};

}  // namespace

TEST_CASE("nesting is tracked per thread", "[concurrency]") {
  // A layer running on one thread must not make another thread's call count as nested.
  constexpr int threads = 4;
  idem::manual_clock clock;
  std::atomic<int> inner_calls{0};
  auto inner_dependency = [&](const idem::attempt_context&) {
    inner_calls.fetch_add(1, std::memory_order_relaxed);
    return response{503};
  };
  using inner_type = idem::retrying<decltype(inner_dependency), nesting_policies>;
  inner_type::options o;
  o.clock = clock;
  inner_type inner{inner_dependency, o};

  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      while (!go.load())
        std::this_thread::yield();
      for (int i = 0; i < 200; ++i)
        inner();  // top level on this thread: 3 attempts each
    });
  }
  go = true;
  for (auto& w : workers)
    w.join();
  CHECK(inner_calls.load() == threads * 200 * 3);
}
