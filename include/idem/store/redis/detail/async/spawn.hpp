// How an operation of async_redis_store and async_redis_cluster_store starts and completes: its
// coroutine on the store's strand, its answer (or exception) delivered to the handler's
// associated executor, and a cancellation turned into store_error(unavailable) that says
// whether anything was sent.
#ifndef IDEM_STORE_REDIS_DETAIL_ASYNC_SPAWN_HPP
#define IDEM_STORE_REDIS_DETAIL_ASYNC_SPAWN_HPP

#include <optional>
#include <string>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/async/exchange.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

// The coroutine `body()` with its cancellations as store_error(unavailable): one that came
// before it ran (kept: the reset below would forget it) sent nothing; one during it (any type
// reaches the exchange awaited; one Asio reports itself, between two exchanges of a walk, too)
// may have sent something that still runs at the server.
template <class T, class Body>
auto redis_guarded(const char* who, Body body) {
  return [who, body = std::move(body)]() mutable -> asio::awaitable<T, redis_strand> {
    const asio::cancellation_state early = co_await asio::this_coro::cancellation_state;
    if (early.cancelled() != asio::cancellation_type::none) {
      throw store_error(
          store_failure::unavailable,
          std::string(who) + ": the operation was cancelled before it started; nothing was sent");
    }
    co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
    std::optional<T> answer;
    std::optional<std::string> cancelled;
    try {
      answer.emplace(co_await body());
    } catch (const asio_system_error& error) {
      cancelled = error.what();
    }
    if (cancelled) {
      throw store_error(store_failure::unavailable,
                        std::string(who) + ": the operation was cancelled (" + *cancelled +
                            "); what it sent may still run at the server");
    }
    co_return std::move(*answer);
  };
}

// Starts `body` (guarded) on `strand` and completes `token` with void(exception_ptr, T) on the
// handler's associated executor, `home` when it has none: never the strand, so that a slow
// handler does not hold up the connections. `keep` (the store's shared part) lives until the
// operation is initiated, for tokens that initiate later.
template <class T, class Token, class Keep, class Body>
auto redis_spawn(Token&& token, const char* who, asio::any_io_executor home,
                 const redis_strand& strand, Keep keep, Body body) {
  return asio::async_initiate<Token, async_store_signature<T>>(
      [who](auto handler, const asio::any_io_executor& fallback, const redis_strand& on,
            const Keep&, Body run) {
        auto where = asio::get_associated_executor(handler, fallback);
        asio::co_spawn(on, redis_guarded<T>(who, std::move(run)),
                       asio::bind_executor(std::move(where), std::move(handler)));
      },
      token, std::move(home), strand, std::move(keep), std::move(body));
}

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_STORE_REDIS_DETAIL_ASYNC_SPAWN_HPP
