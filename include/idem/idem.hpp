// idem — exactly-once effect under at-least-once delivery.
//
// This header includes the whole core: the client side (idem::retrying) and its policies.
// Store adapters that need a client library are included by name, never from here.
#pragma once

#include <idem/version.hpp>
