// JSON canonicalization (RFC 8785, the JSON Canonicalization Scheme) for fingerprinting bodies.
//
// A retried request must fingerprint like the original, and a different request must not. Two
// JSON texts that mean the same — members in another order, other whitespace, `1.0` for `1`,
// `"\u0041"` for `"A"` — canonicalize to the same bytes, so a digest of the canonical form tells
// a retry from a changed body. Members that legitimately change between deliveries (a webhook's
// timestamp or signature) can be left out by JSON Pointer.
//
// Canonical form (RFC 8785 §3.2): no whitespace; object members sorted by name compared as
// UTF-16 code units; strings with only the escapes JSON requires; numbers printed as
// ECMAScript's Number::toString prints them.
//
// Input is strict, because a lenient parser would give two fingerprints (or one) to texts other
// parsers disagree on: RFC 8259 JSON without extensions, limited to I-JSON (RFC 7493) where the
// canonical form needs it — duplicate member names, lone surrogates (escaped or encoded), numbers
// that overflow a double, and invalid UTF-8 are errors. One deliberate leniency: Unicode
// noncharacters (U+FDD0..U+FDEF, U+xxFFFE, U+xxFFFF), which I-JSON forbids, are accepted and kept:
// they are scalar values with one UTF-8 and one UTF-16 form, so their canonical form is defined,
// and refusing them would reject request bodies for no gain. Numbers that underflow to zero are
// zero, as ECMAScript reads them.
//
// The machinery is in json/: the document (document.hpp), UTF-8 and UTF-16 (utf8.hpp), the
// parser (parser.hpp), the excluded pointers (exclusions.hpp) and the writer (writer.hpp).
#ifndef IDEM_CORE_FINGERPRINT_CANONICALIZE_JSON_HPP
#define IDEM_CORE_FINGERPRINT_CANONICALIZE_JSON_HPP

#include <span>
#include <string>
#include <string_view>

#include <idem/core/fingerprint/json/detail/exclusions.hpp>
#include <idem/core/fingerprint/json/detail/parser.hpp>
#include <idem/core/fingerprint/json/detail/writer.hpp>
#include <idem/core/fingerprint/json/document.hpp>

namespace idem {

/// Appends the RFC 8785 canonical form of `json` to `out`.
///
/// `excluded` are JSON Pointers (RFC 6901, the plain string form: "/meta/timestamp",
/// "/a~1b" for the member "a/b", "/m~0n" for "m~n") of object members to leave out, with their
/// values, wherever they occur:
///  * A pointer's last token names an object member. A member it names that is absent removes
///    nothing; a path that runs into a scalar, or into a container of the other kind, removes
///    nothing either. Names are compared after the document's escapes are decoded.
///  * Tokens before the last step into members by name and into array elements by index
///    ("/items/0/id"). A pointer whose last token lands on an array element removes nothing:
///    dropping an element would shift the ones after it and change what the array says, so
///    elements are never left out (leave out the member that holds the array instead).
///  * The token "*" matches every member of an object and every element of an array
///    ("/items/*/timestamp"). RFC 6901 has no escape for '*', so a member literally named "*"
///    can be excluded only together with its siblings.
/// Exclusion never hides invalid input: the whole document is checked first.
///
/// Throws json_error for invalid input and std::invalid_argument (json_error's base) for an
/// invalid pointer, including "" (the whole document). Either way `out` is left as it was.
template <class Lazy = void>
inline void canonicalize_json(std::string_view json, std::string& out,
                              std::span<const std::string> excluded = {}) {
  const detail::exclusion_set<Lazy> exclusions(excluded);
  detail::json_document<Lazy> document;
  detail::json_parser<Lazy>(json, document).parse();
  out.reserve(out.size() + json.size());
  detail::canonical_writer<Lazy>(document, exclusions, out).write();
}

/// The RFC 8785 canonical form of `json`; see the overload above.
template <class Lazy = void>
inline std::string canonicalize_json(std::string_view json,
                                     std::span<const std::string> excluded = {}) {
  std::string out;
  canonicalize_json<Lazy>(json, out, excluded);
  return out;
}

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_CANONICALIZE_JSON_HPP
