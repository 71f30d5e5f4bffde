// async_redis_store under real faults, on private redis-server processes the tests start, put to
// sleep (DEBUG SLEEP), cut off (CLIENT KILL) and kill: a command timeout, a stalled connection,
// a connection killed mid-pipeline, a server down and back; and the handshake's refusals.
#include <catch2/catch.hpp>

#include <idem/store/redis.hpp>
#include <idem/store/redis/async.hpp>

#include <chrono>
#include <cstddef>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "redis_async_test_support.hpp"

using namespace std::chrono_literals;
using idem::claim_status;
using idem_redis_async_test::claim_of;
using idem_redis_async_test::info_number;
using idem_redis_async_test::unavailable_saying;
namespace asio = idem::asio;

namespace {

const std::vector<std::string> debug_allowed = {"--appendonly", "no", "--enable-debug-command",
                                                "yes"};

// Puts the server to sleep for `seconds` from a thread of its own; joined when it goes.
class sleeper {
 public:
  sleeper(const idem_redis_test::private_redis& server, const char* seconds)
      : thread_([&server, seconds] {
          const auto raw = server.connect();
          (void)idem_redis_test::command(raw.get(), {"DEBUG", "SLEEP", seconds});
        }) {
    std::this_thread::sleep_for(100ms);  // the server is asleep by then
  }
  sleeper(const sleeper&) = delete;
  sleeper& operator=(const sleeper&) = delete;
  ~sleeper() { thread_.join(); }

 private:
  std::thread thread_;
};

// Takes the password "secret" off the server when it goes.
class password_reset {
 public:
  explicit password_reset(const idem_redis_test::private_redis& server) : server_(server) {}
  password_reset(const password_reset&) = delete;
  password_reset& operator=(const password_reset&) = delete;
  ~password_reset() {
    try {
      const auto raw = server_.connect();
      (void)idem_redis_test::command(raw.get(), {"AUTH", "secret"});
      (void)idem_redis_test::command(raw.get(), {"CONFIG", "SET", "requirepass", ""});
    } catch (...) {
      // A server that is gone needs no reset.
    }
  }

