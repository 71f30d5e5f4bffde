// idem — exactly-once effect under at-least-once delivery.
//
// Parsing of the HTTP `Retry-After` field (RFC 9110 §10.2.3) and of HTTP-date (RFC 9110 §5.6.7),
// so that a retrying client waits as long as the server asked instead of its own backoff.
// Field values come from the network: every function here is noexcept, allocates nothing, reads
// only inside the given view, and answers std::nullopt for anything that is not exactly the
// grammar, so that the caller can ignore the field and fall back to its own delay.
//
// Choices the RFC leaves to the recipient:
// * names are case-sensitive: the grammar spells day and month names with %s"…" and §5.6.7 says
//   HTTP-date is case sensitive. "sun, 06 nov 1994 …" is rejected.
// * the day name must be the weekday of the date (as RFC 5322 §3.3 requires of the format that
//   IMF-fixdate is a fixed subset of): a mismatch means a corrupt or hand-made value, and ignoring
//   it only costs the caller its own backoff.
// * second 60 (a leap second, allowed by RFC 5322 §3.3) is accepted at any minute and counts as
//   the second after :59. std::chrono::system_clock has no leap seconds, so 23:59:60 is the same
//   instant as 00:00:00 of the next day; the order of timestamps is kept.
// * a two-digit RFC 850 year is resolved against the caller's `now` by calendar year (UTC): the
//   latest year with those last two digits that is at most 50 years after now's year
//   (RFC 9110 §5.6.7 turns "more than 50 years in the future" into "the most recent past year").
// * optional whitespace (SP / HTAB) around the whole field value is skipped by parse_retry_after
//   (RFC 9110 §5.5 excludes it from the field value); parse_http_date takes the bare date, where
//   the grammar allows no extra whitespace.
//
// The calendar is std::chrono's (year_month_day, sys_days, weekday): the proleptic Gregorian
// calendar RFC 9110 dates are written in.
#ifndef IDEM_CLIENT_RETRY_AFTER_HPP
#define IDEM_CLIENT_RETRY_AFTER_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace idem {

namespace detail {

inline constexpr std::string_view short_day_names[7] = {"Sun", "Mon", "Tue", "Wed",
                                                        "Thu", "Fri", "Sat"};
inline constexpr std::string_view long_day_names[7] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                                       "Thursday", "Friday", "Saturday"};
inline constexpr std::string_view month_names[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// The fields of one HTTP-date as written; nothing is validated yet.
struct http_date_fields {
  int weekday = 0;  // 0 = Sunday, as std::chrono::weekday::c_encoding() counts
  int year = 0;
  int month = 0;  // 1-12
  int day = 0;
  int hour = 0;
  int minute = 0;
  int second = 0;
};

// The parsers below consume from the front of `in` and only ever look at in.front() or call
// starts_with/remove_prefix after a size check, so no input can make them read past the end.

constexpr bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

constexpr bool eat(std::string_view& in, std::string_view literal) noexcept {
  if (!in.starts_with(literal)) return false;
  in.remove_prefix(literal.size());
  return true;
}

// Exactly `count` ASCII digits (count <= 4, so the value cannot overflow).
constexpr bool eat_digits(std::string_view& in, std::size_t count, int& value) noexcept {
  if (in.size() < count) return false;
  int v = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (!is_digit(in[i])) return false;
    v = v * 10 + (in[i] - '0');
  }
  in.remove_prefix(count);
  value = v;
  return true;
}

template <std::size_t N>
constexpr bool eat_name(std::string_view& in, const std::string_view (&names)[N],
                        int& index) noexcept {
  for (std::size_t i = 0; i < N; ++i) {
    if (eat(in, names[i])) {
      index = static_cast<int>(i);
      return true;
    }
  }
  return false;
}

// time-of-day = hour ":" minute ":" second, each 2DIGIT.
constexpr bool eat_time_of_day(std::string_view& in, http_date_fields& f) noexcept {
  return eat_digits(in, 2, f.hour) && eat(in, ":") && eat_digits(in, 2, f.minute) && eat(in, ":") &&
         eat_digits(in, 2, f.second);
}

// IMF-fixdate = day-name "," SP day SP month SP year SP time-of-day SP "GMT"
constexpr bool parse_imf_fixdate(std::string_view in, http_date_fields& f) noexcept {
  int month = 0;
  if (!(eat_name(in, short_day_names, f.weekday) && eat(in, ", ") && eat_digits(in, 2, f.day) &&
        eat(in, " ") && eat_name(in, month_names, month) && eat(in, " ") &&
        eat_digits(in, 4, f.year) && eat(in, " ") && eat_time_of_day(in, f) && eat(in, " GMT"))) {
    return false;
  }
  f.month = month + 1;
  return in.empty();
}

// rfc850-date = day-name-l "," SP day "-" month "-" 2DIGIT SP time-of-day SP "GMT"
// The year is left as its two digits; resolve_two_digit_year gives it a century.
constexpr bool parse_rfc850_date(std::string_view in, http_date_fields& f) noexcept {
  int month = 0;
  if (!(eat_name(in, long_day_names, f.weekday) && eat(in, ", ") && eat_digits(in, 2, f.day) &&
        eat(in, "-") && eat_name(in, month_names, month) && eat(in, "-") &&
        eat_digits(in, 2, f.year) && eat(in, " ") && eat_time_of_day(in, f) && eat(in, " GMT"))) {
    return false;
  }
  f.month = month + 1;
  return in.empty();
}

