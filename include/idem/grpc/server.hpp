// idem on a gRPC C++ server: a unary method that runs an idempotent wrapper, keyed by the
// client's `idempotency-key` metadata, with every verdict answered as a gRPC status. Needs
// grpc++ and protobuf (CMake: idem::grpc; Debian: libgrpc++-dev); not part of idem.hpp.
//
//   auto charges = idem::idempotent{idem::grpc_unary<ChargeReply>(
//       [&](idem::handler_context& ctx, const idem::grpc_request<ChargeRequest>& req,
//           ChargeReply& reply) {
//         reply.set_charge_id(bank.charge(req->amount(), ctx.downstream_key("charge"),
//                                         req.time_left()));
//         return grpc::Status::OK;   // an error status is kept and replayed too
//       })};
//
//   grpc::Status Charge(grpc::ServerContext* context, const ChargeRequest* request,
//                       ChargeReply* reply) override {
//     return idem::grpc_serve(charges, request->account(), *context, *request, *reply);
//   }
//
// One call (grpc_serve):
//   1. a call whose deadline has passed, or leaves less than options.min_time_left, is refused
//      DEADLINE_EXCEEDED before anything is claimed;
//   2. the key is read from every `idempotency-key` metadata value: more than one, or one that
//      is not a key (idem::http::parse_key: the bare key or a quoted sf-string), is refused
//      INVALID_ARGUMENT before anything is claimed; none is the wrapper's missing key;
//   3. the request is fingerprinted as its serialized bytes (deterministic serialization), with
//      its message type's name as the target, and the wrapper runs;
//   4. the answer: the reply and status the handler returned (a replay with initial metadata
//      `idempotent-replayed: true`), or the refusal's status (grpc_status_for), with the
//      refusal's name in trailing metadata `idempotency-problem` and, for a call still in
//      progress (ABORTED), trailing metadata `retry-after`: whole seconds of the holder's lease
//      left.
//
// The stored answer is a grpc_response (idem/grpc/response.hpp): the status and the reply's
// bytes. The first caller and every repeat get the reply parsed from those same bytes, so the
// replies re-serialise identically (map fields aside: protobuf writes them in hash order).
//
// A handler's status is kept and replayed, errors included, except the codes that say "nothing
// happened, try again" (grpc_unary's `released`, by default UNAVAILABLE, RESOURCE_EXHAUSTED and
// ABORTED): those release the key, as an exception does, so that the client's retry runs.
//
// Names are idem::grpc_*, not a namespace idem::grpc: inside namespace idem that namespace would
// hide ::grpc, and `using namespace idem;` would make every `grpc::Status` ambiguous.
#ifndef IDEM_GRPC_SERVER_HPP
#define IDEM_GRPC_SERVER_HPP

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>
#include <grpcpp/support/string_ref.h>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/client/grpc_status.hpp>
#include <idem/core/request.hpp>
#include <idem/grpc/metadata.hpp>
#include <idem/grpc/response.hpp>
#include <idem/http/idempotency_key.hpp>
#include <idem/http/problem.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/outcome.hpp>