 private:
  const idem_redis_test::private_redis& server_;
};

template <class Call>
std::exception_ptr failure_of(Call call) {
  try {
    call();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

TEST_CASE(
    "an operation past the command timeout fails unavailable in about the timeout, and the next "
    "on its connection gets its own answer",
    "[redis_async]") {
  const idem_redis_test::private_redis server(debug_allowed);
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::private_options(server);
  options.pool_size = 1;
  options.command_timeout = 400ms;
  auto store = stores.make_blocking(options);
  REQUIRE(store.claim(claim_of("warm")).status == claim_status::claimed);
  const long long connections = info_number(server, "stats", "total_connections_received");
  {
    const sleeper asleep(server, "0.7");
    const auto started = std::chrono::steady_clock::now();
    const std::exception_ptr late = failure_of([&] { (void)store.claim(claim_of("late")); });
    const auto took = std::chrono::steady_clock::now() - started;
    CHECK(unavailable_saying(late, "no answer from"));
    CHECK(unavailable_saying(late, "may still run"));
    CHECK(took >= 390ms);
    CHECK(took < 600ms);
    // Sent behind the late claim on the one connection: the late claim's reply comes first and
    // is dropped; this one gets its own.
    const auto next = store.claim(claim_of("next"));
    CHECK(next.status == claim_status::claimed);
    CHECK(next.fence == 1);
  }
  // The late claim ran all the same: what "may still run" means.
  CHECK(store.claim(claim_of("late")).status == claim_status::existing);
  CHECK(store.claim(claim_of("next")).status == claim_status::existing);
  // The connection was kept: the only new ones are the sleeper's and INFO's.
  CHECK(info_number(server, "stats", "total_connections_received") - connections == 2);
}

TEST_CASE(
    "a connection that stays silent a further command timeout after one is dropped, and the "
    "next operation reconnects",
    "[redis_async]") {
  const idem_redis_test::private_redis server(debug_allowed);
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::private_options(server);
  options.pool_size = 1;
  options.command_timeout = 300ms;
  auto store = stores.make_blocking(options);
  REQUIRE(store.claim(claim_of("warm")).status == claim_status::claimed);
  const long long connections = info_number(server, "stats", "total_connections_received");
  {
    const sleeper asleep(server, "1.2");
    CHECK(unavailable_saying(failure_of([&] { (void)store.claim(claim_of("late")); }),
                             "no answer from"));
    // Nothing read for 300 ms more: the connection is taken as lost.
    std::this_thread::sleep_for(450ms);
  }
  const auto after = store.claim(claim_of("after"));
  CHECK(after.status == claim_status::claimed);
  // The sleeper's, INFO's, and the store's new one.
  CHECK(info_number(server, "stats", "total_connections_received") - connections == 3);
}

TEST_CASE(
    "a connection killed mid-pipeline fails what it had in flight clearly, answers none with "
    "another's reply, and the store recovers",
    "[redis_async][concurrency]") {
  const idem_redis_test::private_redis server({"--appendonly", "no"});
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::private_options(server);
  options.pool_size = 1;
  constexpr std::size_t count = 2000;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < count; ++i)
    keys.push_back("key-" + std::to_string(i));
  // Every other key is held already, with recovery bytes naming it: an answer given to the
  // wrong claim shows.
  {
    idem::redis_store::options twin = server.options(options.clock);
    twin.prefix = options.prefix;
    idem::redis_store seeding(twin);
    for (std::size_t i = 0; i < count; i += 2) {
      auto request = claim_of(keys[i]);
      const std::string bytes = "recovery of " + keys[i];
      request.recovery = bytes;
      REQUIRE(seeding.claim(request).status == claim_status::claimed);
    }
  }
  idem::async_redis_store store = stores.make(options);
  const long long connections = info_number(server, "stats", "total_connections_received");

  struct outcome {
    bool done = false;
    std::exception_ptr error;
    idem::claim_result answer;
  };
  std::vector<outcome> outcomes(count);
  std::size_t completed = 0;
  asio::io_context loop;
  for (std::size_t i = 0; i < count; ++i) {
    store.async_claim(
        claim_of(keys[i]),
        asio::bind_executor(loop, [&, i](std::exception_ptr error, idem::claim_result answer) {
          outcomes[i] = {true, error, answer};
          if (++completed == 1) {
            // The first answer is in: most of the pipeline is still in flight.
            const auto raw = server.connect();
            (void)idem_redis_test::command(raw.get(),
                                           {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
          }
        }));
  }
  loop.run();
  std::size_t failed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    INFO("claim of " << keys[i]);
    REQUIRE(outcomes[i].done);
    if (outcomes[i].error) {
      CHECK(unavailable_saying(outcomes[i].error, "was lost"));
      CHECK(unavailable_saying(outcomes[i].error, "may have run"));
      ++failed;
    } else if (i % 2 == 0) {
      CHECK(outcomes[i].answer.status == claim_status::existing);
      CHECK(outcomes[i].answer.existing.recovery == "recovery of " + keys[i]);
    } else {
      CHECK(outcomes[i].answer.status == claim_status::claimed);
    }
  }
  CHECK(failed > 0);
  CHECK(failed < count);
  // The store recovers on a new connection: every key answers as its own, whether or not the
  // lost claim had run.
  idem_redis_async_test::blocking_async again(store);
  for (std::size_t i = 0; i < count; i += 97) {
    INFO("claim of " << keys[i] << " again");
    const auto answer = again.claim(claim_of(keys[i]));
    CHECK(answer.status != claim_status::full);
    if (i % 2 == 0) CHECK(answer.existing.recovery == "recovery of " + keys[i]);
  }
  // The store's first connection (made after `connections` was read), the killer's, INFO's,
  // and the store's one new connection.
  CHECK(info_number(server, "stats", "total_connections_received") - connections == 4);
}

TEST_CASE(
    "a server that is down is answered unavailable promptly, and the store reconnects when it "
    "is back",
    "[redis_async]") {
  idem_redis_test::private_redis server;  // appendfsync always: what it acknowledged survives
  idem_redis_async_test::store_maker stores;
  auto options = idem_redis_async_test::private_options(server);
  options.pool_size = 2;
  options.connect_timeout = 500ms;
  options.reconnect_delay = 50ms;
  options.max_reconnect_delay = 200ms;
  auto store = stores.make_blocking(options);
  REQUIRE(store.claim(claim_of("before")).status == claim_status::claimed);

  server.kill9();
  for (int attempt = 0; attempt < 5; ++attempt) {
    INFO("attempt " << attempt);
    const auto started = std::chrono::steady_clock::now();
    const std::exception_ptr down = failure_of([&] { (void)store.claim(claim_of("during")); });
    CHECK(std::chrono::steady_clock::now() - started < 300ms);
    REQUIRE(down);
    CHECK(unavailable_saying(down, "127.0.0.1:" + std::to_string(server.port())));
  }

  server.start();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  std::exception_ptr last;
  bool back = false;
  while (!back && std::chrono::steady_clock::now() < deadline) {
    last = failure_of([&] { (void)store.claim(claim_of("after")); });
    back = !last;
    if (!back) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(back);
  CHECK(store.find("s", "before", std::chrono::system_clock::now()).has_value());
  CHECK(store.find("s", "after", std::chrono::system_clock::now()).has_value());
}

TEST_CASE(
    "a server the checks at start refuse, or that refuses AUTH, fails every operation saying "
    "why",
    "[redis_async]") {
  SECTION("an eviction policy that could drop records") {
    const idem_redis_test::private_redis server(
        {"--appendonly", "no", "--maxmemory-policy", "allkeys-lru"});
    idem_redis_async_test::store_maker stores;
    auto store = stores.make_blocking(idem_redis_async_test::private_options(server));
    CHECK(unavailable_saying(failure_of([&] { (void)store.claim(claim_of("k")); }),
                             "maxmemory-policy allkeys-lru"));
    // Nothing was written.
    const auto raw = server.connect();
    CHECK(idem_redis_test::command(raw.get(), {"DBSIZE"})->integer == 0);
  }
  SECTION("a password, a database; and a wrong password") {
    const idem_redis_test::private_redis server({"--appendonly", "no"});
    idem_redis_test::config_set(server, "requirepass", "secret");
    idem_redis_async_test::store_maker stores;
    // Before the maker deletes the test's keys (with no password), the password goes.
    const password_reset reset(server);
    auto options = idem_redis_async_test::private_options(server);
    options.password = "secret";
    options.database = 3;
    auto store = stores.make_blocking(options);
    REQUIRE(store.claim(claim_of("k")).status == claim_status::claimed);
    const auto raw = server.connect();
    REQUIRE(idem_redis_test::command(raw.get(), {"AUTH", "secret"})->type == REDIS_REPLY_STATUS);
    REQUIRE(idem_redis_test::command(raw.get(), {"SELECT", "3"})->type == REDIS_REPLY_STATUS);
    CHECK(idem_redis_test::command(raw.get(), {"DBSIZE"})->integer > 0);

    options.password = "wrong";
    auto refused = stores.make_blocking(options);
    CHECK(unavailable_saying(failure_of([&] { (void)refused.claim(claim_of("k")); }),
                             "refused AUTH"));
  }
}
