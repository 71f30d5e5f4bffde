// async_idempotent over the asynchronous PostgreSQL store with a handler that takes the store's
// transaction: its own statements, awaited on the transaction's connection, its outbox messages
// and its steps commit together with the record, or not at all. And with a handler that answers
// idem::commit_with: it runs outside any transaction, and its writes commit with the record
// after it has returned.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>
#include <idem/store/postgres/async.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
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

  explicit fixture(std::chrono::milliseconds statement_timeout = 0ms, std::size_t pool_size = 4) {
    idem::async_postgres_store::options config;
    config.conninfo = pgtest::conninfo();
    config.table = table.name;
    config.pool_size = pool_size;
    config.statement_timeout = statement_timeout;
    store = idem::async_postgres_store{loop.executor(), config};
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

// Waits on the loop, 5 ms at a time, until `flag` is set or `limit` has passed; answers whether
// it was set.
asio::awaitable<bool> wait_for_flag(const std::atomic<bool>& flag,
                                    std::chrono::milliseconds limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!flag.load() && std::chrono::steady_clock::now() < until) {
    timer.expires_after(5ms);
    co_await timer.async_wait(asio::use_awaitable);
  }
  co_return flag.load();
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

// --- commit_with: the writes commit with the record, after the handler ----------------------

using committed = idem::commit_with<idem::http_response, transaction>;

// The writes of commit_with for one effect row (key, note), made where the handler returns.
std::function<asio::awaitable<void>(transaction&)> write_effect(const fixture& f, std::string key,
                                                                std::string note) {
  return [sql = f.insert_sql(), key = std::move(key),
          note = std::move(note)](transaction& tx) -> asio::awaitable<void> {
    const idem::async_postgres_store::parameters row{key, note};
    co_await tx.exec(sql, row);
    const idem::outbox_message message{topic, key, note, {}};
    (void)co_await tx.publish(done, message);
  };
}

TEST_CASE(
    "a handler answering commit_with: its step runs once, its writes and message commit with "
    "the record, and a repeat replays without running",
    "[postgres_async][async_idempotent][commit_with]") {
  fixture f;
  std::atomic<int> runs{0};
  std::atomic<int> charged{0};
  auto handler = [&](idem::async_handler_context& ctx,
                     const idem::http_request& request) -> asio::awaitable<committed> {
    ++runs;
    const std::string charge =
        co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
          ++charged;
          co_return std::string("ch_7");
        });
    co_return committed{response(201, charge),
                        write_effect(f, std::string(ctx.key()), request.body)};
  };
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler,
                                        f.options_for<decltype(handler)>()};

  const outcome first = call(guarded, post("c-1", "one"));
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first->status == 201);
  CHECK(first->body == "ch_7");
  const outcome again = call(guarded, post("c-1", "one"));
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again->body == "ch_7");
  CHECK(runs == 1);
  CHECK(charged == 1);
  CHECK(f.effect_count() == 1);
  CHECK(f.outbox_count() == 1);
  CHECK(f.admin.scalar("SELECT count(*) FROM \"" + f.table.name +
                       "\" WHERE key = 'c-1' AND state = 1") == 1);
}

TEST_CASE(
    "a handler answering commit_with holds no connection while it waits, and one that takes the "
    "transaction holds it to the end",
    "[postgres_async][async_idempotent][commit_with]") {
  // One connection. The first call's handler waits (on the loop) for a second call, of another
  // key, to be answered. With commit_with the connection is free while it waits, so the second
  // call is answered at once; a handler inside the transaction keeps the connection, so the
  // second call waits for the first to commit, and the first gives up waiting after 1 s.
  fixture f{0ms, 1};
  std::atomic<bool> second_answered{false};
  std::atomic<bool> saw_second{false};
  auto quick = [&](idem::async_handler_context& ctx,
                   const idem::http_request& request) -> asio::awaitable<committed> {
    co_return committed{response(201, ok), write_effect(f, std::string(ctx.key()), request.body)};
  };
  guarded_by<decltype(quick)> other{f.loop.executor(), quick, f.options_for<decltype(quick)>()};

  SECTION("commit_with") {
    auto waiting = [&](idem::async_handler_context& ctx,
                       const idem::http_request& request) -> asio::awaitable<committed> {
      saw_second = co_await wait_for_flag(second_answered, 1000ms);
      co_return committed{response(201, ok), write_effect(f, std::string(ctx.key()), request.body)};
    };
    guarded_by<decltype(waiting)> guarded{f.loop.executor(), waiting,
                                          f.options_for<decltype(waiting)>()};
    const idem::http_request first_request = post("w-1", "first");  // read until answered
    auto first = guarded.async_call("tenant", first_request, asio::use_future);
    const outcome second = call(other, post("w-2", "second"));
    second_answered = true;
    CHECK(second.verdict() == idem::verdict::executed);
    CHECK(first.get().verdict() == idem::verdict::executed);
    CHECK(saw_second);
  }
  SECTION("inside the transaction (the control)") {
    auto waiting = [&](idem::async_handler_context& ctx, const idem::http_request& request,
                       transaction& tx) -> asio::awaitable<idem::http_response> {
      saw_second = co_await wait_for_flag(second_answered, 1000ms);
      const idem::async_postgres_store::parameters row{std::string(ctx.key()), request.body};
      co_await tx.exec(f.insert_sql(), row);
      co_return response(201, ok);
    };
    guarded_by<decltype(waiting)> guarded{f.loop.executor(), waiting,
                                          f.options_for<decltype(waiting)>()};
    const idem::http_request first_request = post("w-1", "first");  // read until answered
    auto first = guarded.async_call("tenant", first_request, asio::use_future);
    // Started once the first holds the connection: its claim is answered, its handler waits.
    std::this_thread::sleep_for(200ms);
    const outcome second = call(other, post("w-2", "second"));
    second_answered = true;
    CHECK(second.verdict() == idem::verdict::executed);
    CHECK(first.get().verdict() == idem::verdict::executed);
    CHECK_FALSE(saw_second);
  }
  CHECK(f.effect_count() == 2);
}

