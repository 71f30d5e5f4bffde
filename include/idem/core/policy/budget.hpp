// Retry budgets: may this retry go at all?
//
// When a dependency is down, every caller retrying multiplies the load exactly when it can least
// take it. A budget caps retries at a share of the traffic, so an outage costs at most that much
// extra. token_bucket follows the AWS SDKs' retry quota (a bucket of 500 tokens; a retry takes 5,
// a retry after a timeout 10; a success gives back) and adds the refill of gRPC's retry
// throttling and Finagle's RetryBudget: every first attempt deposits `retry_ratio` of a retry's
// cost. Under total failure the bucket drains and then retries settle at `retry_ratio` of first
// attempts (half that when every failure is a timeout, as those cost double).
#ifndef IDEM_CORE_POLICY_BUDGET_HPP
#define IDEM_CORE_POLICY_BUDGET_HPP

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace idem {

/// Why a retry is wanted, which sets its price: in the AWS SDKs a retry after a timeout costs
/// twice as much, since a dependency that times out is likelier overloaded.
enum class retry_reason : std::uint8_t {
  none,       // no retry: with on_success, the first attempt succeeded
  transient,  // the failure did not take effect
  ambiguous,  // it may have (a timeout, a connection lost after sending)
};

/// What a `budget` policy must provide. Copies of a budget share its state, so one budget can
/// guard every call to one dependency; all members must be safe to call from many threads.
template <class B>
concept Budget = std::copy_constructible<B> && requires(B& budget, retry_reason reason) {
  budget.on_request();                                         // a first attempt is about to go
  { budget.try_acquire_retry(reason) } -> std::same_as<bool>;  // may a retry go for this reason?
  budget.on_success(reason);  // an operation succeeded; `reason`: that of the retry that did it
};

/// Never refuses a retry. Only for dependencies that cannot be overloaded by their callers.
struct unlimited_budget {
  void on_request() const noexcept {}
  bool try_acquire_retry(retry_reason) const noexcept { return true; }
  void on_success(retry_reason) const noexcept {}
};

/// A token bucket shared by its copies. Tokens are kept in thousandths so that fractional
/// deposits (0.1 x 5 = 0.5 token) add up exactly.
class token_bucket {
 public:
  struct options {
    double max_tokens = 500;           // AWS SDK INITIAL_RETRY_TOKENS; also the bucket's size
    double retry_cost = 5;             // AWS SDK RETRY_COST
    double ambiguous_retry_cost = 10;  // AWS SDK TIMEOUT_RETRY_COST
    double success_deposit = 1;        // AWS SDK NO_RETRY_INCREMENT: a first-attempt success
    double retry_ratio = 0.1;          // gRPC retry throttling's example tokenRatio
  };

  token_bucket() : token_bucket(options{}) {}
  explicit token_bucket(options s) : state_(std::make_shared<state>(validated(s))) {}

  void on_request() noexcept { deposit(state_->request_deposit); }

  bool try_acquire_retry(retry_reason reason) noexcept {
    const std::int64_t cost = cost_of(reason);
    auto& tokens = state_->tokens;
    std::int64_t current = tokens.load(std::memory_order_relaxed);
    do {
      if (current < cost) return false;
    } while (!tokens.compare_exchange_weak(current, current - cost, std::memory_order_relaxed));
    return true;
  }

  void on_success(retry_reason reason) noexcept {
    // A retry that worked gives back what it took (AWS SDK): it was worth spending.
    deposit(reason == retry_reason::none ? state_->success_deposit : cost_of(reason));
  }

  /// Tokens left, for tests and dashboards.
  double tokens() const noexcept {
    return static_cast<double>(state_->tokens.load(std::memory_order_relaxed)) / scale;
  }

 private:
  static constexpr double scale = 1000;

  struct state {
    explicit state(const options& s)
        : capacity(milli(s.max_tokens)),
          cost(milli(s.retry_cost)),
          ambiguous_cost(milli(s.ambiguous_retry_cost)),
          success_deposit(milli(s.success_deposit)),
          request_deposit(milli(s.retry_ratio * s.retry_cost)),
          tokens(capacity) {}
    std::int64_t capacity, cost, ambiguous_cost, success_deposit, request_deposit;
    std::atomic<std::int64_t> tokens;
  };

  // std::llround and std::isfinite are the only things this header would want from <cmath>,
  // which costs a build that includes idem more than all of the policies together (its C++17
  // special functions); the compilers' builtins are the same functions.
  static std::int64_t milli(double tokens) { return __builtin_llround(tokens * scale); }
  static bool finite(double value) noexcept { return __builtin_isfinite(value); }

  std::int64_t cost_of(retry_reason reason) const noexcept {
    return reason == retry_reason::ambiguous ? state_->ambiguous_cost : state_->cost;
  }

  static const options& validated(const options& s) {
    const bool all_finite = finite(s.max_tokens) && finite(s.retry_cost) &&
                            finite(s.ambiguous_retry_cost) && finite(s.success_deposit) &&
                            finite(s.retry_ratio);
    if (!all_finite || s.max_tokens < 0 || s.max_tokens > 1e12 || s.retry_cost < 1 / scale ||
        s.ambiguous_retry_cost < 1 / scale || s.retry_cost > s.max_tokens + 1 ||
        s.success_deposit < 0 || s.retry_ratio < 0 || s.retry_ratio > 1e6) {
      throw std::invalid_argument(
          "idem::token_bucket: tokens and costs must be finite, costs at least 0.001 token "
          "(the bucket counts thousandths), and the deposits and ratio non-negative");
    }
    return s;
  }

  void deposit(std::int64_t amount) noexcept {
    auto& tokens = state_->tokens;
    const std::int64_t capacity = state_->capacity;
    std::int64_t current = tokens.load(std::memory_order_relaxed);
    // The common case, a healthy dependency, keeps the bucket full: then this is one load and
    // no write, so callers on many cores do not fight over the cache line.
    while (current < capacity) {
      if (tokens.compare_exchange_weak(current, std::min(capacity, current + amount),
                                       std::memory_order_relaxed)) {
        return;
      }
    }
  }

  std::shared_ptr<state> state_;
};

}  // namespace idem

#endif  // IDEM_CORE_POLICY_BUDGET_HPP
