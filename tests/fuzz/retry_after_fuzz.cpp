// Fuzz target: the Retry-After field and HTTP-date parsing (idem/client/retry_after.hpp), which
// read bytes a server sent.
//
// Properties, for every field value and every `now` (any 64-bit nanosecond count):
//  * a delay is never negative; delay-seconds (digits only) gives exactly that many seconds, or
//    nanoseconds::max() when it does not fit;
//  * optional whitespace around the value changes nothing;
//  * a value that is an HTTP-date gives the gap from `now` to that date, zero once it is past;
//  * a parsed date, written back as an IMF-fixdate, parses to the same instant; and an
//    IMF-fixdate input (its second not 60) is written back byte for byte.
#include <idem/client/retry_after.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;
using std::chrono::nanoseconds;
using std::chrono::system_clock;

std::string imf_fixdate(system_clock::time_point when) {
  using namespace std::chrono;
  const auto day_point = floor<days>(when);
  const year_month_day date{day_point};
  const hh_mm_ss time{floor<seconds>(when - day_point)};
  char text[64];
  std::snprintf(text, sizeof text, "%s, %02u %s %04d %02d:%02d:%02d GMT",
                idem::detail::short_day_names[weekday{day_point}.c_encoding()].data(),
                static_cast<unsigned>(date.day()),
                idem::detail::month_names[static_cast<unsigned>(date.month()) - 1].data(),
                static_cast<int>(date.year()), static_cast<int>(time.hours().count()),
                static_cast<int>(time.minutes().count()), static_cast<int>(time.seconds().count()));
  return text;
}

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// delay-seconds by the book, in 128 bits, saturating at what nanoseconds holds.
nanoseconds reference_delay(std::string_view digits) {
  const idem_fuzz::wide_int limit = nanoseconds::max().count();
  idem_fuzz::wide_int value = 0;
  for (const char c : digits) {
    value = value * 10 + (c - '0');
    if (value * 1'000'000'000 > limit) return nanoseconds::max();
  }
  return nanoseconds{static_cast<std::int64_t>(value * 1'000'000'000)};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  const auto now_ns = static_cast<std::int64_t>(in.u64());
  const system_clock::time_point now{
      std::chrono::duration_cast<system_clock::duration>(nanoseconds{now_ns})};
  const std::string_view value = in.rest();

  const std::optional<nanoseconds> delay = idem::parse_retry_after(value, now);
  if (delay) fuzz_require(*delay >= nanoseconds::zero(), "a Retry-After delay is never negative");

  const std::string padded = " \t" + std::string(value) + "\t ";
  fuzz_require(idem::parse_retry_after(padded, now) == delay,
               "whitespace around a Retry-After value changes nothing");

  const std::string_view bare = idem::detail::trim_ows(value);
  if (all_digits(bare)) {
    fuzz_require(delay.has_value() && *delay == reference_delay(bare),
                 "delay-seconds gives that many seconds, saturated");
  }

  if (!all_digits(bare)) {
    std::int64_t target = 0;
    const bool is_date =
        idem::detail::parse_http_date_seconds(bare, idem::detail::year_of(now), target);
    fuzz_require(delay.has_value() == is_date,
                 "a value that is not delay-seconds is valid exactly when it is an HTTP-date");
    if (is_date) {
      const idem_fuzz::wide_int gap = static_cast<idem_fuzz::wide_int>(target) * 1'000'000'000 -
                                      static_cast<idem_fuzz::wide_int>(now_ns);
      const idem_fuzz::wide_int max = nanoseconds::max().count();
      if (gap <= 0) {
        fuzz_require(*delay == nanoseconds::zero(), "a date already past gives no delay");
      } else if (*delay == nanoseconds::max()) {
        // Saturation is decided in whole seconds, so it may come up to a second early.
        fuzz_require(gap > max - 1'000'000'000, "a delay saturates only when it does not fit");
      } else {
        fuzz_require(delay->count() == static_cast<std::int64_t>(gap),
                     "a Retry-After date gives the time from now until it");
      }
    }
  }

  const std::optional<system_clock::time_point> date = idem::parse_http_date(bare, now);
  if (date) {
    const std::string written = imf_fixdate(*date);
    fuzz_require(idem::parse_http_date(written, now) == date,
                 "a parsed date written as IMF-fixdate parses to the same instant");
    const bool imf_form = bare.size() == 29 && bare[3] == ',';
    if (imf_form && bare.substr(23, 2) != "60") {
      fuzz_require(written == bare, "an IMF-fixdate is written back byte for byte");
    }
  }
  return 0;
}