// asctime-date = day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time-of-day SP year
// asctime() pads the day with a space ("Nov  6"); two digits ("Nov 06", "Nov 16") are also valid.
constexpr bool parse_asctime_date(std::string_view in, http_date_fields& f) noexcept {
  int month = 0;
  if (!(eat_name(in, short_day_names, f.weekday) && eat(in, " ") &&
        eat_name(in, month_names, month) && eat(in, " "))) {
    return false;
  }
  if (!(eat(in, " ") ? eat_digits(in, 1, f.day) : eat_digits(in, 2, f.day))) return false;
  if (!(eat(in, " ") && eat_time_of_day(in, f) && eat(in, " ") && eat_digits(in, 4, f.year))) {
    return false;
  }
  f.month = month + 1;
  return in.empty();
}

// RFC 9110 §5.6.7: a two-digit year that appears to be more than 50 years in the future is the
// most recent past year with the same last two digits. So: the latest year ending in `yy` that is
// at most reference_year + 50.
constexpr int resolve_two_digit_year(int yy, int reference_year) noexcept {
  const int limit = reference_year + 50;
  const int limit_yy = ((limit % 100) + 100) % 100;
  const int back = ((limit_yy - yy) % 100 + 100) % 100;
  return limit - back;
}

// system_clock's tick, as a whole number of ticks per second. Every standard library's is a
// fraction of a second that divides 1e9: 1 ns (libstdc++), 1 us (libc++), 100 ns (MSVC).
inline constexpr std::int64_t ticks_per_second = std::chrono::system_clock::period::den;
static_assert(
    std::chrono::system_clock::period::num == 1 && 1'000'000'000 % ticks_per_second == 0,
    "idem/client/retry_after.hpp expects system_clock to tick in a fraction of a second that "
    "a nanosecond divides (1 ns, 100 ns, 1 us, ...).");

// `now` split into whole seconds since the epoch, rounded down, and the nanoseconds past them
// (in [0, 1e9)), by integer division of the tick count: nothing is multiplied out of range for
// any `now` the clock can hold.
struct split_time {
  std::int64_t seconds;
  std::int64_t nanoseconds;
};
inline split_time split_seconds(std::chrono::system_clock::time_point now) noexcept {
  const std::int64_t ticks = now.time_since_epoch().count();
  split_time t{ticks / ticks_per_second, ticks % ticks_per_second};
  if (t.nanoseconds < 0) {  // division truncates toward zero; step back to the floor
    t.seconds -= 1;
    t.nanoseconds += ticks_per_second;
  }
  t.nanoseconds *= 1'000'000'000 / ticks_per_second;
  return t;
}

// The UTC calendar year of `now`. The day is clamped to ±30000 years around 1970, so that the
// years resolve_two_digit_year derives from it (±100) stay inside the ±32767 that
// to_epoch_seconds accepts, whatever the clock's range (a nanosecond clock spans only ±292 years).
inline int year_of(std::chrono::system_clock::time_point now) noexcept {
  constexpr std::int64_t max_days = 365LL * 30000;
  const std::int64_t seconds = split_seconds(now).seconds;
  std::int64_t days = seconds / 86400 - (seconds % 86400 < 0 ? 1 : 0);  // rounded down
  if (days > max_days) days = max_days;
  if (days < -max_days) days = -max_days;
  const std::chrono::sys_days day{std::chrono::days{days}};
  return static_cast<int>(std::chrono::year_month_day{day}.year());
}

// Validates the fields and turns them into seconds since the Unix epoch. The range is about
// ±1e12 s (4-digit years, or a two-digit one resolved near a clamped reference year), far from
// overflowing std::int64_t.
constexpr bool to_epoch_seconds(const http_date_fields& f, std::int64_t& seconds) noexcept {
  // The years std::chrono::year holds: every year the parsers and year_of can produce.
  if (f.year < -32767 || f.year > 32767) return false;
  if (f.month < 1 || f.month > 12 || f.day < 1 || f.day > 31) return false;
  if (f.hour > 23 || f.minute > 59 || f.second > 60) return false;
  const std::chrono::year_month_day date{std::chrono::year{f.year},
                                         std::chrono::month{static_cast<unsigned>(f.month)},
                                         std::chrono::day{static_cast<unsigned>(f.day)}};
  if (!date.ok()) return false;  // Feb 30, Apr 31
  const std::chrono::sys_days day{date};
  if (std::chrono::weekday{day}.c_encoding() != static_cast<unsigned>(f.weekday)) return false;
  const int time_of_day = f.hour * 3600 + f.minute * 60 + f.second;
  seconds = std::int64_t{day.time_since_epoch().count()} * 86400 + time_of_day;
  return true;
}

