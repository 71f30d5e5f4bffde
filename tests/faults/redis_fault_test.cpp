// The store failing at each step of the protocol with redis_store behind the faults, and real
// faults on a private redis-server: the server asleep (DEBUG SLEEP) past the store's command
// timeout at the claim and at the completion, where the command is applied after the client
// gave up (a real timeout whose effect landed), and the store's connections killed (CLIENT KILL)
// mid-request.
#include <catch2/catch.hpp>

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <string>

#include <idem/store/redis.hpp>

#include "fault_matrix.hpp"
#include "stores/redis/redis_test_support.hpp"

namespace faults = idem::testing::faults;
using namespace std::chrono_literals;

namespace {

struct redis_factory {
  idem_redis_test::shared_stores stores;
  idem::redis_store operator()() { return stores.make(idem::time_source::caller); }
};

// A private server that accepts DEBUG, with a store whose commands time out after 200 ms.
struct sleepy_server {
  idem_redis_test::private_redis server{{"--appendonly", "no", "--enable-debug-command", "yes"}};
  idem::redis_store store = [this] {
    idem::redis_store::options options = server.options(idem::time_source::caller);
    options.command_timeout = 200ms;
    return idem::redis_store{options};
  }();
  idem_redis_test::context_ptr admin = server.connect();

  // Sends DEBUG SLEEP without waiting for its answer, then waits until the server is asleep: a
  // probe's PING goes unanswered (the server serves connections in its own order, so having
  // sent the command is not enough).
  void put_to_sleep() {
    REQUIRE(redisAppendCommand(admin.get(), "DEBUG SLEEP 1.5") == REDIS_OK);
    int done = 0;
    while (done == 0)
      REQUIRE(redisBufferWrite(admin.get(), &done) == REDIS_OK);
    for (int probe = 0;; ++probe) {
      REQUIRE(probe < 100);
      const idem_redis_test::context_ptr prober = server.connect();
      const timeval limit{0, 20000};
      REQUIRE(redisSetTimeout(prober.get(), limit) == REDIS_OK);
      void* reply = redisCommand(prober.get(), "PING");
      if (reply == nullptr) return;  // no answer: asleep
      freeReplyObject(reply);
    }
  }
  // Waits for DEBUG SLEEP's answer: the server is awake again.
  void wait_until_awake() {
    void* reply = nullptr;
    REQUIRE(redisGetReply(admin.get(), &reply) == REDIS_OK);
    freeReplyObject(reply);
  }
};

}  // namespace

IDEM_FAULT_MATRIX_TESTS("redis", redis_factory)

TEST_CASE("a server asleep past the command timeout at the claim: 503, nothing runs",
          "[faults][redis]") {
  sleepy_server made;
  idem::manual_clock clock;
  faults::charging handler;
  auto payments = faults::guard_real(made.store, clock, handler);

  made.put_to_sleep();
  const auto refused = (*payments)("tenant", "order-1", std::string("10 EUR"));
  CHECK(refused.verdict() == idem::verdict::store_unavailable);
  CHECK_THAT(std::string(refused.message()), Catch::Matchers::Contains("idem::redis_store"));
  CHECK(handler.downstream.calls() == 0);
  made.wait_until_awake();

  // The claim may have been applied after the store stopped waiting: then the retry finds it
  // in progress, waits out its lease and takes it over. Either way, one charge.
  faults::observed seen;
  const std::string on_record = faults::call_until_recorded(*payments, clock, std::string("10 EUR"),
                                                            seen, "idem::redis_store");
  faults::require_replays(*payments, clock, std::string("10 EUR"), seen, on_record);
  CHECK(handler.downstream.calls() == 1);
}

TEST_CASE(
    "a server asleep past the command timeout at the completion: told not stored, then "
    "one effect and the same response",
    "[faults][redis]") {
  sleepy_server made;
  idem::manual_clock clock;
  faults::charging handler;
  auto payments = faults::guard_real(made.store, clock, handler);

  *handler.after_step = [&] { made.put_to_sleep(); };
  const auto first = (*payments)("tenant", "order-1", std::string("10 EUR"));
  CHECK(first.verdict() == idem::verdict::executed);
  CHECK_FALSE(first.recorded());
  CHECK_THAT(std::string(first.message()), Catch::Matchers::Contains("not stored") &&
                                               Catch::Matchers::Contains("idem::redis_store"));
  made.wait_until_awake();

  // The completion may have landed after the timeout (a replay) or not (a takeover after the
  // lease, resuming from the recorded charge): the same response and one charge either way.
  faults::observed seen;
  seen.responses.push_back(first.value());
  const std::string on_record = faults::call_until_recorded(*payments, clock, std::string("10 EUR"),
                                                            seen, "idem::redis_store");
  faults::require_replays(*payments, clock, std::string("10 EUR"), seen, on_record);
  CHECK(handler.downstream.calls() == 1);
}

TEST_CASE(
    "the store's connections killed mid-request: the call goes through on a new one, "
    "one effect",
    "[faults][redis]") {
  sleepy_server made;
  idem::manual_clock clock;
  faults::charging handler;
  auto payments = faults::guard_real(made.store, clock, handler);

  long long killed = 0;
  *handler.after_step = [&] {
    const auto reply = idem_redis_test::command(
        made.admin.get(), {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
    killed = reply->integer;
  };
  const auto first = (*payments)("tenant", "order-1", std::string("10 EUR"));
  CHECK(killed >= 1);
  // A reused connection the server closed is sent once more on a fresh one: no error at all.
  CHECK(first.verdict() == idem::verdict::executed);
  CHECK(first.recorded());
  faults::observed seen;
  seen.responses.push_back(first.value());
  faults::require_replays(*payments, clock, std::string("10 EUR"), seen, first.value());
  CHECK(handler.downstream.calls() == 1);
}
