// The memory store's per-thread block cache: a freed block is reused for the next block of its
// size class, and the cache keeps no more than its limit.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/block_cache.hpp>

#include <cstddef>
#include <set>
#include <thread>
#include <vector>

using idem::detail::memory::block_cache;

TEST_CASE("block cache: a block given back is taken again for any size of its class",
          "[memory_store][block_cache]") {
  // Run on a thread of its own, so that the cache starts empty.
  std::thread([] {
    block_cache<>& cache = block_cache<>::local();
    REQUIRE(cache.held() == 0);
    void* block = cache.take(100);  // class 104: 100 to 104 bytes
    block_cache<>::give(block, 100);
    CHECK(cache.held() == 104);
    CHECK(cache.take(104) == block);
    CHECK(cache.held() == 0);
    block_cache<>::give(block, 104);
    CHECK(cache.take(97) == block);
    // Another class is not served from it.
    block_cache<>::give(block, 97);
    void* other = cache.take(120);
    CHECK(other != block);
    CHECK(cache.held() == 104);
    block_cache<>::give(other, 120);
    CHECK(cache.held() == 104 + 120);
  }).join();
}

TEST_CASE("block cache: blocks past the largest class, or past the limit, go back to the allocator",
          "[memory_store][block_cache]") {
  std::thread([] {
    block_cache<>& cache = block_cache<>::local();
    void* big = cache.take(block_cache<>::largest + 1);
    block_cache<>::give(big, block_cache<>::largest + 1);
    CHECK(cache.held() == 0);

    // 1016-byte blocks: the cache keeps as many as fit in its limit, and frees the rest.
    constexpr std::size_t size = block_cache<>::largest;
    std::vector<void*> blocks;
    for (int i = 0; i < 100; ++i)
      blocks.push_back(cache.take(size));
    for (void* block : blocks)
      block_cache<>::give(block, size);
    CHECK(cache.held() == block_cache<>::limit_bytes / size * size);
    // What it kept comes back, each block once, before the allocator is asked again.
    std::set<void*> kept;
    while (cache.held() > 0)
      CHECK(kept.insert(cache.take(size)).second);
    CHECK(kept.size() == block_cache<>::limit_bytes / size);
    for (void* block : kept)
      block_cache<>::give(block, size);
  }).join();
}

namespace {
// Gives a block back after the thread's cache is gone: thread_local objects are destroyed in
// the reverse order of their construction, and this one is made before the cache.
struct late_giver {
  void* block = nullptr;
  ~late_giver() {
    if (block != nullptr) block_cache<>::give(block, 64);
  }
};
}  // namespace

TEST_CASE("block cache: a block freed after the thread's cache is gone goes to the allocator",
          "[memory_store][block_cache]") {
  // Epoch reclamation frees blocks at thread exit, after the cache may be destroyed: the block
  // must not be pushed into a destroyed cache (a sanitizer build sees it if it is).
  std::thread([] {
    thread_local late_giver giver;
    giver.block = block_cache<>::local().take(64);
  }).join();
  SUCCEED("the thread ended without touching its destroyed cache");
}
