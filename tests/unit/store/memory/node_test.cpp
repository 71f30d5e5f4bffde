// A memory store node: its fields and variable parts in one block, and the tagged links that
// chain nodes (address, removal mark and ordering hint in one word).
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/node.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace node_test {

using idem::detail::memory::node;
using idem::detail::memory::node_state;
using namespace std::chrono_literals;

namespace {

const idem::store_time start{std::chrono::seconds{1767225600}};

idem::digest print(std::uint8_t seed) {
  std::uint8_t bytes[16] = {seed, 2, 3};
  return idem::digest{bytes};
}

}  // namespace

TEST_CASE("node: a claim holds its scope, key and fingerprint, in progress, times from the request",
          "[memory_store][node]") {
  const std::string key(300, 'k');
  node* n = node::make_claim({"tenant", key, print(7), start, 30s, 24h}, 0xbeef, 3);
  CHECK(n->scope() == "tenant");
  CHECK(n->key() == key);
  CHECK(n->id_size() == 6 + 300);
  CHECK(n->fingerprint() == print(7));
  CHECK(n->matches(print(7)));
  CHECK_FALSE(n->matches(print(8)));
  CHECK_FALSE(n->matches(idem::digest{}));  // another size
  CHECK(n->state == node_state::in_progress);
  CHECK(n->fence == 3);
  CHECK(n->hint == 0xbeef);
  CHECK(idem::detail::memory::from_ns(n->created_at) == start);
  CHECK(idem::detail::memory::from_ns(n->lease_until) == start + 30s);
  CHECK(idem::detail::memory::from_ns(n->expires_at) == start + 24h);
  CHECK(n->payload_size() == 0);
  CHECK(n->payload_response().empty());
  CHECK(n->allocated_size() == sizeof(node) + 306 + 16);
  CHECK(n->next.load() == 0);
  node::destroy(n);
}

TEST_CASE("node: a copy keeps the record and carries new response and recovery bytes",
          "[memory_store][node]") {
  node* claim = node::make_claim({"s", "k", print(1), start, 30s, 24h}, 42, 5);
  node* checkpointed = node::copy(*claim, {}, "step 1 done");
  node* completed = node::copy(*checkpointed, "the response", checkpointed->payload_recovery());
  completed->state = node_state::completed;
  for (const node* n : {checkpointed, completed}) {
    CHECK(n->scope() == "s");
    CHECK(n->key() == "k");
    CHECK(n->fingerprint() == print(1));
    CHECK(n->fence == 5);
    CHECK(n->hint == 42);
    CHECK(n->created_at == claim->created_at);
    CHECK(n->lease_until == claim->lease_until);
    CHECK(n->expires_at == claim->expires_at);
    CHECK(n->payload_recovery() == "step 1 done");
  }
  CHECK(checkpointed->payload_response().empty());
  CHECK(completed->payload_response() == "the response");
  CHECK(completed->payload_size() == 12 + 11);
  CHECK(claim->state == node_state::in_progress);  // the original is untouched
  for (node* n : {claim, checkpointed, completed})
    node::destroy(n);
}

TEST_CASE("node: a link packs address, mark and hint, and unpacks each", "[memory_store][node]") {
  using namespace idem::detail::memory;
  node* n = node::make_claim({"s", "k", print(1), start, 30s, 24h}, 0x8001, 1);
  const std::uintptr_t link = link_to(n);
  CHECK(pointer(link) == n);
  CHECK_FALSE(marked(link));
  CHECK(marked(link | mark_bit));
  CHECK(pointer(link | mark_bit) == n);
  CHECK(pointer(0) == nullptr);
  if constexpr (links_carry_hints) {
    if ((reinterpret_cast<std::uintptr_t>(n) >> hint_shift) == 0) {
      // The hint rides in the top bits: a search stops before this node without reading it
      // exactly when the key it looks for has a smaller hint.
      CHECK((link >> hint_shift) == 0x8001);
      CHECK(orders_after(link, 0x8000));
      CHECK(orders_after(link | mark_bit, 0x0000));
      CHECK_FALSE(orders_after(link, 0x8001));
      CHECK_FALSE(orders_after(link, 0xffff));
    }
  }
  // A link without a hint (an address that uses the top bits) never orders after anything.
  CHECK_FALSE(orders_after(reinterpret_cast<std::uintptr_t>(n), 0));
  node::destroy(n);
}

TEST_CASE("node: a destroyed node's block is reused for the next node of its size",
          "[memory_store][node]") {
  node* first = node::make_claim({"s", "key-1", print(1), start, 30s, 24h}, 1, 1);
  node::destroy(first);
  node* second = node::make_claim({"s", "key-2", print(1), start, 30s, 24h}, 1, 1);
  CHECK(second == first);  // from this thread's block cache
  CHECK(second->key() == "key-2");
  node::destroy(second);
}

}  // namespace node_test
