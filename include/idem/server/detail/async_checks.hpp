// The checks async_idempotent and async_inbox make of their handlers, each with the sentence a
// user reads when it fails, in the manner of idem/server/detail/checks.hpp: a handler's result
// type is named only after its check passed.
#ifndef IDEM_SERVER_DETAIL_ASYNC_CHECKS_HPP
#define IDEM_SERVER_DETAIL_ASYNC_CHECKS_HPP

#include <concepts>
#include <type_traits>
#include <variant>

#include <idem/server/async_handler_context.hpp>
#include <idem/store/async_contract.hpp>

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
template <class Handler, class Request>
using async_context_result =
    typename awaited<std::invoke_result_t<Handler&, async_handler_context&, const Request&>>::type;

// A handler that answers commit_with: its response and the writes that commit with its record.
template <class Handler, class Request>
concept async_answers_commit_with =
    takes_async_context<Handler, Request> && is_commit_with<async_context_result<Handler, Request>>;

// A store a commit_with's writes can commit in: an AsyncTransactionalStore, or a blocking
// TransactionalStore, whose complete_within runs where the store's calls run.
template <class Store>
concept commits_writes = AsyncTransactionalStore<Store> || TransactionalStore<Store>;

// ... whose writes take the store's own transaction.
template <class Handler, class Request, class Store>
concept async_commits_with_record =
    async_answers_commit_with<Handler, Request> && commits_writes<Store> &&
    std::same_as < typename commit_with_parts<async_context_result<Handler, Request>>::transaction,
typename Store::transaction > ;

template <class Handler, class Request, class Store>
requires takes_async_context<Handler, Request>
struct async_handler_result<Handler, Request, Store> {
  using type = typename commit_with_parts<async_context_result<Handler, Request>>::response;
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
  if constexpr (async_answers_commit_with<Handler, Request>) {
    static_assert(async_commits_with_record<Handler, Request, Store>,
                  "A handler that answers idem::commit_with<R, Transaction> needs an "
                  "AsyncTransactionalStore or a TransactionalStore whose transaction type is "
                  "Transaction: its writes "
                  "commit in the transaction that completes the record.");
  }
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

#endif  // IDEM_SERVER_DETAIL_ASYNC_CHECKS_HPP