// Any of the three HTTP-date forms, exactly, with no surrounding whitespace: true, with the
// date's `seconds` since the epoch, or false.
constexpr bool parse_http_date_seconds(std::string_view text, int reference_year,
                                       std::int64_t& seconds) noexcept {
  // The forms differ by the fourth byte (',' / ' ' / a letter), so at most one can match.
  if (http_date_fields f; parse_imf_fixdate(text, f)) return to_epoch_seconds(f, seconds);
  if (http_date_fields f; parse_asctime_date(text, f)) return to_epoch_seconds(f, seconds);
  if (http_date_fields f; parse_rfc850_date(text, f)) {
    f.year = resolve_two_digit_year(f.year, reference_year);
    return to_epoch_seconds(f, seconds);
  }
  return false;
}

constexpr bool is_ows(char c) noexcept {
  return c == ' ' || c == '\t';
}

constexpr std::string_view trim_ows(std::string_view s) noexcept {
  while (!s.empty() && is_ows(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back()))
    s.remove_suffix(1);
  return s;
}

// The largest whole number of seconds that std::chrono::nanoseconds can hold.
inline constexpr std::int64_t max_delay_seconds =
    std::chrono::nanoseconds::max().count() / 1'000'000'000;

// delay-seconds = 1*DIGIT; any length is valid, so a value past what nanoseconds holds saturates.
constexpr std::optional<std::chrono::nanoseconds> parse_delay_seconds(std::string_view s) noexcept {
  if (s.empty()) return std::nullopt;
  std::int64_t value = 0;
  bool saturated = false;
  for (const char c : s) {
    if (!is_digit(c)) return std::nullopt;
    if (!saturated) {
      value = value * 10 + (c - '0');
      saturated = value > max_delay_seconds;  // checked every digit, so value * 10 cannot overflow
    }
  }
  if (saturated) return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds{value * 1'000'000'000};  // value <= max_delay_seconds
}

// From `now` until `target` (seconds since the epoch): zero when target is not after now,
// std::chrono::nanoseconds::max() when the gap does not fit. Written so that no intermediate
// overflows for any `now` the clock can hold.
inline std::chrono::nanoseconds delay_until(std::int64_t target,
                                            std::chrono::system_clock::time_point now) noexcept {
  const split_time n = split_seconds(now);
  if (target <= n.seconds) return std::chrono::nanoseconds::zero();  // target <= floor(now) <= now
  if (n.seconds < target - max_delay_seconds) return std::chrono::nanoseconds::max();
  const std::int64_t gap = target - n.seconds;  // in [1, max_delay_seconds]
  return std::chrono::nanoseconds{gap * 1'000'000'000 - n.nanoseconds};
}

}  // namespace detail

/// Parses an HTTP-date (RFC 9110 §5.6.7) in any of the three forms a recipient must accept:
/// IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the obsolete RFC 850 form
/// ("Sunday, 06-Nov-94 08:49:37 GMT") and the asctime() form ("Sun Nov  6 08:49:37 1994").
/// `now` resolves the century of an RFC 850 two-digit year. Returns std::nullopt for anything that
/// is not one of those forms exactly, for a date that does not exist, for a day name that is not
/// the date's weekday, and for a date that system_clock::time_point cannot represent.
inline std::optional<std::chrono::system_clock::time_point> parse_http_date(
    std::string_view text, std::chrono::system_clock::time_point now) noexcept {
  std::int64_t seconds = 0;
  if (!detail::parse_http_date_seconds(text, detail::year_of(now), seconds)) return std::nullopt;
  // Division truncates toward zero, which keeps both bounds inside the clock's range.
  using clock_duration = std::chrono::system_clock::duration;
  constexpr std::int64_t lo = clock_duration::min().count() / detail::ticks_per_second;
  constexpr std::int64_t hi = clock_duration::max().count() / detail::ticks_per_second;
  if (seconds < lo || seconds > hi) return std::nullopt;
  return std::chrono::system_clock::time_point{clock_duration{seconds * detail::ticks_per_second}};
}
/// As above, resolving an RFC 850 two-digit year against the current time.
inline std::optional<std::chrono::system_clock::time_point> parse_http_date(
    std::string_view text) noexcept {
  return parse_http_date(text, std::chrono::system_clock::now());
}

/// Parses a Retry-After field value (RFC 9110 §10.2.3): delay-seconds (1*DIGIT) or an HTTP-date,
/// with optional SP / HTAB around it. Returns how long to wait from `now`: a date not after `now`
/// gives zero, and a delay or date too far away for std::chrono::nanoseconds saturates to
/// nanoseconds::max(). Returns std::nullopt for anything malformed; the caller then ignores the
/// field (RFC 9110 §5.6.7 lets a recipient ignore an invalid date).
inline std::optional<std::chrono::nanoseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now) noexcept {
  const std::string_view v = detail::trim_ows(value);
  if (!v.empty() && detail::is_digit(v.front())) return detail::parse_delay_seconds(v);
  std::int64_t date = 0;
  if (!detail::parse_http_date_seconds(v, detail::year_of(now), date)) return std::nullopt;
  return detail::delay_until(date, now);
}

}  // namespace idem

#endif  // IDEM_CLIENT_RETRY_AFTER_HPP
