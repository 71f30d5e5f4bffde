// What a request must pass before anything is claimed for it: a key (or none, where the
// options allow), a valid key, a body within max_body_bytes, a fingerprint. The blocking
// idempotent and the asynchronous one (idem/asio) both ask here, so a refusal reads the same
// and costs the same through either.
#ifndef IDEM_SERVER_DETAIL_ADMISSION_HPP
#define IDEM_SERVER_DETAIL_ADMISSION_HPP

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/core/key.hpp>
#include <idem/core/request.hpp>
#include <idem/server/deadline.hpp>
#include <idem/server/detail/engine.hpp>
#include <idem/server/outcome.hpp>

namespace idem::detail {

/// A call without a key where options.require_key says one is needed.
template <class Response>
idempotent_outcome<Response> missing_key() {
  return idempotent_outcome<Response>{verdict::missing_key, "an idempotency key is required"};
}

/// Whether a caller with `deadline` has too little time left for a handler that needs
/// `minimum` (nothing left is always too little).
inline bool too_late(const caller_deadline& deadline, std::chrono::nanoseconds minimum) noexcept {
  return deadline.time_left <= std::chrono::nanoseconds::zero() || deadline.time_left < minimum;
}

/// The caller's deadline on `clock`: the time it had left on arrival, from now; none without one.
template <class Clock>
std::optional<typename Clock::time_point> deadline_on(
    Clock& clock, const std::optional<caller_deadline>& deadline) {
  if (!deadline) return std::nullopt;
  return clock.now() +
         std::chrono::duration_cast<typename Clock::time_point::duration>(deadline->time_left);
}

/// The refusal of a call too_late said no to: nothing is claimed, the caller is told why.
template <class Response>
idempotent_outcome<Response> deadline_refusal(const caller_deadline& deadline,
                                              std::chrono::nanoseconds minimum) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  if (deadline.time_left <= std::chrono::nanoseconds::zero()) {
    return idempotent_outcome<Response>{verdict::deadline_exceeded,
                                        "the caller's deadline has passed: the request was not "
                                        "started"};
  }
  return idempotent_outcome<Response>{
      verdict::deadline_exceeded,
      "the caller waits " +
          std::to_string(duration_cast<milliseconds>(deadline.time_left).count()) +
          " ms more, and the request needs at least " +
          std::to_string(duration_cast<milliseconds>(minimum).count()) + " ms: it was not started"};
}

/// Checks a keyed request: the refusal (invalid_key, body_too_large, invalid_request), or none
/// with `print` set to the request's fingerprint. `settings` are idempotent::options or the
/// asynchronous wrapper's.
template <class Response, class Options>
std::optional<idempotent_outcome<Response>> admit(const Options& settings, std::string_view key,
                                                  const request_view& view, digest& print) {
  using outcome_type = idempotent_outcome<Response>;
  if (!is_valid_key(key, settings.max_key_length)) {
    return engine<Options>::template invalid_key<Response>("the idempotency key",
                                                           settings.max_key_length);
  }
  if (view.body.size() > settings.max_body_bytes) {
    return outcome_type{verdict::body_too_large,
                        "the request body is " + std::to_string(view.body.size()) +
                            " bytes; at most " + std::to_string(settings.max_body_bytes) +
                            " are accepted"};
  }
  try {
    print = settings.fingerprint(view);
  } catch (const std::invalid_argument& error) {
    return outcome_type{verdict::invalid_request, error.what()};
  }
  return std::nullopt;
}

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_ADMISSION_HPP
