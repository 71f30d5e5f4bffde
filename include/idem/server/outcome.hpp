// What one guarded call returns: what happened (a verdict), the response when there is one, and
// the HTTP status a service answers with.
//
// Every expected ending is a verdict the caller branches on, not an exception: a repeat (replay),
// a concurrent duplicate (409), key misuse (422), a bad key (400), a store that cannot take the
// claim (503). Only the handler's own exceptions pass through as exceptions. The type depends on
// the response type alone, never on the policies.
#ifndef IDEM_SERVER_OUTCOME_HPP
#define IDEM_SERVER_OUTCOME_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace idem {

enum class verdict : std::uint8_t {
  executed,            // the handler ran under a new or taken-over claim; its response is returned
  replayed,            // a completed record with the same fingerprint: the stored response
  in_progress,         // another attempt holds a live claim on the key (HTTP 409)
  mismatch,            // the key was used with another request (HTTP 422)
  missing_key,         // no key where one is required (HTTP 400)
  invalid_key,         // empty, too long, or not visible ASCII (HTTP 400)
  invalid_request,     // the request cannot be fingerprinted, e.g. a body that is not JSON (400)
  body_too_large,      // the body is longer than max_body_bytes; nothing is read or stored (413)
  store_unavailable,   // the store cannot answer; nothing ran (HTTP 503)
  store_full,          // the store has no room for the claim; nothing ran (HTTP 503)
  response_too_large,  // the response passed max_response_bytes and was not stored (HTTP 500):
                       // the first caller still has it; repeats are not run again
  cancelled,           // an asynchronous call was cancelled (its cancellation slot) before it
                       // ended: nothing was recorded for it, its claim was settled as a failure
                       // (released by default), so a retry runs again (HTTP 503)
  deadline_exceeded,   // the caller's deadline (idem::caller_deadline) leaves less time than the
                       // wrapper's minimum_time_left: nothing was claimed or run (HTTP 504)
};

constexpr std::string_view to_string(verdict v) noexcept {
  switch (v) {
    case verdict::executed:
      return "executed";
    case verdict::replayed:
      return "replayed";
    case verdict::in_progress:
      return "in_progress";
    case verdict::mismatch:
      return "mismatch";
    case verdict::missing_key:
      return "missing_key";
    case verdict::invalid_key:
      return "invalid_key";
    case verdict::invalid_request:
      return "invalid_request";
    case verdict::body_too_large:
      return "body_too_large";
    case verdict::store_unavailable:
      return "store_unavailable";
    case verdict::store_full:
      return "store_full";
    case verdict::response_too_large:
      return "response_too_large";
    case verdict::cancelled:
      return "cancelled";
    case verdict::deadline_exceeded:
      return "deadline_exceeded";
  }
  return "unknown";
}

/// The HTTP status for a verdict that carries no response of the handler's; 0 for executed and
/// replayed, whose status is the response's own.
constexpr int http_status(verdict v) noexcept {
  switch (v) {
    case verdict::executed:
    case verdict::replayed:
      return 0;
    case verdict::in_progress:
      return 409;  // RFC 9110 Conflict, as the IETF idempotency-key draft and Stripe answer
    case verdict::mismatch:
      return 422;  // Unprocessable Content: the key was reused for another request
    case verdict::missing_key:
    case verdict::invalid_key:
    case verdict::invalid_request:
      return 400;
    case verdict::body_too_large:
      return 413;  // RFC 9110 Content Too Large
    case verdict::store_unavailable:
    case verdict::store_full:
    case verdict::cancelled:  // the service stopped working on it; a retry is safe and runs again
      return 503;
    case verdict::response_too_large:
      return 500;  // the service cannot answer a repeat as it answered the first request
    case verdict::deadline_exceeded:
      return 504;  // as Google's APIs map gRPC's DEADLINE_EXCEEDED to HTTP
  }
  return 500;
}

/// Thrown by idempotent_outcome::value() when the verdict carries no response.
class no_response_error : public std::logic_error {
 public:
  explicit no_response_error(verdict v)
      : std::logic_error("idem::idempotent_outcome: no response, the verdict is " +
                         std::string(to_string(v))),
        verdict_(v) {}
  verdict which() const noexcept { return verdict_; }

 private:
  verdict verdict_;
};

