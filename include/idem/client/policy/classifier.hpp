// Classifiers: was that a success, a failure worth repeating, or one that repeating cannot fix?
//
// The rules are those of the HTTP and gRPC specifications and of the AWS and Google SDKs:
//
//   HTTP  408 Request Timeout, 425 Too Early, 429 Too Many Requests, 502, 503   transient
//         504 Gateway Timeout                                                   ambiguous
//         409 Conflict with Retry-After (http_classifier: a request under the   transient
//             same key is still in progress, the IETF draft's 409 that idem's
//             servers send; repeated under the same key, after Retry-After)
//         other 4xx: the request itself is wrong; never repeated                permanent
//         500 and other 5xx: may be a bug that repeats; not repeated by default permanent
//   errno timed_out, connection_reset / _aborted, broken_pipe, network_reset     ambiguous
//         connection_refused, host / network unreachable, network_down, EAGAIN  transient
//   gRPC  UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED                              transient
//         DEADLINE_EXCEEDED                                                     ambiguous
//
// "Ambiguous" means the request may have taken effect: the connection died after it was sent.
// Repeating it is safe only under the same idempotency key, or after asking the dependency
// whether it landed (the call's `resolve` hook).
#ifndef IDEM_CLIENT_POLICY_CLASSIFIER_HPP
#define IDEM_CLIENT_POLICY_CLASSIFIER_HPP

#include <concepts>
#include <exception>
#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

#include <idem/client/attempt.hpp>
#include <idem/client/grpc_status.hpp>

namespace idem {

/// What a `classifier` policy must provide for a call returning `Result`: a judgement of a
/// returned value, and of a thrown exception. (A call returning void is judged by its
/// exceptions alone.)
template <class C, class Result>
concept Classifier = requires(const C& classifier, std::exception_ptr error) {
  { classifier.classify_exception(error) } -> std::same_as<classification>;
}
&&(std::is_void_v<Result> || requires(const C& classifier, const Result& result) {
  { classifier.classify(result) } -> std::same_as<classification>;
});

/// The HTTP rules above, for a status code.
constexpr classification classify_http_status(int status) noexcept {
  const bool server_error = status >= 500 && status <= 599;
  if (status >= 100 && status <= 399) return {disposition::success, status, false, {}};
  switch (status) {
    case 408:  // the server timed out waiting for the request: it did not act on it
    case 429:  // rate limited: the dependency asks for less load
      return {disposition::transient, status, true, {}};
    case 425:  // Too Early (RFC 8470): replay of early data refused; resend normally
      return {disposition::transient, status, false, {}};
    case 502:
    case 503:
      return {disposition::transient, status, true, {}};
    case 504:  // the gateway gave up waiting; the upstream may still have done it
      return {disposition::ambiguous, status, true, {}};
    default:
      return {disposition::permanent, status, server_error, {}};
  }
}

/// The errno and gRPC rules above, for an error code. An empty code is a success; a code from
/// a category these rules do not know is permanent.
inline classification classify_error_code(const std::error_code& code) noexcept {
  if (!code) return {disposition::success, 0, false, {}};
  const int value = code.value();
  if (code.category() == grpc_category()) {
    switch (static_cast<grpc_status>(value)) {
      case grpc_status::unavailable:
      case grpc_status::resource_exhausted:
      case grpc_status::aborted:
        return {disposition::transient, value, true, {}};
      case grpc_status::deadline_exceeded:
        return {disposition::ambiguous, value, true, {}};
      case grpc_status::internal:
      case grpc_status::unknown:
      case grpc_status::data_loss:
        return {disposition::permanent, value, true, {}};
      default:
        return {disposition::permanent, value, false, {}};
    }
  }
  const auto condition = code.default_error_condition();
  if (condition.category() == std::generic_category()) {
    switch (static_cast<std::errc>(condition.value())) {
      case std::errc::timed_out:
      case std::errc::connection_reset:
      case std::errc::connection_aborted:
      case std::errc::broken_pipe:
      case std::errc::network_reset:
        return {disposition::ambiguous, value, true, {}};
      case std::errc::connection_refused:
      case std::errc::host_unreachable:
      case std::errc::network_unreachable:
      case std::errc::network_down:
      case std::errc::resource_unavailable_try_again:
        return {disposition::transient, value, true, {}};
      default:
        break;
    }
  }
  return {disposition::permanent, value, false, {}};
}

namespace detail {

template <class R>
concept has_status_member = requires(const R& r) {
  { r.status } -> std::convertible_to<int>;
};

template <class R>
concept has_status_function = requires(const R& r) {
  { r.status() } -> std::convertible_to<int>;
};

template <class R>
concept has_retry_after_member = requires(const R& r) {
  { r.retry_after } -> std::convertible_to<std::string_view>;
};

template <class R>
concept has_header_lookup = requires(const R& r) {
  { r.header(std::string_view{}) } -> std::convertible_to<std::optional<std::string_view>>;
};

template <class R>
constexpr int status_of(const R& response) {
  if constexpr (has_status_member<R>) {
    return static_cast<int>(response.status);
  } else {
    return static_cast<int>(response.status());
  }
}

template <class R>
constexpr std::string_view retry_after_of(const R& response) {
  if constexpr (has_retry_after_member<R>) {
    return std::string_view{response.retry_after};
  } else if constexpr (has_header_lookup<R>) {
    const std::optional<std::string_view> value = response.header("Retry-After");
    return value ? *value : std::string_view{};
  } else {
    return {};
  }
}

// std::error_code itself, an error code enum (grpc_status), or std::errc, the portable errno
// names, which the standard makes an error *condition* enum.
template <class E>
concept error_code_like =
    std::same_as<E, std::error_code> || std::is_error_code_enum_v<E> || std::same_as<E, std::errc>;

template <error_code_like E>
std::error_code to_error_code(const E& code) noexcept {
  if constexpr (std::same_as<E, std::errc>) {
    return std::make_error_code(code);
  } else {
    return std::error_code{code};
  }
}

/// The exceptions every provided classifier understands: std::system_error by its code.
inline classification classify_standard_exception(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const std::system_error& e) {
    return classify_error_code(e.code());
  } catch (...) {
  }
  return {disposition::permanent, 0, false, {}};
}

template <class... Types>
bool holds_one_of(const std::exception_ptr& error) noexcept {
  if constexpr (sizeof...(Types) == 0) {
    return false;
  } else {
    return ([&error]<class T>() -> bool {
      try {
        std::rethrow_exception(error);
      } catch (const T&) {
        return true;
      } catch (...) {
      }
      return false;
    }.template operator()<Types>() || ...);
  }
}

}  // namespace detail

