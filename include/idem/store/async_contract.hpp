// The asynchronous store contract: AsyncStore, beside Store (idem/store/contract.hpp).
//
// An asynchronous store does what a Store does, with the same records and the same semantics
// (the contract's text applies word for word), but each operation starts and returns at once
// and completes later through an Asio completion token, so that an event loop keeps thousands
// of them in flight on a few threads instead of a thread per call:
//
//   async_claim(request, token)               completes with claim_result
//   async_complete(held, bytes, now, token)   completes with bool
//   async_release(held, token)                completes with bool
//   async_checkpoint(held, bytes, now, token) completes with bool
//   async_find(scope, key, now, token)        completes with std::optional<record>
//   async_sweep(now, token)                   completes with std::size_t
//   async_stuck(now, limit, token)            completes with std::vector<record>
//
// Each completes with the signature void(std::exception_ptr, T) (async_store_signature<T>):
// null and the answer, or the store_error the blocking call would throw (unavailable or full,
// with the same meaning: nothing was written, or for a timeout, nothing is known) and T{}. With
// asio::use_awaitable the error is thrown; with asio::use_future the future throws it.
//
// * Arguments. The views an operation is given (scope, key, bytes, the request's fields) must
//   stay valid until it completes, as an Asio operation's buffers must.
// * Threads. An operation may be started from any thread. It completes on the completion
//   handler's associated executor (the store's own executor, get_executor(), when the handler
//   has none), never inside the initiating call.
// * Cancellation. A store may let an operation be cancelled through the handler's cancellation
//   slot. A cancelled operation completes at once with store_error(unavailable): it may still
//   take effect at the server (a request already sent is not recalled), so it is as ambiguous
//   as a timeout. Operations in flight beside it are not affected. The asynchronous wrappers
//   never cancel a store operation: a claim or completion cut off half way would leave its
//   caller not knowing what it holds.
// * Copies of a store share its records and its connections (a store type is a handle).
//
// Batched renewals (optional: AsyncCheckpointBatchStore):
//   async_checkpoint_batch(entries, lease_until, token)  completes with std::vector<bool>
// CheckpointBatchStore's checkpoint_batch (idem/store/batch.hpp): one bool per entry, in order,
// in one round trip; the entries' views stay valid until it completes. async_idempotent's
// heartbeat renews every lease that falls due in a tick with one such call where the store has
// it, and with one async_checkpoint per lease where it has not.
//
// Transactions (optional: AsyncTransactionalStore), TransactionalStore's asynchronously:
//   async_complete_within(held, now, produce, token)  completes with bool
// complete_within's semantics (idem/store/contract.hpp), with `produce(transaction&)` a
// coroutine (asio::awaitable<std::string>) that awaits the handler's own statements on the
// transaction's connection; transaction::checkpoint(held, recovery, lease_until) is an
// awaitable<bool> on that connection. async_idempotent runs a handler that takes the
// transaction this way (docs/async_server.md).
//
// A handler whose work is partly outside the database (a payment processor's charge) and partly
// writes in it (the payment's row) answers commit_with<R, Store::transaction>
// (idem/store/contract.hpp): its response and the writes to make in the transaction that
// completes its record, which an asynchronous transaction takes as its `writes_type`, a function
// answering asio::awaitable<void>. async_idempotent runs the handler outside any transaction (its
// steps recorded as they happen, its lease kept by the heartbeat), and only then opens the
// transaction: a connection is held for the writes, not while the handler waits on the network.
// A store that can take them with the response already known (optional: AsyncCompleteWithStore)
//   async_complete_with(held, now, bytes, writes, writes_failed, token)  completes with bool
// opens the transaction with the completion (which locks the record and checks the fence),
// then the writes, then COMMIT, in one round trip where the writes await nothing; false when
// the fence is lost, and what the writes threw (or a statement they sent that was refused) in
// `writes_failed` as well as thrown. async_idempotent uses it where the store has it.
//
// async_idempotent and async_inbox (idem/asio) use these operations when their store is an
// AsyncStore, and run a blocking Store's calls on options.store_executor otherwise.
// blocking_store (idem/async/blocking_store.hpp) turns an AsyncStore back into a Store for the
// blocking wrappers, the reconciler and the conformance suite.
#ifndef IDEM_STORE_ASYNC_CONTRACT_HPP
#define IDEM_STORE_ASYNC_CONTRACT_HPP

#include <concepts>
#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>

namespace idem {

/// The completion signature of an asynchronous store's operation that answers T.
template <class T>
using async_store_signature = void(std::exception_ptr, T);

/// What an asynchronous store must provide (see the top of this header).
template <class S>
concept AsyncStore = std::copy_constructible<S> &&
    requires(S& store, const claim_request& request, const fenced_key& held, std::string_view bytes,
             std::string_view scope, std::string_view key, store_time now, std::size_t limit) {
  { store.get_executor() } -> std::convertible_to<asio::any_io_executor>;
  {
    store.async_claim(request, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<claim_result>>;
  {
    store.async_complete(held, bytes, now, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<bool>>;
  { store.async_release(held, asio::use_awaitable) } -> std::same_as<asio::awaitable<bool>>;
  {
    store.async_checkpoint(held, bytes, now, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<bool>>;
  {
    store.async_find(scope, key, now, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<std::optional<record>>>;
  { store.async_sweep(now, asio::use_awaitable) } -> std::same_as<asio::awaitable<std::size_t>>;
  {
    store.async_stuck(now, limit, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<std::vector<record>>>;
};

/// An AsyncStore that renews many leases in one round trip (see the top of this header).
template <class S>
concept AsyncCheckpointBatchStore = AsyncStore<S> &&
    requires(S& store, std::span<const batch_checkpoint> entries, store_time when) {
  {
    store.async_checkpoint_batch(entries, when, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<std::vector<bool>>>;
};

/// An AsyncStore that completes a record in the transaction of the handler's own writes (see
/// the top of this header).
template <class S>
concept AsyncTransactionalStore = AsyncStore<S> && requires {
  typename S::transaction;
} && requires(S& store, typename S::transaction& transaction, const fenced_key& held,
              std::string_view bytes, store_time now,
              asio::awaitable<std::string> (&produce)(typename S::transaction&)) {
  {
    store.async_complete_within(held, now, produce, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<bool>>;
  { transaction.checkpoint(held, bytes, now) } -> std::same_as<asio::awaitable<bool>>;
};

/// An AsyncTransactionalStore that completes a record whose response is known before its
/// transaction opens (a commit_with's), the writes in that transaction, in fewer round trips
/// than async_complete_within takes (see the top of this header).
template <class S>
concept AsyncCompleteWithStore = AsyncTransactionalStore<S> &&
    requires(S& store, const fenced_key& held, store_time now, std::string_view bytes,
             const typename S::transaction::writes_type& writes, std::exception_ptr& failed) {
  {
    store.async_complete_with(held, now, bytes, writes, failed, asio::use_awaitable)
    } -> std::same_as<asio::awaitable<bool>>;
};

}  // namespace idem

#endif  // IDEM_STORE_ASYNC_CONTRACT_HPP
