// Response codecs: what happens to a response's bytes on their way into the store and back, for
// services whose responses (and recovery points) must not sit in the store as they are: card
// numbers, personal data, tokens.
//
// A `response_codec` policy provides
//
//   void seal(std::string_view plain, std::string& out) const;   // appends the stored form
//   void open(std::string_view sealed, std::string& out) const;  // appends the plain form back
//
// idempotent and inbox seal every response and every recovery point before the store sees it,
// and open them when a repeat replays or a takeover resumes. Encryption is the usual seal (an
// AEAD such as AES-GCM with a key from the service's key store, the record's scope as associated
// data when it should be bound to it); open throws idem::codec_error when the bytes do not open
// (another key, tampered), and the guarded call passes that exception to its caller. A redacting
// codec may drop fields for good, in which case a replay answers what is left.
//
// What is not sealed: the scope, the key, the fingerprint (a digest already) and the record's
// times, which the store needs to do its work. stuck() lists records as stored (sealed).
// max_response_bytes counts the sealed bytes.
#ifndef IDEM_SERVER_RESPONSE_CODEC_HPP
#define IDEM_SERVER_RESPONSE_CODEC_HPP

#include <concepts>
#include <string>
#include <string_view>

namespace idem {

/// What a `response_codec` policy must provide (see above).
template <class C>
concept ResponseCodec = std::copy_constructible<C> &&
    requires(const C& codec, std::string_view bytes, std::string& out) {
  codec.seal(bytes, out);
  codec.open(bytes, out);
};

/// The default: the bytes are stored as they are, at no cost (idempotent skips the calls).
struct plain_response_codec {
  void seal(std::string_view plain, std::string& out) const { out.append(plain); }
  void open(std::string_view sealed, std::string& out) const { out.append(sealed); }
};

}  // namespace idem

#endif  // IDEM_SERVER_RESPONSE_CODEC_HPP
