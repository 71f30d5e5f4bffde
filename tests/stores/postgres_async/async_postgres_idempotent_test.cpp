// async_idempotent over the asynchronous PostgreSQL store with a handler that takes the store's
// transaction: its own statements, awaited on the transaction's connection, its outbox messages
// and its steps commit together with the record, or not at all.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>
#include <idem/store/async_postgres.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <future>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "async_postgres_support.hpp"

namespace pgtest = idem::testing::postgres;
namespace pgasync = idem::testing::postgres_async;
namespace asio = idem::asio;
using namespace std::chrono_literals;

namespace {

using outcome = idem::idempotent_outcome<idem::http_response>;
using transaction = idem::async_postgres_store::transaction;

const std::string topic = "things";
const std::string done = "done";
const std::string attempt = "attempt";
const std::string made = "made ";
const std::string ok = "ok";

// Made outside the handlers, as the statements' parameters are made before their co_await: GCC 12
// rejects a braced initialiser in a co_await'ed call's arguments, and string literals in one
// inside a coroutine ("array used as initializer").
idem::http_response response(int status, std::string body) {
  return {status, {{"Content-Type", "text/plain"}}, std::move(body)};
}

struct policies : idem::default_policies {
  using store = idem::async_postgres_store;
};
template <class Handler>
using guarded_by = idem::async_idempotent<Handler, policies>;

// A store on a fresh table with an effects table beside it (both dropped with the table), and a
// loop run by one thread of the fixture's own: a call's parts must not run at once.
struct fixture {
  pgtest::table_guard table{pgtest::unique_table("aidem")};
  pgtest::connection admin;
  pgasync::running_loop loop{1};
  idem::async_postgres_store store;

  explicit fixture(std::chrono::milliseconds statement_timeout = 0ms) {
    idem::async_postgres_store::options config;
    config.conninfo = pgtest::conninfo();
    config.table = table.name;
    config.pool_size = 4;
    config.statement_timeout = statement_timeout;
    store = idem::async_postgres_store{config, loop.executor()};
    admin.exec("CREATE TABLE " + effects() + " (key text NOT NULL, note text)");
  }
  std::string effects() const { return "\"" + table.name + "_effects\""; }
  std::string insert_sql() const { return "INSERT INTO " + effects() + " VALUES ($1, $2)"; }
  long long effect_count() { return admin.scalar("SELECT count(*) FROM " + effects()); }
  long long outbox_count() {
    return admin.scalar("SELECT count(*) FROM \"" + table.name + "_outbox\"");
  }

  template <class Handler>
  typename guarded_by<Handler>::options options_for() {
    typename guarded_by<Handler>::options options;
    options.store = store;
    options.lease = 5s;
    return options;
  }
};

idem::http_request post(const std::string& key, const std::string& body) {
  return {"POST", "/v1/things", {{"Idempotency-Key", key}}, body};
}

// Calls `guarded` for `request` under scope "tenant" and waits for the outcome.
template <class Guarded>
outcome call(Guarded& guarded, const idem::http_request& request) {
  return guarded.async_call("tenant", request, asio::use_future).get();
}

}  // namespace

TEST_CASE(
    "a transactional async handler's writes and message commit with its record, and a repeat "
    "replays without running",
    "[postgres_async][async_idempotent]") {
  fixture f;
  std::atomic<int> runs{0};
  auto handler = [&](idem::async_handler_context& ctx, const idem::http_request& request,
                     transaction& tx) -> asio::awaitable<idem::http_response> {
    ++runs;
    const std::string key(ctx.key());
    const idem::async_postgres_store::parameters row{key, request.body};
    co_await tx.exec(f.insert_sql(), row);
    const idem::outbox_message message{topic, key, request.body, {}};
    const std::string id = co_await tx.publish(done, message);
    co_return response(201, made + id);
  };
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler,
                                        f.options_for<decltype(handler)>()};

  const outcome first = call(guarded, post("k-1", "one"));
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first->status == 201);
  CHECK(first->body == made + idem::outbox_message_id("tenant", "k-1", "done"));
  const outcome again = call(guarded, post("k-1", "one"));
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again->body == first->body);
  CHECK(runs == 1);
  CHECK(f.effect_count() == 1);
  CHECK(f.outbox_count() == 1);
}

TEST_CASE("a transactional async handler that throws rolls its writes back, and a retry runs",
          "[postgres_async][async_idempotent]") {
  fixture f;
  std::atomic<int> runs{0};
  auto handler = [&](idem::async_handler_context& ctx, const idem::http_request&,
                     transaction& tx) -> asio::awaitable<idem::http_response> {
    const std::string key(ctx.key());
    const idem::async_postgres_store::parameters row{key, attempt};
    co_await tx.exec(f.insert_sql(), row);
    const idem::outbox_message message{topic, key, attempt, {}};
    (void)co_await tx.publish(done, message);
    if (++runs == 1) throw std::runtime_error("the downstream said no");
    co_return response(201, ok);
  };
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler,
                                        f.options_for<decltype(handler)>()};

  CHECK_THROWS_WITH(call(guarded, post("k-2", "{}")), "the downstream said no");
  CHECK(f.effect_count() == 0);
  CHECK(f.outbox_count() == 0);
  const outcome retried = call(guarded, post("k-2", "{}"));
  CHECK(retried.verdict() == idem::verdict::executed);
  CHECK(runs == 2);
  CHECK(f.effect_count() == 1);
  CHECK(f.outbox_count() == 1);
}

