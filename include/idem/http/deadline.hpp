// The caller's deadline on HTTP: the Request-Timeout-Ms field, read and written. Standard
// library only.
//
//   Request-Timeout-Ms: 2500
//
// HTTP has no field for a deadline (gRPC sends its grpc-timeout with every call), so idem names
// one: how many milliseconds the caller still waits for the answer, as a decimal integer. It is
// relative, so that the caller's clock and the server's need not agree, and each hop sends what
// is left of it when it calls the next (deadline propagation): a client sends its retrying
// deadline's time left with each attempt (attempt_fields), a server reads it (parse_deadline),
// refuses to start what cannot finish in time (verdict::deadline_exceeded, 504) and hands the
// rest to its handler (handler_context::time_left), which sends it on.
//
// A value is 1 to 9 digits, nothing else (spaces and tabs around it aside, RFC 9110 section 5.5):
// 999,999,999 ms, eleven days and a half, is more than any caller waits, and a longer value is
// refused rather than cut. A sign, a fraction, an exponent, two fields: refused, never guessed.
// 0 is well-formed: the caller has stopped waiting.
#ifndef IDEM_HTTP_DEADLINE_HPP
#define IDEM_HTTP_DEADLINE_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <idem/client/attempt.hpp>
#include <idem/core/key.hpp>
#include <idem/http/idempotency_key.hpp>
#include <idem/server/deadline.hpp>

namespace idem::http {

/// The field idem reads and writes the caller's deadline in.
inline constexpr std::string_view deadline_field = "Request-Timeout-Ms";

/// The most digits a deadline value has.
inline constexpr std::size_t max_deadline_digits = 9;

/// Why a field value is not a deadline.
enum class deadline_error : std::uint8_t {
  none,
  empty,           ///< nothing but spaces
  negative,        ///< a minus sign
  not_a_number,    ///< anything but digits: a plus sign, a fraction, letters, inner spaces
  too_large,       ///< more than max_deadline_digits digits
  several_fields,  ///< the field twice, or a list (a proxy joined two with a comma)
};

/// A deadline field read: the caller's deadline, none (no field), or why the value is wrong.
class parsed_deadline {
 public:
  parsed_deadline() = default;
  explicit parsed_deadline(caller_deadline deadline) : deadline_(deadline) {}
  explicit parsed_deadline(deadline_error error) : error_(error) {}

  /// False when the field was there and wrong: refuse the request (400).
  explicit operator bool() const noexcept { return error_ == deadline_error::none; }
  deadline_error error() const noexcept { return error_; }
  /// The caller's deadline; std::nullopt when the request had no field.
  const std::optional<caller_deadline>& deadline() const noexcept { return deadline_; }

  /// What is wrong, for a problem body; empty when nothing is.
  std::string_view message() const noexcept {
    switch (error_) {
      case deadline_error::none:
        return {};
      case deadline_error::empty:
        return "the Request-Timeout-Ms field is empty: send the milliseconds the caller still "
               "waits, or no field";
      case deadline_error::negative:
        return "the Request-Timeout-Ms field is negative: send 0 when the caller no longer waits";
      case deadline_error::not_a_number:
        return "the Request-Timeout-Ms field is not a whole number of milliseconds";
      case deadline_error::too_large:
        return "the Request-Timeout-Ms field has more than 9 digits: send at most 999999999 ms";
      case deadline_error::several_fields:
        return "the request has more than one Request-Timeout-Ms value";
    }
    return "the Request-Timeout-Ms field is not valid";
  }

 private:
  std::optional<caller_deadline> deadline_;
  deadline_error error_ = deadline_error::none;
};

/// Reads one Request-Timeout-Ms field value.
inline parsed_deadline parse_deadline(std::string_view value) {
  std::size_t first = 0;
  std::size_t last = value.size();
  while (first < last && detail::sf::is_ows(value[first]))
    ++first;
  while (last > first && detail::sf::is_ows(value[last - 1]))
    --last;
  value = value.substr(first, last - first);
  if (value.empty()) return parsed_deadline{deadline_error::empty};
  if (value.find(',') != std::string_view::npos) {
    return parsed_deadline{deadline_error::several_fields};
  }
  if (value.front() == '-') return parsed_deadline{deadline_error::negative};
  std::int64_t milliseconds = 0;
  for (const char c : value) {
    if (!detail::sf::is_digit(c)) return parsed_deadline{deadline_error::not_a_number};
  }
  if (value.size() > max_deadline_digits) return parsed_deadline{deadline_error::too_large};
  for (const char c : value)
    milliseconds = milliseconds * 10 + (c - '0');
  return parsed_deadline{caller_deadline{std::chrono::milliseconds{milliseconds}}};
}

/// Reads every value the request carried under the field's name: none is no deadline, two or
/// more are refused (which would the caller mean?), one is parse_deadline's.
template <class Values>
parsed_deadline parse_deadline_fields(const Values& values) {
  auto it = values.begin();
  if (it == values.end()) return {};
  const std::string_view first = *it;
  if (++it != values.end()) return parsed_deadline{deadline_error::several_fields};
  return parse_deadline(first);
}

/// The field value for `time_left`: whole milliseconds, rounded down so that the next hop never
/// waits past the caller; 0 when nothing is left; at most 999,999,999.
inline std::string format_deadline(std::chrono::nanoseconds time_left) {
  constexpr std::int64_t most = 999'999'999;
  const std::int64_t ms =
      time_left <= std::chrono::nanoseconds::zero()
          ? 0
          : std::chrono::duration_cast<std::chrono::milliseconds>(time_left).count();
  return std::to_string(ms < most ? ms : most);
}

/// What a retrying client sends with each attempt: the operation's key and what is left of its
/// deadline, as field values.
///
///   auto fields = idem::http::attempt_fields(attempt);
///   headers.emplace(idem::http::key_field, fields.key);
///   headers.emplace(idem::http::deadline_field, fields.deadline);
struct attempt_field_values {
  std::string key;       ///< the Idempotency-Key value, in the form asked for
  std::string deadline;  ///< the Request-Timeout-Ms value
};

/// The field name of the key, for attempt_fields' key value.
inline constexpr std::string_view key_field = idempotency_key_field;

/// The fields for one attempt: its key (bare by default, key_form::sf_string for the draft's
/// form) and its time left.
inline attempt_field_values attempt_fields(const attempt_context& attempt,
                                           key_form form = key_form::any) {
  return {format_key(attempt.key(), form), format_deadline(attempt.time_left())};
}

}  // namespace idem::http

#endif  // IDEM_HTTP_DEADLINE_HPP