/// A response type with an HTTP status: a `status` member or `status()` function, and optionally
/// a `retry_after` string member or a `header(name)` lookup returning optional<string_view>.
/// Such a lookup is asked for "Retry-After" and must compare names without regard to case, as
/// HTTP does (HTTP/2 and 3 send them in lower case).
template <class R>
concept http_response_like = detail::has_status_member<R> || detail::has_status_function<R>;

/// HTTP responses by the HTTP rules, with their Retry-After.
struct http_classifier {
  template <http_response_like R>
  classification classify(const R& response) const {
    auto verdict = classify_http_status(detail::status_of(response));
    if (verdict.kind != disposition::success)
      verdict.retry_after = detail::retry_after_of(response);
    // A 409 that says when to come back is the draft's "request outstanding": the same key is
    // held by an attempt still running (an earlier one of this operation, often). Repeating it
    // under that key is what the server asks for, and cannot run the effect twice. A 409 with
    // no Retry-After is a conflict of the request itself, as before.
    if (verdict.code == 409 && !verdict.retry_after.empty()) verdict.kind = disposition::transient;
    return verdict;
  }
  classification classify_exception(const std::exception_ptr& error) const noexcept {
    return detail::classify_standard_exception(error);
  }
};

/// std::error_code results (and std::errc, and error code enums such as grpc_status) by the errno
/// and gRPC rules.
struct error_code_classifier {
  template <detail::error_code_like E>
  classification classify(const E& code) const noexcept {
    return classify_error_code(detail::to_error_code(code));
  }
  classification classify_exception(const std::exception_ptr& error) const noexcept {
    return detail::classify_standard_exception(error);
  }
};

/// A list of exception types, for exception_classifier.
template <class... Types>
struct exception_types {};

/// Exceptions by type: those in `Transient` (or derived from one) are repeated, those in
/// `Ambiguous` are repeated as ambiguous, std::system_error by its code, others are permanent.
/// Returned values are successes.
/// `exception_classifier<>`: failures are exceptions (std::system_error by its code), and every
/// returned value is a success.
template <class Transient = exception_types<>, class Ambiguous = exception_types<>>
struct exception_classifier;

template <class... Transient, class... Ambiguous>
struct exception_classifier<exception_types<Transient...>, exception_types<Ambiguous...>> {
  template <class R>
  classification classify(const R&) const noexcept {
    return {disposition::success, 0, false, {}};
  }
  classification classify_exception(const std::exception_ptr& error) const noexcept {
    if (detail::holds_one_of<Ambiguous...>(error)) return {disposition::ambiguous, 0, true, {}};
    if (detail::holds_one_of<Transient...>(error)) return {disposition::transient, 0, true, {}};
    return detail::classify_standard_exception(error);
  }
};

/// What the default classifier can judge: a value that says by itself whether it failed (an
/// HTTP-like response, an error code), or nothing (a call returning void fails by throwing).
/// Any other type, say `struct reply { int code; }`, could carry a 503 that the default would
/// have to call a success, and the call would silently never be retried; retrying refuses to
/// compile it instead and says what to do.
template <class R>
concept judged_by_default_classifier =
    std::is_void_v<R> || http_response_like<R> || detail::error_code_like<R>;

/// The default: HTTP-like responses by the HTTP rules, error codes by the errno and gRPC rules,
/// std::system_error by its code; any other exception is permanent. A call returning another
/// type needs a classifier of its own (`exception_classifier<>` when its failures are
/// exceptions and every value a success, `classify_with` for rules of its own).
struct default_classifier {
  template <judged_by_default_classifier R>
  classification classify(const R& result) const {
    if constexpr (http_response_like<R>) {
      return http_classifier{}.classify(result);
    } else {
      return classify_error_code(detail::to_error_code(result));
    }
  }
  classification classify_exception(const std::exception_ptr& error) const noexcept {
    return detail::classify_standard_exception(error);
  }
};

/// The user's own rules: `function(result)` judges values and, when it also accepts a
/// std::exception_ptr, exceptions (others are judged as default_classifier would).
template <class Function>
struct classify_with {
  Function function{};

  template <class R>
  requires std::is_invocable_r_v<classification, const Function&, const R&> classification
  classify(const R& result)
  const { return function(result); }
  classification classify_exception(const std::exception_ptr& error) const {
    if constexpr (std::is_invocable_r_v<classification, const Function&,
                                        const std::exception_ptr&>) {
      return function(error);
    } else {
      return detail::classify_standard_exception(error);
    }
  }
};

}  // namespace idem

#endif  // IDEM_CLIENT_POLICY_CLASSIFIER_HPP
