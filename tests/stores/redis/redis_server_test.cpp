// redis_store against redis-server processes the tests start, reconfigure and kill themselves
// (private port, temporary directory, appendonly with appendfsync always), so the shared
// server is never disturbed: a full server, a server down at construction or mid-run,
// reconnecting after a restart, a dead server that would raise SIGPIPE, and kill -9 while
// clients claim and complete. The checks at construction (the eviction policy, a server without
// CONFIG) are in redis_connection_test.cpp.
#include <catch2/catch.hpp>

#include <idem/policies.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/store/redis.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "redis_test_support.hpp"

using namespace std::chrono_literals;
using idem::claim_status;
using idem::record_state;
using idem::store_failure;
using idem::time_source;
using idem_redis_test::claim_now;
using idem_redis_test::config_set;

namespace {

// Runs `operation` and answers the failure of the store_error it throws (or fails the test).
template <class Operation>
store_failure failure_of(Operation&& operation) {
  try {
    operation();
  } catch (const idem::store_error& error) {
    INFO(error.what());
    return error.failure();
  }
  FAIL("the operation did not throw store_error");
  return store_failure::full;
}

}  // namespace

TEST_CASE("a full server refuses new claims and writes, keeps every record, and recovers",
          "[redis][server]") {
  idem_redis_test::private_redis server;
  idem::redis_store store(server.options());
  const auto held = store.claim(claim_now("tenant", "held"));
  REQUIRE(held.status == claim_status::claimed);
  const auto done = store.claim(claim_now("tenant", "done"));
  REQUIRE(store.complete({"tenant", "done", done.fence}, "response", {}));

  config_set(server, "maxmemory", "1");  // every write that could grow memory is refused now
  CHECK(store.claim(claim_now("tenant", "new")).status == claim_status::full);
  CHECK(store.claim(claim_now("other-scope", "new")).status == claim_status::full);
  // Existing records are still answered.
  const auto existing = store.claim(claim_now("tenant", "done"));
  REQUIRE(existing.status == claim_status::existing);
  CHECK(existing.existing.response == "response");
  CHECK(failure_of([&] {
          (void)store.complete({"tenant", "held", held.fence}, "r", {});
        }) == store_failure::full);
  CHECK(failure_of([&] {
          (void)store.checkpoint({"tenant", "held", held.fence}, "step",
                                 std::chrono::system_clock::now() + 1h);
        }) == store_failure::full);
  // Nothing was written by the refused calls.
  const auto still = store.find("tenant", "held", {});
  REQUIRE(still);
  CHECK(still->state == record_state::in_progress);
  CHECK(still->recovery.empty());
  CHECK_FALSE(store.find("tenant", "new", {}));

  // Through idempotent: 503 store_full, the handler not run.
  struct policies : idem::default_policies {
    using store = idem::redis_store;
    using clock = idem::system_clock;
  };
  int runs = 0;
  auto handler = [&runs](idem::handler_context&, const std::string&) {
    ++runs;
    return std::string("ok");
  };
  idem::idempotent<decltype(handler), policies>::options parts;
  parts.store = store;
  idem::idempotent<decltype(handler), policies> guarded(handler, std::move(parts));
  CHECK(guarded("tenant", "via-idempotent", "body").verdict() == idem::verdict::store_full);
  CHECK(runs == 0);

  // Releasing only deletes: it works on a full server and frees room.
  CHECK(store.release({"tenant", "held", held.fence}));

  config_set(server, "maxmemory", "0");
  CHECK(store.claim(claim_now("tenant", "new")).status == claim_status::claimed);
  CHECK(guarded("tenant", "via-idempotent", "body").verdict() == idem::verdict::executed);
  CHECK(runs == 1);
}

