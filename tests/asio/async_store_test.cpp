// The asynchronous store contract (idem/store/async_contract.hpp) and blocking_store: the whole
// Store conformance suite run against an asynchronous store through blocking_store (the driver
// every asynchronous store's tests use), here over posted_store, the reference asynchronous
// store with no server behind it; and blocking_store's refusal on the store's own thread.
#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/locked.hpp>
#include <idem/store/memory.hpp>
#include <idem/testing/posted_store.hpp>
#include <idem/testing/store_conformance.hpp>

#include "support/checkpoint_batch_cases.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace async_store_test {

namespace asio = idem::asio;
using namespace std::chrono_literals;

using posted_memory = idem::testing::posted_store<idem::memory_store>;

static_assert(idem::AsyncStore<posted_memory>);
static_assert(!idem::AsyncStore<idem::memory_store>, "a blocking store is not an AsyncStore");
static_assert(idem::Store<idem::blocking_store<posted_memory>>);
static_assert(idem::AsyncStore<idem::blocking_store<posted_memory>>,
              "blocking_store is still awaitable: the asynchronous wrappers await it");
static_assert(!idem::Store<posted_memory>, "an asynchronous store alone is not a Store");
static_assert(idem::AsyncCheckpointBatchStore<posted_memory>);
static_assert(idem::CheckpointBatchStore<idem::blocking_store<posted_memory>>);

namespace {

// The pool runs the store's operations; blocking_store's callers are the suite's own threads.
struct posted_memory_factory {
  static constexpr bool bounded = true;
  std::unique_ptr<asio::thread_pool> pool = std::make_unique<asio::thread_pool>(2);

  idem::blocking_store<posted_memory> make(const idem::testing::store_limits& limits) {
    idem::memory_store::options bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1024;
    return idem::blocking_store<posted_memory>{
        posted_memory{idem::memory_store{bounds}, pool->get_executor()}};
  }
};

const std::array<std::uint8_t, 16> print_bytes{1, 2};
const idem::digest print{print_bytes};
const idem::store_time start{std::chrono::seconds{1'700'000'000}};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(posted_memory_factory)

TEST_CASE("an asynchronous store's operations complete on the caller's executor, errors thrown",
          "[async_store]") {
  asio::thread_pool pool{1};
  asio::io_context loop;
  posted_memory store{idem::memory_store{}, pool.get_executor()};
  std::optional<idem::claim_result> first, second;
  bool on_loop = false;
  asio::co_spawn(
      loop,
      [&]() -> asio::awaitable<void> {
        first = co_await store.async_claim({"s", "k", print, start, 1s, 1h}, asio::use_awaitable);
        on_loop = loop.get_executor().running_in_this_thread();
        second = co_await store.async_claim({"s", "k", print, start, 1s, 1h}, asio::use_awaitable);
      },
      asio::detached);
  loop.run();
  REQUIRE(first);
  CHECK(first->status == idem::claim_status::claimed);
  CHECK(on_loop);
  REQUIRE(second);
  CHECK(second->status == idem::claim_status::existing);

  // A store_error reaches the awaiting coroutine as the blocking call throws it: a response
  // larger than a bounded store accepts.
  posted_memory tiny{idem::memory_store{idem::memory_store::options{.max_bytes = 1000}},
                     pool.get_executor()};
  std::optional<idem::store_failure> failure;
  loop.restart();
  asio::co_spawn(
      loop,
      [&]() -> asio::awaitable<void> {
        const idem::claim_result held =
            co_await tiny.async_claim({"s", "k", print, start, 1s, 1h}, asio::use_awaitable);
        try {
          (void)co_await tiny.async_complete({"s", "k", held.fence}, std::string(10'000, 'x'),
                                             start, asio::use_awaitable);
        } catch (const idem::store_error& error) {
          failure = error.failure();
        }
      },
      asio::detached);
  loop.run();
  pool.join();
  REQUIRE(failure.has_value());
  CHECK(*failure == idem::store_failure::full);
}

TEST_CASE(
    "blocking_store refuses a call on a thread that runs the store's executor, and starts "
    "nothing",
    "[async_store]") {
  asio::io_context loop;
  idem::memory_store records;
  idem::blocking_store<posted_memory> store{posted_memory{records, loop.get_executor()}};
  std::string refusal;
  asio::post(loop, [&] {
    try {
      (void)store.claim({"s", "k", print, start, 1s, 1h});
    } catch (const std::logic_error& error) {
      refusal = error.what();
    }
  });
  loop.run();
  CHECK_THAT(refusal, Catch::Matchers::Contains("would wait for itself forever"));
  CHECK_THAT(refusal, Catch::Matchers::Contains("nothing was started"));
  CHECK_FALSE(records.find("s", "k", start).has_value());

  // From another thread, while the loop runs, the same call goes through.
  loop.restart();
  auto guard = asio::make_work_guard(loop);
  std::thread runner([&] { loop.run(); });
  const idem::claim_result claimed = store.claim({"s", "k", print, start, 1s, 1h});
  guard.reset();
  runner.join();
  CHECK(claimed.status == idem::claim_status::claimed);
  CHECK(records.find("s", "k", start).has_value());
}

TEST_CASE("posted_store renews a batch of leases in one operation, each on its own fence",
          "[async_store]") {
  posted_memory_factory make;
  auto store = make.make({});
  idem_test::checkpoint_batch_renews_each_held_record(store, start, std::chrono::nanoseconds{0});
}

}  // namespace async_store_test
