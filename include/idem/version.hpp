// idem — exactly-once effect under at-least-once delivery.
// The library's version, for code that must branch on it.
#ifndef IDEM_VERSION_HPP
#define IDEM_VERSION_HPP

#define IDEM_VERSION_MAJOR 0
#define IDEM_VERSION_MINOR 1
#define IDEM_VERSION_PATCH 0

namespace idem {

/// The version as a number: major * 10000 + minor * 100 + patch.
inline constexpr int version =
    IDEM_VERSION_MAJOR * 10000 + IDEM_VERSION_MINOR * 100 + IDEM_VERSION_PATCH;

}  // namespace idem

#endif  // IDEM_VERSION_HPP
