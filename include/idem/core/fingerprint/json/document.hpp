// The parsed JSON document the canonicalizer works on
// (idem/core/fingerprint/canonicalize_json.hpp), and the error it throws for input it refuses.
#ifndef IDEM_CORE_FINGERPRINT_JSON_DOCUMENT_HPP
#define IDEM_CORE_FINGERPRINT_JSON_DOCUMENT_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/core/detail/lazy.hpp>

namespace idem {

/// The deepest nesting of arrays and objects accepted. Deeper input is refused with json_error
/// rather than allowed to exhaust the stack: the parser and the writer recurse once per level.
inline constexpr std::size_t max_json_depth = 256;

/// Thrown for input that is not valid JSON (RFC 8259) or not canonicalizable I-JSON (RFC 7493).
/// what() says what is wrong and at which byte; offset() is that byte's index in the input: the
/// offending byte or the start of the offending token (the opening quote of an unterminated
/// string, the second of two equal member names), or the input's size where it ends too early.
class json_error : public std::invalid_argument {
 public:
  json_error(std::string what, std::size_t offset)
      : std::invalid_argument(message(std::move(what), offset)), offset_(offset) {}

  std::size_t offset() const noexcept { return offset_; }

 private:
  static std::string message(std::string what, std::size_t offset) {
    return "idem: invalid JSON: " + std::move(what) + " (at byte " + std::to_string(offset) + ')';
  }

  std::size_t offset_;
};

namespace detail {

// ---------------------------------------------------------------------------------------------
// The parsed document: a flat pre-order array of nodes, one allocation for all of them, plus one
// arena that holds every decoded string. Offsets are 32-bit to keep a node at 16 bytes; the
// input is limited to 4 GiB accordingly (far beyond any request body).

enum class json_kind : std::uint8_t {
  null,
  false_literal,
  true_literal,
  number,
  string,
  array,
  object
};

struct json_node {
  json_kind kind;
  // One past the last node of this subtree, so a reader steps from one child to the next
  // without a pointer per child.
  std::uint32_t end;
  // string: the decoded UTF-8 text in the arena (offset, length).
  // number: index into json_document::numbers (first), unused (second).
  // object: the members' name nodes, sorted, in json_document::member_order (offset, count).
  //         The value of a member is the node right after its name.
  std::uint32_t first;
  std::uint32_t second;
};

template <class Lazy = void>
struct json_document {
  std::vector<lazy_t<Lazy, json_node>> nodes;
  std::vector<lazy_t<Lazy, double>> numbers;
  std::vector<lazy_t<Lazy, std::uint32_t>> member_order;
  std::string arena;

  std::string_view text(const json_node& node) const noexcept {
    return std::string_view(arena).substr(node.first, node.second);
  }
};

// The text of the three literals, as the parser reads them and the writer writes them.
constexpr std::string_view literal_text(json_kind kind) noexcept {
  switch (kind) {
    case json_kind::false_literal:
      return "false";
    case json_kind::true_literal:
      return "true";
    default:
      return "null";
  }
}

}  // namespace detail

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_JSON_DOCUMENT_HPP
