// Fuzz target: the Idempotency-Key field's value (idem/http/idempotency_key.hpp), which clients
// send and servers read before anything else.
//
// Input: one byte whose low bit picks the form (any, or sf_string only), then the field value.
//
// Properties, for every input:
//  * parse_key never throws, and answers a key or one of its errors with a message;
//  * a key read is never empty, and holds no character an sf-string cannot hold unless it was
//    read bare (key_form::any, a value not starting with a double quote);
//  * with the form sf_string, a bare value is refused as not_a_string, never read;
//  * a key read from an sf-string, written again as one (format_key), reads back the same, and
//    its bare reading (form any) is the same key as its sf-string reading when format_key writes
//    it bare without refusing;
//  * spaces and tabs around the value change nothing.
#include <idem/http/idempotency_key.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;
namespace http = idem::http;

bool printable(std::string_view text) {
  for (const char c : text) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  const http::key_form form =
      (in.byte() & 1) != 0 ? http::key_form::sf_string : http::key_form::any;
  const std::string_view field = in.rest();

  const http::parsed_key parsed = http::parse_key(field, form);
  if (!parsed) {
    fuzz_require(!parsed.message().empty(), "a refusal says why");
    fuzz_require(parsed.value().empty(), "a refusal holds no key");
  } else {
    fuzz_require(parsed.message().empty(), "a key has no refusal message");
    fuzz_require(!parsed.value().empty(), "a key read is never empty");
  }

  std::size_t first = 0;
  while (first < field.size() && (field[first] == ' ' || field[first] == '\t'))
    ++first;
  const bool quoted = first < field.size() && field[first] == '"';
  if (parsed && form == http::key_form::sf_string)
    fuzz_require(quoted, "strict reads sf-strings only");
  if (!quoted && form == http::key_form::sf_string && first < field.size()) {
    fuzz_require(parsed.error() == http::key_error::not_a_string, "a bare value is not_a_string");
  }

  if (parsed && quoted) {
    const std::string key(parsed.value());
    fuzz_require(printable(key), "an sf-string key is printable ASCII");
    const std::string written = http::format_key(key, http::key_form::sf_string);
    const http::parsed_key again = http::parse_key(written, http::key_form::sf_string);
    fuzz_require(again && again.value() == key, "an sf-string written reads back the same");
    try {
      const std::string bare = http::format_key(key);
      const http::parsed_key bare_read = http::parse_key(bare);
      fuzz_require(bare_read && bare_read.value() == key, "a bare key reads back the same");
    } catch (const std::invalid_argument&) {
      // Not writable bare (a space, a leading quote): the sf-string is the way to send it.
    }
  }

  const std::string padded = " \t" + std::string(field) + "\t ";
  const http::parsed_key padded_read = http::parse_key(padded, form);
  fuzz_require(padded_read.error() == parsed.error() && padded_read.value() == parsed.value(),
               "spaces and tabs around the value change nothing");
  return 0;
}
