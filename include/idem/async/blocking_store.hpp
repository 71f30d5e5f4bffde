// blocking_store<S>: an asynchronous store (idem/store/async_contract.hpp) as a blocking Store, for
// what runs on threads of its own: the blocking wrappers (idempotent, inbox), the reconciler,
// a sweep job, and the conformance suite (which runs every case of the Store contract against
// an asynchronous store through it, the 64-thread storm included).
//
// Each call starts the store's operation and waits for it on the calling thread. The store's
// executor must be run by other threads meanwhile: a call made on a thread that runs the
// store's io_context or thread_pool would wait for itself forever, so it throws
// std::logic_error instead.
//
// It stays an AsyncStore too: its async_ operations and get_executor are the store's own, so
// the asynchronous wrappers given one await the store as they would the store itself, while
// code beside them (a test's checks, a sweep job on its own thread) calls it blocking.
#ifndef IDEM_ASYNC_BLOCKING_STORE_HPP
#define IDEM_ASYNC_BLOCKING_STORE_HPP

#include <concepts>
#include <cstddef>
#include <future>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>

#if defined(IDEM_ASIO_STANDALONE)
#include <asio/thread_pool.hpp>
#else
#include <boost/asio/thread_pool.hpp>
#endif

namespace idem {

template <AsyncStore S>
class blocking_store {
 public:
  static constexpr bool reads_completion_time = idem::reads_completion_time<S>;

  /// A store's options hold a default one until the real one is given.
  blocking_store() requires std::default_initializable<S>
  = default;
  explicit blocking_store(S store) : store_(std::move(store)) {}

  /// The asynchronous store, for what can await it.
  S& async() noexcept { return store_; }
  const S& async() const noexcept { return store_; }

  asio::any_io_executor get_executor() const { return store_.get_executor(); }
  template <class Token>
  auto async_claim(const claim_request& request, Token&& token) {
    return store_.async_claim(request, std::forward<Token>(token));
  }
  template <class Token>
  auto async_complete(const fenced_key& held, std::string_view bytes, store_time now,
                      Token&& token) {
    return store_.async_complete(held, bytes, now, std::forward<Token>(token));
  }
  template <class Token>
  auto async_release(const fenced_key& held, Token&& token) {
    return store_.async_release(held, std::forward<Token>(token));
  }
  template <class Token>
  auto async_checkpoint(const fenced_key& held, std::string_view bytes, store_time lease_until,
                        Token&& token) {
    return store_.async_checkpoint(held, bytes, lease_until, std::forward<Token>(token));
  }
  template <class Token>
  auto async_checkpoint_batch(std::span<const batch_checkpoint> entries, store_time lease_until,
                              Token&& token) requires AsyncCheckpointBatchStore<S> {
    return store_.async_checkpoint_batch(entries, lease_until, std::forward<Token>(token));
  }
  template <class Token>
  auto async_find(std::string_view scope, std::string_view key, store_time now, Token&& token) {
    return store_.async_find(scope, key, now, std::forward<Token>(token));
  }
  template <class Token>
  auto async_sweep(store_time now, Token&& token) {
    return store_.async_sweep(now, std::forward<Token>(token));
  }
  template <class Token>
  auto async_stuck(store_time now, std::size_t limit, Token&& token) {
    return store_.async_stuck(now, limit, std::forward<Token>(token));
  }

  claim_result claim(const claim_request& request) {
    return wait([&](auto token) { return store_.async_claim(request, token); });
  }
  bool complete(const fenced_key& held, std::string_view response, store_time now) {
    return wait([&](auto token) { return store_.async_complete(held, response, now, token); });
  }
  bool release(const fenced_key& held) {
    return wait([&](auto token) { return store_.async_release(held, token); });
  }
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    return wait(
        [&](auto token) { return store_.async_checkpoint(held, recovery, lease_until, token); });
  }
  std::vector<bool> checkpoint_batch(std::span<const batch_checkpoint> entries,
                                     store_time lease_until) requires AsyncCheckpointBatchStore<S> {
    return wait(
        [&](auto token) { return store_.async_checkpoint_batch(entries, lease_until, token); });
  }
  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) {
    return wait([&](auto token) { return store_.async_find(scope, key, now, token); });
  }
  std::size_t sweep(store_time now) {
    return wait([&](auto token) { return store_.async_sweep(now, token); });
  }
  std::vector<record> stuck(store_time now, std::size_t limit) {
    return wait([&](auto token) { return store_.async_stuck(now, limit, token); });
  }

 private:
  // Starts the operation with asio::use_future and waits for its answer; refuses, before
  // starting anything, on a thread that runs the store's executor.
  template <class Start>
  auto wait(Start start) const {
    if (runs_store_executor()) {
      throw std::logic_error(
          "idem::blocking_store: called on a thread that runs the asynchronous store's own "
          "executor, which would wait for itself forever; nothing was started: call it from "
          "another thread, or await the store's async_ operations instead");
    }
    return start(asio::use_future).get();
  }

  // Whether this thread runs the io_context or thread_pool (or a strand of either) that the
  // store's executor belongs to. Another kind of executor is not checked.
  bool runs_store_executor() const {
    const asio::any_io_executor executor(store_.get_executor());
    return runs<asio::io_context::executor_type>(executor) ||
           runs<asio::thread_pool::executor_type>(executor);
  }

  template <class Executor>
  static bool runs(const asio::any_io_executor& executor) {
    if (const auto* plain = executor.target<Executor>()) return plain->running_in_this_thread();
    if (const auto* strand = executor.target<asio::strand<Executor>>()) {
      return strand->get_inner_executor().running_in_this_thread();
    }
    return false;
  }

  S store_;
};

}  // namespace idem

#endif  // IDEM_ASYNC_BLOCKING_STORE_HPP