namespace idem {

/// The status a verdict without a response is answered with (docs/grpc.md says why each);
/// grpc_status::ok for executed and replayed, whose status is the handler's.
constexpr grpc_status grpc_status_for(verdict v) noexcept {
  switch (v) {
    case verdict::executed:
    case verdict::replayed:
      return grpc_status::ok;
    case verdict::in_progress:
      // gRPC's guide: ABORTED for a concurrency conflict the client retries at a higher level.
      // ALREADY_EXISTS would tell the client its resource exists, which it may never.
      return grpc_status::aborted;
    case verdict::mismatch:     // the key was sent with another request: a new key is needed
    case verdict::missing_key:  // where keys are required
    case verdict::invalid_key:  // empty, too long, not visible ASCII
    case verdict::invalid_request:
    case verdict::body_too_large:  // not RESOURCE_EXHAUSTED: that one is retried, this never
      return grpc_status::invalid_argument;
    case verdict::store_unavailable:
    case verdict::store_full:
    case verdict::cancelled:  // nothing was recorded: a retry is safe and runs
      return grpc_status::unavailable;
    case verdict::response_too_large:  // the first caller got it; repeats cannot
      return grpc_status::internal;
    case verdict::deadline_exceeded:  // the caller's deadline leaves too little: nothing ran
      return grpc_status::deadline_exceeded;
  }
  return grpc_status::internal;
}

namespace detail {

// A message's bytes, written with deterministic serialization (map entries in key order), and
// partially: what the message holds is what is kept, required fields or not.
template <class Message>
void serialize_deterministic(const Message& message, std::string& out) {
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializePartialToCodedStream(&coded);
}

inline std::string_view view_of(const grpc::string_ref& text) noexcept {
  return {text.data(), text.size()};
}

// The message type's full name, as a view that lives as long as the program (the descriptor's).
template <class Message>
std::string_view message_type_name() {
  if constexpr (requires { Message::descriptor()->full_name(); }) {
    return Message::descriptor()->full_name();
  } else {
    static const std::string name = Message().GetTypeName();  // the lite runtime
    return name;
  }
}

}  // namespace detail

/// Time left until `deadline` from `now`: nanoseconds::max() when there is no deadline (gRPC's
/// infinite deadline is system_clock::time_point::max()), never negative.
inline std::chrono::nanoseconds grpc_time_left(std::chrono::system_clock::time_point deadline,
                                               std::chrono::system_clock::time_point now) {
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return std::chrono::nanoseconds::max();
  }
  if (deadline <= now) return std::chrono::nanoseconds::zero();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
}

/// One call's request as the guarded handler sees it: the message, the server context, and the
/// call's deadline. Fingerprinted as `method` (empty unless grpc_serve_options::method says), the
/// message type's full name and the message's serialized bytes; a fingerprint that reads
/// headers reads the client's metadata. Points at the message and the context, which must
/// outlive it.
template <class Message>
class grpc_request {
 public:
  grpc_request(const Message& message, grpc::ServerContextBase& context,
               std::string_view method = {})
      : message_(&message), context_(&context), method_(method) {
    detail::serialize_deterministic(message, bytes_);
  }

  const Message& message() const noexcept { return *message_; }
  const Message& operator*() const noexcept { return *message_; }
  const Message* operator->() const noexcept { return message_; }
  grpc::ServerContextBase& context() const noexcept { return *context_; }

  /// The call's deadline as the client set it (gRPC carries it); time_point::max() for none.
  std::chrono::system_clock::time_point deadline() const { return context_->deadline(); }
  /// What is left of the call's deadline now: give it to the downstream calls the handler makes.
  /// nanoseconds::max() when the call has no deadline.
  std::chrono::nanoseconds time_left() const {
    return grpc_time_left(deadline(), std::chrono::system_clock::now());
  }

  /// The bytes the fingerprint covers.
  std::string_view bytes() const noexcept { return bytes_; }

  request_view view() const {
    return {method_, detail::message_type_name<Message>(), bytes_, {}, context_, &metadata_of};
  }

 private:
  // The first value of a client metadata key; a null view when absent. gRPC keys are lower case.
  static std::string_view metadata_of(const void* source, std::string_view name) {
    std::string lower(name);
    for (char& c : lower) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
    }
    const auto& metadata = static_cast<const grpc::ServerContextBase*>(source)->client_metadata();
    const auto found = metadata.find(grpc::string_ref(lower));
    if (found == metadata.end()) return {};
    return detail::view_of(found->second);
  }

  const Message* message_;
  grpc::ServerContextBase* context_;
  std::string_view method_;
  std::string bytes_;
};

/// A set of status codes (grpc_unary's `released`).
class grpc_code_set {
 public:
  constexpr grpc_code_set() noexcept = default;
  constexpr grpc_code_set(std::initializer_list<grpc_status> codes) noexcept {
    for (const grpc_status code : codes)
      bits_ |= bit(static_cast<int>(code));
  }
  constexpr bool contains(int code) const noexcept { return (bits_ & bit(code)) != 0; }

 private:
  static constexpr std::uint32_t bit(int code) noexcept {
    return code >= 0 && code < 32 ? std::uint32_t{1} << code : 0;
  }
  std::uint32_t bits_ = 0;
};

