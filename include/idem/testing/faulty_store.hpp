// faulty_store<Store>: a store that fails on demand, for testing what a service does when its
// store is down, full, or times out.
//
// Two ways to fail:
// * fail(mode): from now on every operation throws store_error with the chosen failure, and
//   nothing reaches the wrapped store, until heal().
// * inject(fault): one chosen call fails once: the (skip + 1)-th call of one operation from now.
//   Before the store: nothing reaches it (a refused or dropped request). After the store: the
//   operation is applied and then its answer is lost (a timeout after the server did the work),
//   the ambiguous case a caller cannot tell from the first.
// Copies share the switch, the pending faults and the counts, so a test keeps one copy and hands
// another to the wrapper under test. Safe to use from many threads.
#ifndef IDEM_TESTING_FAULTY_STORE_HPP
#define IDEM_TESTING_FAULTY_STORE_HPP

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>

namespace idem::testing {

/// The store operations a fault can be aimed at.
enum class store_operation : std::uint8_t {
  claim,
  complete,
  release,
  checkpoint,
  find,
  sweep,
  stuck,
};
inline constexpr std::size_t store_operation_count = 7;

constexpr std::string_view to_string(store_operation operation) noexcept {
  constexpr std::array<std::string_view, store_operation_count> names{
      "claim", "complete", "release", "checkpoint", "find", "sweep", "stuck"};
  return names[static_cast<std::size_t>(operation)];
}

/// When an injected fault strikes.
enum class fault_timing : std::uint8_t {
  before_store,  // nothing reaches the store: nothing is written
  after_store,   // the store applies the operation, then its answer is lost (a timeout)
};

template <Store Inner>
class faulty_store {
 public:
  /// As the wrapped store: the engine reads the clock for a completion only if it would.
  static constexpr bool reads_completion_time = idem::reads_completion_time<Inner>;
  /// Blocks where the wrapped store does: the faults it injects never wait.
  static constexpr bool never_blocks = idem::never_blocks<Inner>;

  enum class mode : int { healthy, unavailable, full };

  /// One call that fails.
  struct fault {
    store_operation operation = store_operation::claim;
    /// Calls of `operation` that go through first.
    std::size_t skip = 0;
    fault_timing timing = fault_timing::before_store;
    /// unavailable or full.
    mode failure = mode::unavailable;
  };

  explicit faulty_store(Inner inner = Inner{})
      : inner_(std::move(inner)), shared_(std::make_shared<shared>()) {}

  /// From now on every operation fails as `m` says (healthy: none does).
  void fail(mode m) noexcept { shared_->switched.store(m, std::memory_order_relaxed); }
  void heal() noexcept { fail(mode::healthy); }
  /// Arms `f`, replacing any fault armed for the same operation.
  void inject(const fault& f) {
    const std::lock_guard lock(shared_->mutex);
    shared_->pending[index(f.operation)] = f;
  }
  /// Disarms every injected fault that has not struck yet.
  void clear_faults() {
    const std::lock_guard lock(shared_->mutex);
    for (auto& pending : shared_->pending)
      pending.reset();
  }
  /// Calls of `operation` so far, failed ones included.
  std::size_t calls(store_operation operation) const {
    const std::lock_guard lock(shared_->mutex);
    return shared_->calls[index(operation)];
  }
  /// Injected faults that have struck so far.
  std::size_t faults_struck() const {
    const std::lock_guard lock(shared_->mutex);
    return shared_->struck;
  }
  Inner& inner() noexcept { return inner_; }

  claim_result claim(const claim_request& request) {
    return guarded(store_operation::claim, [&] { return inner_.claim(request); });
  }
  bool complete(const fenced_key& held, std::string_view response, store_time now) {
    return guarded(store_operation::complete, [&] { return inner_.complete(held, response, now); });
  }
  bool release(const fenced_key& held) {
    return guarded(store_operation::release, [&] { return inner_.release(held); });
  }
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    return guarded(store_operation::checkpoint,
                   [&] { return inner_.checkpoint(held, recovery, lease_until); });
  }
  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) {
    return guarded(store_operation::find, [&] { return inner_.find(scope, key, now); });
  }
  std::size_t sweep(store_time now) {
    return guarded(store_operation::sweep, [&] { return inner_.sweep(now); });
  }
  std::vector<record> stuck(store_time now, std::size_t limit) {
    return guarded(store_operation::stuck, [&] { return inner_.stuck(now, limit); });
  }

 private:
  struct shared {
    std::atomic<mode> switched{mode::healthy};
    mutable std::mutex mutex;
    std::array<std::optional<fault>, store_operation_count> pending{};
    std::array<std::size_t, store_operation_count> calls{};
    std::size_t struck = 0;
  };

  static std::size_t index(store_operation operation) noexcept {
    return static_cast<std::size_t>(operation);
  }

  [[noreturn]] static void raise(mode failure, store_operation operation, const char* what) {
    const std::string text = std::string("idem::testing::faulty_store: ") +
                             std::string(to_string(operation)) + ": " + what;
    throw store_error(failure == mode::full ? store_failure::full : store_failure::unavailable,
                      text);
  }

  // The fault that strikes this call of `operation`, if one does; counts the call.
  std::optional<fault> take(store_operation operation) {
    const std::lock_guard lock(shared_->mutex);
    ++shared_->calls[index(operation)];
    std::optional<fault>& pending = shared_->pending[index(operation)];
    if (!pending) return std::nullopt;
    if (pending->skip > 0) {
      --pending->skip;
      return std::nullopt;
    }
    ++shared_->struck;
    return std::exchange(pending, std::nullopt);
  }

  template <class Call>
  auto guarded(store_operation operation, Call&& call) {
    switch (shared_->switched.load(std::memory_order_relaxed)) {
      case mode::healthy:
        break;
      case mode::unavailable:
        raise(mode::unavailable, operation, "the store is down");
      case mode::full:
        raise(mode::full, operation, "the store is full");
    }
    const std::optional<fault> strikes = take(operation);
    if (strikes && strikes->timing == fault_timing::before_store) {
      raise(strikes->failure, operation, "injected failure; nothing reached the store");
    }
    auto answer = call();
    if (strikes) {
      raise(strikes->failure, operation,
            "injected timeout; the store applied the operation but its answer was lost");
    }
    return answer;
  }

  Inner inner_;
  std::shared_ptr<shared> shared_;
};

}  // namespace idem::testing

#endif  // IDEM_TESTING_FAULTY_STORE_HPP