TEST_CASE(
    "commit_with writes that throw, or send a statement the server refuses, roll back: the call "
    "throws, and a retry writes once",
    "[postgres_async][async_idempotent][commit_with]") {
  // A statement sent, not awaited (transaction::send), is refused when COMMIT comes back, after
  // the writes have returned: the refusal is still theirs, not the store's (which would keep
  // the claim).
  fixture f;
  bool refused = false;
  std::string thrown;
  SECTION("thrown by the writes") {}
  SECTION("a sent statement refused") {
    refused = true;
  }
  std::atomic<int> runs{0};
  auto handler = [&](idem::async_handler_context& ctx,
                     const idem::http_request& request) -> asio::awaitable<committed> {
    const bool fail = ++runs == 1;
    auto writes = [effect = write_effect(f, std::string(ctx.key()), request.body), fail,
                   refused](transaction& tx) -> asio::awaitable<void> {
      co_await effect(tx);  // made, then rolled back
      if (fail && refused) tx.send("INSERT INTO idem_no_such_table VALUES (1)");
      if (fail && !refused) throw std::runtime_error("the writes said no");
    };
    co_return committed{response(201, ok), writes};
  };
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler,
                                        f.options_for<decltype(handler)>()};

  try {
    (void)call(guarded, post("t-1", "{}"));
  } catch (const idem::postgres_error& error) {
    thrown = "postgres_error " + error.sqlstate();
  } catch (const std::runtime_error& error) {
    thrown = error.what();
  }
  CHECK(thrown == (refused ? "postgres_error 42P01" : "the writes said no"));
  CHECK(f.effect_count() == 0);
  CHECK(f.outbox_count() == 0);
  const outcome retried = call(guarded, post("t-1", "{}"));  // released: runs again
  CHECK(retried.verdict() == idem::verdict::executed);
  CHECK(runs == 2);
  CHECK(f.effect_count() == 1);
  CHECK(f.outbox_count() == 1);
}

TEST_CASE(
    "a commit_with transaction the store cannot commit answers store_unavailable and keeps the "
    "claim, and the retry after the lease replays the step and writes once",
    "[postgres_async][async_idempotent][commit_with]") {
  fixture f{1000ms};
  std::atomic<int> charged{0};
  std::atomic<bool> step_done{false};
  std::atomic<bool> row_locked{false};
  auto handler = [&](idem::async_handler_context& ctx,
                     const idem::http_request& request) -> asio::awaitable<committed> {
    const std::string charge =
        co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
          ++charged;
          co_return std::string("ch_9");
        });
    step_done = true;
    (void)co_await wait_for_flag(row_locked, 3000ms);
    co_return committed{response(201, charge),
                        write_effect(f, std::string(ctx.key()), request.body)};
  };
  auto options = f.options_for<decltype(handler)>();
  options.lease = 1s;
  options.heartbeat = false;
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler, options};

  const idem::http_request first_request = post("u-1", "{}");  // read until answered
  auto first = guarded.async_call("tenant", first_request, asio::use_future);
  while (!step_done)
    std::this_thread::sleep_for(2ms);
  // Another session holds the record's row: the transaction's fenced write waits for it past
  // statement_timeout.
  f.admin.exec("BEGIN");
  f.admin.exec("SELECT 1 FROM \"" + f.table.name + "\" WHERE key = 'u-1' FOR UPDATE");
  row_locked = true;
  const outcome refused = first.get();
  f.admin.exec("ROLLBACK");
  CHECK(refused.verdict() == idem::verdict::store_unavailable);
  CHECK(f.effect_count() == 0);
  CHECK(f.admin.scalar("SELECT count(*) FROM \"" + f.table.name +
                       "\" WHERE key = 'u-1' AND state = 0") == 1);  // the claim stays

  std::this_thread::sleep_for(1100ms);  // past the lease
  const outcome resumed = call(guarded, post("u-1", "{}"));
  REQUIRE(resumed.verdict() == idem::verdict::executed);
  CHECK(resumed->body == "ch_9");
  CHECK(charged == 1);  // the step's recorded result, not a second charge
  CHECK(f.effect_count() == 1);
  CHECK(f.outbox_count() == 1);
}

