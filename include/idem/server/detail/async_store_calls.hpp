// Where an asynchronous driver's store calls run: inline, on the caller's executor, for a store
// that never blocks (idem::never_blocks: memory_store, locked_store); as the store's own
// asynchronous operations for an AsyncStore (idem/store/async_contract.hpp); and on the executor
// the user gave for blocking work (a thread pool's, or a strand of it) for any other, so that a
// database round trip never stalls the event loop.
//
// A store call always runs to its end, whatever the caller's cancellation says meanwhile: a
// store call cut off half way could have claimed, completed or released without its caller
// knowing. An AsyncStore's operations are started with no cancellation slot for that reason.
// The caller resumes on its own executor afterwards.
#ifndef IDEM_SERVER_DETAIL_ASYNC_STORE_CALLS_HPP
#define IDEM_SERVER_DETAIL_ASYNC_STORE_CALLS_HPP

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/server/detail/async_renewal_batch.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/contract.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

template <class Store>
class store_calls {
 public:
  static constexpr bool async_store = AsyncStore<Store>;
  static constexpr bool inline_calls = never_blocks<Store> && !async_store;
  static constexpr bool batches_renewals = AsyncCheckpointBatchStore<Store>;

  /// Throws std::invalid_argument, naming `who`, for a store that blocks and no executor to run
  /// its calls on.
  store_calls(asio::any_io_executor executor, const char* who) : executor_(std::move(executor)) {
    if (!inline_calls && !async_store && !executor_) {
      throw std::invalid_argument(
          std::string(who) +
          ": this store blocks (it does not declare never_blocks), so its calls must not run on "
          "the event loop: give options.store_executor, e.g. an asio::thread_pool's executor");
    }
  }

  // The store's operations, each where it runs, answering what it answers or throwing the
  // store_error it fails with.
  asio::awaitable<claim_result> claim(Store& store, const claim_request& request) const {
    if constexpr (async_store) {
      co_return co_await store.async_claim(request, uncancellable());
    } else {
      co_return co_await (*this)([&] { return store.claim(request); });
    }
  }
  asio::awaitable<bool> complete(Store& store, const fenced_key& held, std::string_view bytes,
                                 store_time now) const {
    if constexpr (async_store) {
      co_return co_await store.async_complete(held, bytes, now, uncancellable());
    } else {
      co_return co_await (*this)([&] { return store.complete(held, bytes, now); });
    }
  }
  asio::awaitable<bool> release(Store& store, const fenced_key& held) const {
    if constexpr (async_store) {
      co_return co_await store.async_release(held, uncancellable());
    } else {
      co_return co_await (*this)([&] { return store.release(held); });
    }
  }
  asio::awaitable<bool> checkpoint(Store& store, const fenced_key& held, std::string_view bytes,
                                   store_time lease_until) const {
    if constexpr (async_store) {
      co_return co_await store.async_checkpoint(held, bytes, lease_until, uncancellable());
    } else {
      co_return co_await (*this)([&] { return store.checkpoint(held, bytes, lease_until); });
    }
  }
  /// A heartbeat's renewal: checkpoint's, sent with the other renewals of its tick in one
  /// batch where the store has async_checkpoint_batch (async_renewal_batch.hpp).
  asio::awaitable<bool> renew(Store& store, const fenced_key& held, std::string_view bytes,
                              store_time lease_until) const {
    if constexpr (batches_renewals) {
      co_return co_await renewals_->renew(store, held, bytes, lease_until);
    } else {
      co_return co_await checkpoint(store, held, bytes, lease_until);
    }
  }
  asio::awaitable<std::optional<record>> find(Store& store, std::string_view scope,
                                              std::string_view key, store_time now) const {
    if constexpr (async_store) {
      co_return co_await store.async_find(scope, key, now, uncancellable());
    } else {
      co_return co_await (*this)([&] { return store.find(scope, key, now); });
    }
  }

