// Counting heap allocations, for tests that prove a path allocates nothing (or exactly n times).
//
// Linked only into idem_alloc_tests: tests/support/count_allocations.cpp replaces every global
// operator new and delete, forwards them to malloc/free (so it works under AddressSanitizer too)
// and counts each successful allocation in a thread_local counter. Counting per thread keeps a
// test's count free of whatever Catch2 or another thread allocates meanwhile.
//
//   idem_test::allocation_scope scope;
//   run_the_hot_path();
//   CHECK(scope.count() == 0);
//
// The compiler may elide a new/delete pair it can see through (C++14 [expr.new]/10); measure
// code whose allocations escape or are opaque to the optimiser, as real library code is.
#pragma once

#include <cstddef>
#include <cstdint>

namespace idem_test {

/// Every global operator new that has succeeded on the calling thread since it started.
std::size_t allocations_on_this_thread() noexcept;

/// Heap bytes the whole program holds through operator new now, each block counted as
/// malloc_usable_size reports it (the allocator's own per-block header, 8 bytes in glibc, is not
/// included).
std::ptrdiff_t live_heap_bytes() noexcept;

/// Whether live_heap_bytes is kept up to date (it is from the start). While off, allocations are
/// still counted but their bytes are not, so nothing is written that threads share; a block
/// allocated while off and freed while on makes live_heap_bytes too low, so turn it on before
/// the stretch measured and read the difference across it.
void count_heap_bytes(bool on) noexcept;

/// Allocations made on the constructing thread between construction and each call to count().
class allocation_scope {
 public:
  allocation_scope() noexcept : start_(allocations_on_this_thread()) {}

  [[nodiscard]] std::size_t count() const noexcept { return allocations_on_this_thread() - start_; }

  /// Start counting from zero again.
  void reset() noexcept { start_ = allocations_on_this_thread(); }

 private:
  std::size_t start_;
};

}  // namespace idem_test
