// faulty_store<Store>: a store that fails on demand, for testing what a service does when its
// store is down or full.
//
// It forwards every operation to the store it wraps until told to fail; then every operation
// throws store_error with the chosen failure, and nothing reaches the wrapped store. Copies share
// the switch, so a test keeps one copy and hands another to the wrapper under test.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store.hpp>

namespace idem::testing {

template <Store Inner>
class faulty_store {
 public:
  enum class mode : int { healthy, unavailable, full };

  explicit faulty_store(Inner inner = Inner{})
      : inner_(std::move(inner)), mode_(std::make_shared<std::atomic<mode>>(mode::healthy)) {}

  /// From now on every operation fails as `m` says (healthy: none does).
  void fail(mode m) noexcept { mode_->store(m, std::memory_order_relaxed); }
  void heal() noexcept { fail(mode::healthy); }
  Inner& inner() noexcept { return inner_; }

  claim_result claim(const claim_request& request) {
    check("claim");
    return inner_.claim(request);
  }
  bool complete(const fenced_key& held, std::string_view response, store_time now) {
    check("complete");
    return inner_.complete(held, response, now);
  }
  bool release(const fenced_key& held) {
    check("release");
    return inner_.release(held);
  }
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    check("checkpoint");
    return inner_.checkpoint(held, recovery, lease_until);
  }
  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) {
    check("find");
    return inner_.find(scope, key, now);
  }
  std::size_t sweep(store_time now) {
    check("sweep");
    return inner_.sweep(now);
  }
  std::vector<record> stuck(store_time now, std::size_t limit) {
    check("stuck");
    return inner_.stuck(now, limit);
  }

 private:
  void check(const char* operation) const {
    switch (mode_->load(std::memory_order_relaxed)) {
      case mode::healthy:
        return;
      case mode::unavailable:
        throw store_error(store_failure::unavailable, std::string("idem::testing::faulty_store: ") +
                                                          operation + ": the store is down");
      case mode::full:
        throw store_error(store_failure::full, std::string("idem::testing::faulty_store: ") +
                                                   operation + ": the store is full");
    }
  }

  Inner inner_;
  std::shared_ptr<std::atomic<mode>> mode_;
};

}  // namespace idem::testing
