// Fingerprints: the digest that tells a repeat of a request from a different request under the
// same key.
//
// A fingerprint covers the method, the target, the body and the headers a service chooses (by
// default none: most headers, a Date or a trace id, change between retries of one intent). The
// parts are length-prefixed before they are hashed, so moving bytes from the target into the
// body can never give the same digest.
//
// Any HashFunction (xxh3_128, the default; sha256) is a fingerprint policy as it is; wrap it in
// request_fingerprint to cover headers, or in canonical_json
// (idem/core/fingerprint/canonical_json.hpp) so that key order and whitespace in a JSON body do
// not count. A fingerprint that cannot read a request throws std::invalid_argument (json_error is
// one), and the call's verdict is invalid_request: nothing is claimed.
//
// The digest is persisted in records, so it must never change for the same request: it is not
// the per-process keyed hash a memory store buckets by.
#ifndef IDEM_CORE_FINGERPRINT_FINGERPRINT_HPP
#define IDEM_CORE_FINGERPRINT_FINGERPRINT_HPP

#include <concepts>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/core/detail/le64.hpp>
#include <idem/core/fingerprint/digest.hpp>
#include <idem/core/request.hpp>

namespace idem {

/// What a `fingerprint` policy must provide: a const call operator from request_view to digest.
template <class F>
concept Fingerprint = std::default_initializable<F> && std::copy_constructible<F> &&
    requires(const F& fingerprint, const request_view& request) {
  { fingerprint(request) } -> std::same_as<digest>;
};

namespace detail {

// A part as hashed: its size as 8 bytes, little-endian, then its bytes.
template <class State>
void hash_part(State& state, std::string_view part) {
  char length[8];
  write_le64(length, part.size());
  state.update(std::string_view{length, sizeof length});
  state.update(part);
}

// The same framing written to `out`, which has room; answers the end of what was written.
inline char* frame_part(char* out, std::string_view part) noexcept {
  // The length in one 8-byte store. The hash's wide loads over this buffer follow at once and
  // wait for the stores either way; on an Intel Xeon, when the hash took the stripes in three
  // kernel calls, byte stores had made the default fingerprint of a 256-byte body 3.5 ns
  // faster, but with the kernel called once (AMD EPYC) the single store is 2 ns faster.
  write_le64(out, part.size());
  out += sizeof(std::uint64_t);
  if (!part.empty()) std::memcpy(out, part.data(), part.size());
  return out + part.size();
}

}  // namespace detail

/// Method, target, the listed headers (by name, case-insensitive; an absent header counts as
/// absent, not as empty) and the body, hashed with H.
template <HashFunction H>
struct request_fingerprint {
  std::vector<std::string> headers{};

  digest operator()(const request_view& request) const {
    // Without headers, a request is framed into one buffer on the stack and hashed in one call:
    // the same bytes, so the same digest, without the streaming state's buffering of every part
    // (which cost about as much as hashing a 256-byte body). A hash that takes its input in two
    // parts is not given the body in that buffer at all.
    constexpr std::string_view tag = "idem fingerprint v1";
    constexpr std::size_t inline_bytes = 1024;
    const std::size_t framed = tag.size() + 3 * sizeof(std::uint64_t) + request.method.size() +
                               request.target.size() + request.body.size();
    if constexpr (requires(std::span<char> buffer, std::string_view part) {
                    H::hash(buffer, part.size(), part);
                  }) {
      // A hash that reads two parts where they lie (xxh3_128) is given the framing, up to and
      // including the body's length, as one part and the body as the other: the body, however
      // long, is hashed in place, not copied behind the framing first.
      if (headers.empty() && framed - request.body.size() <= inline_bytes) {
        char buffer[inline_bytes + 64];
        char* out = buffer;
        std::memcpy(out, tag.data(), tag.size());
        out += tag.size();
        out = detail::frame_part(out, request.method);
        out = detail::frame_part(out, request.target);
        detail::write_le64(out, request.body.size());
        out += sizeof(std::uint64_t);
        return H::hash(std::span<char>{buffer}, static_cast<std::size_t>(out - buffer),
                       request.body);
      }
    }
    if (headers.empty() && framed <= inline_bytes) {
      char buffer[inline_bytes];
      char* out = buffer;
      std::memcpy(out, tag.data(), tag.size());
      out += tag.size();
      for (const std::string_view part : {request.method, request.target, request.body}) {
        out = detail::frame_part(out, part);
      }
      return H::hash(std::string_view{buffer, framed});
    }
    typename H::state state;
    // A version tag, so that a later change of the framing can never meet an old record.
    state.update(tag);
    detail::hash_part(state, request.method);
    detail::hash_part(state, request.target);
    for (const std::string& name : headers) {
      const std::string_view value = request.header(name);
      // An absent header is a null view; a present one, even empty, points at its text.
      const bool present = value.data() != nullptr;
      detail::hash_part(state, name);
      state.update(std::string_view{present ? "\x01" : "\x00", 1});
      if (present) detail::hash_part(state, value);
    }
    detail::hash_part(state, request.body);
    return state.finish();
  }
};

/// The fingerprint a policy names: a hash function is used as request_fingerprint<H> without
/// headers; anything else is used as it is.
template <class F>
struct fingerprint_policy {
  using type = F;
};
template <HashFunction F>
struct fingerprint_policy<F> {
  using type = request_fingerprint<F>;
};
template <class F>
using fingerprint_for = typename fingerprint_policy<F>::type;

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_FINGERPRINT_HPP
