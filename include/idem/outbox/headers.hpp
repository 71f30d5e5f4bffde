// How an outbox message's headers are stored: one column of bytes, each header two netstrings
// (https://cr.yp.to/proto/netstrings.txt), its name and then its value:
//
//   {{"type", "charged"}, {"trace", ""}}  ->  "4:type,7:charged,5:trace,0:,"
//
// Netstrings because the relay that reads the column back, and any tool an operator points at
// the table, may be written in another language: a decimal length, a colon, the bytes, a comma
// is decoded in a few lines anywhere, carries any bytes (a value may hold a comma, a colon or a
// NUL), and a reader never has to guess where a value ends. No headers: the empty string.
#ifndef IDEM_OUTBOX_HEADERS_HPP
#define IDEM_OUTBOX_HEADERS_HPP

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem {

/// One header of an outbox message: what the relay hands the sink beside the payload (a
/// message type, a trace id, a content type).
struct outbox_header {
  std::string name{};
  std::string value{};

  friend bool operator==(const outbox_header&, const outbox_header&) = default;
};

/// The stored form of `headers` (see the top of this header).
inline std::string encode_outbox_headers(std::span<const outbox_header> headers) {
  std::string out;
  for (const outbox_header& header : headers) {
    for (const std::string* part : {&header.name, &header.value}) {
      out += std::to_string(part->size());
      out += ':';
      out += *part;
      out += ',';
    }
  }
  return out;
}

/// The headers encode_outbox_headers stored. Throws std::invalid_argument, saying where, for
/// bytes that are not such an encoding (a column written by hand, or damaged).
inline std::vector<outbox_header> decode_outbox_headers(std::string_view stored) {
  const std::size_t whole = stored.size();
  const auto fail = [&](const char* what) {
    throw std::invalid_argument("idem: outbox headers: " + std::string(what) + " at byte " +
                                std::to_string(whole - stored.size()) + " of " +
                                std::to_string(whole));
  };
  const auto take = [&]() -> std::string {
    std::size_t length = 0;
    std::size_t digits = 0;
    while (digits < stored.size() && stored[digits] >= '0' && stored[digits] <= '9') {
      // 19 digits stay below 2^64: a longer length cannot be real, and would overflow.
      if (digits == 19) fail("a length too long");
      length = length * 10 + static_cast<std::size_t>(stored[digits] - '0');
      ++digits;
    }
    if (digits == 0) fail("a length expected");
    if (digits > 1 && stored[0] == '0') fail("a length with a leading zero");
    if (digits == stored.size() || stored[digits] != ':') fail("':' expected after a length");
    stored.remove_prefix(digits + 1);
    if (length >= stored.size()) fail("a netstring longer than what follows");
    std::string part(stored.substr(0, length));
    if (stored[length] != ',') fail("',' expected after a netstring");
    stored.remove_prefix(length + 1);
    return part;
  };
  std::vector<outbox_header> headers;
  while (!stored.empty()) {
    outbox_header header;
    header.name = take();
    if (stored.empty()) fail("a header name without its value");
    header.value = take();
    headers.push_back(std::move(header));
  }
  return headers;
}

}  // namespace idem

#endif  // IDEM_OUTBOX_HEADERS_HPP
