// SipHash-1-3: the keyed hash the memory store buckets by.
//
// An attacker who can choose keys (every client chooses its idempotency keys) and knows the
// bucketing hash can send keys that all land in one bucket and turn every lookup into a walk of
// one long chain. SipHash (Aumasson and Bernstein, 2012) is a pseudo-random function of a
// 128-bit secret key, so without the key the bucket of a key cannot be predicted. The 1-3
// variant (one compression round, three finalisation rounds) is what Rust's HashMap and
// CPython use for the same purpose. The key is drawn once per process and never stored: this
// hash is for memory only, never the persisted fingerprint.
#ifndef IDEM_STORE_MEMORY_DETAIL_SIPHASH_HPP
#define IDEM_STORE_MEMORY_DETAIL_SIPHASH_HPP

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <idem/core/detail/entropy.hpp>
#include <idem/core/detail/le64.hpp>

namespace idem::detail {

struct siphash_key {
  std::uint64_t k0;
  std::uint64_t k1;
};

class siphash13 {
 public:
  explicit siphash13(siphash_key key) noexcept
      : v0_(key.k0 ^ 0x736f6d6570736575ULL),
        v1_(key.k1 ^ 0x646f72616e646f6dULL),
        v2_(key.k0 ^ 0x6c7967656e657261ULL),
        v3_(key.k1 ^ 0x7465646279746573ULL) {}

  void update(std::string_view bytes) noexcept {
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    std::size_t size = bytes.size();
    total_ += size;
    if (pending_size_ > 0) {
      while (size > 0 && pending_size_ < 8) {
        pending_ |= static_cast<std::uint64_t>(*data++) << (8 * pending_size_++);
        --size;
      }
      if (pending_size_ < 8) return;
      compress(pending_);
      pending_ = 0;
      pending_size_ = 0;
    }
    while (size >= 8) {
      compress(load64(data));
      data += 8;
      size -= 8;
    }
    while (size > 0) {
      pending_ |= static_cast<std::uint64_t>(*data++) << (8 * pending_size_++);
      --size;
    }
  }

  /// One-shot over contiguous bytes: the same value as update() then finish(), without the
  /// byte-at-a-time path streaming needs for pieces that do not fill a word.
  static std::uint64_t hash(siphash_key key, const void* data, std::size_t size) noexcept {
    siphash13 h(key);
    const auto* bytes = static_cast<const unsigned char*>(data);
    const std::size_t words = size / 8;
    for (std::size_t i = 0; i < words; ++i)
      h.compress(load64(bytes + 8 * i));
    std::uint64_t last = 0;
    for (std::size_t i = 8 * words; i < size; ++i) {
      last |= static_cast<std::uint64_t>(bytes[i]) << (8 * (i - 8 * words));
    }
    h.pending_ = last;
    h.total_ = size;
    return h.finish();
  }

  /// For callers that frame their message in whole words themselves (the memory store's bucket
  /// hash): absorbs `word` as the next 8 bytes of the message. Only before any update().
  void absorb(std::uint64_t word) noexcept {
    compress(word);
    total_ += 8;
  }

  /// For the same callers: ends a message of whole absorbed words with `tail_size` (below 8)
  /// more bytes, given as a little-endian word, in SipHash's final block.
  std::uint64_t finish(std::uint64_t tail, std::size_t tail_size) noexcept {
    pending_ = tail;
    total_ += tail_size;
    return finish();
  }

  std::uint64_t finish() noexcept {
    compress(pending_ | (static_cast<std::uint64_t>(total_ & 0xff) << 56));
    v2_ ^= 0xff;
    round();
    round();
    round();
    return v0_ ^ v1_ ^ v2_ ^ v3_;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int b) noexcept { return (x << b) | (x >> (64 - b)); }
  // Words are read little-endian, as the specification reads them, on every host.
  static std::uint64_t load64(const unsigned char* p) noexcept { return read_le64(p); }
  void round() noexcept {
    v0_ += v1_;
    v1_ = rotl(v1_, 13);
    v1_ ^= v0_;
    v0_ = rotl(v0_, 32);
    v2_ += v3_;
    v3_ = rotl(v3_, 16);
    v3_ ^= v2_;
    v0_ += v3_;
    v3_ = rotl(v3_, 21);
    v3_ ^= v0_;
    v2_ += v1_;
    v1_ = rotl(v1_, 17);
    v1_ ^= v2_;
    v2_ = rotl(v2_, 32);
  }
  void compress(std::uint64_t m) noexcept {
    v3_ ^= m;
    round();
    v0_ ^= m;
  }

  std::uint64_t v0_, v1_, v2_, v3_;
  std::uint64_t pending_ = 0;
  std::size_t pending_size_ = 0;
  std::size_t total_ = 0;
};

// The process's bucketing key: random, drawn on first use.
inline siphash_key process_hash_key() {
  static const siphash_key key = [] {
    std::uint64_t words[2];
    fill_with_entropy(words, 2);
    return siphash_key{words[0], words[1]};
  }();
  return key;
}

}  // namespace idem::detail

#endif  // IDEM_STORE_MEMORY_DETAIL_SIPHASH_HPP
