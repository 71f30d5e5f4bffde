// Requests and responses as the server side sees them.
//
// A fingerprint covers what makes two requests "the same": method, target, body and the headers
// a service chooses. request_view is that, without owning anything, so a service's own request
// type only has to say where those parts are (a `view()` member, or a conversion). http_request
// and http_response are small owning types for services and tests that have none of their own;
// http_response is also a response type that idempotent stores and replays byte for byte.
#ifndef IDEM_CORE_REQUEST_HPP
#define IDEM_CORE_REQUEST_HPP

#include <concepts>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem {

/// One header: name and value as they arrived.
struct header_field {
  std::string_view name;
  std::string_view value;
};

/// HTTP header names are case-insensitive (RFC 9110, 5.1); values are compared exactly.
constexpr bool header_name_equals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

/// The parts of a request a fingerprint may cover. Nothing is owned: the viewed request must
/// outlive the view.
///
/// Headers are looked up by name, because a fingerprint covers only the few a service chooses:
/// either from `headers`, or, for a request type that keeps its headers its own way, through
/// `header_lookup(header_source, name)`, which then takes precedence.
struct request_view {
  std::string_view method{};
  std::string_view target{};
  std::string_view body{};
  std::span<const header_field> headers{};
  const void* header_source = nullptr;
  std::string_view (*header_lookup)(const void* source, std::string_view name) = nullptr;

  /// The first value of the header `name` (case-insensitive). Absent is a null view (data() is
  /// nullptr), which find_header turns into std::nullopt; a lookup must keep to that.
  constexpr std::string_view header(std::string_view name) const noexcept {
    if (header_lookup != nullptr) return header_lookup(header_source, name);
    for (const header_field& field : headers) {
      if (header_name_equals(field.name, name)) return field.value;
    }
    return {};
  }
  /// The header's value, or std::nullopt when the request has no such header.
  constexpr std::optional<std::string_view> find_header(std::string_view name) const noexcept {
    const std::string_view value = header(name);
    if (value.data() == nullptr) return std::nullopt;
    return value;
  }
};

namespace detail {

inline std::string_view find_header_in(
    const std::vector<std::pair<std::string, std::string>>& headers,
    std::string_view name) noexcept {
  for (const auto& [field_name, value] : headers) {
    if (header_name_equals(field_name, name)) return value;
  }
  return {};
}

}  // namespace detail

/// An owning request, for services without a request type of their own.
struct http_request {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  /// The first value of the header `name` (case-insensitive); a null view when absent.
  std::string_view header(std::string_view name) const noexcept {
    return detail::find_header_in(headers, name);
  }
  /// The header's value, or std::nullopt when absent.
  std::optional<std::string_view> find_header(std::string_view name) const noexcept {
    return view().find_header(name);
  }

  request_view view() const noexcept {
    return {method, target, body, {}, this, [](const void* self, std::string_view name) {
              return static_cast<const http_request*>(self)->header(name);
            }};
  }
};

/// An owning response: what a handler returns and what a replay gives back, byte for byte.
struct http_response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  std::string_view header(std::string_view name) const noexcept {
    return detail::find_header_in(headers, name);
  }

  friend bool operator==(const http_response&, const http_response&) = default;
};

namespace detail {

template <class Request>
concept has_request_view = requires(const Request& request) {
  { request.view() } -> std::convertible_to<request_view>;
};

}  // namespace detail

/// Whether idempotent can fingerprint a request of this type: it converts to request_view, has
/// a `view()` member returning one, or is text (taken as the body alone).
template <class Request>
concept Fingerprintable = std::convertible_to<const Request&, request_view> ||
    detail::has_request_view<Request> || std::convertible_to<const Request&, std::string_view>;

/// The fingerprinted parts of `request`.
template <Fingerprintable Request>
constexpr request_view view_of(const Request& request) noexcept {
  if constexpr (std::convertible_to<const Request&, request_view>) {
    return request;
  } else if constexpr (detail::has_request_view<Request>) {
    return request.view();
  } else {
    return request_view{.body = std::string_view{request}};
  }
}

}  // namespace idem

#endif  // IDEM_CORE_REQUEST_HPP
