// idem::retrying on a gRPC C++ client: each attempt's ClientContext carries the operation's key
// (`idempotency-key` metadata) and what is left of its deadline (gRPC propagates it to the
// server), and the answer is judged by the gRPC status rules of idem/client/grpc_status.hpp,
// with the server's `retry-after` honoured. Needs grpc++ (CMake: idem::grpc); not part of
// idem.hpp.
//
//   struct charge_policies : idem::default_policies {
//     using classifier = idem::grpc_classifier;
//   };
//   ChargeReply reply;
//   auto call = [&](const idem::attempt_context& attempt) {
//     grpc::ClientContext context;              // one per attempt: gRPC allows no reuse
//     idem::grpc_prepare(context, attempt);
//     return idem::grpc_result::of(stub->Charge(&context, request, &reply), context);
//   };
//   idem::retrying<decltype(call), charge_policies> charge{call};
//   auto outcome = charge();                     // outcome.value().status, and `reply`
//
// The classifier's rules (classify_error_code): UNAVAILABLE, RESOURCE_EXHAUSTED and ABORTED are
// transient (ABORTED is what an idem server answers while the key's first call still runs, with
// `retry-after`); DEADLINE_EXCEEDED is ambiguous (the call may have run: repeated under the same
// key, which makes that safe); every other code is permanent (INVALID_ARGUMENT and
// FAILED_PRECONDITION among them); INTERNAL, UNKNOWN and DATA_LOSS count as the server's fault.
#ifndef IDEM_GRPC_CLIENT_HPP
#define IDEM_GRPC_CLIENT_HPP

#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>
#include <grpcpp/support/string_ref.h>

#include <chrono>
#include <concepts>
#include <exception>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include <idem/client/attempt.hpp>
#include <idem/client/grpc_status.hpp>
#include <idem/client/policy/classifier.hpp>
#include <idem/grpc/metadata.hpp>
#include <idem/http/idempotency_key.hpp>

namespace idem {

/// Prepares a fresh ClientContext for one attempt: the key as `idempotency-key` metadata (bare,
/// or as the draft's sf-string with key_form::sf_string), and the call's deadline at what is left
/// of the operation's (a deadline already spent is set to now: gRPC fails the call at once).
inline void grpc_prepare(grpc::ClientContext& context, const attempt_context& attempt,
                         http::key_form form = http::key_form::any) {
  context.AddMetadata(std::string(grpc_key_metadata), http::format_key(attempt.key(), form));
  const auto now = std::chrono::system_clock::now();
  const std::chrono::nanoseconds left = attempt.time_left();
  if (left <= std::chrono::nanoseconds::zero()) {
    context.set_deadline(now);
  } else if (left < std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::time_point::max() - now)) {
    context.set_deadline(now + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                   std::chrono::ceil<std::chrono::microseconds>(left)));
  }
}

namespace detail {

inline std::string_view grpc_first_value(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata, std::string_view name) {
  const auto found = metadata.find(grpc::string_ref(name.data(), name.size()));
  if (found == metadata.end()) return {};
  return {found->second.data(), found->second.size()};
}

}  // namespace detail

/// One attempt's answer as the classifier judges it: the status, the server's `retry-after`
/// (trailing metadata, whole seconds; empty when none), and whether it was a replay.
struct grpc_result {
  grpc::Status status;
  std::string retry_after;
  bool replayed = false;

  bool ok() const noexcept { return status.ok(); }

  /// Reads what the server said from a finished call's context.
  static grpc_result of(grpc::Status status, const grpc::ClientContext& context) {
    grpc_result result{std::move(status), {}, false};
    result.retry_after = std::string(
        detail::grpc_first_value(context.GetServerTrailingMetadata(), grpc_retry_after_metadata));
    result.replayed = detail::grpc_first_value(context.GetServerInitialMetadata(),
                                               grpc_replayed_metadata) == "true";
    return result;
  }
};

/// A result with a grpc::Status `status` member (grpc_result, or a type of the caller's own that
/// also carries the reply), and optionally a `retry_after` text member.
template <class R>
concept grpc_status_result = requires(const R& result) {
  { result.status } -> std::convertible_to<const grpc::Status&>;
};

/// The classifier for gRPC calls: a grpc::Status, or a grpc_status_result with its retry-after.
struct grpc_classifier {
  classification classify(const grpc::Status& status) const noexcept {
    return classify_error_code(
        make_error_code(static_cast<grpc_status>(static_cast<int>(status.error_code()))));
  }

  template <grpc_status_result R>
  classification classify(const R& result) const noexcept {
    classification verdict = classify(static_cast<const grpc::Status&>(result.status));
    if constexpr (requires { std::string_view(result.retry_after); }) {
      if (verdict.kind != disposition::success) verdict.retry_after = result.retry_after;
    }
    return verdict;
  }

  classification classify_exception(const std::exception_ptr& error) const noexcept {
    return detail::classify_standard_exception(error);
  }
};

}  // namespace idem

#endif  // IDEM_GRPC_CLIENT_HPP
