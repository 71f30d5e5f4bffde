// The caller's deadline, as a request brings it: how long the caller still waits for the answer
// (an HTTP deadline field, gRPC's call deadline). A wrapper given one refuses to start work the
// caller has already given up on (verdict::deadline_exceeded, nothing claimed), and hands what
// is left of it to the handler (handler_context::time_left), so that the handler's own
// downstream calls stop when the caller stops waiting: deadline propagation.
#ifndef IDEM_SERVER_DEADLINE_HPP
#define IDEM_SERVER_DEADLINE_HPP

#include <chrono>

namespace idem {

/// How long the caller still waits, measured when the request arrived. Relative, as HTTP and
/// gRPC send it, so that the caller's clock and the server's need not agree.
struct caller_deadline {
  std::chrono::nanoseconds time_left{};
};

}  // namespace idem

#endif  // IDEM_SERVER_DEADLINE_HPP
