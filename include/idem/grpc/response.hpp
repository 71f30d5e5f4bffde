// What idem keeps of one unary gRPC call's answer, so that a repeat gets it back byte for byte:
// the status (code, message, binary details) and the reply message as its serialized bytes.
// Bytes, never the message type: one store serves every method, and a record outlives the
// process that wrote it. Standard library only (the code is gRPC's StatusCode as an int), so a
// store, a codec or a test can handle it without grpc++.
#ifndef IDEM_GRPC_RESPONSE_HPP
#define IDEM_GRPC_RESPONSE_HPP

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include <idem/core/codec.hpp>

namespace idem {

/// One unary call's answer as the store keeps it: what the handler returned, serialized.
struct grpc_response {
  /// grpc::StatusCode: 0 (OK) when `reply` is the answer.
  int code = 0;
  /// The status message (grpc::Status::error_message).
  std::string message;
  /// The status details (grpc::Status::error_details: a serialized google.rpc.Status, say).
  std::string details;
  /// The reply message, serialized (empty unless code is OK: gRPC sends no message with an error).
  std::string reply;

  bool ok() const noexcept { return code == 0; }

  friend bool operator==(const grpc_response&, const grpc_response&) = default;
};

/// Layout: 'G', format version 1, code (varint), message and details (varint length, bytes), then
/// the reply's bytes to the end. A template, as codec<http_response> is, so that it compiles only
/// where a gRPC answer is stored.
template <std::same_as<grpc_response> T>
struct codec<T> {
  static void encode(const T& response, std::string& out) {
    out.push_back('G');
    out.push_back('\x01');
    detail::put_varint(out, static_cast<std::uint64_t>(static_cast<std::uint32_t>(response.code)));
    detail::put_varint(out, response.message.size());
    out += response.message;
    detail::put_varint(out, response.details.size());
    out += response.details;
    out += response.reply;
  }

  static T decode(std::string_view bytes) {
    if (bytes.size() < 2 || bytes[0] != 'G' || bytes[1] != '\x01') {
      throw codec_error("idem::codec<grpc_response>: the stored bytes are not a grpc_response");
    }
    bytes.remove_prefix(2);
    T response;
    const std::uint64_t code = detail::take_varint(bytes, "grpc_response code");
    // gRPC defines 0 to 16; a code beyond is carried as it came, within an int.
    if (code > 0x7fffffff)
      throw codec_error("idem::codec<grpc_response>: stored code out of range");
    response.code = static_cast<int>(code);
    response.message.assign(detail::take_bytes(bytes, "grpc_response message"));
    response.details.assign(detail::take_bytes(bytes, "grpc_response details"));
    response.reply.assign(bytes);
    return response;
  }
};

}  // namespace idem

#endif  // IDEM_GRPC_RESPONSE_HPP
