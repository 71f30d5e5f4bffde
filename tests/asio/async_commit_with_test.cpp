// async_idempotent over a blocking TransactionalStore (SQLite, its calls on a thread pool) with a
// handler answering idem::commit_with: the handler runs on the loop outside any transaction (no
// write lock held while it waits), and its writes are made where the store's calls run, in the
// transaction that completes the record.
#include <catch2/catch.hpp>

#if defined(IDEM_TEST_SQLITE)
#include <idem/asio.hpp>
#include <idem/store/sqlite.hpp>

#include <sqlite3.h>

#include <atomic>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>

#include "support/temporary_directory.hpp"

namespace {

namespace asio = idem::asio;
using idem::verdict;
using transaction = idem::sqlite_store::transaction;
using committed = idem::commit_with<std::string, transaction>;

struct sqlite_policies : idem::default_policies {
  using store = idem::sqlite_store;
};

// A connection of the test's own to the store's file.
struct file {
  sqlite3* db = nullptr;
  explicit file(const std::string& path) {
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
  }
  ~file() { sqlite3_close(db); }
  file(const file&) = delete;
  file& operator=(const file&) = delete;
  std::string text(const char* sql) const {
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql, -1, &statement, nullptr) == SQLITE_OK);
    std::string out;
    if (sqlite3_step(statement) == SQLITE_ROW && sqlite3_column_text(statement, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(statement, 0));
    }
    sqlite3_finalize(statement);
    return out;
  }
  // Whether SQLite's write lock can be taken at once: no transaction holds it.
  bool write_lock_free() const {
    sqlite3_busy_timeout(db, 0);
    const bool free = sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
    if (free) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_busy_timeout(db, 5000);
    return free;
  }
};

struct fixture {
  idem::testing::temporary_directory directory;
  std::string path = directory.file("idem.sqlite3");
  idem::sqlite_store store{path};
  // The event loop outlives the pool, whose thread may still be returning from posting a store
  // call's completion to it when the loop's run() has already returned: the pool is joined first.
  asio::io_context io;
  asio::thread_pool pool{1};

  fixture() {
    file app(path);
    REQUIRE(sqlite3_exec(app.db, "CREATE TABLE charges (key TEXT NOT NULL, amount INTEGER)",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  template <class Handler>
  typename idem::async_idempotent<Handler, sqlite_policies>::options options_for() {
    typename idem::async_idempotent<Handler, sqlite_policies>::options options;
    options.store = store;
    options.store_executor = pool.get_executor();
    return options;
  }
  // One call, run on the loop until it completes.
  template <class Guarded>
  auto call(Guarded& guarded, const char* key, const std::string& body) {
    auto pending = guarded.async_call("tenant", std::string_view(key), body, asio::use_future);
    io.restart();
    while (pending.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
      io.run_one_for(std::chrono::milliseconds(10));
    }
    return pending.get();
  }
  std::string charges() const {
    return file(path).text("SELECT group_concat(key || ':' || amount, ',') FROM charges");
  }
  std::string messages() const { return file(path).text("SELECT count(*) FROM idem_outbox"); }
};

std::function<void(transaction&)> charge_row(std::string key, int amount) {
  return [key = std::move(key), amount](transaction& tx) {
    (void)tx.exec("INSERT INTO charges (key, amount) VALUES (?1, ?2)", key, amount);
    (void)tx.publish("charged", idem::outbox_message{"charges", key, std::to_string(amount), {}});
  };
}

}  // namespace

TEST_CASE(
    "async_idempotent on SQLite: a handler answering commit_with waits with no write lock held, "
    "and its writes and message commit with the record where the store's calls run",
    "[async_idempotent][commit_with]") {
  fixture f;
  std::atomic<int> runs{0};
  std::atomic<int> charged{0};
  std::atomic<bool> lock_free{false};
  auto handler = [&](idem::async_handler_context& ctx,
                     const std::string& amount) -> asio::awaitable<committed> {
    ++runs;
    const std::string charge = co_await ctx.async_step(
        "charge",
        [&]() -> asio::awaitable<std::string> { co_return "ch_" + std::to_string(++charged); });
    lock_free = file(f.path).write_lock_free();  // where the processor would answer
    co_return committed{charge, charge_row(std::string(ctx.key()), std::stoi(amount))};
  };
  idem::async_idempotent<decltype(handler), sqlite_policies> guarded{
      f.io.get_executor(), handler, f.options_for<decltype(handler)>()};

  const auto first = f.call(guarded, "order-1", "250");
  REQUIRE(first.verdict() == verdict::executed);
  CHECK(first.recorded());
  CHECK(*first == "ch_1");
  CHECK(lock_free);
  const auto again = f.call(guarded, "order-1", "250");
  CHECK(again.verdict() == verdict::replayed);
  CHECK(*again == "ch_1");
  CHECK(runs == 1);
  CHECK(charged == 1);
  CHECK(f.charges() == "order-1:250");
  CHECK(f.messages() == "1");
}

TEST_CASE(
    "async_idempotent on SQLite: commit_with writes that throw roll back with the record, the "
    "call throws, and the retry writes once",
    "[async_idempotent][commit_with]") {
  fixture f;
  std::atomic<int> runs{0};
  auto handler = [&](idem::async_handler_context& ctx,
                     const std::string& amount) -> asio::awaitable<committed> {
    const bool fail = ++runs == 1;
    auto writes = [row = charge_row(std::string(ctx.key()), std::stoi(amount)),
                   fail](transaction& tx) {
      row(tx);  // made, then rolled back with the throw
      if (fail) throw std::runtime_error("the writes said no");
    };
    co_return committed{"charged", writes};
  };
  idem::async_idempotent<decltype(handler), sqlite_policies> guarded{
      f.io.get_executor(), handler, f.options_for<decltype(handler)>()};

  CHECK_THROWS_WITH(f.call(guarded, "order-1", "5"), "the writes said no");
  CHECK(f.charges().empty());
  CHECK(f.messages() == "0");
  const auto retried = f.call(guarded, "order-1", "5");  // released: runs again
  CHECK(retried.verdict() == verdict::executed);
  CHECK(runs == 2);
  CHECK(f.charges() == "order-1:5");
  CHECK(f.messages() == "1");
}

#endif  // IDEM_TEST_SQLITE
