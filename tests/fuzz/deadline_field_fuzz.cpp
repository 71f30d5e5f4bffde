// Fuzz target: the caller's deadline field, Request-Timeout-Ms (idem/http/deadline.hpp), which a
// server reads from every request before anything is claimed.
//
// Input: the field value.
//
// Properties, for every input:
//  * parse_deadline never throws, and answers a deadline or one of its errors with a message;
//  * a deadline read is between 0 and 999,999,999 ms, and is exactly the value's digits read as
//    a decimal number (nothing else is accepted: no sign, no fraction, no inner space);
//  * a value read, written again (format_deadline), reads back the same;
//  * spaces and tabs around the value change nothing.
#include <idem/http/deadline.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;
namespace http = idem::http;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  const std::string_view field = in.rest();

  const http::parsed_deadline parsed = http::parse_deadline(field);
  if (!parsed) {
    fuzz_require(!parsed.message().empty(), "a refusal says why");
    fuzz_require(!parsed.deadline().has_value(), "a refusal holds no deadline");
    return 0;
  }
  fuzz_require(parsed.message().empty(), "a deadline has no refusal message");
  fuzz_require(parsed.deadline().has_value(), "a well-formed value is a deadline");
  const auto left = parsed.deadline()->time_left;
  fuzz_require(left >= std::chrono::nanoseconds::zero(), "never negative");
  fuzz_require(left <= std::chrono::milliseconds{999'999'999}, "never past nine digits");

  std::size_t first = 0;
  std::size_t last = field.size();
  while (first < last && (field[first] == ' ' || field[first] == '\t'))
    ++first;
  while (last > first && (field[last - 1] == ' ' || field[last - 1] == '\t'))
    --last;
  const std::string_view digits = field.substr(first, last - first);
  std::int64_t expected = 0;
  for (const char c : digits) {
    fuzz_require(c >= '0' && c <= '9', "only digits are read");
    expected = expected * 10 + (c - '0');
  }
  fuzz_require(left == std::chrono::milliseconds{expected}, "the digits, read as decimal");

  const http::parsed_deadline again = http::parse_deadline(http::format_deadline(left));
  fuzz_require(again && again.deadline()->time_left == left, "what is written reads back");
  const http::parsed_deadline spaced = http::parse_deadline(" \t" + std::string(field) + "\t ");
  fuzz_require(spaced && spaced.deadline()->time_left == left, "spaces around change nothing");
  return 0;
}
