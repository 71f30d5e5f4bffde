// posted_store<S>: an asynchronous store (idem/store/async_contract.hpp) made of a blocking Store
// that never waits (memory_store, locked_store): each operation is posted to the store's
// executor, runs the blocking call there, and completes on the completion handler's executor.
// A reference AsyncStore with no server behind it, for the drivers' tests: every operation
// suspends its caller, as a real asynchronous store's does, so the tests walk the suspending
// paths (idem/asio's engine) that an inline store never takes.
//
// It lets nothing be cancelled (the contract allows that), and it is not meant for production:
// a store that answers from memory is best called inline (never_blocks). The handler's executor
// counts the operation as work until the store's thread has posted the answer and let go of it,
// a moment after the caller resumed: keep that io_context until its run() returns (or it has no
// work left), not only until the answer arrived, as with any executor's tracked work.
#ifndef IDEM_TESTING_POSTED_STORE_HPP
#define IDEM_TESTING_POSTED_STORE_HPP

#include <cstddef>
#include <exception>
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

namespace idem::testing {

template <Store S>
class posted_store {
 public:
  static constexpr bool reads_completion_time = idem::reads_completion_time<S>;

  /// A store's options hold a default one until the real one is given; it starts nothing.
  posted_store() = default;
  posted_store(S store, asio::any_io_executor executor)
      : store_(std::move(store)), executor_(std::move(executor)) {}

  asio::any_io_executor get_executor() const noexcept { return executor_; }
  /// The blocking store underneath, for a test to look at.
  S& blocking() noexcept { return store_; }

  template <class Token>
  auto async_claim(const claim_request& request, Token&& token) {
    return start<claim_result>(std::forward<Token>(token),
                               [request](S& store) { return store.claim(request); });
  }
  template <class Token>
  auto async_complete(const fenced_key& held, std::string_view bytes, store_time now,
                      Token&& token) {
    return start<bool>(std::forward<Token>(token),
                       [held, bytes, now](S& store) { return store.complete(held, bytes, now); });
  }
  template <class Token>
  auto async_release(const fenced_key& held, Token&& token) {
    return start<bool>(std::forward<Token>(token),
                       [held](S& store) { return store.release(held); });
  }
  template <class Token>
  auto async_checkpoint(const fenced_key& held, std::string_view bytes, store_time lease_until,
                        Token&& token) {
    return start<bool>(std::forward<Token>(token), [held, bytes, lease_until](S& store) {
      return store.checkpoint(held, bytes, lease_until);
    });
  }
  /// The underlying store's checkpoint_batch where it has one, else its checkpoints in turn:
  /// one operation either way.
  template <class Token>
  auto async_checkpoint_batch(std::span<const batch_checkpoint> entries, store_time lease_until,
                              Token&& token) {
    return start<std::vector<bool>>(std::forward<Token>(token), [entries, lease_until](S& store) {
      return detail::checkpoint_batch_of(store, entries, lease_until);
    });
  }
  template <class Token>
  auto async_find(std::string_view scope, std::string_view key, store_time now, Token&& token) {
    return start<std::optional<record>>(std::forward<Token>(token), [scope, key, now](S& store) {
      return store.find(scope, key, now);
    });
  }
  template <class Token>
  auto async_sweep(store_time now, Token&& token) {
    return start<std::size_t>(std::forward<Token>(token),
                              [now](S& store) { return store.sweep(now); });
  }
  template <class Token>
  auto async_stuck(store_time now, std::size_t limit, Token&& token) {
    return start<std::vector<record>>(std::forward<Token>(token),
                                      [now, limit](S& store) { return store.stuck(now, limit); });
  }

 private:
  // Posts `call` to the store's executor; its answer, or the store_error it threw, goes to the
  // handler on the handler's executor.
  template <class T, class Token, class Call>
  auto start(Token&& token, Call call) {
    if (!executor_) {
      throw std::logic_error("idem::testing::posted_store: a default store has no executor");
    }
    return asio::async_initiate<Token, async_store_signature<T>>(
        [this](auto handler, Call run) {
          auto home = asio::prefer(asio::get_associated_executor(handler, executor_),
                                   asio::execution::outstanding_work.tracked);
          asio::post(executor_, [store = store_, handler = std::move(handler), run = std::move(run),
                                 home = std::move(home)]() mutable {
            std::exception_ptr error;
            T answer{};
            try {
              answer = run(store);
            } catch (...) {
              error = std::current_exception();
            }
            asio::post(home,
                       [handler = std::move(handler), error, answer = std::move(answer)]() mutable {
                         std::move(handler)(error, std::move(answer));
                       });
          });
        },
        token, std::move(call));
  }

  S store_;
  asio::any_io_executor executor_;
};

}  // namespace idem::testing

#endif  // IDEM_TESTING_POSTED_STORE_HPP