TEST_CASE(
    "a commit_with handler that lost its claim while it ran commits nothing, and answers with "
    "the record of the caller that took over",
    "[postgres_async][async_idempotent][commit_with]") {
  fixture f;
  std::atomic<int> runs{0};
  std::atomic<bool> go_on{false};
  auto handler = [&](idem::async_handler_context& ctx,
                     const idem::http_request& request) -> asio::awaitable<committed> {
    const std::string note = "run " + std::to_string(++runs);
    if (note == "run 1") (void)co_await wait_for_flag(go_on, 3000ms);
    co_return committed{response(201, note), write_effect(f, std::string(ctx.key()), request.body)};
  };
  auto options = f.options_for<decltype(handler)>();
  options.lease = 300ms;
  options.heartbeat = false;  // so that the claim can be taken over while the first waits
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler, options};

  const idem::http_request first_request = post("l-1", "{}");  // read until answered
  auto first = guarded.async_call("tenant", first_request, asio::use_future);
  std::this_thread::sleep_for(400ms);
  const outcome taken = call(guarded, post("l-1", "{}"));
  REQUIRE(taken.verdict() == idem::verdict::executed);
  CHECK(taken->body == "run 2");
  go_on = true;
  const outcome late = first.get();
  CHECK(late.verdict() == idem::verdict::replayed);
  CHECK(late->body == "run 2");
  CHECK(f.effect_count() == 1);
  CHECK(f.outbox_count() == 1);
}

TEST_CASE("a commit_with handler needs a key: without one it is not run",
          "[postgres_async][async_idempotent][commit_with]") {
  fixture f;
  int runs = 0;
  auto handler = [&](idem::async_handler_context&,
                     const idem::http_request&) -> asio::awaitable<committed> {
    ++runs;
    co_return committed{response(201, ok), {}};
  };
  auto options = f.options_for<decltype(handler)>();
  options.require_key = false;
  guarded_by<decltype(handler)> guarded{f.loop.executor(), handler, options};
  const idem::http_request keyless{"POST", "/v1/things", {}, "{}"};
  CHECK(call(guarded, keyless).verdict() == idem::verdict::missing_key);
  CHECK(runs == 0);
}

namespace {

// The default clock with an exact wall time (the coarse one reads alike within a kernel tick):
// leases asked for a few microseconds apart differ.
struct exact_clock : idem::coarse_clock {
  std::chrono::system_clock::time_point wall_now() const noexcept {
    return std::chrono::system_clock::now();
  }
};
struct exact_clock_policies : policies {
  using clock = exact_clock;
};

}  // namespace

TEST_CASE(
    "the heartbeat renews the leases of 50 handlers in flight on the real store, past the lease "
    "each was claimed with",
    "[postgres_async][async_idempotent][heartbeat]") {
  fixture f;
  std::atomic<int> runs{0};
  auto handler = [&](idem::async_handler_context&,
                     const idem::http_request&) -> asio::awaitable<idem::http_response> {
    ++runs;
    asio::steady_timer timer(co_await asio::this_coro::executor, 4s);
    co_await timer.async_wait(asio::use_awaitable);
    co_return response(201, ok);
  };
  // The caller's clock: the leases of one batch are one parameter, so they are equal.
  idem::async_postgres_store::options config = pgasync::caller_time_options(f.table.name);
  f.store = idem::async_postgres_store{f.loop.executor(), config};
  using guarded_type = idem::async_idempotent<decltype(handler), exact_clock_policies>;
  guarded_type::options options;
  options.store = f.store;
  options.lease = 1500ms;  // renewed every 500 ms, in one statement for every lease due
  guarded_type guarded{f.loop.executor(), handler, options};
  constexpr int calls = 50;
  std::vector<idem::http_request> requests;  // each kept until its call has answered
  for (int i = 0; i < calls; ++i)
    requests.push_back(post("k-" + std::to_string(i), "{}"));
  std::vector<std::future<outcome>> outcomes;
  for (const idem::http_request& request : requests)
    outcomes.push_back(guarded.async_call("tenant", request, asio::use_future));
  std::this_thread::sleep_for(2500ms);
  // Every record's lease now reaches past the one its claim wrote: renewed at least once.
  const std::string renewed = "SELECT count(*) FROM \"" + f.table.name +
                              "\" WHERE state = 0 AND lease_until > created_at + 1500000000";
  CHECK(f.admin.scalar(renewed) == calls);
  // Renewed together: one lease for all (where one checkpoint each leaves 50 leases, each its
  // own call's clock reading), or a few where a tick's renewals were split.
  const long long leases = f.admin.scalar("SELECT count(DISTINCT lease_until) FROM \"" +
                                          f.table.name + "\" WHERE state = 0");
  CHECK(leases >= 1);
  CHECK(leases <= 5);
  for (auto& each : outcomes) {
    const outcome ran = each.get();
    INFO(ran.message());
    CHECK(ran.verdict() == idem::verdict::executed);
    CHECK(ran.fence() == 1);
  }
  CHECK(runs.load() == calls);
}
