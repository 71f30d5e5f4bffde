// Hedging: a second attempt under the same key when the first is slow, the first answer wins.
//
// A dependency whose slowest few answers take a hundred times its median makes its callers'
// tail latency that slow too. A hedge sends the same request again, under the same idempotency
// key, once the first attempt has taken longer than most answers do (the tracker's p95 by
// default): whichever answers first is taken and the other is cancelled. The server answers
// both under one key (one effect: the other gets the replay, or a 409 while the first is still
// running), so a hedge is safe exactly where a retry is: for keyed or naturally idempotent calls.
// A policies struct whose safety is `unsafe` cannot name a hedging policy (static_assert).
//
// Hedges cost load, so they are limited by a budget of their own, a share of requests as gRPC's
// hedging throttle and brpc's backup-request ratio are: every operation deposits `ratio` of a
// token (up to `max_tokens`), a hedge takes a whole one, and with none left the attempt simply
// waits for its first answer. A spent budget never cancels a hedge already sent. Copies of a
// hedging policy share the budget: one per dependency.
//
// Only async_retrying hedges (idem/client/async_retrying.hpp): a blocking call has no way to wait
// for two answers at once. Only its outermost layer hedges, as only it retries: layers nested in
// its attempts make one attempt each, so hedges and retries do not multiply.
#ifndef IDEM_CLIENT_POLICY_HEDGING_HPP
#define IDEM_CLIENT_POLICY_HEDGING_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <type_traits>

namespace idem {

/// No hedges (the default).
struct no_hedging {};

/// When to hedge and how many: see above.
class hedging {
 public:
  struct options {
    /// The quantile of the latency tracker's durations after which the hedge goes out (the
    /// tracker must keep it: latency_tracker::options::quantiles has 0.95 by default).
    double quantile = 0.95;
    /// The hedge's delay while the tracker has too few samples, or without a tracker.
    std::chrono::nanoseconds start_delay = std::chrono::milliseconds{100};
    /// Never hedge sooner than this after the first attempt went out.
    std::chrono::nanoseconds floor = std::chrono::milliseconds{1};
    /// The share of operations that may send a hedge, in the long run.
    double ratio = 0.05;
    /// The most hedges that may go out in a burst.
    double max_tokens = 10;
  };

  hedging() : hedging(options{}) {}
  explicit hedging(const options& s) : config_(s), tokens_(std::make_shared<budget>()) {
    if (!(s.quantile > 0 && s.quantile < 1) || s.start_delay <= std::chrono::nanoseconds::zero() ||
        s.floor < std::chrono::nanoseconds::zero() || !(s.ratio > 0 && s.ratio <= 1) ||
        !(s.max_tokens >= 1 && s.max_tokens <= 1e6)) {
      throw std::invalid_argument(
          "idem::hedging: quantile must be within (0, 1), start_delay positive, floor not "
          "negative, ratio within (0, 1] and max_tokens within 1..1e6");
    }
    tokens_->deposit = static_cast<std::int64_t>(s.ratio * scale);
    tokens_->cap = static_cast<std::int64_t>(s.max_tokens * scale);
  }

  const options& settings() const noexcept { return config_; }

  /// An operation starts: `ratio` of a token, up to the cap.
  void on_operation() noexcept {
    budget& b = *tokens_;
    std::int64_t held = b.tokens.load(std::memory_order_relaxed);
    // Load before the exchange: a full budget, the steady state of a quiet dependency, is
    // not written at all.
    while (held < b.cap && !b.tokens.compare_exchange_weak(held, std::min(b.cap, held + b.deposit),
                                                           std::memory_order_relaxed)) {
    }
  }

  /// A hedge would go out: takes a whole token, or answers false when there is none.
  bool try_hedge() noexcept {
    budget& b = *tokens_;
    std::int64_t held = b.tokens.load(std::memory_order_relaxed);
    while (held >= scale) {
      if (b.tokens.compare_exchange_weak(held, held - scale, std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  /// Tokens left, in hedges.
  double tokens() const noexcept {
    return static_cast<double>(tokens_->tokens.load(std::memory_order_relaxed)) / scale;
  }

 private:
  static constexpr std::int64_t scale = 1'000'000;  // a token, in millionths

  struct budget {
    std::atomic<std::int64_t> tokens{0};
    std::int64_t deposit = 0;
    std::int64_t cap = 0;
  };

  options config_;
  std::shared_ptr<budget> tokens_;
};

namespace detail {

template <class H>
inline constexpr bool hedges = !std::is_same_v<H, no_hedging>;

}  // namespace detail

}  // namespace idem

#endif  // IDEM_CLIENT_POLICY_HEDGING_HPP
