// idem::async_inbox::async_deduplicate_batch: the blocking inbox's batch on the asynchronous
// driver, by the same rules (idem/server/detail/batch.hpp): one outcome per id in input order,
// each new id's function run once, a later occurrence answered as its first, an id refused as
// invalid_key while the rest go on, a live claim answered in_progress at once, and a throw that
// keeps what ran before it and releases the rest for the redelivery. Also: the options the
// twins share, and settings().
#include <catch2/catch.hpp>

#include <idem/asio.hpp>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "asio/event_loop.hpp"
#include "asio/net.hpp"
#include "asio/server_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace asio = idem::asio;
using idem::verdict;
using test_async::completion;
using test_async::run_until;

using policies = test_async::manual_policies;
using inbox = idem::async_inbox<policies>;
using outcomes = std::vector<idem::idempotent_outcome<std::string>>;

inbox::options on(const idem::manual_clock& clock, const idem::memory_store& store) {
  inbox::options parts;
  parts.clock = clock;
  parts.store = store;
  return parts;
}

// Runs one batch to its end; `fn` is asio::awaitable<std::string>(std::size_t).
template <class F>
outcomes batch(asio::io_context& io, idem::manual_clock& clock, inbox& consumer,
               const std::vector<std::string>& ids, F fn) {
  completion<outcomes> call;
  consumer.async_deduplicate_batch("orders", ids, std::move(fn), call.handler());
  run_until(io, clock, [&] { return call.done; });
  return call.take();
}

}  // namespace

TEST_CASE("the asynchronous twins share their blocking twins' options, and answer settings()") {
  using blocking_inbox = idem::inbox<policies>;
  static_assert(std::is_same_v<blocking_inbox::options, idem::inbox_options<policies>>);
  static_assert(std::is_base_of_v<idem::inbox_options<policies>, inbox::options>);
  using handler = asio::awaitable<idem::http_response> (*)(const idem::http_request&);
  static_assert(std::is_same_v<idem::idempotent<handler, policies>::options,
                               idem::idempotent_options<policies>>);
  static_assert(std::is_base_of_v<idem::idempotent_options<policies>,
                                  idem::async_idempotent<handler, policies>::options>);
  struct call {
    int operator()() const { return 1; }
  };
  static_assert(
      std::is_same_v<idem::retrying<call, policies>::options, idem::retry_options<policies>>);
  static_assert(std::is_base_of_v<idem::retry_options<policies>,
                                  idem::async_retrying<call, policies>::options>);

  asio::io_context io;
  idem::manual_clock clock;
  inbox::options parts = on(clock, idem::memory_store{});
  parts.lease = 7s;
  parts.heartbeat = false;
  const inbox consumer{io.get_executor(), parts};
  CHECK(consumer.settings().lease == 7s);
  CHECK_FALSE(consumer.settings().heartbeat);

  blocking_inbox::options blocking_parts;
  blocking_parts.clock = clock;
  blocking_parts.max_key_length = 40;
  const blocking_inbox blocking{blocking_parts};
  CHECK(blocking.settings().max_key_length == 40);
}

TEST_CASE("an async batch runs each new id once, in order, and answers one outcome per id") {
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  inbox consumer{io.get_executor(), on(clock, store)};
  auto ran = std::make_shared<std::vector<std::size_t>>();
  auto fn = [ran](std::size_t index) -> asio::awaitable<std::string> {
    ran->push_back(index);
    co_return "done " + std::to_string(index);
  };

  const std::vector<std::string> ids{"e-1", "e-2", "e-1", "", "e-3"};
  const outcomes first = batch(io, clock, consumer, ids, fn);
  REQUIRE(first.size() == 5);
  CHECK(*ran == std::vector<std::size_t>{0, 1, 4});
  CHECK(first[0].verdict() == verdict::executed);
  CHECK(*first[0] == "done 0");
  CHECK(first[1].verdict() == verdict::executed);
  // The same event later in the batch: run once, answered as its first (replayed).
  CHECK(first[2].verdict() == verdict::replayed);
  CHECK(*first[2] == "done 0");
  // An id the inbox refuses: the rest of the batch goes on.
  CHECK(first[3].verdict() == verdict::invalid_key);
  CHECK(first[4].verdict() == verdict::executed);
  CHECK(*first[4] == "done 4");

  // Delivered again: every recorded id replays, nothing runs.
  ran->clear();
  const outcomes again = batch(io, clock, consumer, {"e-3", "e-2", "e-1"}, fn);
  CHECK(ran->empty());
  REQUIRE(again.size() == 3);
  CHECK(again[0].verdict() == verdict::replayed);
  CHECK(*again[0] == "done 4");
  CHECK(*again[1] == "done 1");
  CHECK(*again[2] == "done 0");

  // A void function stores nothing: std::monostate outcomes.
  completion<std::vector<idem::idempotent_outcome<std::monostate>>> plain;
  consumer.async_deduplicate_batch(
      "orders", std::vector<std::string>{"v-1"},
      [](std::size_t) -> asio::awaitable<void> { co_return; }, plain.handler());
  run_until(io, clock, [&] { return plain.done; });
  const auto voids = plain.take();
  REQUIRE(voids.size() == 1);
  CHECK(voids[0].verdict() == verdict::executed);
}

