// Failure policies: what becomes of a key when its handler throws.
//
// The default, release_on_failure, frees the key (conditional on the fence) and lets the
// exception pass through unchanged. Most exceptions mean the request did not take effect (bad
// input found late, a dependency down before anything was written), and a client that retries
// after fixing the cause should be run, not answered with the old error for 24 hours.
//
// When a failure may come after an effect began, freeing the key invites a second effect, so a
// service can store chosen failures instead: the record is completed with the response the
// policy builds, every repeat replays it, and the first caller still gets the exception.
// store_failures_after_effect does what Stripe does: once execution began (here: a recovery point
// was recorded), a failure is stored as a 500-class response rather than released.
#ifndef IDEM_SERVER_FAILURE_HPP
#define IDEM_SERVER_FAILURE_HPP

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string_view>

#include <idem/core/request.hpp>

namespace idem {

/// What a failure policy is told about a handler that threw.
struct failure_info {
  std::exception_ptr error;
  std::string_view scope;
  std::string_view key;
  std::uint64_t fence = 0;
  /// Recovery points recorded under this key, by this attempt and those before it.
  std::size_t steps_recorded = 0;

  /// Whether execution began: a recovery point was recorded, so an effect may have happened.
  bool effect_started() const noexcept { return steps_recorded > 0; }
};

/// What a `failure` policy must provide: stored_response<Response>(const failure_info&) returning
/// std::optional<Response>: a response to store (and replay to every repeat), or nothing to
/// release the key.
template <class P, class Response>
concept FailurePolicy = requires(const P& policy, const failure_info& info) {
  { policy.template stored_response<Response>(info) } -> std::same_as<std::optional<Response>>;
};

/// The default: every failure releases the key.
struct release_on_failure {
  template <class Response>
  std::optional<Response> stored_response(const failure_info& /*info*/) const {
    return std::nullopt;
  }
};

/// A 500 with a short plain-text body, for store_failures_after_effect with http_response.
struct internal_error_response {
  http_response operator()(const failure_info& /*info*/) const {
    return http_response{500, {{"content-type", "text/plain"}}, "internal error\n"};
  }
};

/// Stripe's rule: a failure after execution began is stored, as `MakeResponse` builds it; a
/// failure before is released.
template <class MakeResponse = internal_error_response>
struct store_failures_after_effect {
  MakeResponse make{};

  template <class Response>
  std::optional<Response> stored_response(const failure_info& info) const {
    if (!info.effect_started()) return std::nullopt;
    return Response(make(info));
  }
};

/// Every failure is stored, as `MakeResponse` builds it.
template <class MakeResponse = internal_error_response>
struct store_all_failures {
  MakeResponse make{};

  template <class Response>
  std::optional<Response> stored_response(const failure_info& info) const {
    return Response(make(info));
  }
};

}  // namespace idem

#endif  // IDEM_SERVER_FAILURE_HPP
