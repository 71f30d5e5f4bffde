// The asynchronous wrapper's hot paths whose instruction counts an A/B of a code change compares
// (scripts/hot_path_ab.sh), beside hot_path_calls.cpp's blocking ones: the same calls as the
// benchmarks async_idempotent_first/idem_async and async_idempotent_replay/idem_async (a trivial
// coroutine handler, default policies, co_await ... use_awaitable from a coroutine on an
// io_context run by this thread), a fixed number of times each, between callgrind client
// requests.
//
// Two more phases frame those counts: async_idempotent_first_no_heartbeat (a wrapper built with
// options.heartbeat off: what entering and leaving the heartbeat costs a first call), and
// async_floor (no idem: a coroutine that awaits the same handler's coroutine and answers its
// response, awaited the same way: what any asynchronous call of this shape costs Asio, the part
// of async_idempotent_first that no change to idem can remove).
//
// Built against whichever include/ the script puts first on the path, with Boost.Asio: it uses
// only <idem/asio.hpp>, async_idempotent's async_call(scope, key, request, use_awaitable) and
// its options' heartbeat.
#include <idem/asio.hpp>

#include <valgrind/callgrind.h>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hot_path_calls.hpp"

namespace {

namespace asio = idem::asio;
using idem_ab::calls;
using idem_ab::keep;
using idem_ab::replay_keys;
using idem_ab::response_text;
using idem_ab::scope;

struct handler {
  asio::awaitable<std::string> operator()(const std::string& body) const {
    keep(body);
    co_return std::string(response_text);
  }
};

using guard = idem::async_idempotent<handler>;

// The floor: the call's coroutine and the handler's, nothing between them.
asio::awaitable<std::optional<std::string>> floor_call(std::string_view key,
                                                       const std::string& body) {
  keep(key);
  co_return co_await handler{}(body);
}

asio::awaitable<void> run_phases(guard& payments, guard& unbeaten,
                                 const std::vector<std::string>& keys, const std::string& body) {
  CALLGRIND_ZERO_STATS;
  for (const auto& key : keys) {
    const std::optional<std::string_view> given = key;
    auto outcome = co_await payments.async_call(scope, given, body, asio::use_awaitable);
    keep(outcome);
  }
  CALLGRIND_DUMP_STATS_AT("async_idempotent_first");

  for (std::size_t i = 0; i < calls; ++i) {
    const std::optional<std::string_view> given = keys[i % replay_keys];
    auto outcome = co_await payments.async_call(scope, given, body, asio::use_awaitable);
    keep(outcome);
  }
  CALLGRIND_DUMP_STATS_AT("async_idempotent_replay");

  for (const auto& key : keys) {
    const std::optional<std::string_view> given = key;
    auto outcome = co_await unbeaten.async_call(scope, given, body, asio::use_awaitable);
    keep(outcome);
  }
  CALLGRIND_DUMP_STATS_AT("async_idempotent_first_no_heartbeat");

  for (const auto& key : keys) {
    auto outcome = co_await floor_call(key, body);
    keep(outcome);
  }
  CALLGRIND_DUMP_STATS_AT("async_floor");
}

}  // namespace

int main() {
  const std::string body = idem_ab::request_body();
  const auto keys = idem_ab::make_keys(calls);

  asio::io_context io;
  guard payments{io.get_executor(), handler{}};
  guard::options without_heartbeat;
  without_heartbeat.heartbeat = false;
  guard unbeaten{io.get_executor(), handler{}, without_heartbeat};
  asio::co_spawn(io, run_phases(payments, unbeaten, keys, body), asio::detached);
  io.run();
  std::printf("%zu calls per phase\n", calls);
}
