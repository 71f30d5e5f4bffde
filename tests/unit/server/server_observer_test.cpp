// The server observer policy (idem/server/observer.hpp): one call event a call with its verdict,
// a handler event a handler run, and coalesced replays told apart from plain ones.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/testing/faulty_store.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace server_observer_test {

using namespace std::chrono_literals;

namespace {

// Keeps every event; copies share the lists, as the policy's handles do.
class recording_observer {
 public:
  void on_call(const idem::server_call_event& e) {
    const std::lock_guard lock(seen_->mutex);
    seen_->calls.push_back(e);
  }
  void on_handler(const idem::handler_event& e) {
    const std::lock_guard lock(seen_->mutex);
    seen_->handlers.push_back(e);
  }
  std::vector<idem::server_call_event> calls() const {
    const std::lock_guard lock(seen_->mutex);
    return seen_->calls;
  }
  std::vector<idem::handler_event> handlers() const {
    const std::lock_guard lock(seen_->mutex);
    return seen_->handlers;
  }

 private:
  struct lists {
    std::mutex mutex;
    std::vector<idem::server_call_event> calls;
    std::vector<idem::handler_event> handlers;
  };
  std::shared_ptr<lists> seen_ = std::make_shared<lists>();
};

static_assert(idem::ServerObserver<recording_observer>);
static_assert(idem::ServerObserver<idem::no_server_observer>);
static_assert(!idem::ServerObserver<int>);

struct observed_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using store = idem::testing::faulty_store<idem::memory_store>;
  using server_observer = recording_observer;
};

const idem::http_request charge{"POST", "/charges", {}, "{\"amount\":5}"};
const idem::http_request other{"POST", "/charges", {}, "{\"amount\":6}"};

}  // namespace

TEST_CASE("a server observer hears each call's verdict once and each handler run's duration") {
  recording_observer seen;
  idem::manual_clock clock;
  idem::testing::faulty_store<idem::memory_store> store;
  std::function<idem::http_response(const idem::http_request&)> body;
  auto handler = [&](const idem::http_request& request) { return body(request); };
  using guard_type = idem::idempotent<decltype(handler), observed_policies>;
  guard_type::options options;
  options.clock = clock;
  options.store = store;
  options.server_observer = seen;
  guard_type guard{handler, options};
  body = [&](const idem::http_request&) {
    clock.advance(7ms);
    // A duplicate while this one runs: in_progress, at once (no coalescing).
    CHECK(guard("s", "k1", charge).verdict() == idem::verdict::in_progress);
    return idem::http_response{201, {}, "ok"};
  };

  CHECK(guard("s", "k1", charge).verdict() == idem::verdict::executed);
  CHECK(guard("s", "k1", charge).verdict() == idem::verdict::replayed);
  CHECK(guard("s", "k1", other).verdict() == idem::verdict::mismatch);
  CHECK(guard("s", std::nullopt, charge).verdict() == idem::verdict::missing_key);
  store.fail(idem::testing::faulty_store<idem::memory_store>::mode::unavailable);
  CHECK(guard("s", "k2", charge).verdict() == idem::verdict::store_unavailable);

  const std::vector<idem::server_call_event> calls = seen.calls();
  REQUIRE(calls.size() == 6);
  // The nested duplicate ends first.
  CHECK(calls[0].verdict == idem::verdict::in_progress);
  CHECK(calls[1].verdict == idem::verdict::executed);
  CHECK(calls[1].duration == 7ms);
  CHECK(calls[2].verdict == idem::verdict::replayed);
  CHECK(calls[3].verdict == idem::verdict::mismatch);
  CHECK(calls[4].verdict == idem::verdict::missing_key);
  CHECK(calls[5].verdict == idem::verdict::store_unavailable);
  for (const auto& call : calls)
    CHECK_FALSE(call.coalesced);

  const std::vector<idem::handler_event> handlers = seen.handlers();
  REQUIRE(handlers.size() == 1);
  CHECK(handlers[0].duration == 7ms);
  CHECK_FALSE(handlers[0].threw);
}

