// idem on gRPC C++ (grpc++ and protobuf; CMake: idem::grpc; Debian: libgrpc++-dev): unary
// methods guarded by an idempotency key, and clients that retry them safely. Not part of
// idem.hpp. docs/grpc.md has the status table, the deadline rules and an example.
//
//   metadata.hpp  the metadata both sides use: idempotency-key, idempotent-replayed, ...
//   response.hpp  grpc_response: the status and reply bytes a record keeps, and their codec
//   server.hpp    grpc_unary (the handler), grpc_serve (one call), grpc_status_for (the table)
//   client.hpp    grpc_prepare (key and deadline per attempt), grpc_result, grpc_classifier
#ifndef IDEM_GRPC_HPP
#define IDEM_GRPC_HPP

#include <idem/grpc/client.hpp>
#include <idem/grpc/metadata.hpp>
#include <idem/grpc/response.hpp>
#include <idem/grpc/server.hpp>

#endif  // IDEM_GRPC_HPP
