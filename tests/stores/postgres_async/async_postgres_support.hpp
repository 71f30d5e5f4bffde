// What the asynchronous PostgreSQL store's tests share: a loop run by threads of the test's own,
// stores on unique tables (dropped when the test case ends), and the conformance factory.
#pragma once

#include <catch2/catch.hpp>

#include <idem/asio/blocking_store.hpp>
#include <idem/store/async_postgres.hpp>

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
  config.clock = async_postgres_store::time_source::caller;
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
    config.pool_size = 8;  // the storm's 64 threads share 8 pipelined connections
    tables.push_back(config.table);
    return blocking_store<async_postgres_store>{async_postgres_store{config, loop->executor()}};
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
