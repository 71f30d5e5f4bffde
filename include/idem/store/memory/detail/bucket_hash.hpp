// The memory store's bucket hash: which shard and bucket a (scope, key) lives in, and the 16-bit
// hint its chain is ordered by.
//
// Keyed (SipHash-1-3 under a key drawn once per process, siphash.hpp) so that clients cannot aim
// their keys at one bucket; never stored, so free to differ from every other hash in idem.
#ifndef IDEM_STORE_MEMORY_DETAIL_BUCKET_HASH_HPP
#define IDEM_STORE_MEMORY_DETAIL_BUCKET_HASH_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include <idem/core/detail/le64.hpp>
#include <idem/store/memory/detail/siphash.hpp>

namespace idem::detail::memory {

/// SipHash-1-3 under `key` over the scope's bytes and the key's, each zero-padded to a whole
/// word, then both lengths as two 16-bit little-endian numbers, which SipHash's final block
/// carries. The lengths make the padding unambiguous, so distinct (scope, key) pairs are
/// distinct messages; the words are read where the bytes lie, with no copy into a buffer.
inline std::uint64_t bucket_hash(const siphash_key& key, std::string_view scope,
                                 std::string_view id) noexcept {
  siphash13 h(key);
  for (const std::string_view part : {scope, id}) {
    const std::size_t whole = part.size() / 8;
    for (std::size_t i = 0; i < whole; ++i)
      h.absorb(read_le64(part.data() + 8 * i));
    const std::size_t rest = part.size() % 8;
    if (rest == 0) continue;
    std::uint64_t last = 0;
    if (part.size() >= 8) {
      // The word that ends the part, its first bytes (already absorbed) shifted out.
      last = read_le64(part.data() + part.size() - 8) >> (8 * (8 - rest));
    } else {
      for (std::size_t i = 0; i < rest; ++i)
        last |= static_cast<std::uint64_t>(static_cast<unsigned char>(part[i])) << (8 * i);
    }
    h.absorb(last);
  }
  // The store refuses a scope or key of more than 65,535 bytes before it hashes; two pairs that
  // met beyond that would only share a bucket: every search compares scope and key in full.
  // In the final block rather than a word of their own: one SipHash round fewer.
  return h.finish((static_cast<std::uint64_t>(scope.size()) & 0xffff) |
                      ((static_cast<std::uint64_t>(id.size()) & 0xffff) << 16),
                  4);
}

/// The hash's top 6 bits choose one of the 64 shards.
inline constexpr int shard_shift = 58;

/// The 16 bits of the bucket hash just below the shard's: chains are ordered by them first, and
/// the bits that choose a bucket are the lowest ones, so within a bucket they vary as freely as
/// anywhere.
inline std::uint16_t hint_of(std::uint64_t hash) noexcept {
  return static_cast<std::uint16_t>(hash >> 42);
}

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_BUCKET_HASH_HPP