TEST_CASE(
    "an async batch answers an id held by a live delivery in_progress at once, never waiting") {
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  inbox::options parts = on(clock, store);
  parts.coalesce = 5s;  // a single delivery would wait this long for the holder
  inbox consumer{io.get_executor(), parts};

  // Another delivery of e-2 holds its claim: its function waits an hour downstream.
  completion<idem::idempotent_outcome<std::string>> holder;
  consumer.async_deduplicate(
      "orders", "e-2",
      [clock]() -> asio::awaitable<std::string> {
        co_await test_async::downstream(clock, 1h);
        co_return "held";
      },
      holder.handler());
  run_until(io, clock, [&] { return clock.waiting_wakes() >= 1; });

  const auto before = clock.now();
  int runs = 0;
  const outcomes answered = batch(io, clock, consumer, {"e-1", "e-2"},
                                  [&runs](std::size_t) -> asio::awaitable<std::string> {
                                    ++runs;
                                    co_return "ran";
                                  });
  REQUIRE(answered.size() == 2);
  CHECK(answered[0].verdict() == verdict::executed);
  CHECK(answered[1].verdict() == verdict::in_progress);
  CHECK(runs == 1);
  // No coalescing pause was waited: the manual clock never had to move.
  CHECK(clock.now() == before);
  CHECK_FALSE(holder.done);
  // The holder comes back from downstream and records its delivery.
  run_until(io, clock, [&] { return holder.done; });
  CHECK(holder.take().verdict() == verdict::executed);
}

TEST_CASE(
    "an async batch whose function throws keeps what ran before, and the redelivery runs the "
    "rest") {
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  inbox consumer{io.get_executor(), on(clock, store)};
  auto ran = std::make_shared<std::vector<std::size_t>>();
  auto failing_at_1 = [ran](std::size_t index) -> asio::awaitable<std::string> {
    ran->push_back(index);
    if (index == 1) throw std::runtime_error("the broker is down");
    co_return "ok " + std::to_string(index);
  };

  const std::vector<std::string> ids{"e-1", "e-2", "e-3"};
  completion<outcomes> call;
  consumer.async_deduplicate_batch("orders", ids, failing_at_1, call.handler());
  run_until(io, clock, [&] { return call.done; });
  REQUIRE(call.error);
  CHECK_THROWS_WITH(call.take(), "the broker is down");
  CHECK(*ran == std::vector<std::size_t>{0, 1});

  // The redelivery: e-1 replays; e-2 (released) and e-3 (never claimed) run now.
  ran->clear();
  const outcomes redelivered =
      batch(io, clock, consumer, ids, [ran](std::size_t index) -> asio::awaitable<std::string> {
        ran->push_back(index);
        co_return "ok " + std::to_string(index);
      });
  CHECK(*ran == std::vector<std::size_t>{1, 2});
  REQUIRE(redelivered.size() == 3);
  CHECK(redelivered[0].verdict() == verdict::replayed);
  CHECK(redelivered[1].verdict() == verdict::executed);
  CHECK(redelivered[2].verdict() == verdict::executed);
}

TEST_CASE("an async batch of more ids than a batch takes throws before anything starts") {
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  inbox consumer{io.get_executor(), on(clock, store)};
  std::vector<std::string> ids;
  for (int i = 0; i < 4097; ++i)
    ids.push_back("e-" + std::to_string(i));
  int runs = 0;
  completion<outcomes> call;
  CHECK_THROWS_AS(consumer.async_deduplicate_batch(
                      "orders", ids,
                      [&runs](std::size_t) -> asio::awaitable<std::string> {
                        ++runs;
                        co_return "ran";
                      },
                      call.handler()),
                  std::invalid_argument);
  io.restart();
  io.poll();
  CHECK_FALSE(call.done);
  CHECK(runs == 0);
  CHECK_FALSE(store.find("orders", "e-0", clock.wall_now()));
}
