// A memory store bucket's chain: Harris and Michael's lock-free ordered list of nodes, ordered by
// (hint, scope, key), with replacement of a node by its record's next node in one step.
//
// A node is removed by marking its own link (node.hpp); whoever then swings its predecessor past
// it retires it to epoch reclamation (epoch.hpp), so the caller of every function here holds an
// epoch_guard, and no node it reads is freed under it.
#ifndef IDEM_STORE_MEMORY_DETAIL_LIST_HPP
#define IDEM_STORE_MEMORY_DETAIL_LIST_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <idem/core/detail/le64.hpp>
#include <idem/store/memory/detail/epoch.hpp>
#include <idem/store/memory/detail/node.hpp>

namespace idem::detail::memory {

/// Whether the `size` bytes at `a` and at `b` are the same: words of 8 bytes, the last one
/// ending at the end (overlapping the one before), and memcmp beyond 64 bytes.
inline bool same_bytes(const char* a, const char* b, std::size_t size) noexcept {
  if (size > 64) return std::memcmp(a, b, size) == 0;
  if (size >= 8) {
    for (std::size_t at = 0; at + 8 < size; at += 8) {
      if (read_le64(a + at) != read_le64(b + at)) return false;
    }
    return read_le64(a + size - 8) == read_le64(b + size - 8);
  }
  for (std::size_t at = 0; at < size; ++at) {
    if (a[at] != b[at]) return false;
  }
  return true;
}

/// Chains are ordered by (hint, scope, key), so a search stops at the first node not below.
inline int compare(const node& n, std::uint16_t hint, std::string_view scope,
                   std::string_view key) noexcept {
  if (n.hint != hint) return n.hint < hint ? -1 : 1;
  if (n.scope_size != scope.size()) return n.scope_size < scope.size() ? -1 : 1;
  // A search that reaches a node of the same hint and scope size has almost always found its
  // key: checked for equality first, inline, where two calls to memcmp cost a replay 5 ns.
  if (n.key_size == key.size() && same_bytes(n.scope().data(), scope.data(), scope.size()) &&
      same_bytes(n.key().data(), key.data(), key.size())) {
    return 0;
  }
  if (const int c = n.scope().compare(scope); c != 0) return c;
  return n.key().compare(key);
}

/// Where a search stopped.
struct position {
  std::atomic<std::uintptr_t>* previous;
  node* current;
  std::uintptr_t link;  // previous's value when it pointed to current
  bool found;
};

/// Unlinks a marked node from `previous`, which held `link` to it, pointing `previous` past it
/// to `next` (the node's own link), and retires it. False when `previous` changed meanwhile:
/// the caller walks its chain again.
template <class Lazy>
inline bool unlink(std::atomic<std::uintptr_t>* previous, std::uintptr_t link, std::uintptr_t next,
                   epoch_guard<Lazy>& guard) {
  std::uintptr_t expected = link;
  if (!previous->compare_exchange_strong(expected, next & ~mark_bit, std::memory_order_acq_rel)) {
    return false;
  }
  guard.retire(pointer(link), &node::destroy_erased<Lazy>);
  return true;
}

/// Harris-Michael search: the first node not below (hint, scope, key), and the link pointing to
/// it. Nodes marked removed or replaced are unlinked on the way; whoever unlinks one retires
/// it. A node found was unmarked when its link was read, so it was the record then. When the
/// key is absent, the node returned may be one only its link's hint was read of (possibly
/// marked): inserting before it is still correct, as the list needs only `previous` unmarked.
template <class Lazy>
inline position search(std::atomic<std::uintptr_t>& head, std::uint16_t hint,
                       std::string_view scope, std::string_view key, epoch_guard<Lazy>& guard) {
retry:
  std::atomic<std::uintptr_t>* previous = &head;
  std::uintptr_t link = previous->load(std::memory_order_acquire);
  for (node* current = pointer(link); current != nullptr; current = pointer(link)) {
    if (orders_after(link, hint)) return {previous, current, link, false};
    const std::uintptr_t next = current->next.load(std::memory_order_acquire);
    if (marked(next)) {
      if (!unlink(previous, link, next, guard)) goto retry;
      link = next & ~mark_bit;
      continue;
    }
    const int order = compare(*current, hint, scope, key);
    if (order >= 0) return {previous, current, link, order == 0};
    previous = &current->next;
    link = next;
  }
  return {previous, nullptr, 0, false};
}

/// Swaps `next` in for the record `at` found: one compare-and-swap on the found node's own
/// link, from its successor to `next` marked, with `next` linked to that successor. The mark
/// removes the old node and the link points past it to its replacement, in one step, so no
/// search can see the key absent in between. Fails when the old node was replaced or removed
/// first. The old node is then unlinked here if its predecessor still points to it, or by the
/// next search that passes.
template <class Lazy>
inline bool replace(const position& at, node* next, epoch_guard<Lazy>& guard) {
  node* const old = at.current;
  std::uintptr_t successor = old->next.load(std::memory_order_acquire);
  for (;;) {
    if (marked(successor)) return false;
    next->next.store(successor, std::memory_order_relaxed);
    if (old->next.compare_exchange_weak(successor, link_to(next) | mark_bit,
                                        std::memory_order_seq_cst, std::memory_order_acquire)) {
      break;
    }
  }
  std::uintptr_t expected = at.link;
  if (at.previous->compare_exchange_strong(expected, link_to(next), std::memory_order_acq_rel)) {
    guard.retire(old, &node::destroy_erased<Lazy>);
  }
  return true;
}

/// Removes the nodes of one chain that expired by `now`, calling removed(node) for each one this
/// call removed, and counts them. Only one remover a chain at a time (the memory store holds its
/// shard's sweep lock); claims and writes may race with it. Lazy: see idem/core/detail/lazy.hpp.
template <class Lazy = void, class OnRemoved>
std::size_t remove_expired(std::atomic<std::uintptr_t>& head, std::int64_t now,
                           OnRemoved&& removed) {
  std::size_t count = 0;
  epoch_guard<Lazy> guard;
retry:
  std::atomic<std::uintptr_t>* previous = &head;
  std::uintptr_t link = previous->load(std::memory_order_acquire);
  for (node* current = pointer(link); current != nullptr; current = pointer(link)) {
    std::uintptr_t next = current->next.load(std::memory_order_acquire);
    if (marked(next)) {
      if (!unlink(previous, link, next, guard)) goto retry;
      link = next & ~mark_bit;
      continue;
    }
    if (current->expires_at <= now) {
      // Marked without a replacement: removed. A write that replaced it first leaves its
      // replacement (as expired) to the next turn of this loop.
      if (current->next.compare_exchange_strong(next, next | mark_bit, std::memory_order_acq_rel)) {
        removed(static_cast<const node&>(*current));
        ++count;
      }
      continue;  // the same node again: now marked, it is unlinked
    }
    previous = &current->next;
    link = next;
  }
  return count;
}

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_LIST_HPP
