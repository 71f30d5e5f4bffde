// Fuzz target: decoding the bytes a store hands back (idem/core/codec.hpp and the recovery points
// of idem/server/handler_context.hpp). Every store keeps a record's response and recovery points as
// opaque bytes, so these decoders are what a damaged or foreign record reaches first, whatever
// the store.
//
// The first input byte picks the decoder; the rest are the stored bytes. Properties:
//  * http_response: decoding throws codec_error and nothing else, or gives a response that
//    encodes and decodes back to itself; an encoding idem wrote decodes to what was encoded;
//  * numbers: exactly sizeof(T) bytes decode (a bool: one byte, 0 or 1), and encode back to
//    the same bytes; anything else is a codec_error;
//  * std::monostate: only empty bytes decode;
//  * http_request (what a resumable wrapper keeps): decoding throws codec_error and nothing
//    else, or gives a request that encodes and decodes back to itself;
//  * recovery points: count_steps, find_step and the reconciler's read_recovery throw
//    codec_error and nothing else; when the bytes decode, every step result found by name is the
//    first step of that name, idem's own entries are never found as steps, and writing the
//    steps out again gives the same bytes.
#include <idem/core/codec.hpp>
#include <idem/reconciler.hpp>
#include <idem/server/handler_context.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;

void check_http_response(std::string_view bytes) {
  idem::http_response decoded;
  try {
    decoded = idem::decode<idem::http_response>(bytes);
  } catch (const idem::codec_error&) {
    return;
  }
  fuzz_require(decoded.status >= 0 && decoded.status <= 999, "a decoded status is 0-999");
  const std::string encoded = idem::encode(decoded);
  const idem::http_response again = idem::decode<idem::http_response>(encoded);
  fuzz_require(again.status == decoded.status && again.headers == decoded.headers &&
                   again.body == decoded.body,
               "a decoded http_response encodes and decodes back to itself");
  fuzz_require(encoded.size() <= bytes.size(),
               "re-encoding never grows (idem writes the shortest lengths)");
}

void check_http_request(std::string_view bytes) {
  idem::http_request decoded;
  try {
    decoded = idem::decode<idem::http_request>(bytes);
  } catch (const idem::codec_error&) {
    return;
  }
  const idem::http_request again = idem::decode<idem::http_request>(idem::encode(decoded));
  fuzz_require(again.method == decoded.method && again.target == decoded.target &&
                   again.headers == decoded.headers && again.body == decoded.body,
               "a decoded http_request encodes and decodes back to itself");
}

// A response made from the bytes, encoded by idem: it must decode to what was encoded.
void check_http_round_trip(idem_fuzz::input_reader& in) {
  idem::http_response response;
  response.status = static_cast<int>(in.byte()) * 4 % 1000;
  for (int count = in.byte() % 8; count > 0; --count) {
    response.headers.emplace_back(std::string(in.piece()), std::string(in.piece()));
  }
  response.body = std::string(in.rest());
  const idem::http_response back = idem::decode<idem::http_response>(idem::encode(response));
  fuzz_require(back.status == response.status && back.headers == response.headers &&
                   back.body == response.body,
               "an encoded http_response decodes to what was encoded");
}

template <class T>
void check_number(std::string_view bytes) {
  try {
    const T value = idem::decode<T>(bytes);
    fuzz_require(bytes.size() == sizeof(T), "only sizeof(T) bytes decode as a number");
    fuzz_require(idem::encode(value) == bytes, "a decoded number encodes to the same bytes");
  } catch (const idem::codec_error&) {
    // A bool is one byte of 0 or 1; any other byte is damage (reading it as a bool would be
    // undefined behaviour).
    const bool bad_bool =
        std::is_same_v<T, bool> && bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) > 1;
    fuzz_require(bytes.size() != sizeof(T) || bad_bool,
                 "a number of the right size always decodes");
  }
}

void check_monostate(std::string_view bytes) {
  try {
    static_cast<void>(idem::decode<std::monostate>(bytes));
    fuzz_require(bytes.empty(), "only empty bytes decode as nothing");
  } catch (const idem::codec_error&) {
    fuzz_require(!bytes.empty(), "empty bytes decode as nothing");
  }
}

void check_recovery(std::string_view bytes) {
  std::size_t steps = 0;
  try {
    steps = idem::detail::count_steps(bytes);
  } catch (const idem::codec_error&) {
    return;
  }
  try {
    const idem::detail::recovery_contents contents = idem::detail::read_recovery(bytes);
    fuzz_require(contents.recorded.size() == steps, "the reconciler reads every step result");
  } catch (const idem::codec_error&) {
    // a kept request entry whose name length does not read
  }
  // Walk the steps as the format says, and write them out again.
  std::vector<std::pair<std::string_view, std::string_view>> seen;
  std::string rewritten;
  std::string_view rest = bytes;
  while (!rest.empty()) {
    const std::string_view name = idem::detail::take_bytes(rest, "name");
    const std::string_view value = idem::detail::take_bytes(rest, "value");
    seen.emplace_back(name, value);
    idem::detail::put_varint(rewritten, name.size());
    rewritten.append(name);
    idem::detail::put_varint(rewritten, value.size());
    rewritten.append(value);
  }
  std::size_t results = 0;  // entries that are step results, not idem's own (a zero byte first)
  for (const auto& [name, value] : seen)
    results += idem::detail::reserved_entry(name) ? 0 : 1;
  fuzz_require(results == steps, "count_steps counts every step result");
  for (const auto& [name, value] : seen) {
    std::string_view found;
    if (idem::detail::reserved_entry(name)) {
      fuzz_require(!idem::detail::find_step(bytes, name, found),
                   "idem's own entries are never found as a step");
      continue;
    }
    fuzz_require(idem::detail::find_step(bytes, name, found), "every recorded step is found");
    std::string_view first;
    for (const auto& [other_name, other_value] : seen) {
      if (other_name == name) {
        first = other_value;
        break;
      }
    }
    fuzz_require(found.data() == first.data() && found.size() == first.size(),
                 "find_step answers the first step of that name");
  }
  // Non-shortest varints are accepted on the way in, so compare step by step, not byte by byte.
  fuzz_require(idem::detail::count_steps(rewritten) == steps,
               "recovery points written out again hold the same steps");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  const std::uint8_t which = in.byte();
  switch (which % 8) {
    case 0:
      check_http_response(in.rest());
      break;
    case 1:
      check_http_round_trip(in);
      break;
    case 2:
      check_number<std::uint64_t>(in.rest());
      break;
    case 3:
      check_number<std::int32_t>(in.rest());
      break;
    case 4:
      check_number<bool>(in.rest());
      break;
    case 5:
      check_monostate(in.rest());
      break;
    case 6:
      check_http_request(in.rest());
      break;
    default:
      check_recovery(in.rest());
      break;
  }
  return 0;
}
