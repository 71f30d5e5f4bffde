// What writes one held claim's recovery points in the asynchronous driver: the engine's own
// checkpointer (the fence check, the lease renewal, the sealing), reached by a blocking step(),
// an async_step and the heartbeat alike.
//
// The heartbeat renews the lease while a step may be recording, and neither may put back an
// older recovery than the other wrote: a heartbeat never erases a recorded step. With a store
// that blocks, the two writes run on a thread pool, perhaps at once: both go through one lock,
// and the heartbeat writes the recovery bytes the last successful write left. With an
// AsyncStore the writes are the store's operations, in flight on the call's executor: a step's
// write waits for a heartbeat's in flight, and a heartbeat skips its beat while a step's write
// is in flight (that write renews the lease itself).
#ifndef IDEM_SERVER_DETAIL_ASYNC_CLAIM_WRITER_HPP
#define IDEM_SERVER_DETAIL_ASYNC_CLAIM_WRITER_HPP

#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/async/blocking_store.hpp>
#include <idem/server/async_handler_context.hpp>
#include <idem/server/detail/async_store_calls.hpp>
#include <idem/store/contract.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

// An AsyncStore's writer keeps only the checkpointer's flag: the checkpointer calls a blocking
// store.
struct failed_flag {
  template <class Engine>
  failed_flag(Engine& /*engine*/, const fenced_key& /*held*/) noexcept {}
  bool failed = false;
};

// The transaction a transactional handler's steps are written in, when the store has one.
template <class Store>
struct open_transaction {
  struct none {};
  using type = none;
};
template <AsyncTransactionalStore Store>
struct open_transaction<Store> {
  using type = typename Store::transaction;
};

template <class Engine>
class claim_writer final : public async_recovery_writer {
  using store_type = typename Engine::store_type;
  static constexpr bool async_store = store_calls<store_type>::async_store;
  using checkpointer_type = std::conditional_t<async_store, failed_flag,
                                               typename Engine::template checkpointer<store_type>>;
  using transaction_type = typename open_transaction<store_type>::type;

 public:
  /// While it lives, the steps are written in `transaction` (a transactional handler's run):
  /// another connection would wait on the record's lock that the transaction holds.
  class scoped_transaction {
   public:
    scoped_transaction(claim_writer& writer, transaction_type& transaction) noexcept
        : writer_(writer) {
      writer_.within_ = &transaction;
    }
    ~scoped_transaction() { writer_.within_ = nullptr; }
    scoped_transaction(const scoped_transaction&) = delete;
    scoped_transaction& operator=(const scoped_transaction&) = delete;

   private:
    claim_writer& writer_;
  };

  claim_writer(Engine& engine, const fenced_key& held, const store_calls<store_type>& calls,
               std::string recovery)
      : engine_(engine),
        held_(held),
        checkpoint_(engine, held),
        calls_(calls),
        last_(std::move(recovery)) {
    if constexpr (!async_store) checkpoint_.writer = &engine.store();
  }

  // A step's write, on the thread it is called on (a blocking step() calls it inline). With an
  // AsyncStore it waits for the store's operation, which must then run on another thread than
  // this one (blocking_store's rule).
  bool write(std::string_view recovery) override {
    if constexpr (async_store) {
      if (within_ != nullptr) {
        throw std::logic_error(
            "idem::async_idempotent: a blocking step() in a handler that runs inside the "
            "store's transaction, whose connection only the handler's coroutine may use; "
            "nothing was written: record steps with co_await ctx.async_step(...)");
      }
      if (in_flight_) {
        throw std::logic_error(
            "idem::async_idempotent: a blocking step() was recorded while the heartbeat's write "
            "was in flight on an asynchronous store, which could land after it; nothing was "
            "written: with an AsyncStore, record steps with co_await ctx.async_step(...)");
      }
      std::string sealed;
      const std::string_view bytes = engine_.recovery_stored(recovery, sealed);
      bool applied = false;
      try {
        applied = blocking_store<store_type>{engine_.store()}.checkpoint(held_, bytes,
                                                                         engine_.lease_from_now());
      } catch (const store_error&) {
        checkpoint_.failed = true;
        throw;
      }
      return written(applied, recovery);
    } else {
      const std::lock_guard lock(mutex_);
      return written(checkpoint_.write(recovery), recovery);
    }
  }

