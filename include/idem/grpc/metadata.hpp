// The gRPC metadata idem's binding reads and writes, named once for both sides (gRPC sends
// metadata keys in lower case). Standard library only.
#ifndef IDEM_GRPC_METADATA_HPP
#define IDEM_GRPC_METADATA_HPP

#include <string_view>

namespace idem {

/// Client to server: the operation's idempotency key, bare or as a quoted sf-string.
inline constexpr std::string_view grpc_key_metadata = "idempotency-key";
/// Server to client, initial metadata: "true" on a replay of the key's kept answer.
inline constexpr std::string_view grpc_replayed_metadata = "idempotent-replayed";
/// Server to client, trailing metadata of an ABORTED (the key's first call still runs): whole
/// seconds until its lease ends and a retry may take it over.
inline constexpr std::string_view grpc_retry_after_metadata = "retry-after";
/// Server to client, trailing metadata of a refusal: its name, the fragment of the HTTP
/// binding's problem type (key-reused, missing-key, request-outstanding, ...: docs/http.md).
inline constexpr std::string_view grpc_problem_metadata = "idempotency-problem";

}  // namespace idem

#endif  // IDEM_GRPC_METADATA_HPP
