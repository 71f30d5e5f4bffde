// The asynchronous wrapper's hot paths whose instruction counts an A/B of a code change compares
// (scripts/hot_path_ab.sh), beside hot_path_calls.cpp's blocking ones: the same calls as the
// benchmarks async_idempotent_first/idem_async and async_idempotent_replay/idem_async (a trivial
// coroutine handler, default policies, co_await ... use_awaitable from a coroutine on an
// io_context run by this thread), a fixed number of times each, between callgrind client
// requests.
//
// Built against whichever include/ the script puts first on the path, with Boost.Asio: it uses
// only <idem/asio.hpp> and async_idempotent's async_call(scope, key, request, use_awaitable).
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

asio::awaitable<void> run_phases(idem::async_idempotent<handler>& payments,
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
}

}  // namespace

int main() {
  const std::string body = idem_ab::request_body();
  const auto keys = idem_ab::make_keys(calls);

  asio::io_context io;
  idem::async_idempotent<handler> payments{io.get_executor(), handler{}};
  asio::co_spawn(io, run_phases(payments, keys, body), asio::detached);
  io.run();
  std::printf("%zu calls per phase\n", calls);
}