template <class Response>
class idempotent_outcome {
 public:
  /// A verdict without a response: a refusal (400, 409, 422, 503), with why in words.
  idempotent_outcome() = default;
  idempotent_outcome(idem::verdict v) : verdict_(v) {}
  idempotent_outcome(idem::verdict v, std::string message)
      : verdict_(v), message_(std::move(message)) {}
  /// in_progress: another attempt holds the key, and its lease has `lease_left` to run before
  /// a retry may take it over (what an HTTP 409's Retry-After says).
  idempotent_outcome(idem::verdict v, std::string message, std::chrono::nanoseconds lease_left)
      : verdict_(v), message_(std::move(message)), lease_left_(lease_left) {}

  /// The handler ran under `fence` and its response was stored for repeats.
  template <class R>
  static idempotent_outcome executed(R&& response, std::uint64_t fence, bool resumed) {
    return idempotent_outcome(idem::verdict::executed, std::forward<R>(response), fence, resumed,
                              true);
  }
  /// The handler ran, but its response was not stored: `v` is executed when the store failed,
  /// response_too_large when it did not fit; `message` says which.
  template <class R>
  static idempotent_outcome unrecorded(idem::verdict v, R&& response, std::string message,
                                       std::uint64_t fence = 0, bool resumed = false) {
    return idempotent_outcome(v, std::forward<R>(response), fence, resumed, false,
                              std::move(message));
  }
  /// A repeat: the response stored by the call that ran.
  template <class R>
  static idempotent_outcome replayed(R&& response) {
    return idempotent_outcome(idem::verdict::replayed, std::forward<R>(response), 0, false, true);
  }

  idem::verdict verdict() const noexcept { return verdict_; }
  /// True when there is a response: executed or replayed.
  bool has_value() const noexcept { return response_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }

  Response& value() & {
    if (!response_) throw no_response_error(verdict_);
    return *response_;
  }
  const Response& value() const& {
    if (!response_) throw no_response_error(verdict_);
    return *response_;
  }
  Response&& value() && {
    if (!response_) throw no_response_error(verdict_);
    return std::move(*response_);
  }
  /// The response, unchecked, as std::optional has it: only when has_value().
  Response* operator->() noexcept { return &*response_; }
  const Response* operator->() const noexcept { return &*response_; }
  Response& operator*() & noexcept { return *response_; }
  const Response& operator*() const& noexcept { return *response_; }
  Response&& operator*() && noexcept { return std::move(*response_); }

  /// Why there is no response (or why it was not stored), in words; empty otherwise.
  std::string_view message() const noexcept { return message_; }
  /// The fence the call ran under (executed), else 0.
  std::uint64_t fence() const noexcept { return fence_; }
  /// Executed: whether the response was stored for repeats. False when the store failed after
  /// the handler ran (message() says how); the claim then stays in progress until its lease
  /// ends, and stuck() lists it.
  bool recorded() const noexcept { return recorded_; }
  /// Executed after taking over an abandoned claim.
  bool resumed() const noexcept { return resumed_; }
  /// in_progress: how long the claim that holds the key has left before a retry may take it
  /// over, as the store answered the claim; zero when it is not known or already over.
  std::chrono::nanoseconds lease_left() const noexcept { return lease_left_; }

  /// The status to answer with: the response's own `status` member when it has one (200 when it
  /// has none), or the verdict's (409, 422, 400, 503).
  int http_status() const noexcept {
    if (response_) {
      if constexpr (requires(const Response& r) { static_cast<int>(r.status); }) {
        return static_cast<int>(response_->status);
      } else {
        return 200;
      }
    }
    return idem::http_status(verdict_);
  }

 private:
  template <class R>
  idempotent_outcome(idem::verdict v, R&& response, std::uint64_t fence, bool resumed,
                     bool recorded, std::string message = {})
      : verdict_(v),
        response_(std::in_place, std::forward<R>(response)),
        message_(std::move(message)),
        fence_(fence),
        recorded_(recorded),
        resumed_(resumed) {}

  idem::verdict verdict_ = idem::verdict::executed;
  std::optional<Response> response_;
  std::string message_;
  std::uint64_t fence_ = 0;
  std::chrono::nanoseconds lease_left_{};
  bool recorded_ = false;
  bool resumed_ = false;
};

}  // namespace idem

#endif  // IDEM_SERVER_OUTCOME_HPP
