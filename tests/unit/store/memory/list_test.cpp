// A bucket's chain alone: Harris-Michael search in (hint, scope, key) order, replacement of a
// node by the record's next one, and removal of the expired.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/list.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

using namespace idem::detail::memory;
using namespace std::chrono_literals;

namespace {

const idem::store_time start{std::chrono::seconds{1767225600}};

idem::digest print(std::uint8_t seed) {
  std::uint8_t bytes[16] = {seed};
  return idem::digest{bytes};
}

// A chain, freed whole at the end (nodes unlinked on the way were retired to epoch reclamation).
struct chain {
  std::atomic<std::uintptr_t> head{0};
  chain() = default;
  chain(const chain&) = delete;
  chain& operator=(const chain&) = delete;
  ~chain() {
    for (node* n = pointer(head.load()); n != nullptr;) {
      node* next = pointer(n->next.load());
      node::destroy(n);
      n = next;
    }
  }

  // Links a claim of (scope, key) where a search puts it, as a claim does; false if present.
  bool insert(std::uint16_t hint, std::string_view scope, std::string_view key,
              std::chrono::nanoseconds retention = 24h) {
    idem::detail::epoch_guard<> guard;
    const position at = search(head, hint, scope, key, guard);
    if (at.found) return false;
    node* fresh = node::make_claim({scope, key, print(1), start, 30s, retention}, hint, 1);
    fresh->next.store(at.link);
    std::uintptr_t expected = at.link;
    REQUIRE(at.previous->compare_exchange_strong(expected, link_to(fresh)));
    return true;
  }
  const node* find(std::uint16_t hint, std::string_view scope, std::string_view key) {
    idem::detail::epoch_guard<> guard;
    const position at = search(head, hint, scope, key, guard);
    return at.found ? at.current : nullptr;
  }
  // The unmarked nodes, in chain order, as "hint/scope/key".
  std::vector<std::string> listed() const {
    std::vector<std::string> out;
    for (node* n = pointer(head.load()); n != nullptr; n = pointer(n->next.load())) {
      if (!marked(n->next.load()))
        out.push_back(std::to_string(n->hint) + "/" + std::string(n->scope()) + "/" +
                      std::string(n->key()));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("list: a search finds what was linked, and a chain stays ordered by hint, scope, key",
          "[memory_store][list]") {
  chain c;
  CHECK(c.insert(5, "s", "b"));
  CHECK(c.insert(5, "s", "a"));
  CHECK(c.insert(2, "zz", "z"));
  CHECK(c.insert(5, "tt", "a"));  // a longer scope orders after
  CHECK(c.insert(9, "s", "a"));
  CHECK(c.insert(5, "t", "a"));
  CHECK_FALSE(c.insert(5, "s", "a"));  // present: found, not linked again
  CHECK(c.listed() ==
        std::vector<std::string>{"2/zz/z", "5/s/a", "5/s/b", "5/t/a", "5/tt/a", "9/s/a"});
  REQUIRE(c.find(5, "s", "b") != nullptr);
  CHECK(c.find(5, "s", "b")->key() == "b");
  CHECK(c.find(5, "s", "c") == nullptr);
  CHECK(c.find(6, "s", "b") == nullptr);  // another hint is another key
  CHECK(c.find(5, "", "b") == nullptr);
  CHECK(c.find(5, "t", "a")->scope() == "t");
}

TEST_CASE("list: keys compare equal only when every byte of scope and key is",
          "[memory_store][list]") {
  // The inline comparison reads words; a difference in any byte, first, last or between, at
  // every length on every path (bytes, words, memcmp), must tell keys apart.
  for (std::size_t size = 0; size <= 80; ++size) {
    const std::string key(size, 'k');
    node* n = node::make_claim({"scope", key, print(1), start, 30s, 24h}, 1, 1);
    CHECK(same_bytes(key.data(), std::string(size, 'k').data(), size));
    CHECK(compare(*n, 1, "scope", key) == 0);
    for (std::size_t at = 0; at < size; ++at) {
      std::string other = key;
      other[at] = 'x';
      CAPTURE(size, at);
      REQUIRE_FALSE(same_bytes(key.data(), other.data(), size));
      REQUIRE(compare(*n, 1, "scope", other) < 0);  // 'k' < 'x'
      REQUIRE(compare(*n, 1, other, "scope") != 0);
    }
    node::destroy(n);
  }
}

TEST_CASE("list: the order is hint first, then scope length, scope bytes and key",
          "[memory_store][list]") {
  node* n = node::make_claim({"bb", "m", print(1), start, 30s, 24h}, 10, 1);
  CHECK(compare(*n, 11, "a", "a") < 0);
  CHECK(compare(*n, 9, "zzz", "z") > 0);
  CHECK(compare(*n, 10, "zzz", "a") < 0);  // a longer scope orders after, whatever its bytes
  CHECK(compare(*n, 10, "z", "z") > 0);
  CHECK(compare(*n, 10, "bc", "a") < 0);
  CHECK(compare(*n, 10, "ba", "z") > 0);
  CHECK(compare(*n, 10, "bb", "n") < 0);
  CHECK(compare(*n, 10, "bb", "l") > 0);
  CHECK(compare(*n, 10, "bb", "mm") < 0);
  CHECK(compare(*n, 10, "bb", "m") == 0);
  node::destroy(n);
}

TEST_CASE("list: a replaced node is marked and passed over, and cannot be replaced again",
          "[memory_store][list]") {
  chain c;
  REQUIRE(c.insert(3, "s", "a"));
  REQUIRE(c.insert(3, "s", "b"));
  REQUIRE(c.insert(3, "s", "c"));
  idem::detail::epoch_guard<> guard;
  const position at = search(c.head, 3, "s", "b", guard);
  REQUIRE(at.found);
  node* old = at.current;
  node* next = node::copy(*old, "done", {});
  next->state = node_state::completed;
  CHECK(replace(at, next, guard));
  CHECK(marked(old->next.load()));
  CHECK(pointer(old->next.load()) == next);
  // The record is the new node at once, in the same place of the chain.
  const position again = search(c.head, 3, "s", "b", guard);
  REQUIRE(again.found);
  CHECK(again.current == next);
  CHECK(again.current->payload_response() == "done");
  CHECK(c.listed() == std::vector<std::string>{"3/s/a", "3/s/b", "3/s/c"});
  // A write that found the old node loses: its record was replaced first.
  node* late = node::copy(*old, "late", {});
  CHECK_FALSE(replace(at, late, guard));
  node::destroy(late);
}

TEST_CASE("list: removing the expired removes exactly those, once each", "[memory_store][list]") {
  chain c;
  std::vector<std::string> expiring;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "k" + std::to_string(i);
    const bool expires = i % 3 == 0;
    REQUIRE(c.insert(static_cast<std::uint16_t>(i % 5), "s", key, expires ? 1h : 24h));
    if (expires) expiring.push_back(key);
  }
  const std::int64_t at = to_ns(start + 1h);
  std::vector<std::string> removed;
  const std::size_t count =
      remove_expired(c.head, at, [&](const node& gone) { removed.emplace_back(gone.key()); });
  CHECK(count == expiring.size());
  std::sort(removed.begin(), removed.end());
  std::sort(expiring.begin(), expiring.end());
  CHECK(removed == expiring);
  CHECK(c.listed().size() == 40 - expiring.size());
  for (const std::string& key : expiring) {
    CHECK(c.find(static_cast<std::uint16_t>(std::stoi(key.substr(1)) % 5), "s", key) == nullptr);
  }
  CHECK(c.find(1, "s", "k1") != nullptr);
  // A second pass at the same time finds nothing more; one just before the rest expire, neither.
  CHECK(remove_expired(c.head, at, [](const node&) {}) == 0);
  CHECK(remove_expired(c.head, to_ns(start + 24h) - 1, [](const node&) {}) == 0);
  CHECK(remove_expired(c.head, to_ns(start + 24h), [](const node&) {}) == 40 - expiring.size());
  CHECK(c.listed().empty());
}
