// idem — exactly-once effect under at-least-once delivery.
//
// This header includes the whole core: the server side (idem::idempotent, idem::inbox, the
// store contract, the lock-free memory store and the locked reference store, fingerprints and
// codecs) and the client side (idem::retrying), with their policies. Store adapters that need a
// client library are included by name, never from here.
#pragma once

#include <idem/attempt.hpp>
#include <idem/canonical_json.hpp>
#include <idem/codec.hpp>
#include <idem/digest.hpp>
#include <idem/fingerprint.hpp>
#include <idem/grpc_status.hpp>
#include <idem/handler_context.hpp>
#include <idem/hash/sha256.hpp>
#include <idem/hash/xxh3.hpp>
#include <idem/idempotent.hpp>
#include <idem/idempotent_outcome.hpp>
#include <idem/inbox.hpp>
#include <idem/json/canonical.hpp>
#include <idem/key.hpp>
#include <idem/policies.hpp>
#include <idem/redacted_key.hpp>
#include <idem/request.hpp>
#include <idem/response_codec.hpp>
#include <idem/retry_after.hpp>
#include <idem/retry_outcome.hpp>
#include <idem/retrying.hpp>
#include <idem/store.hpp>
#include <idem/store/locked.hpp>
#include <idem/store/memory.hpp>
#include <idem/version.hpp>
