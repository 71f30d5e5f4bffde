// What writes one held claim's recovery points in the asynchronous driver: the engine's own
// checkpointer (the fence check, the lease renewal, the sealing), reached by a blocking step(),
// an async_step and the heartbeat alike.
//
// The heartbeat renews the lease while a step may be recording, and with a store that blocks the
// two writes run on a thread pool, perhaps at once. Both go through one lock, and the heartbeat
// writes the recovery bytes the last successful write left, so neither can put back an older
// recovery than the other wrote: a heartbeat never erases a recorded step.
#ifndef IDEM_ASIO_DETAIL_CLAIM_WRITER_HPP
#define IDEM_ASIO_DETAIL_CLAIM_WRITER_HPP

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <idem/asio/config.hpp>
#include <idem/asio/detail/store_calls.hpp>
#include <idem/asio/handler_context.hpp>
#include <idem/store/contract.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

template <class Engine>
class claim_writer final : public async_recovery_writer {
  using store_type = typename Engine::store_type;

 public:
  claim_writer(Engine& engine, const fenced_key& held, const store_calls<store_type>& calls,
               std::string recovery)
      : checkpoint_(engine, held), calls_(calls), last_(std::move(recovery)) {
    checkpoint_.writer = &engine.store();
  }

  // A step's write, on the thread it is called on (a blocking step() calls it inline).
  bool write(std::string_view recovery) override {
    const std::lock_guard lock(mutex_);
    if (!checkpoint_.write(recovery)) {
      lose();
      return false;
    }
    last_.assign(recovery);
    return true;
  }

  // A step's write where the store's calls run.
  asio::awaitable<bool> async_write(std::string_view recovery) override {
    co_return co_await calls_([this, recovery] { return write(recovery); });
  }

  /// A heartbeat: checks the fence and renews the lease with the last recovery written. A store
  /// failing here is the heartbeat's alone: it does not mark the steps' writes as failed.
  bool renew() {
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

  bool lost() const noexcept override { return lost_.load(std::memory_order_acquire); }
  void lose() noexcept { lost_.store(true, std::memory_order_release); }
  /// A step's write threw: its effect may not be recorded, so the claim must stay.
  bool failed() const noexcept { return checkpoint_.failed; }

 private:
  typename Engine::template checkpointer<store_type> checkpoint_;
  const store_calls<store_type>& calls_;
  std::mutex mutex_;
  std::string last_;
  std::atomic<bool> lost_{false};
};

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_ASIO_DETAIL_CLAIM_WRITER_HPP
