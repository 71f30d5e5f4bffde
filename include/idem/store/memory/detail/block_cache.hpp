// A small cache, on each thread, of the memory store's freed node blocks, for the next node of
// the same size class.
//
// A new key's claim is replaced by its completion moments later, so without it every first call
// would free one block through epoch reclamation, in batches, and glibc's malloc would then
// search its bins for the next (measured: 855 against 358 ns a first call). Classes are the
// sizes 16k + 8, which glibc serves from chunks of 16(k + 1) bytes, so rounding a request up to
// its class takes no more memory than malloc would; at most 64 KiB a thread is kept.
//
// A template whose parameter means nothing, so that it compiles only where the memory store is
// used (idem/core/detail/lazy.hpp): block_cache<> is the cache.
#ifndef IDEM_STORE_MEMORY_DETAIL_BLOCK_CACHE_HPP
#define IDEM_STORE_MEMORY_DETAIL_BLOCK_CACHE_HPP

#include <array>
#include <cstddef>
#include <new>
#include <vector>

#include <idem/core/detail/lazy.hpp>

namespace idem::detail::memory {

template <class Lazy = void>
class block_cache {
 public:
  static constexpr std::size_t largest = 1024 - 8;
  static constexpr std::size_t limit_bytes = std::size_t{64} * 1024;

  block_cache() = default;
  block_cache(const block_cache&) = delete;
  block_cache& operator=(const block_cache&) = delete;
  ~block_cache() {
    alive() = false;
    for (auto& bin : bins_) {
      for (void* block : bin)
        ::operator delete(block);
    }
  }

  static block_cache& local() {
    thread_local block_cache cache;
    return cache;
  }

  /// At least `bytes`; freed by give(block, bytes).
  void* take(std::size_t bytes) {
    const std::size_t at = bin_of(bytes);
    if (at < bins && !bins_[at].empty()) {
      void* block = bins_[at].back();
      bins_[at].pop_back();
      held_ -= class_size(at);
      return block;
    }
    return ::operator new(at < bins ? class_size(at) : bytes);
  }

  static void give(void* block, std::size_t bytes) noexcept {
    const std::size_t at = bin_of(bytes);
    // Once this thread's cache is gone (blocks freed by its epoch participant at thread exit),
    // blocks go straight back to the allocator.
    if (at < bins && alive()) {
      block_cache& cache = local();
      if (cache.held_ + class_size(at) <= limit_bytes) {
        try {
          cache.bins_[at].push_back(block);
          cache.held_ += class_size(at);
          return;
        } catch (const std::bad_alloc&) {  // a full heap: free it instead
        }
      }
    }
    ::operator delete(block);
  }

  /// The bytes this cache holds for reuse.
  std::size_t held() const noexcept { return held_; }

 private:
  static constexpr std::size_t bins = (largest + 8) / 16;
  static std::size_t bin_of(std::size_t bytes) noexcept { return (bytes + 7) / 16; }
  static std::size_t class_size(std::size_t bin) noexcept { return 16 * bin + 8; }
  // Trivially destructible, so it stays readable after the cache itself is destroyed.
  static bool& alive() noexcept {
    thread_local bool flag = true;
    return flag;
  }

  std::array<lazy_t<Lazy, std::vector<void*>>, bins> bins_;
  std::size_t held_ = 0;
};

}  // namespace idem::detail::memory

#endif  // IDEM_STORE_MEMORY_DETAIL_BLOCK_CACHE_HPP