  /// An AsyncTransactionalStore's async_complete_within: `produce(transaction&)` (an
  /// awaitable<std::string>) runs where the store runs it, inside the transaction.
  template <class Produce>
  asio::awaitable<bool> complete_within(Store& store, const fenced_key& held, store_time now,
                                        Produce produce) const {
    co_return co_await store.async_complete_within(held, now, std::move(produce), uncancellable());
  }

  /// A commit_with's completion: `writes` (its `writes` member) made in the transaction that
  /// completes `held` with `bytes`, through an AsyncCompleteWithStore's async_complete_with, an
  /// AsyncTransactionalStore's async_complete_within, or a blocking TransactionalStore's
  /// complete_within where its calls run. `writes_threw` gets the exception of writes that threw
  /// or sent a statement that was refused (then passed on as the transaction's failure).
  template <class Transaction, class Writes>
  asio::awaitable<bool> complete_with_writes(Store& store, const fenced_key& held, store_time now,
                                             std::string_view bytes, Writes& writes,
                                             std::exception_ptr& writes_threw) const {
    if constexpr (AsyncCompleteWithStore<Store>) {
      co_return co_await store.async_complete_with(held, now, bytes, writes, writes_threw,
                                                   uncancellable());
    } else if constexpr (AsyncTransactionalStore<Store>) {
      auto produce = [&](Transaction& transaction) -> asio::awaitable<std::string> {
        if (writes) {
          try {
            co_await writes(transaction);
          } catch (...) {
            writes_threw = std::current_exception();
            throw;
          }
        }
        co_return std::string(bytes);
      };
      co_return co_await complete_within(store, held, now, produce);
    } else {
      auto produce = [&](Transaction& transaction) -> std::string {
        if (writes) {
          try {
            writes(transaction);
          } catch (...) {
            writes_threw = std::current_exception();
            throw;
          }
        }
        return std::string(bytes);
      };
      co_return co_await (*this)([&] { return store.complete_within(held, now, produce); });
    }
  }

  /// Runs `call` where a blocking store's calls run, and answers what it returned or throws
  /// what it threw.
  template <class Call>
  asio::awaitable<std::invoke_result_t<Call&>> operator()(Call call) const {
    using result_type = std::invoke_result_t<Call&>;
    if constexpr (inline_calls) {
      co_return call();
    } else {
      using kept_type = std::conditional_t<std::is_void_v<result_type>, bool, result_type>;
      std::optional<kept_type> result;
      std::exception_ptr error;
      // The coroutine's handler is never connected to its cancellation slot here: see the top.
      co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
          [&](auto resume) {
            asio::post(executor_, [&, resume = std::move(resume)]() mutable {
              try {
                if constexpr (std::is_void_v<result_type>) {
                  call();
                  result.emplace(true);
                } else {
                  result.emplace(call());
                }
              } catch (...) {
                error = std::current_exception();
              }
              // Back to the coroutine's own executor.
              const auto home = asio::get_associated_executor(resume);
              asio::post(home, std::move(resume));
            });
          },
          asio::use_awaitable);
      if (error) std::rethrow_exception(error);
      if constexpr (!std::is_void_v<result_type>) co_return std::move(*result);
    }
  }

 private:
  // use_awaitable with no cancellation slot: the caller's cancellation never reaches the store.
  static auto uncancellable() {
    return asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable);
  }

  struct no_batches {};
  using renewals_type =
      std::conditional_t<batches_renewals, std::shared_ptr<renewal_batch<Store>>, no_batches>;

  static renewals_type make_renewals() {
    if constexpr (batches_renewals) {
      return std::make_shared<renewal_batch<Store>>();
    } else {
      return {};
    }
  }

  asio::any_io_executor executor_;
  renewals_type renewals_ = make_renewals();  // shared by copies, as the wrapper's calls are
};

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_STORE_CALLS_HPP
