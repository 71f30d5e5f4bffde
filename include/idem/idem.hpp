// idem — exactly-once effect under at-least-once delivery.
//
// This header includes the whole core: the client side (idem::retrying) and its policies.
// Store adapters that need a client library are included by name, never from here.
#pragma once

#include <idem/attempt.hpp>
#include <idem/grpc_status.hpp>
#include <idem/key.hpp>
#include <idem/policies.hpp>
#include <idem/retry_after.hpp>
#include <idem/retry_outcome.hpp>
#include <idem/retrying.hpp>
#include <idem/version.hpp>
