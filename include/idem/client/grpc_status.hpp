// gRPC status codes as a std::error_code category, so that a gRPC failure is classified by the
// same rules as any other error code (the codes and their meaning: grpc/doc/statuscodes.md).
#ifndef IDEM_CLIENT_GRPC_STATUS_HPP
#define IDEM_CLIENT_GRPC_STATUS_HPP

#include <string>
#include <system_error>

namespace idem {

enum class grpc_status : int {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,
  failed_precondition = 9,
  aborted = 10,
  out_of_range = 11,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  data_loss = 15,
  unauthenticated = 16,
};

namespace detail {

class grpc_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "grpc"; }
  std::string message(int code) const override {
    static constexpr const char* names[] = {"OK",
                                            "CANCELLED",
                                            "UNKNOWN",
                                            "INVALID_ARGUMENT",
                                            "DEADLINE_EXCEEDED",
                                            "NOT_FOUND",
                                            "ALREADY_EXISTS",
                                            "PERMISSION_DENIED",
                                            "RESOURCE_EXHAUSTED",
                                            "FAILED_PRECONDITION",
                                            "ABORTED",
                                            "OUT_OF_RANGE",
                                            "UNIMPLEMENTED",
                                            "INTERNAL",
                                            "UNAVAILABLE",
                                            "DATA_LOSS",
                                            "UNAUTHENTICATED"};
    if (code < 0 || code > 16) return "unrecognised gRPC status " + std::to_string(code);
    return names[code];
  }
};

}  // namespace detail

/// The category of gRPC status codes.
inline const std::error_category& grpc_category() noexcept {
  static const detail::grpc_category_impl category;
  return category;
}

inline std::error_code make_error_code(grpc_status status) noexcept {
  return {static_cast<int>(status), grpc_category()};
}

}  // namespace idem

template <>
struct std::is_error_code_enum<idem::grpc_status> : std::true_type {};

#endif  // IDEM_CLIENT_GRPC_STATUS_HPP