TEST_CASE("a server that is down at construction is a clear store_error", "[redis][server]") {
  idem::redis_store::options options;
  options.host = "127.0.0.1";
  options.port = idem_redis_test::free_port();  // nothing listens there
  try {
    idem::redis_store store(options);
    FAIL("constructed a store without a server");
  } catch (const idem::store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    CHECK_THAT(error.what(),
               Catch::Matchers::Contains("127.0.0.1:" + std::to_string(options.port)));
    CHECK_THAT(error.what(), Catch::Matchers::Contains("Connection refused"));
  }
}

TEST_CASE("the store reaches a server through its unix socket", "[redis][server]") {
  idem_redis_test::private_redis server;
  auto options = server.options();
  options.unix_socket = server.socket_path();
  options.port = 0;  // not used with a socket
  idem::redis_store store(options);
  const auto claimed = store.claim(claim_now("s", "k"));
  REQUIRE(claimed.status == claim_status::claimed);
  CHECK(store.complete({"s", "k", claimed.fence}, "over the socket", {}));
  CHECK(store.find("s", "k", {})->response == "over the socket");
}

TEST_CASE(
    "every operation on a server that went down is store_error(unavailable), and the "
    "same store works again once it is back",
    "[redis][server]") {
  idem_redis_test::private_redis server;
  auto options = server.options();
  options.pool_size = 4;
  idem::redis_store store(options);
  // Several pooled connections, all of which the restart will break.
  std::vector<std::thread> warm;
  warm.reserve(4);
  for (int t = 0; t < 4; ++t) {
    warm.emplace_back([copy = store, t]() mutable {
      for (int i = 0; i < 20; ++i)
        (void)copy.claim(claim_now("warm", std::to_string(t) + "-" + std::to_string(i)));
    });
  }
  for (std::thread& thread : warm)
    thread.join();
  const auto claimed = store.claim(claim_now("tenant", "before"));
  REQUIRE(store.complete({"tenant", "before", claimed.fence}, "kept", {}));

  server.kill9();
  const auto now = std::chrono::system_clock::now();
  CHECK(failure_of([&] { (void)store.claim(claim_now("tenant", "during")); }) ==
        store_failure::unavailable);
  CHECK(failure_of([&] {
          (void)store.complete({"tenant", "before", 1}, "x", now);
        }) == store_failure::unavailable);
  CHECK(failure_of([&] {
          (void)store.release({"tenant", "before", 1});
        }) == store_failure::unavailable);
  CHECK(failure_of([&] {
          (void)store.checkpoint({"tenant", "before", 1}, "x", now);
        }) == store_failure::unavailable);
  CHECK(failure_of([&] { (void)store.find("tenant", "before", now); }) ==
        store_failure::unavailable);
  CHECK(failure_of([&] { (void)store.sweep(now); }) == store_failure::unavailable);
  CHECK(failure_of([&] { (void)store.stuck(now, 10); }) == store_failure::unavailable);

  server.start();  // same port, same data; its script cache is empty (NOSCRIPT on first use)
  const auto found = store.find("tenant", "before", now);
  REQUIRE(found);
  CHECK(found->state == record_state::completed);
  CHECK(found->response == "kept");
  CHECK(store.claim(claim_now("tenant", "after")).status == claim_status::claimed);
  CHECK(store.claim(claim_now("warm", "0-0")).status == claim_status::existing);
}

TEST_CASE("a store whose connections a restart broke reconnects without an error",
          "[redis][server]") {
  idem_redis_test::private_redis server;
  idem::redis_store store(server.options());
  REQUIRE(store.claim(claim_now("tenant", "one")).status == claim_status::claimed);
  server.kill9();
  server.start();
  // The pooled connection is dead; the call is sent again on a fresh one, once, and succeeds.
  CHECK(store.claim(claim_now("tenant", "two")).status == claim_status::claimed);
  CHECK(store.claim(claim_now("tenant", "one")).status == claim_status::existing);
}