TEST_CASE("a server observer hears that a handler threw, and no call event for that call") {
  recording_observer seen;
  idem::manual_clock clock;
  auto handler = [&](const idem::http_request&) -> idem::http_response {
    clock.advance(3ms);
    throw std::runtime_error("declined");
  };
  using guard_type = idem::idempotent<decltype(handler), observed_policies>;
  guard_type::options options;
  options.clock = clock;
  options.server_observer = seen;
  guard_type guard{handler, options};
  CHECK_THROWS_AS(guard("s", "k", charge), std::runtime_error);
  CHECK(seen.calls().empty());
  const std::vector<idem::handler_event> handlers = seen.handlers();
  REQUIRE(handlers.size() == 1);
  CHECK(handlers[0].duration == 3ms);
  CHECK(handlers[0].threw);
}

TEST_CASE("a duplicate that waited for the first request's response is a coalesced replay") {
  struct coalescing_policies : idem::default_policies {
    using clock = idem::steady_clock;
    using server_observer = recording_observer;
  };
  recording_observer seen;
  std::atomic<bool> release{false};
  std::atomic<bool> running{false};
  auto handler = [&](const idem::http_request&) {
    running = true;
    while (!release)
      std::this_thread::sleep_for(1ms);
    return idem::http_response{201, {}, "ok"};
  };
  using guard_type = idem::idempotent<decltype(handler), coalescing_policies>;
  guard_type::options options;
  options.coalesce = 10s;
  options.server_observer = seen;
  guard_type guard{handler, options};

  std::thread first([&] { CHECK(guard("s", "k", charge).verdict() == idem::verdict::executed); });
  while (!running)
    std::this_thread::sleep_for(1ms);
  std::thread duplicate(
      [&] { CHECK(guard("s", "k", charge).verdict() == idem::verdict::replayed); });
  std::this_thread::sleep_for(30ms);  // the duplicate is in its coalescing wait by now
  release = true;
  first.join();
  duplicate.join();
  // A later repeat finds the record completed: a plain replay.
  CHECK(guard("s", "k", charge).verdict() == idem::verdict::replayed);

  const std::vector<idem::server_call_event> calls = seen.calls();
  REQUIRE(calls.size() == 3);
  int coalesced = 0;
  for (const auto& call : calls)
    coalesced += call.coalesced ? 1 : 0;
  CHECK(coalesced == 1);
  CHECK_FALSE(calls[2].coalesced);
  CHECK(seen.handlers().size() == 1);
}

TEST_CASE("server observer: an inbox reports each delivery, each run and a redelivery's wait") {
  struct inbox_policies : idem::default_policies {
    using clock = idem::steady_clock;
    using server_observer = recording_observer;
  };
  recording_observer seen;
  idem::inbox<inbox_policies>::options parts;
  parts.coalesce = 10s;
  parts.server_observer = seen;
  idem::inbox<inbox_policies> consumed{parts};

  std::atomic<bool> running{false};
  std::atomic<bool> release{false};
  int shipped = 0;
  std::thread first([&] {
    const auto outcome = consumed.deduplicate("orders", "event-1", [&] {
      running = true;
      while (!release)
        std::this_thread::sleep_for(1ms);
      ++shipped;
      return 7;
    });
    CHECK(outcome.verdict() == idem::verdict::executed);
  });
  while (!running)
    std::this_thread::sleep_for(1ms);
  std::thread redelivery([&] {
    CHECK(consumed.deduplicate("orders", "event-1", [&] { return ++shipped; }).verdict() ==
          idem::verdict::replayed);
  });
  std::this_thread::sleep_for(30ms);
  release = true;
  first.join();
  redelivery.join();
  CHECK(consumed.deduplicate("orders", "event-1", [&] { return ++shipped; }).verdict() ==
        idem::verdict::replayed);
  CHECK(consumed.deduplicate("orders", "", [&] { return ++shipped; }).verdict() ==
        idem::verdict::invalid_key);
  CHECK_THROWS(consumed.deduplicate("orders", "event-2", []() -> int { throw 1; }));

  CHECK(shipped == 1);
  const auto calls = seen.calls();
  REQUIRE(calls.size() == 4);  // the throw is not a call event: its exception passes through
  int coalesced = 0, replayed = 0;
  for (const auto& e : calls) {
    coalesced += e.coalesced ? 1 : 0;
    replayed += e.verdict == idem::verdict::replayed ? 1 : 0;
  }
  CHECK(coalesced == 1);
  CHECK(replayed == 2);
  const auto handlers = seen.handlers();
  REQUIRE(handlers.size() == 2);
  int threw = 0;
  for (const auto& e : handlers)
    threw += e.threw ? 1 : 0;
  CHECK(threw == 1);
}

}  // namespace server_observer_test
