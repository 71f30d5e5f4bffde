// The event-version gate: what its SQL bindings (idem/store/sqlite/version_gate.hpp,
// idem/store/postgres/version_gate.hpp) share: the outcome of one delivery, and the rules an
// entity id, a version and a table name must follow. Standard library only.
//
// A consumer of entity updates, each event carrying an entity id and a version that grows with
// every change of that entity, needs no record per event to act once per event: it applies an
// event only when its version is newer than the one it applied last. The gate keeps one row per
// (scope, entity id) holding that version, and bumps it in the transaction that runs the
// consumer's writes, so that the two commit together or not at all. A redelivery (the same
// version) is a duplicate, an older version arriving late is stale: neither runs the consumer.
// docs/version_gate.md says when to choose it over the inbox (idem/server/inbox.hpp).
//
// Versions are signed 64-bit integers, 0 to 2^63 - 1 (an int8 / INTEGER column holds no more).
// A negative version is refused (std::invalid_argument, nothing read or written): it is either
// a bug or an unsigned counter that wrapped, and letting it in would make every later event of
// the entity look newer or older by accident. The first event of an entity is applied whatever
// its version, 0 included.
#ifndef IDEM_STORE_VERSION_GATE_HPP
#define IDEM_STORE_VERSION_GATE_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <idem/core/key.hpp>

namespace idem {

/// What the gate did with one delivered event.
enum class version_gate_verdict : std::uint8_t {
  /// The event was newer than the stored version (or the entity had none): the consumer ran and
  /// its writes committed with the new version.
  applied,
  /// The stored version equals the event's: the event was applied before (a redelivery). The
  /// consumer did not run.
  duplicate,
  /// The stored version is newer than the event's: a later event overtook it. The consumer did
  /// not run.
  stale,
};

/// The outcome of one delivery: a value, so that a consumer branches on it (and acknowledges
/// the message in every case); failures of the database are exceptions (store_error).
struct version_gate_outcome {
  version_gate_verdict verdict = version_gate_verdict::applied;
  /// The entity's version once the call returned: the event's own when applied or a
  /// duplicate, the newer one that overtook it when stale.
  std::int64_t stored_version = 0;

  bool applied() const noexcept { return verdict == version_gate_verdict::applied; }
  friend bool operator==(const version_gate_outcome&, const version_gate_outcome&) = default;
};

/// The table the gate keeps its versions in unless told otherwise.
inline constexpr std::string_view default_version_gate_table = "idem_versions";

namespace detail {

// The entity id follows the idempotency key's rule (idem/core/key.hpp: 1 to max_length bytes of
// visible ASCII): ids of entities are database keys, UUIDs, "order-42", which it admits, and it
// keeps control characters and invisible bytes out of a table operators read.
inline void check_version_gate_event(std::string_view entity_id, std::int64_t version,
                                     std::size_t max_length, const char* who) {
  if (!is_valid_key(entity_id, max_length)) {
    throw std::invalid_argument(
        std::string(who) + ": an entity id must be 1 to " + std::to_string(max_length) +
        " bytes of visible ASCII (0x21-0x7E); got " + std::to_string(entity_id.size()) + " bytes");
  }
  if (version < 0) {
    throw std::invalid_argument(std::string(who) + ": version " + std::to_string(version) +
                                " is negative; versions are 0 to 2^63 - 1");
  }
}

// Names are spliced into SQL text, so only plain identifiers are let in: a configured name can
// never inject SQL, needs no quoting rules of its own, and stays within PostgreSQL's 63 bytes.
// The same rule as postgres_store's schema and table options. `what`: "table", "schema".
inline void check_version_gate_name(std::string_view name, const char* what, const char* who) {
  bool valid = !name.empty() && name.size() <= 50 && !(name.front() >= '0' && name.front() <= '9');
  for (const char c : name) {
    valid = valid && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_');
  }
  if (!valid) {
    throw std::invalid_argument(std::string(who) + ": the " + what + " name '" + std::string(name) +
                                "' must be 1 to 50 letters, digits or underscores, not starting "
                                "with a digit");
  }
}

inline void check_version_gate_max_length(std::size_t max_length, const char* who) {
  if (max_length == 0 || max_length > max_key_length) {
    throw std::invalid_argument(std::string(who) + ": max_entity_id_length must be 1 to " +
                                std::to_string(max_key_length));
  }
}

}  // namespace detail

}  // namespace idem

#endif  // IDEM_STORE_VERSION_GATE_HPP
