#include <catch2/catch.hpp>
#include <idem/client/retry_after.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using std::chrono::system_clock;

system_clock::time_point at(std::int64_t unix_seconds) {
  return system_clock::time_point{seconds{unix_seconds}};
}

// 2025-06-01 00:00:00 UTC, a Sunday: the fixed `now` of every test that does not pick its own.
const system_clock::time_point fixed_now = at(1748736000);

std::optional<std::int64_t> epoch_seconds(std::string_view text,
                                          system_clock::time_point now = fixed_now) {
  const auto t = idem::parse_http_date(text, now);
  if (!t) return std::nullopt;
  return std::chrono::duration_cast<seconds>(t->time_since_epoch()).count();
}

// The IMF-fixdate of a whole-second time point, to check that what was parsed round-trips.
std::string imf_fixdate(system_clock::time_point t) {
  using namespace std::chrono;
  const auto s = floor<seconds>(t);
  const auto d = floor<days>(s);
  const year_month_day ymd{d};
  const hh_mm_ss hms{s - d};
  static constexpr const char* day_names[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* month_names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%s, %02u %s %04d %02d:%02d:%02d GMT",
                day_names[weekday{d}.c_encoding()], static_cast<unsigned>(ymd.day()),
                month_names[static_cast<unsigned>(ymd.month()) - 1], static_cast<int>(ymd.year()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                static_cast<int>(hms.seconds().count()));
  return buffer;
}

constexpr std::string_view imf_example = "Sun, 06 Nov 1994 08:49:37 GMT";
constexpr std::string_view rfc850_example = "Sunday, 06-Nov-94 08:49:37 GMT";
constexpr std::string_view asctime_example = "Sun Nov  6 08:49:37 1994";
constexpr std::int64_t example_epoch = 784111777;

}  // namespace

TEST_CASE("the parsers are noexcept") {
  STATIC_REQUIRE(noexcept(idem::parse_http_date(std::string_view{})));
  STATIC_REQUIRE(noexcept(idem::parse_http_date(std::string_view{}, fixed_now)));
  STATIC_REQUIRE(noexcept(idem::parse_retry_after(std::string_view{}, fixed_now)));
}

TEST_CASE("delay-seconds gives that many seconds") {
  CHECK(idem::parse_retry_after("0", fixed_now) == nanoseconds::zero());
  CHECK(idem::parse_retry_after("1", fixed_now) == 1s);
  CHECK(idem::parse_retry_after("120", fixed_now) == 120s);
  CHECK(idem::parse_retry_after("86400", fixed_now) == 86400s);
}

TEST_CASE("delay-seconds with leading zeros is still 1*DIGIT") {
  CHECK(idem::parse_retry_after("0003", fixed_now) == 3s);
  CHECK(idem::parse_retry_after("0000", fixed_now) == nanoseconds::zero());
  CHECK(idem::parse_retry_after("00000000000000000000000000042", fixed_now) == 42s);
}

TEST_CASE("delay-seconds does not depend on now") {
  CHECK(idem::parse_retry_after("5", at(0)) == 5s);
  CHECK(idem::parse_retry_after("5", system_clock::time_point::min()) == 5s);
  CHECK(idem::parse_retry_after("5", system_clock::time_point::max()) == 5s);
}

TEST_CASE("an absurdly large delay-seconds saturates instead of overflowing") {
  const auto max_seconds = std::chrono::duration_cast<seconds>(nanoseconds::max()).count();
  CHECK(idem::parse_retry_after(std::to_string(max_seconds), fixed_now) == seconds{max_seconds});
  CHECK(idem::parse_retry_after(std::to_string(max_seconds + 1), fixed_now) == nanoseconds::max());
  CHECK(idem::parse_retry_after("99999999999999999999999", fixed_now) == nanoseconds::max());
  CHECK(idem::parse_retry_after("18446744073709551616", fixed_now) == nanoseconds::max());
  CHECK(idem::parse_retry_after(std::string(10000, '9'), fixed_now) == nanoseconds::max());
}

TEST_CASE("an IMF-fixdate gives its exact epoch second") {
  CHECK(epoch_seconds(imf_example) == example_epoch);
  CHECK(epoch_seconds("Thu, 01 Jan 1970 00:00:00 GMT") == 0);
  CHECK(epoch_seconds("Sun, 01 Jun 2025 00:00:00 GMT") == 1748736000);
  CHECK(epoch_seconds("Wed, 31 Dec 1969 23:59:59 GMT") == -1);
}

