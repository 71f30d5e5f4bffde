// The pauses of a coalescing wait: how a duplicate of a request in progress waits for its
// response. One schedule for the blocking driver, which sleeps them, and the asynchronous one,
// which waits them on a timer, so both wait alike.
#ifndef IDEM_SERVER_DETAIL_COALESCING_HPP
#define IDEM_SERVER_DETAIL_COALESCING_HPP

#include <algorithm>
#include <chrono>
#include <optional>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/store/contract.hpp>

namespace idem::detail {

class coalescing_wait {
 public:
  /// A wait of at most `limit` (options.coalesce) in all.
  explicit coalescing_wait(std::chrono::nanoseconds limit) noexcept : limit_(limit) {}

  /// Whether a claim's answer is worth waiting on: a live claim of the same request, which may
  /// settle (completed, released, abandoned). Another request's claim is a mismatch at once.
  static bool waits_on(const claim_result& claimed, const digest& print) noexcept {
    return claimed.status == claim_status::existing &&
           claimed.existing.state == record_state::in_progress &&
           claimed.existing.fingerprint == print;
  }

  /// The pause before the next claim, `waited` into the wait, or none once the wait is over.
  /// Pauses start at 1 ms and double up to 50 ms: a short request is answered soon after it
  /// completes, and a long one costs a claim every 50 ms, not a busy loop.
  std::optional<std::chrono::nanoseconds> next_pause(std::chrono::nanoseconds waited) noexcept {
    if (waited >= limit_) return std::nullopt;
    const std::chrono::nanoseconds pause = std::min(pause_, limit_ - waited);
    pause_ = std::min<std::chrono::nanoseconds>(2 * pause_, std::chrono::milliseconds{50});
    return pause;
  }

 private:
  std::chrono::nanoseconds limit_;
  std::chrono::nanoseconds pause_ = std::chrono::milliseconds{1};
};

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_COALESCING_HPP
