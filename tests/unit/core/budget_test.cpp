// Retry budgets: token_bucket grants the AWS SDKs' quota from a full bucket, refills from first
// attempts so that under total failure retries settle at retry_ratio of the traffic, never holds
// more than max_tokens, and never grants more than it holds, even to many threads at once.
#include <catch2/catch.hpp>
#include <idem/idem.hpp>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

idem::retry_reason reason_for(bool ambiguous) {
  return ambiguous ? idem::retry_reason::ambiguous : idem::retry_reason::transient;
}

/// How many retries the bucket grants before it first refuses, with nothing deposited.
int grants_until_refused(idem::token_bucket& bucket, bool ambiguous) {
  int granted = 0;
  while (bucket.try_acquire_retry(reason_for(ambiguous)))
    ++granted;
  return granted;
}

/// Every operation makes a first attempt and then up to two retries, all of which fail.
template <class Budget>
long retries_under_total_failure(Budget budget, long operations, bool ambiguous) {
  long retries = 0;
  for (long op = 0; op < operations; ++op) {
    budget.on_request();
    for (int retry = 0; retry < 2 && budget.try_acquire_retry(reason_for(ambiguous)); ++retry)
      ++retries;
  }
  return retries;
}

std::string message_of_rejected(const idem::token_bucket::options& s) {
  try {
    idem::token_bucket bucket{s};
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("a full default bucket grants exactly 100 retries, then refuses") {
  idem::token_bucket bucket;
  CHECK(bucket.tokens() == 500);
  CHECK(grants_until_refused(bucket, false) == 100);
  CHECK(bucket.tokens() == 0);
  CHECK_FALSE(bucket.try_acquire_retry(idem::retry_reason::transient));
  CHECK_FALSE(bucket.try_acquire_retry(idem::retry_reason::ambiguous));
}

TEST_CASE("a full default bucket grants exactly 50 retries after ambiguous outcomes") {
  idem::token_bucket bucket;
  CHECK(grants_until_refused(bucket, true) == 50);
  CHECK(bucket.tokens() == 0);
}

TEST_CASE("an ambiguous retry is refused when only an ordinary retry's cost is left") {
  idem::token_bucket bucket;
  for (int i = 0; i < 99; ++i)
    REQUIRE(bucket.try_acquire_retry(idem::retry_reason::transient));
  CHECK(bucket.tokens() == 5);
  CHECK_FALSE(bucket.try_acquire_retry(idem::retry_reason::ambiguous));
  CHECK(bucket.tokens() == 5);  // a refusal takes nothing
  CHECK(bucket.try_acquire_retry(idem::retry_reason::transient));
}

TEST_CASE("under 100% failure the budget lets retries settle near its ratio") {
  constexpr long n = 20'000;
  constexpr double ratio = 0.1;
  constexpr double epsilon = 0.002;
  SECTION("ordinary retries: the 100 in the bucket, then one per 10 first attempts") {
    const long retries = retries_under_total_failure(idem::token_bucket{}, n, false);
    const double share = static_cast<double>(retries) / n;
    CHECK(share >= ratio - epsilon);
    CHECK(share <= ratio + (500.0 / 5) / n + epsilon);
  }
  SECTION("ambiguous retries cost double, so they settle at half the ratio") {
    const long retries = retries_under_total_failure(idem::token_bucket{}, n, true);
    const double share = static_cast<double>(retries) / n;
    CHECK(share >= ratio / 2 - epsilon);
    CHECK(share <= ratio / 2 + (500.0 / 10) / n + epsilon);
  }
  SECTION("control: without a budget every operation retries twice") {
    CHECK(retries_under_total_failure(idem::unlimited_budget{}, n, false) == 2 * n);
  }
}

TEST_CASE("deposits never fill the bucket beyond max_tokens") {
  idem::token_bucket bucket;
  for (int i = 0; i < 1000; ++i) {
    bucket.on_request();
    bucket.on_success(idem::retry_reason::none);
    bucket.on_success(idem::retry_reason::transient);
  }
  CHECK(bucket.tokens() == 500);
  // From just below full, a deposit larger than the room left stops at the top.
  REQUIRE(bucket.try_acquire_retry(idem::retry_reason::transient));
  bucket.on_success(idem::retry_reason::none);       // 496
  bucket.on_success(idem::retry_reason::transient);  // +5 would be 501
  CHECK(bucket.tokens() == 500);
  CHECK(grants_until_refused(bucket, false) == 100);
}

TEST_CASE("a success on a retry gives that retry's cost back") {
  idem::token_bucket bucket;
  for (int i = 0; i < 3; ++i)
    REQUIRE(bucket.try_acquire_retry(idem::retry_reason::transient));
  REQUIRE(bucket.tokens() == 485);
  bucket.on_success(idem::retry_reason::transient);
  CHECK(bucket.tokens() == 490);
}

TEST_CASE("a first-attempt success deposits success_deposit") {
  SECTION("the default: one token") {
    idem::token_bucket bucket;
    REQUIRE(bucket.try_acquire_retry(idem::retry_reason::ambiguous));
    bucket.on_success(idem::retry_reason::none);
    CHECK(bucket.tokens() == 491);
  }
  SECTION("a chosen deposit") {
    idem::token_bucket::options s;
    s.success_deposit = 2.5;
    idem::token_bucket bucket{s};
    REQUIRE(bucket.try_acquire_retry(idem::retry_reason::ambiguous));
    bucket.on_success(idem::retry_reason::none);
    bucket.on_success(idem::retry_reason::none);
    CHECK(bucket.tokens() == 495);
  }
}

TEST_CASE("every first attempt deposits retry_ratio of a retry's cost") {
  idem::token_bucket bucket;
  REQUIRE(grants_until_refused(bucket, false) == 100);
  for (int i = 0; i < 9; ++i) {
    bucket.on_request();
    CHECK_FALSE(bucket.try_acquire_retry(idem::retry_reason::transient));
  }
  CHECK(bucket.tokens() == Approx(4.5));
  bucket.on_request();  // the tenth half token completes a retry
  CHECK(bucket.try_acquire_retry(idem::retry_reason::transient));
  CHECK(bucket.tokens() == 0);
}

TEST_CASE("invalid token bucket settings are rejected with std::invalid_argument") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  using settings = idem::token_bucket::options;
  auto with = [](auto change) {
    settings s;
    change(s);
    return s;
  };
  const settings invalid[] = {
      with([](settings& s) { s.retry_cost = -5; }),
      with([](settings& s) { s.retry_cost = 0; }),
      with([&](settings& s) { s.retry_cost = nan; }),
      with([](settings& s) { s.ambiguous_retry_cost = 0; }),
      with([](settings& s) { s.ambiguous_retry_cost = -1; }),
      with([&](settings& s) { s.max_tokens = nan; }),
      with([&](settings& s) { s.max_tokens = inf; }),
      with([](settings& s) { s.max_tokens = -1; }),
      with([](settings& s) { s.success_deposit = -1; }),
      with([&](settings& s) { s.success_deposit = nan; }),
      with([](settings& s) { s.retry_ratio = -0.1; }),
      with([&](settings& s) { s.retry_ratio = nan; }),
  };
  for (std::size_t i = 0; i < std::size(invalid); ++i) {
    CAPTURE(i);
    CHECK_THROWS_AS(idem::token_bucket{invalid[i]}, std::invalid_argument);
    CHECK_THAT(message_of_rejected(invalid[i]), Catch::Contains("idem::token_bucket"));
  }
  // Controls: the edges that are valid.
  CHECK_NOTHROW(idem::token_bucket{with([](settings& s) { s.retry_ratio = 0; })});
  CHECK_NOTHROW(idem::token_bucket{with([](settings& s) { s.success_deposit = 0; })});
}

TEST_CASE("copies of a token bucket share one bucket") {
  idem::token_bucket original;
  idem::token_bucket copy = original;
  CHECK(grants_until_refused(copy, false) == 100);
  CHECK_FALSE(original.try_acquire_retry(idem::retry_reason::transient));
  CHECK(original.tokens() == 0);
  original.on_success(idem::retry_reason::transient);
  CHECK(copy.tokens() == 5);
}

TEST_CASE("concurrent retries never overdraw the bucket", "[concurrency]") {
  struct scenario {
    double max_tokens, retry_cost;
  };
  // The default bucket, and one with many cheap tokens so that the threads overlap for longer.
  const scenario scenarios[] = {{500, 5}, {20'000, 1}};
  constexpr int threads = 8;
  for (const auto& s : scenarios) {
    CAPTURE(s.max_tokens, s.retry_cost);
    const auto expected = static_cast<long>(s.max_tokens / s.retry_cost);
    for (int repetition = 0; repetition < 20; ++repetition) {
      idem::token_bucket::options settings;
      settings.max_tokens = s.max_tokens;
      settings.retry_cost = s.retry_cost;
      idem::token_bucket bucket{settings};
      std::atomic<int> ready{0};
      std::atomic<long> granted{0};
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, bucket]() mutable {
          ready.fetch_add(1);
          while (ready.load() < threads)
            std::this_thread::yield();
          long mine = 0;
          for (long i = 0; i < expected; ++i)
            mine += bucket.try_acquire_retry(idem::retry_reason::transient) ? 1 : 0;
          granted.fetch_add(mine);
        });
      }
      for (auto& thread : pool)
        thread.join();
      CAPTURE(repetition);
      CHECK(granted.load() == expected);
      CHECK(bucket.tokens() == 0);
    }
  }
}

