// Codecs: how a response, or a recovery point's result, becomes the bytes a store keeps.
//
// Stores keep bytes, never types, so one store serves handlers of every response type and a
// durable store can be read by the next version of the service. A type is storable when
// idem::codec<T> is specialised for it with
//
//   static void encode(const T& value, std::string& out);   // appends the bytes
//   static T decode(std::string_view bytes);                 // throws idem::codec_error
//
// A codec whose bytes are the value itself may also provide
//
//   static std::string_view bytes_of(const T& value);         // the bytes encode would append
//   static T adopt(std::string&& bytes);                      // decode, taking the bytes over
//
// and idempotent then stores and replays the value without copying it into a buffer first.
//
// Provided: std::string, byte vectors, http_response, integers, floating point and bool. A
// replay decodes exactly what was encoded, so a replayed http_response equals the original
// field for field and its body byte for byte.
#ifndef IDEM_CORE_CODEC_HPP
#define IDEM_CORE_CODEC_HPP

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <idem/core/request.hpp>

namespace idem {

/// The stored bytes do not decode as the type asked for: written by another codec or damaged.
class codec_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Specialise for your own types (see the top of this header).
template <class T>
struct codec;

/// A type idem can store: codec<T> encodes it to bytes and decodes it back.
template <class T>
concept Encodable = requires(const T& value, std::string& out, std::string_view bytes) {
  codec<T>::encode(value, out);
  { codec<T>::decode(bytes) } -> std::same_as<T>;
};

template <>
struct codec<std::string> {
  static void encode(const std::string& value, std::string& out) { out += value; }
  static std::string decode(std::string_view bytes) { return std::string(bytes); }
  static std::string_view bytes_of(const std::string& value) noexcept { return value; }
  static std::string adopt(std::string&& bytes) noexcept { return std::move(bytes); }
};

namespace detail {

// Whether codec<T> stores a value as its own bytes (bytes_of) and can take stored bytes over
// (adopt): see the top of this header.
template <class T>
concept codec_views_bytes = requires(const T& value) {
  { codec<T>::bytes_of(value) } -> std::same_as<std::string_view>;
};
template <class T>
concept codec_adopts_bytes = requires(std::string&& bytes) {
  { codec<T>::adopt(std::move(bytes)) } -> std::same_as<T>;
};

}  // namespace detail

template <class Byte>
requires(sizeof(Byte) == 1 && std::is_trivially_copyable_v<Byte>) struct codec<std::vector<Byte>> {
  static void encode(const std::vector<Byte>& value, std::string& out) {
    const std::size_t at = out.size();
    out.resize(at + value.size());
    if (!value.empty()) std::memcpy(out.data() + at, value.data(), value.size());
  }
  static std::vector<Byte> decode(std::string_view bytes) {
    std::vector<Byte> value(bytes.size());
    if (!bytes.empty()) std::memcpy(value.data(), bytes.data(), bytes.size());
    return value;
  }
};

/// Nothing to store: what a function returning void leaves.
template <>
struct codec<std::monostate> {
  static void encode(const std::monostate& /*value*/, std::string& /*out*/) {}
  static std::monostate decode(std::string_view bytes) {
    if (!bytes.empty()) throw codec_error("idem::codec<std::monostate>: expected no bytes");
    return {};
  }
};

/// Numbers and bool as fixed-width little-endian bytes, so a store written on one machine reads
/// the same on another.
template <class T>
requires(std::is_arithmetic_v<T>) struct codec<T> {
  static void encode(const T& value, std::string& out) {
    auto bits = std::bit_cast<std::array<unsigned char, sizeof(T)>>(value);
    if constexpr (std::endian::native == std::endian::big) reverse(bits);
    out.append(reinterpret_cast<const char*>(bits.data()), bits.size());
  }
  static T decode(std::string_view bytes) {
    if (bytes.size() != sizeof(T)) {
      throw codec_error("idem::codec: a stored number has " + std::to_string(bytes.size()) +
                        " bytes, expected " + std::to_string(sizeof(T)));
    }
    std::array<unsigned char, sizeof(T)> bits{};
    std::memcpy(bits.data(), bytes.data(), sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      // Only 0 and 1 are bools; reading any other byte as one is undefined behaviour.
      if (bits[0] > 1) throw codec_error("idem::codec<bool>: a stored bool is neither 0 nor 1");
    }
    if constexpr (std::endian::native == std::endian::big) reverse(bits);
    return std::bit_cast<T>(bits);
  }

 private:
  static constexpr void reverse(std::array<unsigned char, sizeof(T)>& bits) noexcept {
    for (std::size_t i = 0; i < sizeof(T) / 2; ++i) {
      const unsigned char low = bits[i];
      bits[i] = bits[sizeof(T) - 1 - i];
      bits[sizeof(T) - 1 - i] = low;
    }
  }
};

namespace detail {

// Lengths as LEB128 varints: one byte for the short header names and values that dominate.
inline void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

inline std::uint64_t take_varint(std::string_view& in, const char* what) {
  std::uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) throw codec_error(std::string("idem::codec: truncated ") + what);
    const auto byte = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  throw codec_error(std::string("idem::codec: malformed length in ") + what);
}

inline std::string_view take_bytes(std::string_view& in, const char* what) {
  const std::uint64_t size = take_varint(in, what);
  if (size > in.size()) throw codec_error(std::string("idem::codec: truncated ") + what);
  const std::string_view bytes = in.substr(0, static_cast<std::size_t>(size));
  in.remove_prefix(static_cast<std::size_t>(size));
  return bytes;
}

// HTTP headers as a count (varint), then each name and value (varint length, bytes): the part
// codec<http_response> and codec<http_request> share. `type` names the codec in errors.
// Templates, as those codecs are, so that the vector operations compile only where an HTTP
// message is stored.
template <class Headers>
void put_headers(std::string& out, const Headers& headers) {
  put_varint(out, headers.size());
  for (const auto& [name, value] : headers) {
    put_varint(out, name.size());
    out += name;
    put_varint(out, value.size());
    out += value;
  }
}

template <class Headers>
Headers take_headers(std::string_view& in, const char* type) {
  const std::uint64_t count = take_varint(in, "header count");
  // Each header takes at least two bytes, which bounds a damaged count before it allocates.
  if (count > in.size() / 2) {
    throw codec_error(std::string("idem::codec<") + type + ">: stored header count out of range");
  }
  Headers headers;
  headers.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string_view name = take_bytes(in, "header name");
    const std::string_view value = take_bytes(in, "header value");
    headers.emplace_back(std::string(name), std::string(value));
  }
  return headers;
}

}  // namespace detail

