// Replaces the global allocation functions with counting ones that forward to malloc, so each
// benchmark can report how many allocations one operation makes. The count is per thread: a
// relaxed increment of a thread_local costs about a nanosecond, paid only by code that allocates.
#include "count_allocations.hpp"

#include <cstdlib>
#include <new>

namespace {
thread_local std::size_t allocation_count = 0;

void* allocate(std::size_t size) {
  if (void* p = std::malloc(size == 0 ? 1 : size)) {
    ++allocation_count;
    return p;
  }
  throw std::bad_alloc();
}

void* allocate_aligned(std::size_t size, std::align_val_t alignment) {
  const auto align = static_cast<std::size_t>(alignment);
  const std::size_t rounded = (size + align - 1) / align * align;
  if (void* p = std::aligned_alloc(align, rounded == 0 ? align : rounded)) {
    ++allocation_count;
    return p;
  }
  throw std::bad_alloc();
}
}  // namespace

std::size_t idem_bench::allocations() noexcept {
  return allocation_count;
}

void* operator new(std::size_t size) {
  return allocate(size);
}
void* operator new[](std::size_t size) {
  return allocate(size);
}
void* operator new(std::size_t size, std::align_val_t a) {
  return allocate_aligned(size, a);
}
void* operator new[](std::size_t size, std::align_val_t a) {
  return allocate_aligned(size, a);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
