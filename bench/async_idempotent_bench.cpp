// What the asynchronous driver costs over the blocking one: the same trivial handler behind
// idem::async_idempotent (idem_async) and idem::idempotent (idem_sync), default policies (memory
// store, XXH3-128, coarse clock), one thread.
//
//   async_idempotent_first/idem_async    co_await guard.async_call(scope, key, body,
//                                        use_awaitable) from a coroutine on an io_context, for
//                                        a key never seen before: the checks, the fingerprint,
//                                        the claim, the handler (a coroutine, awaited in the
//                                        call's, entered in the lease heartbeat), the completion
//   async_idempotent_first/idem_sync     guard(scope, key, body), the blocking wrapper
//   async_idempotent_replay/idem_async   the same for keys whose responses are stored: replayed
//   async_idempotent_replay/idem_sync
//   .../idem_async_no_heartbeat          idem_async with options.heartbeat off: the call is
//                                        not entered in the heartbeat (what the heartbeat costs
//                                        a call)
//   async_handler_alone/coroutine        co_await async_handler{}(body) in the same loop, no
//                                        wrapper: what the handler's coroutine and the loop's
//                                        suspension points cost by themselves
//   async_handler_alone/function         respond(body), the blocking handler, in a plain loop
//
// The two `alone` set the ceiling of async / sync: an asynchronous call runs a coroutine handler
// where the blocking one calls a function, so idem_async cannot be cheaper than idem_sync plus
// their difference.
//
// Both handlers return the same 64-byte std::string for the same 256-byte body. first: a fixed
// 60,000 new keys into a fresh store; replay: 1,024 completed keys, cycled through. The
// benchmark loop of idem_async runs inside the coroutine, as a server's connection would.
#include <benchmark/benchmark.h>

#include <idem/asio.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "uuid_keys.hpp"

namespace {

namespace asio = idem::asio;

constexpr std::string_view scope = "payments";
constexpr std::size_t first_keys = 60'000;
constexpr std::size_t replay_keys = 1024;
constexpr std::string_view response_text =
    R"({"id":"ch_3MmlLrLkdIwHu7ix0snN0B1","status":"succeeded","amt":9})";

const std::string& request_body() {
  static const std::string body = [] {
    std::string bytes(256, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<char>('a' + (i * 7) % 26);
    return bytes;
  }();
  return body;
}

const std::vector<std::string>& keys() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> made;
    made.reserve(first_keys + replay_keys);
    for (std::size_t i = 0; i < first_keys + replay_keys; ++i)
      made.push_back(idem_bench::uuid_shaped_key(i, 0x9e3779b97f4a7c15));
    return made;
  }();
  return all;
}

std::string respond(const std::string& body) {
  benchmark::DoNotOptimize(body.data());
  return std::string(response_text);
}

struct async_handler {
  asio::awaitable<std::string> operator()(const std::string& body) const {
    co_return respond(body);
  }
};

using sync_guard = idem::idempotent<std::string (*)(const std::string&)>;
using async_guard = idem::async_idempotent<async_handler>;
// The same wrapper, built with heartbeat = false.
struct no_heartbeat_guard : async_guard {
  static options without_heartbeat() {
    options parts;
    parts.heartbeat = false;
    return parts;
  }
  explicit no_heartbeat_guard(asio::io_context& io)
      : async_guard(io.get_executor(), async_handler{}, without_heartbeat()) {}
};

// Runs `calls` (keys from `first`, cycling over `count`) through the guard, checking each.
template <class Guard>
void run_calls(benchmark::State& state, Guard& guard, std::size_t first, std::size_t count,
               asio::io_context* io) {
  const auto& all = keys();
  const std::string& body = request_body();
  std::size_t next = 0;
  std::size_t wrong = 0;
  if constexpr (std::is_same_v<Guard, sync_guard>) {
    for (auto _ : state) {
      auto outcome = guard(scope, all[first + (next++ % count)], body);
      wrong += outcome && outcome->size() == response_text.size() ? 0 : 1;
      benchmark::DoNotOptimize(outcome);
    }
  } else {
    asio::co_spawn(
        *io,
        [&]() -> asio::awaitable<void> {
          for (auto _ : state) {
            const std::optional<std::string_view> key = all[first + (next++ % count)];
            auto outcome = co_await guard.async_call(scope, key, body, asio::use_awaitable);
            wrong += outcome && outcome->size() == response_text.size() ? 0 : 1;
            benchmark::DoNotOptimize(outcome);
          }
        },
        asio::detached);
    io->run();
  }
  state.SetItemsProcessed(state.iterations());
  if (wrong != 0) state.SkipWithError("a call did not answer the handler's response");
}