/// Layout: 'H', format version 1, status (varint), header count (varint), each header's name and
/// value (varint length, bytes), then the body to the end.
///
/// codec<http_response>, written as a partial specialisation so that it is a template: its
/// members, and the vector operations they call, compile only where a response is stored.
template <std::same_as<http_response> T>
struct codec<T> {
  static void encode(const T& response, std::string& out) {
    out.push_back('H');
    out.push_back('\x01');
    detail::put_varint(out,
                       static_cast<std::uint64_t>(static_cast<std::uint32_t>(response.status)));
    detail::put_headers(out, response.headers);
    out += response.body;
  }

  static T decode(std::string_view bytes) {
    if (bytes.size() < 2 || bytes[0] != 'H' || bytes[1] != '\x01') {
      throw codec_error("idem::codec<http_response>: the stored bytes are not an http_response");
    }
    bytes.remove_prefix(2);
    T response;
    const std::uint64_t status = detail::take_varint(bytes, "http_response status");
    if (status > 999) throw codec_error("idem::codec<http_response>: stored status out of range");
    response.status = static_cast<int>(status);
    response.headers = detail::take_headers<decltype(response.headers)>(bytes, "http_response");
    response.body.assign(bytes);
    return response;
  }
};

/// Layout: 'Q', format version 1, method and target (varint length, bytes), header count
/// (varint), each header's name and value (varint length, bytes), then the body to the end. What
/// a resumable wrapper keeps of an http_request (idempotent::options::max_kept_request_bytes).
template <std::same_as<http_request> T>
struct codec<T> {
  static void encode(const T& request, std::string& out) {
    out.push_back('Q');
    out.push_back('\x01');
    detail::put_varint(out, request.method.size());
    out += request.method;
    detail::put_varint(out, request.target.size());
    out += request.target;
    detail::put_headers(out, request.headers);
    out += request.body;
  }

  static T decode(std::string_view bytes) {
    if (bytes.size() < 2 || bytes[0] != 'Q' || bytes[1] != '\x01') {
      throw codec_error("idem::codec<http_request>: the stored bytes are not an http_request");
    }
    bytes.remove_prefix(2);
    T request;
    request.method.assign(detail::take_bytes(bytes, "http_request method"));
    request.target.assign(detail::take_bytes(bytes, "http_request target"));
    request.headers = detail::take_headers<decltype(request.headers)>(bytes, "http_request");
    request.body.assign(bytes);
    return request;
  }
};

/// Encodes `value` into a fresh string.
template <Encodable T>
std::string encode(const T& value) {
  std::string out;
  codec<T>::encode(value, out);
  return out;
}

template <Encodable T>
T decode(std::string_view bytes) {
  return codec<T>::decode(bytes);
}

}  // namespace idem

#endif  // IDEM_CORE_CODEC_HPP