TEST_CASE("a transactional async handler's steps are written in its transaction, not beside it",
          "[postgres_async][async_idempotent]") {
  // A step written on another connection would wait for the record's row lock, which the
  // handler's own transaction holds: the call would hang until statement_timeout and fail.
  fixture f{2000ms};
  int charged = 0;
  auto handler = [&](idem::async_handler_context& ctx, const idem::http_request&,
                     transaction& tx) -> asio::awaitable<idem::http_response> {
    const std::string charge =
        co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
          ++charged;
          co_return std::string("ch_1");
        });
    const idem::async_postgres_store::parameters row{std::string(ctx.key()), charge};
    co_await tx.exec(f.insert_sql(), row);
    co_return response(201, charge);
  };
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler,
                                        f.options_for<decltype(handler)>()};

  const auto started = std::chrono::steady_clock::now();
  const outcome first = call(guarded, post("k-3", "{}"));
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first->body == "ch_1");
  CHECK(charged == 1);
  CHECK(f.effect_count() == 1);
  CHECK(std::chrono::steady_clock::now() - started < 2000ms);
  // The step's recovery point committed with the record, and the record is complete.
  CHECK(f.admin.scalar("SELECT count(*) FROM \"" + f.table.name +
                       "\" WHERE key = 'k-3' AND state = 1") == 1);
}

TEST_CASE("a blocking step() in a transactional async handler is refused, and nothing commits",
          "[postgres_async][async_idempotent]") {
  fixture f;
  auto handler = [&](idem::async_handler_context& ctx, const idem::http_request&,
                     transaction& tx) -> asio::awaitable<idem::http_response> {
    const idem::async_postgres_store::parameters row{std::string(ctx.key()), attempt};
    co_await tx.exec(f.insert_sql(), row);
    const std::string charge = ctx.step("charge", [] { return std::string("ch_2"); });
    co_return response(201, charge);
  };
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler,
                                        f.options_for<decltype(handler)>()};
  CHECK_THROWS_AS(call(guarded, post("k-4", "{}")), std::logic_error);
  CHECK(f.effect_count() == 0);
}

TEST_CASE("a transactional async handler needs a key: without one it is not run",
          "[postgres_async][async_idempotent]") {
  fixture f;
  int runs = 0;
  auto handler = [&](idem::async_handler_context&, const idem::http_request&,
                     transaction&) -> asio::awaitable<idem::http_response> {
    ++runs;
    co_return response(201, ok);
  };
  auto options = f.options_for<decltype(handler)>();
  options.require_key = false;
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler, options};
  const idem::http_request keyless{"POST", "/v1/things", {}, "{}"};
  const outcome answered = call(guarded, keyless);
  CHECK(answered.verdict() == idem::verdict::missing_key);
  CHECK(runs == 0);
}

TEST_CASE("64 transactional async calls of one key on one thread: one effect, one answer",
          "[postgres_async][async_idempotent][concurrency]") {
  fixture f;
  std::atomic<int> runs{0};
  auto handler = [&](idem::async_handler_context& ctx, const idem::http_request& request,
                     transaction& tx) -> asio::awaitable<idem::http_response> {
    ++runs;
    const idem::async_postgres_store::parameters row{std::string(ctx.key()), request.body};
    co_await tx.exec(f.insert_sql(), row);
    co_return response(201, made + request.body);
  };
  auto options = f.options_for<decltype(handler)>();
  options.coalesce = 3s;  // duplicates wait for the first to settle, then replay it
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler, options};

  for (int round = 0; round < 5; ++round) {
    const std::string key = "storm-" + std::to_string(round);
    const idem::http_request request = post(key, "body");
    std::vector<std::future<outcome>> calls;
    for (int i = 0; i < 64; ++i)
      calls.push_back(guarded.async_call("tenant", request, asio::use_future));
    std::map<idem::verdict, int> verdicts;
    for (auto& pending : calls) {
      const outcome answered = pending.get();
      ++verdicts[answered.verdict()];
      if (answered) CHECK(answered->body == made + "body");
    }
    CHECK(verdicts[idem::verdict::executed] == 1);
    CHECK(verdicts[idem::verdict::executed] + verdicts[idem::verdict::replayed] == 64);
  }
  CHECK(runs == 5);
  CHECK(f.effect_count() == 5);
}