template <class Guard>
std::unique_ptr<Guard> make_guard(asio::io_context& io) {
  if constexpr (std::is_same_v<Guard, sync_guard>) {
    return std::make_unique<Guard>(&respond);
  } else if constexpr (std::is_same_v<Guard, no_heartbeat_guard>) {
    return std::make_unique<Guard>(io);
  } else {
    return std::make_unique<Guard>(io.get_executor(), async_handler{});
  }
}

template <class Guard>
void async_idempotent_first(benchmark::State& state) {
  asio::io_context io;
  auto guard = make_guard<Guard>(io);
  run_calls(state, *guard, 0, first_keys, &io);
}

template <class Guard>
void async_idempotent_replay(benchmark::State& state) {
  asio::io_context io;
  auto guard = make_guard<Guard>(io);
  // The stored responses, made through the guard measured.
  for (std::size_t i = 0; i < replay_keys; ++i) {
    const std::optional<std::string_view> key = keys()[first_keys + i];
    if constexpr (std::is_same_v<Guard, sync_guard>) {
      (void)(*guard)(scope, key, request_body());
    } else {
      guard->async_call(scope, key, request_body(), asio::detached);
      io.run();
      io.restart();
    }
  }
  run_calls(state, *guard, first_keys, replay_keys, &io);
}

void async_handler_alone_coroutine(benchmark::State& state) {
  asio::io_context io;
  const std::string& body = request_body();
  std::size_t wrong = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (auto _ : state) {
          std::string response = co_await async_handler{}(body);
          wrong += response.size() == response_text.size() ? 0 : 1;
          benchmark::DoNotOptimize(response);
        }
      },
      asio::detached);
  io.run();
  state.SetItemsProcessed(state.iterations());
  if (wrong != 0) state.SkipWithError("the handler did not answer its response");
}

void async_handler_alone_function(benchmark::State& state) {
  const std::string& body = request_body();
  std::size_t wrong = 0;
  for (auto _ : state) {
    std::string response = respond(body);
    wrong += response.size() == response_text.size() ? 0 : 1;
    benchmark::DoNotOptimize(response);
  }
  state.SetItemsProcessed(state.iterations());
  if (wrong != 0) state.SkipWithError("the handler did not answer its response");
}

[[maybe_unused]] const bool registered = [] {
  // A fixed count of first calls, so that every run fills a store of the same size.
  benchmark::RegisterBenchmark("async_idempotent_first/idem_async",
                               async_idempotent_first<async_guard>)
      ->Iterations(first_keys)
      ->Repetitions(5);
  benchmark::RegisterBenchmark("async_idempotent_first/idem_sync",
                               async_idempotent_first<sync_guard>)
      ->Iterations(first_keys)
      ->Repetitions(5);
  benchmark::RegisterBenchmark("async_idempotent_first/idem_async_no_heartbeat",
                               async_idempotent_first<no_heartbeat_guard>)
      ->Iterations(first_keys)
      ->Repetitions(5);
  benchmark::RegisterBenchmark("async_handler_alone/coroutine", async_handler_alone_coroutine);
  benchmark::RegisterBenchmark("async_handler_alone/function", async_handler_alone_function);
  benchmark::RegisterBenchmark("async_idempotent_replay/idem_async",
                               async_idempotent_replay<async_guard>);
  benchmark::RegisterBenchmark("async_idempotent_replay/idem_sync",
                               async_idempotent_replay<sync_guard>);
  return true;
}();

}  // namespace