TEST_CASE("writing to a server that died is an error, not SIGPIPE", "[redis][server]") {
  // Over a unix socket whose server is gone, the very first write fails with EPIPE and the
  // kernel raises SIGPIPE, whose default action ends the process; the store blocks it.
  idem_redis_test::private_redis server;
  auto options = server.options();
  options.unix_socket = server.socket_path();
  idem::redis_store store(options);
  REQUIRE(store.claim(claim_now("tenant", "before")).status == claim_status::claimed);
  server.kill9();
  CHECK(failure_of([&] { (void)store.claim(claim_now("tenant", "during")); }) ==
        store_failure::unavailable);
  server.start();
  CHECK(store.claim(claim_now("tenant", "after")).status == claim_status::claimed);
  CHECK(store.claim(claim_now("tenant", "before")).status == claim_status::existing);
}

// kill -9 of the server while 8 threads claim and complete, three times over; after each
// restart every claim and every completion the server acknowledged is there. appendfsync
// always: Redis writes and fsyncs the AOF before it answers.
TEST_CASE("kill -9 of the server loses no acknowledged claim or completion",
          "[redis][server][crash]") {
  constexpr int rounds = 3;
  constexpr int workers = 8;
  constexpr int acknowledged_before_kill = 400;
  idem_redis_test::private_redis server;
  auto options = server.options();
  options.pool_size = workers;
  options.command_timeout = 10s;
  idem::redis_store store(options);

  std::mutex mutex;
  std::map<std::string, std::uint64_t> claimed;  // key -> fence acknowledged
  std::map<std::string, std::string> completed;  // key -> response acknowledged
  int failures_seen = 0;
  for (int round = 0; round < rounds; ++round) {
    std::atomic<int> acknowledged{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    threads.reserve(workers);
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, copy = store, w]() mutable {
        for (int i = 0; !stop.load(); ++i) {
          const std::string key =
              "r" + std::to_string(round) + "-w" + std::to_string(w) + "-" + std::to_string(i);
          try {
            const auto result = copy.claim(claim_now("crash", key));
            if (result.status != claim_status::claimed) continue;
            {
              const std::lock_guard lock(mutex);
              claimed[key] = result.fence;
            }
            acknowledged.fetch_add(1);
            const std::string response = "response to " + key;
            if (copy.complete({"crash", key, result.fence}, response, {})) {
              const std::lock_guard lock(mutex);
              completed[key] = response;
            }
            acknowledged.fetch_add(1);
          } catch (const idem::store_error& error) {
            // Only unavailability is an acceptable failure while the server dies.
            const std::lock_guard lock(mutex);
            ++failures_seen;
            if (error.failure() != store_failure::unavailable) failures_seen += 1000000;
            std::this_thread::sleep_for(1ms);
          }
        }
      });
    }
    while (acknowledged.load() < acknowledged_before_kill)
      std::this_thread::sleep_for(1ms);
    server.kill9();
    std::this_thread::sleep_for(20ms);  // let the workers run into the dead server
    stop = true;
    for (std::thread& thread : threads)
      thread.join();
    server.start();

    const std::lock_guard lock(mutex);
    int lost_claims = 0;
    int lost_completions = 0;
    for (const auto& [key, fence] : claimed) {
      const auto found = store.find("crash", key, {});
      if (!found || found->fence != fence) ++lost_claims;
    }
    for (const auto& [key, response] : completed) {
      const auto found = store.find("crash", key, {});
      if (!found || found->state != record_state::completed || found->response != response) {
        ++lost_completions;
      }
    }
    INFO("round " << round << ": " << claimed.size() << " claims and " << completed.size()
                  << " completions acknowledged so far");
    CHECK(lost_claims == 0);
    CHECK(lost_completions == 0);
  }
  CHECK(failures_seen < 1000000);  // every failure was store_error(unavailable)
  std::printf(
      "redis kill -9: %d rounds, %zu claims and %zu completions acknowledged, none lost; "
      "%d calls failed with unavailable\n",
      rounds, claimed.size(), completed.size(), failures_seen);
}
