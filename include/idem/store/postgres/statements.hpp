// The statements postgres_store prepares on every connection, by name, and the quoting of the
// configured schema and table names that the SQL text is built from.
#ifndef IDEM_STORE_POSTGRES_STATEMENTS_HPP
#define IDEM_STORE_POSTGRES_STATEMENTS_HPP

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace idem::detail::postgres {

// The prepared statements every connection gets, by index.
enum statement : std::uint8_t {
  claim,
  complete,
  release,
  checkpoint,
  find,
  sweep,
  stuck,
  lock,
  scope_turn,
  scope_room,
  count
};
inline constexpr std::array<const char*, statement::count> statement_names{
    "idem_claim", "idem_complete", "idem_release", "idem_checkpoint", "idem_find",
    "idem_sweep", "idem_stuck",    "idem_lock",    "idem_scope_turn", "idem_scope_room"};

// Identifiers are validated, then quoted: a configured name can never inject SQL, and stays
// short enough that the derived names (<table>_meta, <table>_expiry) fit in 63 bytes.
inline std::string quoted_identifier(std::string_view name, const char* what,
                                     std::size_t max_length = 50) {
  const bool valid = !name.empty() && name.size() <= max_length &&
                     std::all_of(name.begin(), name.end(),
                                 [](char c) {
                                   return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                          (c >= '0' && c <= '9') || c == '_';
                                 }) &&
                     !(name.front() >= '0' && name.front() <= '9');
  if (!valid) {
    throw std::invalid_argument(std::string("idem::postgres_store: the ") + what + " name '" +
                                std::string(name) +
                                "' must be 1 to 50 letters, digits or underscores, not starting "
                                "with a digit");
  }
  return "\"" + std::string(name) + "\"";
}

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_STATEMENTS_HPP
