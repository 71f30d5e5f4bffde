// One memory store record as it lies in memory (a node: fixed fields, then its scope, key,
// fingerprint, response and recovery bytes in the same allocation), and the tagged links that
// chain nodes: an address, Harris's removal mark and a 16-bit ordering hint in one word.
//
// A node is immutable once linked except for `next`: a write makes the record's next node and
// swaps it in whole, so a reader sees a whole record or the one after it, never a mix.
#ifndef IDEM_STORE_MEMORY_DETAIL_NODE_HPP
#define IDEM_STORE_MEMORY_DETAIL_NODE_HPP

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string_view>

#include <idem/store/contract.hpp>
#include <idem/store/memory/detail/block_cache.hpp>

namespace idem::detail::memory {

/// store_time as the nanoseconds a node keeps, and back.
inline std::int64_t to_ns(store_time t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline store_time from_ns(std::int64_t ns) noexcept {
  return store_time{std::chrono::duration_cast<store_time::duration>(std::chrono::nanoseconds{ns})};
}

/// A record's state; `released` is kept (with its fence) until the record expires.
enum class node_state : std::uint8_t { in_progress, completed, released };

struct node {
  std::atomic<std::uintptr_t> next;  // the next node; see link_to for its bits
  std::int64_t created_at;
  std::int64_t lease_until;
  std::int64_t expires_at;
  std::uint64_t fence;
  std::uint32_t response_size;
  std::uint32_t recovery_size;
  std::uint16_t scope_size;
  std::uint16_t key_size;
  std::uint16_t hint;  // 16 bits of the bucket hash: see hint_of
  std::uint8_t fingerprint_size;
  node_state state;

  const char* tail() const noexcept { return reinterpret_cast<const char*>(this + 1); }
  char* tail() noexcept { return reinterpret_cast<char*>(this + 1); }
  std::size_t id_size() const noexcept { return std::size_t{scope_size} + key_size; }
  std::string_view scope() const noexcept { return {tail(), scope_size}; }
  std::string_view key() const noexcept { return {tail() + scope_size, key_size}; }
  const char* fingerprint_bytes() const noexcept { return tail() + id_size(); }
  std::string_view payload_response() const noexcept {
    return {fingerprint_bytes() + fingerprint_size, response_size};
  }
  std::string_view payload_recovery() const noexcept {
    return {fingerprint_bytes() + fingerprint_size + response_size, recovery_size};
  }
  std::size_t payload_size() const noexcept { return std::size_t{response_size} + recovery_size; }
  bool matches(const digest& fingerprint) const noexcept {
    return fingerprint.size() == fingerprint_size &&
           std::memcmp(fingerprint_bytes(), fingerprint.data(), fingerprint_size) == 0;
  }
  digest fingerprint() const noexcept {
    return digest{std::span<const std::uint8_t>(
        reinterpret_cast<const std::uint8_t*>(fingerprint_bytes()), fingerprint_size)};
  }

  // Nodes live in blocks of block_cache<Lazy>: the functions that make and free them are
  // templates (Lazy means nothing) so that the cache compiles only where they are used
  // (idem/core/detail/lazy.hpp). node::make_claim(...) and node::destroy(n) use block_cache<>.

  /// A node with room for its variable parts, the scope and key copied in, the rest zero.
  template <class Lazy = void>
  static node* allocate(std::string_view scope, std::string_view key, std::size_t fingerprint_size,
                        std::size_t payload_size) {
    void* memory = block_cache<Lazy>::local().take(sizeof(node) + scope.size() + key.size() +
                                                   fingerprint_size + payload_size);
    auto* n = new (memory) node{};
    n->scope_size = static_cast<std::uint16_t>(scope.size());
    n->key_size = static_cast<std::uint16_t>(key.size());
    n->fingerprint_size = static_cast<std::uint8_t>(fingerprint_size);
    if (!scope.empty()) std::memcpy(n->tail(), scope.data(), scope.size());
    if (!key.empty()) std::memcpy(n->tail() + scope.size(), key.data(), key.size());
    return n;
  }
  /// A claim of (scope, key) under `fence`: in progress, times from the request.
  template <class Lazy = void>
  static node* make_claim(const claim_request& request, std::uint16_t hint, std::uint64_t fence) {
    node* n = allocate<Lazy>(request.scope, request.key, request.fingerprint.size(),
                             request.recovery.size());
    const std::int64_t now = to_ns(request.now);
    n->created_at = now;
    n->lease_until = now + request.lease.count();
    n->expires_at = now + request.retention.count();
    n->fence = fence;
    n->hint = hint;
    n->state = node_state::in_progress;
    char* bytes = n->tail() + n->id_size();
    std::memcpy(bytes, request.fingerprint.data(), request.fingerprint.size());
    if (!request.recovery.empty()) {
      n->recovery_size = static_cast<std::uint32_t>(request.recovery.size());
      std::memcpy(bytes + request.fingerprint.size(), request.recovery.data(),
                  request.recovery.size());
    }
    return n;
  }
  /// A copy of `from` with other response and recovery bytes.
  template <class Lazy = void>
  static node* copy(const node& from, std::string_view response, std::string_view recovery) {
    node* n = allocate<Lazy>(from.scope(), from.key(), from.fingerprint_size,
                             response.size() + recovery.size());
    n->created_at = from.created_at;
    n->lease_until = from.lease_until;
    n->expires_at = from.expires_at;
    n->fence = from.fence;
    n->hint = from.hint;
    n->state = from.state;
    n->response_size = static_cast<std::uint32_t>(response.size());
    n->recovery_size = static_cast<std::uint32_t>(recovery.size());
    char* bytes = n->tail() + n->id_size();
    std::memcpy(bytes, from.fingerprint_bytes(), from.fingerprint_size);
    bytes += from.fingerprint_size;
    if (!response.empty()) std::memcpy(bytes, response.data(), response.size());
    if (!recovery.empty()) std::memcpy(bytes + response.size(), recovery.data(), recovery.size());
    return n;
  }
  std::size_t allocated_size() const noexcept {
    return sizeof(node) + id_size() + fingerprint_size + payload_size();
  }
  template <class Lazy = void>
  static void destroy(node* n) noexcept {
    const std::size_t size = n->allocated_size();
    n->~node();
    block_cache<Lazy>::give(n, size);
  }
  /// destroy, in the form epoch reclamation calls.
  template <class Lazy = void>
  static void destroy_erased(void* n) noexcept {
    destroy<Lazy>(static_cast<node*>(n));
  }
};

static_assert(sizeof(node) == 56, "memory_store's node header is 56 bytes");

// A chain link is an integer: the next node's address, Harris's removal mark in bit 0 (set: the
// node holding this link is removed, or replaced by the node the link points to), and, where the
// address leaves its top 16 bits clear (64-bit user space without pointer tagging), a hint in
// them: the next node's `hint`, with bit 1 saying it is there. A node whose address uses the top
// bits is linked without a hint and read as before.
inline constexpr std::uintptr_t mark_bit = 1;
inline constexpr std::uintptr_t hint_bit = 2;
inline constexpr bool links_carry_hints = sizeof(std::uintptr_t) == 8;
inline constexpr int hint_shift = 48;
inline constexpr std::uint64_t address_bits = (std::uint64_t{1} << hint_shift) - 1;

inline std::uintptr_t link_to(const node* n) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(n);
  if constexpr (links_carry_hints) {
    if ((address & ~address_bits) == 0) {
      return static_cast<std::uintptr_t>(address | hint_bit |
                                         (std::uint64_t{n->hint} << hint_shift));
    }
  }
  return address;
}
inline node* pointer(std::uintptr_t link) noexcept {
  std::uintptr_t address = link & ~(mark_bit | hint_bit);
  if constexpr (links_carry_hints) {
    if ((link & hint_bit) != 0) address &= static_cast<std::uintptr_t>(address_bits);
  }
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  return reinterpret_cast<node*>(address);
}
inline bool marked(std::uintptr_t link) noexcept {
  return (link & mark_bit) != 0;
}
/// Whether the link's node is known, from its hint alone, to order after a key whose hint is
/// `hint`.
inline bool orders_after(std::uintptr_t link, std::uint16_t hint) noexcept {
  if constexpr (links_carry_hints) {
    return (link & hint_bit) != 0 && static_cast<std::uint64_t>(link) >> hint_shift > hint;
  }
  return false;
}

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_NODE_HPP
