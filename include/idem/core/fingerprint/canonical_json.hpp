// canonical_json<Inner>: a fingerprint of a JSON request that ignores what JSON does not mean.
//
// Two bodies that differ only in member order, whitespace or number spelling ({"a":1.0,"b":2}
// and { "b" : 2, "a" : 1 }) are one request; the body is put in RFC 8785 canonical form before
// the Inner fingerprint (by default xxh3_128 over method, target and body) hashes it. Volatile
// members, such as a webhook's delivery timestamp, can be left out by JSON Pointer (RFC 6901),
// so a redelivery with a new timestamp is still recognised as the same event.
//
// A body that is not valid JSON throws json_error (a std::invalid_argument): the call's verdict
// is invalid_request, and nothing is claimed. An empty body is fingerprinted as it is.
#ifndef IDEM_CORE_FINGERPRINT_CANONICAL_JSON_HPP
#define IDEM_CORE_FINGERPRINT_CANONICAL_JSON_HPP

#include <string>
#include <string_view>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/core/fingerprint/canonicalize_json.hpp>
#include <idem/core/fingerprint/digest.hpp>
#include <idem/core/fingerprint/fingerprint.hpp>
#include <idem/core/fingerprint/xxh3.hpp>
#include <idem/core/request.hpp>

namespace idem {

template <class Inner = xxh3_128>
struct canonical_json {
  static_assert(Fingerprint<fingerprint_for<Inner>>,
                "canonical_json<Inner>: Inner must be a hash function or a fingerprint.");

  /// JSON Pointers of members left out of the fingerprint, e.g. "/meta/sent_at".
  std::vector<std::string> excluded{};
  /// The fingerprint of the canonical request; to cover headers, give it a
  /// request_fingerprint<H> with its header list.
  fingerprint_for<Inner> inner{};

  digest operator()(const request_view& request) const {
    if (request.body.empty()) return inner(request);
    // One buffer per thread, reused: canonicalising a body then allocates only when it is
    // larger than any this thread has seen.
    thread_local std::string canonical;
    canonical.clear();
    // Lazy is void whatever Inner is, but spelled with Inner the call depends on it: clang++
    // would otherwise convert `excluded` to a span (and instantiate what that takes) in every
    // translation unit that includes this header, where canonical_json<Inner> is defined.
    canonicalize_json<detail::lazy_t<Inner, void>>(request.body, canonical, excluded);
    request_view canonical_request = request;
    canonical_request.body = canonical;
    return inner(canonical_request);
  }
};

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_CANONICAL_JSON_HPP