TEST_CASE("an RFC 850 date gives the same instant as the IMF-fixdate") {
  CHECK(epoch_seconds(rfc850_example) == example_epoch);
}

TEST_CASE("asctime with a space-padded day gives the same instant as the IMF-fixdate") {
  CHECK(epoch_seconds(asctime_example) == example_epoch);
}

TEST_CASE("asctime with a two-digit day is accepted too") {
  CHECK(epoch_seconds("Sun Nov 06 08:49:37 1994") == example_epoch);
  CHECK(epoch_seconds("Wed Nov 16 08:49:37 1994") == example_epoch + 10 * 86400);
}

TEST_CASE("parse_http_date without now resolves against the current time") {
  const auto t = idem::parse_http_date(imf_example);
  REQUIRE(t);
  CHECK(*t == at(example_epoch));
  CHECK(idem::parse_http_date(rfc850_example) == at(example_epoch));
}

TEST_CASE("an HTTP-date in the future gives the delay from now") {
  CHECK(idem::parse_retry_after("Sun, 01 Jun 2025 00:02:00 GMT", fixed_now) == 120s);
  CHECK(idem::parse_retry_after("Sunday, 01-Jun-25 00:02:00 GMT", fixed_now) == 120s);
  CHECK(idem::parse_retry_after("Sun Jun  1 00:02:00 2025", fixed_now) == 120s);
  CHECK(idem::parse_retry_after("Mon, 02 Jun 2025 00:00:00 GMT", fixed_now) == 24h);
}