/// The codes a handler returns to say that nothing happened and a retry may run: they release
/// the key instead of being kept (the codes idem's classifiers call transient).
inline constexpr grpc_code_set grpc_retryable_codes{
    grpc_status::unavailable, grpc_status::resource_exhausted, grpc_status::aborted};

/// Thrown by grpc_unary's handler for a status it releases rather than keeps, so that the
/// wrapper's failure policy releases the key; grpc_serve answers the status.
class grpc_released_status : public std::runtime_error {
 public:
  explicit grpc_released_status(const grpc::Status& status)
      : std::runtime_error("idem: the handler answered " + status.error_message()),
        status_(status) {}
  const grpc::Status& status() const noexcept { return status_; }

 private:
  grpc::Status status_;
};

/// The handler idempotent runs for a unary method (made by grpc_unary): it gives the user's
/// function a `Reply` to fill, and keeps its status and the reply's bytes.
template <class Reply, class Function>
class grpc_unary_handler {
 public:
  grpc_unary_handler(Function function, grpc_code_set released)
      : function_(std::move(function)), released_(released) {}

  template <class Message>
  requires std::invocable < Function&, handler_context&, const grpc_request<Message>
  &, Reply& > || std::invocable<Function&, const grpc_request<Message>&, Reply&> grpc_response
                 operator()(handler_context& context, const grpc_request<Message>& request) {
    Reply reply;
    if constexpr (std::invocable<Function&, handler_context&, const grpc_request<Message>&,
                                 Reply&>) {
      return answer(std::invoke(function_, context, request, reply), reply);
    } else {
      return answer(std::invoke(function_, request, reply), reply);
    }
  }

  /// With a TransactionalStore: the function's writes commit with the record.
  template <class Message, class Transaction>
  requires std::invocable < Function&, handler_context&, const grpc_request<Message>
  &, Reply&,
      Transaction& > grpc_response operator()(handler_context& context,
                                              const grpc_request<Message>& request,
                                              Transaction& transaction) {
    Reply reply;
    return answer(std::invoke(function_, context, request, reply, transaction), reply);
  }

  Function& function() noexcept { return function_; }

 private:
  grpc_response answer(const grpc::Status& status, const Reply& reply) const {
    const int code = static_cast<int>(status.error_code());
    if (!status.ok() && released_.contains(code)) throw grpc_released_status(status);
    grpc_response kept{code, status.error_message(), status.error_details(), {}};
    if (status.ok()) detail::serialize_deterministic(reply, kept.reply);
    return kept;
  }

  Function function_;
  grpc_code_set released_;
};

/// A unary method's handler for idempotent: `function(ctx, request, reply)` (or without the
/// context, or with a TransactionalStore's transaction last) fills `reply` and returns a
/// grpc::Status. A status in `released` releases the key; any other is kept and replayed.
template <class Reply, class Function>
grpc_unary_handler<Reply, Function> grpc_unary(Function function,
                                               grpc_code_set released = grpc_retryable_codes) {
  return {std::move(function), released};
}

/// How grpc_serve reads a call.
struct grpc_serve_options {
  /// The metadata key that carries the idempotency key (lower case, as gRPC sends keys).
  std::string key_metadata = std::string(grpc_key_metadata);
  /// The key's accepted forms: the bare key or a quoted sf-string (any), or only the latter.
  http::key_form accepted = http::key_form::any;
  /// A call with less than this left of its deadline is refused DEADLINE_EXCEEDED before
  /// anything is claimed (zero: only a deadline already passed is).
  std::chrono::nanoseconds min_time_left{};
  /// Fingerprinted as the request's method: name the RPC ("/pkg.Service/Method") when wrappers
  /// of several methods share a store and a scope and their request types may be the same.
  std::string method{};
};

