// The heartbeat's renewals of one asynchronous wrapper, sent together: every renewal asked for
// while the event loop works through one tick's beats goes to the store in one
// async_checkpoint_batch (an AsyncCheckpointBatchStore, idem/store/async_contract.hpp), one round
// trip for 10,000 leases where one async_checkpoint each took 10,000.
//
// The first renewal of a batch posts its sending to its own executor; the others that the beats
// delivered before it (the heartbeat posts one tick's beats together, heartbeat::fire) join it.
// A renewal asked for on another thread after the sending took the batch starts the next one.
// Each renewal is answered on its caller's executor: its record's bool, or the store_error the
// batch failed with (then no renewal of the batch is known to have landed, and each caller
// treats it as it treats a failed checkpoint). Every renewal of a batch gets the latest lease
// any of them asked for: they were asked for within one tick, and a lease a few microseconds
// longer is still the lease the options give.
#ifndef IDEM_SERVER_DETAIL_ASYNC_RENEWAL_BATCH_HPP
#define IDEM_SERVER_DETAIL_ASYNC_RENEWAL_BATCH_HPP

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

template <class Store>  // an AsyncCheckpointBatchStore
class renewal_batch {
 public:
  /// Renews `held` with `recovery` (which the caller keeps until answered) until at least
  /// `lease_until`, in the next batch: whether the record was still held under its fence.
  asio::awaitable<bool> renew(Store& store, const fenced_key& held, std::string_view recovery,
                              store_time lease_until) {
    co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&,
                                            void(std::exception_ptr, bool)>(
        [&](auto handler) {
          using handler_type = decltype(handler);
          auto executor = asio::get_associated_executor(handler);
          add(store, executor,
              std::make_unique<waiting<handler_type>>(held, recovery, std::move(handler)),
              lease_until);
        },
        asio::use_awaitable);
  }

 private:
  struct waiter {
    waiter(const fenced_key& h, std::string_view r) : held(h), recovery(r) {}
    virtual ~waiter() = default;
    waiter(const waiter&) = delete;
    waiter& operator=(const waiter&) = delete;
    // Answers the caller, on its executor.
    virtual void finish(std::exception_ptr error, bool applied) = 0;

    fenced_key held;
    std::string_view recovery;
  };

  template <class Handler>
  struct waiting final : waiter {
    waiting(const fenced_key& h, std::string_view r, Handler&& c)
        : waiter(h, r), handler(std::move(c)) {}
    void finish(std::exception_ptr error, bool applied) override {
      auto home = asio::get_associated_executor(handler);
      asio::post(home, [answer = std::move(handler), error, applied]() mutable {
        std::move(answer)(error, applied);
      });
    }
    Handler handler;
  };

  // One batch on its way: the store (a handle, copies share its connections), its callers, and
  // the entries the store reads until it answers.
  struct sending {
    explicit sending(const Store& s) : store(s) {}
    Store store;
    std::vector<std::unique_ptr<waiter>> callers;
    std::vector<batch_checkpoint> entries;
  };

  struct state {
    std::mutex mutex;
    std::vector<std::unique_ptr<waiter>> queued;
    store_time lease_until{};
    bool posted = false;  // the sending of the queued renewals is on its way
  };

  void add(Store& store, const asio::any_io_executor& executor, std::unique_ptr<waiter> caller,
           store_time lease_until) {
    const std::lock_guard lock(state_->mutex);
    state_->queued.push_back(std::move(caller));
    state_->lease_until = std::max(state_->lease_until, lease_until);
    if (state_->posted) return;
    state_->posted = true;
    asio::post(executor, [self = state_, &store] { send(self, store); });
  }

  static void send(const std::shared_ptr<state>& self, const Store& store) {
    auto batch = std::make_shared<sending>(store);
    store_time lease_until{};
    {
      const std::lock_guard lock(self->mutex);
      batch->callers.swap(self->queued);
      lease_until = self->lease_until;
      self->lease_until = store_time{};
      self->posted = false;
    }
    batch->entries.reserve(batch->callers.size());
    for (const auto& caller : batch->callers)
      batch->entries.push_back(batch_checkpoint{caller->held, caller->recovery});
    const std::span<const batch_checkpoint> entries(batch->entries);
    auto answer = [batch](std::exception_ptr error, std::vector<bool> applied) {
      for (std::size_t i = 0; i < batch->callers.size(); ++i) {
        const bool kept = !error && i < applied.size() && applied[i];
        batch->callers[i]->finish(error, kept);
      }
    };
    try {
      batch->store.async_checkpoint_batch(entries, lease_until, std::move(answer));
    } catch (...) {
      const std::exception_ptr error = std::current_exception();
      for (const auto& caller : batch->callers)
        caller->finish(error, false);
    }
  }

  std::shared_ptr<state> state_ = std::make_shared<state>();
};

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_RENEWAL_BATCH_HPP