  // A step's write where the store's calls run.
  asio::awaitable<bool> async_write(std::string_view recovery) override {
    if constexpr (async_store) {
      // After a heartbeat's write in flight, never beside it.
      while (in_flight_) {
        if (!gate_) gate_.emplace(co_await asio::this_coro::executor);
        gate_->expires_at(asio::steady_timer::time_point::max());
        asio_error_code ignored;
        co_await gate_->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      }
      const std::string owned(recovery);  // the caller's view may not outlive a suspension
      bool applied = false;
      try {
        if constexpr (AsyncTransactionalStore<store_type>) {
          if (within_ != nullptr) {
            std::string sealed;
            const std::string_view bytes = engine_.recovery_stored(owned, sealed);
            applied = co_await within_->checkpoint(held_, bytes, engine_.lease_from_now());
            co_return written(applied, owned);
          }
        }
        applied = co_await checkpoint(owned);
      } catch (const store_error&) {
        checkpoint_.failed = true;
        throw;
      }
      co_return written(applied, owned);
    } else {
      co_return co_await calls_([this, recovery] { return write(recovery); });
    }
  }

  /// A heartbeat: checks the fence and renews the lease with the last recovery written. A store
  /// failing here is the heartbeat's alone: it does not mark the steps' writes as failed.
  asio::awaitable<bool> renew() {
    if constexpr (async_store) {
      if (in_flight_) co_return true;  // a step's write in flight renews the lease itself
      const std::string last = last_;
      const bool kept = co_await checkpoint(last, true);
      if (!kept) lose();
      co_return kept;
    } else {
      co_return co_await calls_([this] { return renew_now(); });
    }
  }

  bool lost() const noexcept override { return lost_.load(std::memory_order_acquire); }
  void lose() noexcept { lost_.store(true, std::memory_order_release); }
  /// A step's write threw: its effect may not be recorded, so the claim must stay.
  bool failed() const noexcept { return checkpoint_.failed; }

 private:
  bool written(bool applied, std::string_view recovery) {
    if (!applied) {
      lose();
      return false;
    }
    last_.assign(recovery);
    return true;
  }

  // The blocking store's heartbeat, on the store's executor.
  bool renew_now() {
    const std::lock_guard lock(mutex_);
    const bool failed_before = checkpoint_.failed;
    try {
      if (checkpoint_.write(last_)) return true;
    } catch (...) {
      checkpoint_.failed = failed_before;
      throw;
    }
    lose();
    return false;
  }

  // An AsyncStore's checkpoint of `recovery` (plain), one at a time; wakes the steps waiting.
  // A heartbeat's (`renewal`) goes with its tick's others where the store batches them.
  asio::awaitable<bool> checkpoint(const std::string& recovery, bool renewal = false) {
    std::string sealed;
    const std::string_view bytes = engine_.recovery_stored(recovery, sealed);
    in_flight_ = true;
    bool applied = false;
    try {
      if (renewal) {
        applied = co_await calls_.renew(engine_.store(), held_, bytes, engine_.lease_from_now());
      } else {
        applied =
            co_await calls_.checkpoint(engine_.store(), held_, bytes, engine_.lease_from_now());
      }
    } catch (...) {
      in_flight_ = false;
      if (gate_) gate_->cancel();
      throw;
    }
    in_flight_ = false;
    if (gate_) gate_->cancel();
    co_return applied;
  }

  Engine& engine_;
  fenced_key held_;
  checkpointer_type checkpoint_;
  const store_calls<store_type>& calls_;
  std::mutex mutex_;
  std::string last_;
  std::atomic<bool> lost_{false};
  // AsyncStore: whether a checkpoint is in flight, and where a step's write waits for it.
  bool in_flight_ = false;
  std::optional<asio::steady_timer> gate_;
  // A transactional handler's open transaction, while it runs (scoped_transaction).
  transaction_type* within_ = nullptr;
};

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_CLAIM_WRITER_HPP