TEST_CASE("the delay to an HTTP-date keeps the sub-second part of now") {
  CHECK(idem::parse_retry_after("Sun, 01 Jun 2025 00:02:00 GMT", fixed_now + 250ms) ==
        119s + 750ms);
  CHECK(idem::parse_retry_after("Sun, 01 Jun 2025 00:00:01 GMT", fixed_now + 999999999ns) == 1ns);
  // now before the epoch: the sub-second part is counted towards the future, not the past
  CHECK(idem::parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", at(-1) + 250ms) == 750ms);
}

TEST_CASE("an IMF-fixdate in the past gives zero delay") {
  CHECK(idem::parse_retry_after(imf_example, fixed_now) == nanoseconds::zero());
  CHECK(idem::parse_retry_after(asctime_example, fixed_now) == nanoseconds::zero());
  CHECK(idem::parse_retry_after(rfc850_example, fixed_now) == nanoseconds::zero());
}

TEST_CASE("an HTTP-date equal to now, or less than a second before it, gives zero delay") {
  CHECK(idem::parse_retry_after("Sun, 01 Jun 2025 00:00:00 GMT", fixed_now) == nanoseconds::zero());
  CHECK(idem::parse_retry_after("Sun, 01 Jun 2025 00:00:00 GMT", fixed_now + 1ns) ==
        nanoseconds::zero());
}

TEST_CASE("optional whitespace around the field value is skipped") {
  CHECK(idem::parse_retry_after(" 120", fixed_now) == 120s);
  CHECK(idem::parse_retry_after("120 ", fixed_now) == 120s);
  CHECK(idem::parse_retry_after(" \t 120\t \t", fixed_now) == 120s);
  CHECK(idem::parse_retry_after("  Sun, 01 Jun 2025 00:02:00 GMT\t", fixed_now) == 120s);
  CHECK(idem::parse_retry_after("\tSun Jun  1 00:02:00 2025 ", fixed_now) == 120s);
}

TEST_CASE("parse_http_date takes the bare date, without surrounding whitespace") {
  CHECK_FALSE(idem::parse_http_date(" Sun, 06 Nov 1994 08:49:37 GMT", fixed_now));
  CHECK_FALSE(idem::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT ", fixed_now));
}

TEST_CASE("an RFC 850 date with a two-digit year is at most 50 years after now") {
  // now is in 2025: 75 is exactly 50 years ahead and stays in the future, 76 is more and is
  // taken as the most recent past year ending in 76
  CHECK(epoch_seconds("Tuesday, 01-Jan-75 00:00:00 GMT") == 3313526400);
  CHECK(epoch_seconds("Thursday, 01-Jan-76 00:00:00 GMT") == 189302400);
  CHECK(epoch_seconds("Wednesday, 01-Jan-70 00:00:00 GMT") == 3155760000);
  CHECK_FALSE(epoch_seconds("Thursday, 01-Jan-70 00:00:00 GMT"));  // 1970 is not in the window
  CHECK(epoch_seconds("Saturday, 01-Jan-00 00:00:00 GMT") == 946684800);
  // near the end of a century the window crosses into the next one
  const auto in_2099 = at(4083955200);
  CHECK(epoch_seconds("Friday, 01-Jan-00 00:00:00 GMT", in_2099) == 4102444800);
  CHECK_FALSE(epoch_seconds("Saturday, 01-Jan-00 00:00:00 GMT", in_2099));  // 2100 is a Friday
  // near its start it reaches back into the previous one
  const auto in_2001 = at(991353600);
  CHECK(epoch_seconds("Sunday, 01-Jan-51 00:00:00 GMT", in_2001) == 2556144000);
  CHECK(epoch_seconds("Tuesday, 01-Jan-52 00:00:00 GMT", in_2001) == -568080000);
}

TEST_CASE("an RFC 850 date in the delay of Retry-After uses the same now") {
  CHECK(idem::parse_retry_after("Tuesday, 01-Jan-75 00:00:00 GMT", fixed_now) ==
        seconds{3313526400 - 1748736000});
  CHECK(idem::parse_retry_after("Thursday, 01-Jan-76 00:00:00 GMT", fixed_now) ==
        nanoseconds::zero());
}

TEST_CASE("29 February exists only in leap years") {
  CHECK(epoch_seconds("Tue, 29 Feb 2000 00:00:00 GMT") == 951782400);
  CHECK(epoch_seconds("Thu, 29 Feb 2024 00:00:00 GMT") == 1709164800);
  CHECK_FALSE(epoch_seconds("Thu, 29 Feb 1900 00:00:00 GMT"));  // divisible by 100, not by 400
  CHECK_FALSE(epoch_seconds("Sat, 29 Feb 2025 00:00:00 GMT"));
  CHECK_FALSE(epoch_seconds("Thu Feb 29 00:00:00 1900"));
  CHECK(epoch_seconds("Tue Feb 29 00:00:00 2000") == 951782400);
  CHECK(epoch_seconds("Tuesday, 29-Feb-00 00:00:00 GMT") == 951782400);
  CHECK(epoch_seconds("Wed, 28 Feb 1900 00:00:00 GMT") == -2203977600);
}

TEST_CASE("every month has its own last day") {
  CHECK(epoch_seconds("Fri, 31 Jan 2025 00:00:00 GMT"));
  CHECK(epoch_seconds("Wed, 30 Apr 2025 00:00:00 GMT"));
  CHECK_FALSE(epoch_seconds("Thu, 31 Apr 2025 00:00:00 GMT"));
  CHECK_FALSE(epoch_seconds("Tue, 31 Jun 2025 00:00:00 GMT"));
  CHECK_FALSE(epoch_seconds("Wed, 31 Sep 2025 00:00:00 GMT"));
  CHECK_FALSE(epoch_seconds("Mon, 31 Nov 2025 00:00:00 GMT"));
  CHECK(epoch_seconds("Wed, 31 Dec 2025 00:00:00 GMT"));
}

TEST_CASE("second 60 is a leap second, counted as the second after :59") {
  CHECK(epoch_seconds("Wed, 31 Dec 2008 23:59:60 GMT") == 1230768000);
  CHECK(epoch_seconds("Wed, 31 Dec 2008 23:59:60 GMT") ==
        epoch_seconds("Thu, 01 Jan 2009 00:00:00 GMT"));
  CHECK(epoch_seconds("Wed Dec 31 23:59:60 2008") == 1230768000);
  CHECK(epoch_seconds("Sun, 06 Nov 1994 08:49:60 GMT") == example_epoch + 23);
  CHECK_FALSE(epoch_seconds("Wed, 31 Dec 2008 23:59:61 GMT"));
}

TEST_CASE("day and month names are case-sensitive, as RFC 9110 spells them") {
  CHECK_FALSE(epoch_seconds("sun, 06 Nov 1994 08:49:37 GMT"));
  CHECK_FALSE(epoch_seconds("SUN, 06 NOV 1994 08:49:37 GMT"));
  CHECK_FALSE(epoch_seconds("Sun, 06 nov 1994 08:49:37 GMT"));
  CHECK_FALSE(epoch_seconds("Sun, 06 Nov 1994 08:49:37 gmt"));
  CHECK_FALSE(epoch_seconds("sunday, 06-Nov-94 08:49:37 GMT"));
  CHECK_FALSE(epoch_seconds("Sun nov  6 08:49:37 1994"));
}

TEST_CASE("a day name that is not the weekday of the date is rejected") {
  CHECK_FALSE(epoch_seconds("Mon, 06 Nov 1994 08:49:37 GMT"));
  CHECK_FALSE(epoch_seconds("Monday, 06-Nov-94 08:49:37 GMT"));
  CHECK_FALSE(epoch_seconds("Sat Nov  6 08:49:37 1994"));
}

TEST_CASE("dates system_clock cannot hold are rejected, but still order against now") {
  // a nanosecond system_clock spans about 1677-2262
  constexpr std::string_view year_1 = "Mon, 01 Jan 0001 00:00:00 GMT";
  constexpr std::string_view year_9999 = "Fri, 31 Dec 9999 23:59:59 GMT";
  if constexpr (std::is_same_v<system_clock::duration, nanoseconds>) {
    CHECK_FALSE(idem::parse_http_date(year_1, fixed_now));
    CHECK_FALSE(idem::parse_http_date(year_9999, fixed_now));
    // the last and first whole seconds a signed 64-bit nanosecond count holds, and one beyond
    CHECK(epoch_seconds("Fri, 11 Apr 2262 23:47:16 GMT") == 9223372036);
    CHECK_FALSE(epoch_seconds("Fri, 11 Apr 2262 23:47:17 GMT"));
    CHECK(epoch_seconds("Tue, 21 Sep 1677 00:12:44 GMT") == -9223372036);
    CHECK_FALSE(epoch_seconds("Tue, 21 Sep 1677 00:12:43 GMT"));
  }
  CHECK(idem::parse_retry_after(year_1, fixed_now) == nanoseconds::zero());
  CHECK(idem::parse_retry_after(year_9999, fixed_now) == nanoseconds::max());
}

TEST_CASE("an extreme now neither overflows nor crashes") {
  for (const auto now : {system_clock::time_point::min(), system_clock::time_point::max(),
                         system_clock::time_point{}}) {
    CHECK(idem::parse_retry_after("120", now) == 120s);
    CHECK(idem::parse_retry_after(imf_example, now).has_value());
    CHECK(idem::parse_retry_after("Mon, 01 Jan 0001 00:00:00 GMT", now).has_value());
    CHECK(idem::parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now).has_value());
    (void)idem::parse_retry_after(rfc850_example, now);
    (void)idem::parse_http_date(rfc850_example, now);
  }
  CHECK(idem::parse_retry_after(imf_example, system_clock::time_point::max()) ==
        nanoseconds::zero());
  CHECK(idem::parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", system_clock::time_point::min()) ==
        nanoseconds::max());
}

TEST_CASE("malformed values are rejected, never crash") {
  using namespace std::string_view_literals;
  const std::vector<std::string_view> malformed = {
      // not a number or a date at all
      ""sv,
      " "sv,
      " \t  \t"sv,
      "soon"sv,
      // delay-seconds is 1*DIGIT and nothing more
      "-1"sv,
      "+1"sv,
      "-0"sv,
      "1.5"sv,
      "1."sv,
      ".5"sv,
      "1,000"sv,
      "1_000"sv,
      "0x10"sv,
      "1e3"sv,
      "12 3"sv,
      "120s"sv,
      "120 seconds"sv,
      "120, 130"sv,
      "\n120"sv,
      "120\r\n"sv,
      "\v120"sv,
      "\xd9\xa1\xd9\xa2"sv,  // Arabic-Indic digits
      "12\0"
      "3"sv,
      "120\0"sv,
      // IMF-fixdate
      "Sux, 06 Nov 1994 08:49:37 GMT"sv,
      "Sunday, 06 Nov 1994 08:49:37 GMT"sv,
      "Sun 06 Nov 1994 08:49:37 GMT"sv,
      "Sun,06 Nov 1994 08:49:37 GMT"sv,
      "Sun,  06 Nov 1994 08:49:37 GMT"sv,
      "Sun, 6 Nov 1994 08:49:37 GMT"sv,
      "Sun, 06 Nov 94 08:49:37 GMT"sv,
      "Sun, 06 Nov 01994 08:49:37 GMT"sv,
      "Sun, 06 Nox 1994 08:49:37 GMT"sv,
      "Sun, 06 November 1994 08:49:37 GMT"sv,
      "Sun, 06-Nov-1994 08:49:37 GMT"sv,
      "Sun, 06 Nov 1994\t08:49:37 GMT"sv,
      "Sun, 06 Nov 1994 08:49:37"sv,
      "Sun, 06 Nov 1994 08:49:37 UTC"sv,
      "Sun, 06 Nov 1994 08:49:37 +0000"sv,
      "Sun, 06 Nov 1994 08:49:37 GMT+1"sv,
      "Sun, 06 Nov 1994 08:49:37 GMTx"sv,
      "Sun, 06 Nov 1994 08:49:37 GMT x"sv,
      "Sun, 06 Nov 1994 08:49:37 GMT\0"sv,
      "Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT"sv,
      "Sun, 06 Nov 1994 8:49:37 GMT"sv,
      "Sun, 06 Nov 1994 08:49 GMT"sv,
      "Sun, 06 Nov 1994 08:49:37.5 GMT"sv,
      "Sun, 06 Nov 1994 24:00:00 GMT"sv,
      "Sun, 06 Nov 1994 08:60:37 GMT"sv,
      "Sun, 06 Nov 1994 08:49:61 GMT"sv,
      "Sun, 06 Nov 1994 08:49:99 GMT"sv,
      "Sun, 00 Nov 1994 08:49:37 GMT"sv,
      "Thu, 30 Feb 1995 08:49:37 GMT"sv,
      "Fri, 32 Dec 1994 08:49:37 GMT"sv,
      "Sun, -6 Nov 1994 08:49:37 GMT"sv,
      "Sun, 06 Nov 1994 08:49:3a GMT"sv,
      // RFC 850
      "Sun, 06-Nov-94 08:49:37 GMT"sv,
      "Sunday, 06-Nov-94 08:49:37"sv,
      "Sunday, 06-Nov-94 08:49:37 UTC"sv,
      "Sunday, 06-Nov-1994 08:49:37 GMT"sv,
      "Sunday, 06 Nov 94 08:49:37 GMT"sv,
      "Sunday, 6-Nov-94 08:49:37 GMT"sv,
      "Sunday 06-Nov-94 08:49:37 GMT"sv,
      "Sundays, 06-Nov-94 08:49:37 GMT"sv,
      "Sunday, 06-nov-94 08:49:37 GMT"sv,
      // asctime
      "Sun Nov 6 08:49:37 1994"sv,
      "Sun Nov  06 08:49:37 1994"sv,
      "Sun Nov   6 08:49:37 1994"sv,
      "Sun Nov  6 08:49:37 94"sv,
      "Sun Nov  6 08:49:37 1994 GMT"sv,
      "Sun Nov  6 08:49:37 1994\n"sv,
      "Sun, Nov  6 08:49:37 1994"sv,
      "Sunday Nov  6 08:49:37 1994"sv,
      "Sun Nov  0 08:49:37 1994"sv,
      "Sun 06 Nov 08:49:37 1994"sv,
      // a number glued to a date
      "120 Sun, 06 Nov 1994 08:49:37 GMT"sv,
      "Sun, 06 Nov 1994 08:49:37 GMT 120"sv,
  };
  REQUIRE(malformed.size() >= 30);
  for (const auto value : malformed) {
    INFO("value: \"" << std::string(value) << "\" (" << value.size() << " bytes)");
    CHECK_FALSE(idem::parse_retry_after(value, fixed_now));
    CHECK_FALSE(idem::parse_http_date(value, fixed_now));
  }
}

TEST_CASE("a valid date or delay truncated at any position is rejected") {
  for (const std::string_view valid : {imf_example, rfc850_example, asctime_example}) {
    REQUIRE(idem::parse_http_date(valid, fixed_now));
    // Copy each prefix into its own buffer so that ASan sees any read past its end.
    for (std::size_t n = 0; n < valid.size(); ++n) {
      const std::vector<char> prefix(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(n));
      const std::string_view truncated{prefix.data(), prefix.size()};
      INFO("prefix: \"" << std::string(truncated) << "\"");
      CHECK_FALSE(idem::parse_http_date(truncated, fixed_now));
      CHECK_FALSE(idem::parse_retry_after(truncated, fixed_now));
    }
    // and what remains after cutting from the front is not a date either
    for (std::size_t n = 1; n < valid.size(); ++n) {
      const std::string_view tail = valid.substr(n);
      INFO("suffix: \"" << std::string(tail) << "\"");
      CHECK_FALSE(idem::parse_http_date(tail, fixed_now));
    }
  }
}

TEST_CASE("random bytes and mutated dates never crash and parse consistently") {
  std::mt19937_64 rng{20250601};  // fixed seed: the same inputs on every run and platform
  const auto below = [&rng](std::size_t n) {
    return static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(n));
  };
  // Bytes that a date is made of are drawn more often than others, so that random strings get
  // deep into the grammar rather than failing on the first byte.
  constexpr std::string_view alphabet = "0123456789 ,:-\tSunMonTueWedThuFriSatJanFebGMTday";
  const std::vector<std::string> seeds = {std::string(imf_example),
                                          std::string(rfc850_example),
                                          std::string(asctime_example),
                                          "Sun, 01 Jun 2025 00:02:00 GMT",
                                          "Tue, 29 Feb 2000 23:59:60 GMT",
                                          "120",
                                          " 0003 "};

  const auto random_byte = [&]() -> char {
    if (below(2) == 0) return alphabet[below(alphabet.size())];
    return static_cast<char>(static_cast<unsigned char>(below(256)));
  };

  std::size_t parsed_dates = 0;
  const auto check = [&](const std::string& input) {
    // An exact-size heap copy, so that ASan reports any read past the end of the input.
    const std::vector<char> buffer(input.begin(), input.end());
    const std::string_view text{buffer.data(), buffer.size()};
    const auto now = fixed_now + nanoseconds{static_cast<std::int64_t>(below(1'000'000'000))};

    const auto date = idem::parse_http_date(text, now);
    const auto delay = idem::parse_retry_after(text, now);
    // deterministic: parsing again gives the same answer
    REQUIRE(idem::parse_http_date(text, now) == date);
    REQUIRE(idem::parse_retry_after(text, now) == delay);
    if (delay) REQUIRE(*delay >= nanoseconds::zero());
    if (date) {
      ++parsed_dates;
      // a date is also a Retry-After value, and its delay is the distance from now
      REQUIRE(delay);
      REQUIRE(*delay == (*date > now ? *date - now : nanoseconds::zero()));
      // and it round-trips through the IMF-fixdate it denotes
      const std::string canonical = imf_fixdate(*date);
      INFO("input: \"" << input << "\" canonical: \"" << canonical << "\"");
      REQUIRE(idem::parse_http_date(canonical, now) == date);
    }
  };

  for (int i = 0; i < 100'000; ++i) {
    std::string input(below(48), '\0');
    for (auto& c : input)
      c = random_byte();
    check(input);
  }
  for (int i = 0; i < 100'000; ++i) {
    std::string input = seeds[below(seeds.size())];
    const std::size_t edits = 1 + below(3);
    for (std::size_t e = 0; e < edits; ++e) {
      switch (below(4)) {
        case 0:  // overwrite a byte
          if (!input.empty()) input[below(input.size())] = random_byte();
          break;
        case 1: {  // insert a byte; position first, so the draws happen in the same order
          const std::size_t at = below(input.size() + 1);
          input.insert(at, 1, random_byte());
          break;
        }
        case 2:  // delete a byte
          if (!input.empty()) input.erase(below(input.size()), 1);
          break;
        default:  // replace a digit by another digit: mostly still a date, often a different one
          if (!input.empty()) {
            const std::size_t at = below(input.size());
            if (input[at] >= '0' && input[at] <= '9')
              input[at] = static_cast<char>('0' + below(10));
          }
          break;
      }
    }
    check(input);
  }
  // the mutations must have exercised the success path, not only the rejections
  INFO("dates parsed: " << parsed_dates);
  CHECK(parsed_dates > 1000);
}
