// Conditional requests: If-Match against the version of the resource a request changes (RFC 9110
// section 13.1.1), the cheap kind of idempotence. Standard library only.
//
// A client that read version "v7" and sends `PUT /accounts/1` with `If-Match: "v7"` changes the
// account only while it is still at v7: the first attempt applies and moves it to v8, and a
// repeat of that attempt (a retry after a lost answer, a duplicate) finds v8 and is refused with
// 412, changing nothing. The request is idempotent by its condition, with no key and no record;
// the server needs only the current version, which it has anyway (docs/natural_idempotence.md
// compares this with keys).
//
//   auto condition = idem::http::parse_if_match_fields(request_values("If-Match"));
//   if (!condition) return reply(400, condition.message());
//   if (!idem::http::if_match_holds(condition, accounts.etag_of(id)))  // nullopt: no resource
//     return reply(412, ...);
//
// exchange.hpp's conditional_exchange does this before anything is claimed, with the problem
// types precondition-failed (412) and invalid-precondition (400).
//
// The field's grammar (RFC 9110 sections 13.1.1 and 8.8.3): "*", or a comma-separated list of
// entity-tags, each an opaque-tag in double quotes (%x21, %x23-7E and obs-text inside), weak ones
// prefixed W/. Several If-Match fields are one list (RFC 9110 section 5.3). If-Match compares
// strongly: a weak tag never matches.
#ifndef IDEM_HTTP_CONDITIONAL_HPP
#define IDEM_HTTP_CONDITIONAL_HPP

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace idem::http {

/// The field a conditional request carries its expected version in.
inline constexpr std::string_view if_match_field = "If-Match";

/// One entity-tag of a list: its opaque part, without the quotes, and whether it is weak.
struct entity_tag {
  std::string_view opaque;
  bool weak = false;
  friend bool operator==(const entity_tag&, const entity_tag&) = default;
};

/// If-Match read: absent (no condition), "*", a list of entity-tags, or malformed.
class parsed_if_match {
 public:
  /// True unless the field was there and malformed: refuse the request (400).
  explicit operator bool() const noexcept { return !malformed_; }
  /// Whether the request carries a condition at all.
  bool present() const noexcept { return present_; }
  /// "*": any current version of the resource (it must exist).
  bool any() const noexcept { return any_; }
  /// The listed tags (views into the field values); empty for "*" or no field.
  const std::vector<entity_tag>& tags() const noexcept { return tags_; }
  /// What is wrong, for a problem body; empty when nothing is.
  std::string_view message() const noexcept {
    return malformed_ ? std::string_view{"the If-Match field is not \"*\" or a list of quoted "
                                         "entity-tags (RFC 9110 section 13.1.1)"}
                      : std::string_view{};
  }

 private:
  template <class Values>
  friend parsed_if_match parse_if_match_fields(const Values& values);

  bool present_ = false;
  bool any_ = false;
  bool malformed_ = false;
  std::vector<entity_tag> tags_;
};

namespace detail {

constexpr bool is_etagc(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  return u == 0x21 || (u >= 0x23 && u <= 0x7e) || u >= 0x80;
}

/// Appends the entity-tags of one field value to `tags`; false when it is not a well-formed
/// list. "*" sets `any` and must stand alone.
inline bool read_if_match(std::string_view value, bool& any, std::vector<entity_tag>& tags) {
  std::size_t i = 0;
  const auto skip_ows = [&] {
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t'))
      ++i;
  };
  skip_ows();
  if (i < value.size() && value[i] == '*') {
    ++i;
    skip_ows();
    if (i != value.size()) return false;
    any = true;
    return true;
  }
  bool listed = false;
  while (true) {
    skip_ows();
    if (i == value.size()) break;
    if (value[i] == ',') {  // empty list elements are allowed and ignored (RFC 9110 5.6.1)
      ++i;
      continue;
    }
    bool weak = false;
    if (value.substr(i, 2) == "W/") {
      weak = true;
      i += 2;
    }
    if (i == value.size() || value[i] != '"') return false;
    const std::size_t open = ++i;
    while (i < value.size() && is_etagc(value[i]))
      ++i;
    if (i == value.size() || value[i] != '"') return false;
    tags.push_back({value.substr(open, i - open), weak});
    ++i;
    listed = true;
    skip_ows();
    if (i == value.size()) break;
    if (value[i] != ',') return false;
    ++i;
  }
  return listed;
}

}  // namespace detail

/// Reads every If-Match value of a request as one list (RFC 9110 section 5.3); none is no
/// condition. "*" mixed with tags, an unquoted or unterminated tag, an empty field: malformed.
template <class Values>
parsed_if_match parse_if_match_fields(const Values& values) {
  parsed_if_match parsed;
  for (const auto& raw : values) {
    const std::string_view value(raw);
    parsed.present_ = true;
    if (!detail::read_if_match(value, parsed.any_, parsed.tags_)) parsed.malformed_ = true;
  }
  if (parsed.any_ && !parsed.tags_.empty()) parsed.malformed_ = true;
  if (parsed.malformed_) {
    parsed.any_ = false;
    parsed.tags_.clear();
  }
  return parsed;
}

/// Reads one If-Match field value.
inline parsed_if_match parse_if_match(std::string_view value) {
  const std::string_view values[] = {value};
  return parse_if_match_fields(values);
}

/// Whether the condition holds for the resource's current entity-tag (its opaque part), or for
/// no resource (std::nullopt): no condition always holds; "*" holds when the resource exists; a
/// list holds when one of its strong tags is the current tag (strong comparison, RFC 9110
/// section 8.8.3.2: a weak tag never matches). A malformed condition never holds.
inline bool if_match_holds(const parsed_if_match& condition,
                           std::optional<std::string_view> current) noexcept {
  if (!condition) return false;
  if (!condition.present()) return true;
  if (!current) return false;
  if (condition.any()) return true;
  for (const entity_tag& tag : condition.tags()) {
    if (!tag.weak && tag.opaque == *current) return true;
  }
  return false;
}

/// The ETag field value for a version: the opaque part in double quotes, W/ before a weak one.
/// Throws std::invalid_argument for a character an entity-tag cannot hold (a double quote, a
/// space, a control character).
inline std::string format_etag(std::string_view opaque, bool weak = false) {
  for (const char c : opaque) {
    if (!detail::is_etagc(c)) {
      throw std::invalid_argument(
          "idem::http::format_etag: an entity-tag holds no double quote, space or control "
          "character");
    }
  }
  std::string out = weak ? "W/\"" : "\"";
  out.append(opaque);
  out += '"';
  return out;
}

}  // namespace idem::http

#endif  // IDEM_HTTP_CONDITIONAL_HPP