namespace detail {

inline grpc::Status grpc_refusal(grpc::ServerContextBase& context, grpc_status code,
                                 http::problem_kind kind, std::string_view message) {
  const http::problem_type type = http::type_of(kind);
  context.AddTrailingMetadata(std::string(grpc_problem_metadata), std::string(type.fragment));
  return {static_cast<grpc::StatusCode>(code), std::string(message.empty() ? type.title : message)};
}

inline std::string_view grpc_key_message(http::key_error error) noexcept {
  switch (error) {
    case http::key_error::several_fields:
      return "the call has more than one idempotency-key metadata value";
    case http::key_error::empty:
      return "the idempotency-key metadata is empty";
    case http::key_error::not_a_string:
      return "the idempotency-key metadata must be a quoted string, \"like-this\"";
    case http::key_error::none:
    case http::key_error::missing:
    case http::key_error::malformed:
      break;
  }
  return "the idempotency-key metadata is not a key: send it bare, or as a quoted string "
         "(RFC 8941 sf-string)";
}

}  // namespace detail

/// Answers an outcome: the kept status, with `reply` parsed from the kept bytes, or the
/// refusal's status and metadata.
template <class Reply>
grpc::Status grpc_answer(const idempotent_outcome<grpc_response>& outcome,
                         grpc::ServerContextBase& context, Reply& reply) {
  if (outcome) {
    const grpc_response& kept = *outcome;
    if (outcome.verdict() == verdict::replayed) {
      context.AddInitialMetadata(std::string(grpc_replayed_metadata), "true");
    }
    if (kept.ok() && !reply.ParsePartialFromString(kept.reply)) {
      return {grpc::StatusCode::INTERNAL,
              "idem: the kept reply does not parse as " + reply.GetTypeName()};
    }
    return {static_cast<grpc::StatusCode>(kept.code), kept.message, kept.details};
  }
  const verdict v = outcome.verdict();
  const grpc_status code = grpc_status_for(v);
  const http::problem_kind kind =
      http::problem_for(v).value_or(http::problem_kind::store_unavailable);
  if (v == verdict::in_progress && outcome.lease_left() > std::chrono::nanoseconds::zero()) {
    context.AddTrailingMetadata(
        std::string(grpc_retry_after_metadata),
        std::to_string(http::whole_seconds_after(outcome.lease_left()).count()));
  }
  return detail::grpc_refusal(context, code, kind, outcome.message());
}

/// One unary call through `guarded` (an idempotent wrapper whose handler is a grpc_unary) under
/// `scope`: see the top of this header. `reply` is what the method sends.
template <class Guarded, class Message, class Reply>
grpc::Status grpc_serve(Guarded& guarded, std::string_view scope, grpc::ServerContextBase& context,
                        const Message& request, Reply& reply, const grpc_serve_options& options) {
  const std::chrono::nanoseconds left =
      grpc_time_left(context.deadline(), std::chrono::system_clock::now());
  if (left <= std::chrono::nanoseconds::zero() || left < options.min_time_left) {
    return detail::grpc_refusal(context, grpc_status::deadline_exceeded,
                                http::problem_kind::deadline_exceeded,
                                "idem: too little of the call's deadline is left to start it");
  }

  const auto& metadata = context.client_metadata();
  const auto [first, last] = metadata.equal_range(grpc::string_ref(options.key_metadata));
  std::optional<std::string_view> key;
  http::parsed_key parsed;
  if (first != last) {
    if (std::next(first) != last) {
      parsed = http::parsed_key::failed(http::key_error::several_fields);
    } else {
      parsed = http::parse_key(detail::view_of(first->second), options.accepted);
    }
    if (!parsed) {
      return detail::grpc_refusal(context, grpc_status::invalid_argument,
                                  http::problem_for(parsed.error()),
                                  detail::grpc_key_message(parsed.error()));
    }
    key = parsed.value();
  }

  const grpc_request<Message> guarded_request{request, context, options.method};
  try {
    return grpc_answer(guarded(scope, key, guarded_request), context, reply);
  } catch (const grpc_released_status& released) {
    return released.status();
  }
}

/// The same, with the default options.
template <class Guarded, class Message, class Reply>
grpc::Status grpc_serve(Guarded& guarded, std::string_view scope, grpc::ServerContextBase& context,
                        const Message& request, Reply& reply) {
  static const grpc_serve_options defaults{};
  return grpc_serve(guarded, scope, context, request, reply, defaults);
}

}  // namespace idem

#endif  // IDEM_GRPC_SERVER_HPP