TEST_CASE("threads racing for the last retries of many small buckets never overdraw one",
          "[concurrency]") {
  // Every thread sweeps the same buckets in the same order. A thread that falls behind finds
  // drained buckets and catches up at once, so the threads keep meeting at the same bucket just
  // as it holds its last retries: where a check-then-take would grant one twice.
  constexpr int threads = 8;
  constexpr std::size_t buckets_count = 50'000;
  idem::token_bucket::options settings;
  settings.max_tokens = 10;  // two retries each
  std::vector<idem::token_bucket> buckets;
  buckets.reserve(buckets_count);
  for (std::size_t i = 0; i < buckets_count; ++i)
    buckets.emplace_back(settings);
  std::atomic<int> ready{0};
  std::atomic<long> granted{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < threads)
        std::this_thread::yield();
      long mine = 0;
      for (auto& bucket : buckets)
        for (int i = 0; i < 3; ++i)
          mine += bucket.try_acquire_retry(idem::retry_reason::transient) ? 1 : 0;
      granted.fetch_add(mine);
    });
  }
  for (auto& thread : pool)
    thread.join();
  CHECK(granted.load() == 2 * static_cast<long>(buckets_count));
}

TEST_CASE("concurrent ordinary and ambiguous retries spend exactly what the bucket held",
          "[concurrency]") {
  for (int repetition = 0; repetition < 20; ++repetition) {
    idem::token_bucket bucket;
    std::atomic<int> ready{0};
    std::atomic<long> spent{0};
    std::vector<std::thread> pool;
    constexpr int threads = 8;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < threads)
          std::this_thread::yield();
        long mine = 0;
        for (int i = 0; i < 100; ++i) {
          const bool ambiguous = (i + t) % 2 == 0;
          if (bucket.try_acquire_retry(reason_for(ambiguous))) mine += ambiguous ? 10 : 5;
        }
        spent.fetch_add(mine);
      });
    }
    for (auto& thread : pool)
      thread.join();
    CAPTURE(repetition);
    // What was granted plus what is left is what the bucket held: nothing created or lost.
    CHECK(static_cast<double>(spent.load()) + bucket.tokens() == 500);
    CHECK(bucket.tokens() < 5);
  }
}

TEST_CASE("a successful retry after an ambiguous failure gives back the 10 tokens it took") {
  idem::token_bucket bucket;
  REQUIRE(bucket.try_acquire_retry(idem::retry_reason::ambiguous));
  REQUIRE(bucket.try_acquire_retry(idem::retry_reason::ambiguous));
  CHECK(bucket.tokens() == 480);
  bucket.on_success(idem::retry_reason::ambiguous);
  CHECK(bucket.tokens() == 490);
}

TEST_CASE("a cost too small for the bucket's thousandths is rejected, not rounded to free") {
  idem::token_bucket::options tiny;
  tiny.max_tokens = 1;
  tiny.retry_cost = 0.0004;
  CHECK_THROWS_AS(idem::token_bucket{tiny}, std::invalid_argument);
  tiny.retry_cost = 1;
  tiny.ambiguous_retry_cost = 0.0001;
  CHECK_THROWS_AS(idem::token_bucket{tiny}, std::invalid_argument);
  tiny.ambiguous_retry_cost = 0.001;
  CHECK_NOTHROW(idem::token_bucket{tiny});
}
