// One attempt of a retried operation: what it is told, and how its result is judged.
//
// attempt_context is what the wrapped call receives: which attempt this is, the idempotency key
// shared by every attempt of the operation, how much of the overall deadline is left, and the
// timeout this attempt should be given (derived from measured latency when the policies track
// it, else the time left), so that the call never outlives the operation. classification is a
// classifier's judgement of one result; attempt_record is what the history keeps of it.
#ifndef IDEM_CLIENT_ATTEMPT_HPP
#define IDEM_CLIENT_ATTEMPT_HPP

#include <chrono>
#include <cstdint>
#include <string_view>

namespace idem {

/// How a classifier judges one attempt's result.
enum class disposition : std::uint8_t {
  success,    // done: return it
  transient,  // failed, and the request did not take effect: safe to repeat
  ambiguous,  // failed, and it may have taken effect (a timeout, a connection lost after
              // sending): repeat only under the same key, or after asking whether it landed
  permanent,  // failed, and repeating cannot help (a 4xx, a bug): return it
};

constexpr std::string_view to_string(disposition d) noexcept {
  switch (d) {
    case disposition::success:
      return "success";
    case disposition::transient:
      return "transient";
    case disposition::ambiguous:
      return "ambiguous";
    case disposition::permanent:
      return "permanent";
  }
  return "unknown";
}

/// A classifier's verdict on one result.
struct classification {
  disposition kind = disposition::success;
  /// The result's code where it has one (HTTP status, error value), for the history; else 0.
  int code = 0;
  /// The dependency misbehaved (timeouts, connection errors, 5xx): what a circuit breaker counts.
  /// A request it rightly refused (4xx) is not its fault.
  bool fault = false;
  /// The raw Retry-After value the result carried, if any. It must stay valid while the result
  /// lives; retrying parses it at once.
  std::string_view retry_after{};
};

/// What the wrapped call is told about the attempt it is making.
class attempt_context {
 public:
  constexpr attempt_context(int attempt, std::string_view key,
                            std::chrono::nanoseconds time_left) noexcept
      : attempt_context(attempt, key, time_left, time_left) {}
  constexpr attempt_context(int attempt, std::string_view key, std::chrono::nanoseconds time_left,
                            std::chrono::nanoseconds timeout) noexcept
      : attempt_(attempt), key_(key), time_left_(time_left), timeout_(timeout) {}

  /// 1 for the first attempt.
  constexpr int attempt() const noexcept { return attempt_; }
  constexpr bool is_retry() const noexcept { return attempt_ > 1; }
  /// The idempotency key: the same for every attempt of one operation. Send it with the request.
  constexpr std::string_view key() const noexcept { return key_; }
  /// Time left until the overall deadline, measured as this attempt started.
  constexpr std::chrono::nanoseconds time_left() const noexcept { return time_left_; }
  /// How long this attempt may take: with a latency tracker in the policies, a timeout derived
  /// from the dependency's measured latency (attempt_timeouts), never past time_left(); without
  /// one, time_left(). Give it to the request (a socket's read timeout, a gRPC deadline): the
  /// asynchronous driver also cancels the attempt when it runs out.
  constexpr std::chrono::nanoseconds timeout() const noexcept { return timeout_; }

 private:
  int attempt_;
  std::string_view key_;
  std::chrono::nanoseconds time_left_;
  std::chrono::nanoseconds timeout_;
};

/// What the history keeps of one attempt.
struct attempt_record {
  int attempt;  // 1 for the first
  disposition kind;
  int code;                              // as classified (HTTP status, error value), else 0
  bool threw;                            // it ended in an exception rather than a value
  std::chrono::nanoseconds started_at;   // since the operation began
  std::chrono::nanoseconds delay_after;  // the wait before the next attempt; zero if none
  bool delay_from_retry_after;           // the wait was the server's Retry-After
  bool hedged;                           // a hedge went out for it, under the same key, and
                                         // this is the answer that came first (async only)
};

}  // namespace idem

#endif  // IDEM_CLIENT_ATTEMPT_HPP
