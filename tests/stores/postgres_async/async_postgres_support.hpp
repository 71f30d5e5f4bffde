// What the asynchronous PostgreSQL store's tests share: a loop run by threads of the test's own,
// stores on unique tables (dropped when the test case ends), and the conformance factory.
#pragma once

#include <catch2/catch.hpp>

#include <idem/async/blocking_store.hpp>
#include <idem/store/postgres/async.hpp>
#include <idem/testing/detail/conformance/support.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "postgres_test_support.hpp"

namespace idem::testing::postgres_async {

namespace asio = idem::asio;

/// An io_context run by `threads` threads until it is destroyed.
class running_loop {
 public:
  explicit running_loop(int threads = 2) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] { context_.run(); });
  }
  running_loop(const running_loop&) = delete;
  running_loop& operator=(const running_loop&) = delete;
  ~running_loop() {
    guard_.reset();
    for (std::thread& thread : threads_)
      thread.join();
  }
  asio::io_context& context() noexcept { return context_; }
  asio::any_io_executor executor() { return context_.get_executor(); }

 private:
  asio::io_context context_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_{context_.get_executor()};
  std::vector<std::thread> threads_;
};

/// Options on a fresh table, with the caller's time (the suites' manual clock).
inline async_postgres_store::options caller_time_options(const std::string& table) {
  async_postgres_store::options config;
  config.conninfo = postgres::conninfo();
  config.table = table;
  config.clock = time_source::caller;
  // A sanitizer build's 64-connection storm, beside another build's, opened its last
  // connections after more than the default 10 s (CI of stop 44): the tests check effects,
  // not how fast PostgreSQL forks a backend on 2 busy cores.
  config.connect_timeout = std::chrono::seconds{60};
  return config;
}

/// The conformance factory: a fresh table per store, seen through blocking_store, the loop run
/// by two threads of the factory's own.
struct factory {
  static constexpr bool bounded = false;
  std::vector<std::string> tables;
  std::unique_ptr<running_loop> loop = std::make_unique<running_loop>(2);

  blocking_store<async_postgres_store> make(const store_limits& /*limits*/) {
    async_postgres_store::options config = caller_time_options(postgres::unique_table("ac"));
    // The storm runs 64 threads. Each connection commits its operations one after another, each
    // waiting for its own flush to disk, so commits group across connections, not within one.
    config.pool_size = 32;
    tables.push_back(config.table);
    return blocking_store<async_postgres_store>{async_postgres_store{loop->executor(), config}};
  }
  factory() = default;
  factory(const factory&) = delete;
  factory& operator=(const factory&) = delete;
  ~factory() {
    loop.reset();
    for (const std::string& table : tables)
      postgres::drop_table(postgres::conninfo(), table);
  }
};

/// Runs `body` (a coroutine) on `loop` and waits for it, rethrowing what it threw.
template <class Body>
auto run_on(asio::io_context& loop, Body body) {
  return asio::co_spawn(loop, std::move(body), asio::use_future).get();
}

}  // namespace idem::testing::postgres_async

namespace idem::testing::postgres_async {

/// A name for the store's connections (application_name), so a test can find its backends in
/// pg_stat_activity.
inline std::string with_application(const std::string& name) {
  return postgres::conninfo() + " application_name=" + name;
}

/// How many backends of `application` exist, and how many of them wait on a lock.
inline long long backends_of(postgres::connection& admin, const std::string& application) {
  return admin.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" +
                      application + "'");
}
inline long long waiting_on_lock(postgres::connection& admin, const std::string& application) {
  return admin.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = '" +
                      application + "' AND state = 'active' AND wait_event_type = 'Lock'");
}

/// Polls `condition` every 10 ms for up to `limit`; whether it held.
template <class Condition>
bool eventually(Condition condition,
                std::chrono::milliseconds limit = std::chrono::milliseconds{5000}) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return condition();
}

}  // namespace idem::testing::postgres_async
