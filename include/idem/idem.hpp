// idem — exactly-once effect under at-least-once delivery.
//
// This header includes the whole core: the server side (idem::idempotent, idem::inbox, the
// store contract, the lock-free memory store and the locked reference store, fingerprints and
// codecs, the reconciler) and the client side (idem::retrying), with their policies. Included by
// name, never from here: the store adapters that need a client library, the outbox
// (idem/outbox/relay.hpp, standard library only, and the readers and sinks; kept out so that
// what every unit pays for stays what every service uses) and the bindings (Asio, HTTP, gRPC,
// Prometheus).
#ifndef IDEM_IDEM_HPP
#define IDEM_IDEM_HPP

// What both sides share.
#include <idem/core/clock.hpp>
#include <idem/core/key.hpp>
#include <idem/policies.hpp>
#include <idem/version.hpp>

// Client side: idem::retrying and its policies.
#include <idem/client/attempt.hpp>
#include <idem/client/grpc_status.hpp>
#include <idem/client/redacted_key.hpp>
#include <idem/client/retry_after.hpp>
#include <idem/client/retry_outcome.hpp>
#include <idem/client/retrying.hpp>

// Server side: idem::idempotent, idem::inbox, fingerprints and codecs.
#include <idem/core/codec.hpp>
#include <idem/core/fingerprint/canonical_json.hpp>
#include <idem/core/fingerprint/canonicalize_json.hpp>
#include <idem/core/fingerprint/digest.hpp>
#include <idem/core/fingerprint/fingerprint.hpp>
#include <idem/core/fingerprint/sha256.hpp>
#include <idem/core/fingerprint/xxh3.hpp>
#include <idem/core/request.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/server/inbox.hpp>
#include <idem/server/lookup.hpp>
#include <idem/server/observer.hpp>
#include <idem/server/outcome.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/server/resumption.hpp>

// The reconciler: finishes abandoned work, reports what it cannot.
#include <idem/reconciler.hpp>

// Stores: the contract, the memory store, the locked reference model, and the local tier any
// store can sit behind (tiered_store).
#include <idem/store/contract.hpp>
#include <idem/store/locked.hpp>
#include <idem/store/memory.hpp>
#include <idem/store/tiered.hpp>

#endif  // IDEM_IDEM_HPP
