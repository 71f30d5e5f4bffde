// The checks async_idempotent and async_inbox make of their handlers, each with the sentence a
// user reads when it fails, in the manner of idem/server/detail/checks.hpp: a handler's result
// type is named only after its check passed.
#ifndef IDEM_ASIO_DETAIL_ASYNC_CHECKS_HPP
#define IDEM_ASIO_DETAIL_ASYNC_CHECKS_HPP

#include <concepts>
#include <type_traits>
#include <variant>

#include <idem/asio/async_store.hpp>
#include <idem/asio/handler_context.hpp>

namespace idem::detail {

// A call of F with Args that returns an asio::awaitable.
template <class F, class... Args>
concept awaitable_call =
    std::invocable<F&, Args...> && is_awaitable<std::invoke_result_t<F&, Args...>>;

// --- async_idempotent's handler --------------------------------------------------------------

template <class Handler, class Request>
concept takes_async_context = awaitable_call<Handler, async_handler_context&, const Request&>;

// A handler that runs inside the transaction completing its record (AsyncTransactionalStore).
template <class Handler, class Request, class Store>
concept takes_async_transaction = AsyncTransactionalStore<Store> &&
    awaitable_call<Handler, async_handler_context&, const Request&, typename Store::transaction&>;

template <class Handler, class Request, class Store>
concept async_guardable = takes_async_context<Handler, Request> ||
    awaitable_call<Handler, const Request&> || takes_async_transaction<Handler, Request, Store>;

template <class Handler, class Request, class Store>
struct async_handler_result {
  using type = typename awaited<std::invoke_result_t<Handler&, const Request&>>::type;
};
template <class Handler, class Request, class Store>
requires takes_async_context<Handler, Request>
struct async_handler_result<Handler, Request, Store> {
  using type = typename awaited<
      std::invoke_result_t<Handler&, async_handler_context&, const Request&>>::type;
};
template <class Handler, class Request, class Store>
requires(
    takes_async_transaction<Handler, Request, Store> &&
    !takes_async_context<Handler, Request>) struct async_handler_result<Handler, Request, Store> {
  using type =
      typename awaited<std::invoke_result_t<Handler&, async_handler_context&, const Request&,
                                            typename Store::transaction&>>::type;
};

template <class Handler, class Request, class Store>
constexpr bool check_async_handler() {
  static_assert(async_guardable<Handler, Request, Store>,
                "An async_idempotent handler must be callable as "
                "asio::awaitable<R>(idem::async_handler_context&, const Request&) or "
                "asio::awaitable<R>(const Request&), where R is a storable response; or, with an "
                "AsyncTransactionalStore, as asio::awaitable<R>(idem::async_handler_context&, "
                "const Request&, Store::transaction&).");
  return true;
}

// --- async_inbox's consumer function ---------------------------------------------------------

template <class F>
concept takes_async_consumer_context = awaitable_call<F, async_handler_context&>;

template <class F>
concept async_consumer = takes_async_consumer_context<F> || awaitable_call<F>;

template <class F>
struct async_consumer_result {
  using type = typename awaited<std::invoke_result_t<F&>>::type;
};
template <class F>
requires takes_async_consumer_context<F>
struct async_consumer_result<F> {
  using type = typename awaited<std::invoke_result_t<F&, async_handler_context&>>::type;
};

template <class F>
constexpr bool check_async_consumer() {
  static_assert(async_consumer<F>,
                "idem::async_inbox::async_deduplicate: the function must be callable as "
                "asio::awaitable<R>() or asio::awaitable<R>(idem::async_handler_context&), where "
                "R is void or a storable type.");
  return true;
}

}  // namespace idem::detail

#endif  // IDEM_ASIO_DETAIL_ASYNC_CHECKS_HPP
