// Replaces every replaceable global operator new and delete ([new.delete]) with versions that
// forward to malloc/free and count allocations per thread. See count_allocations.hpp.
//
// Forwarding to malloc keeps sanitizers working: AddressSanitizer intercepts malloc/free, so it
// still sees every block, its bounds and its lifetime.
#include "count_allocations.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

// constinit: zero-initialised at load time, so touching it from operator new never runs a
// dynamic TLS initialiser (which could itself allocate).
constinit thread_local std::size_t allocations = 0;
// Bytes held by the whole program, as malloc_usable_size reports each block (what the allocator
// really set aside for it, rounding included): frees may happen on other threads.
constinit std::atomic<std::ptrdiff_t> live_bytes{0};
// Whether live_bytes is kept. Keeping it costs every allocation and free a malloc_usable_size
// and an atomic add on one cache line all threads share: benchmarks turn it off outside the
// stretches they measure memory in, so that it does not slow their threads down.
constinit std::atomic<bool> counting_bytes{true};

void count_in(void* p) noexcept {
  ++allocations;
  if (!counting_bytes.load(std::memory_order_relaxed)) return;
  live_bytes.fetch_add(static_cast<std::ptrdiff_t>(malloc_usable_size(p)),
                       std::memory_order_relaxed);
}

void release(void* p) noexcept {
  if (p == nullptr) return;
  if (counting_bytes.load(std::memory_order_relaxed)) {
    live_bytes.fetch_sub(static_cast<std::ptrdiff_t>(malloc_usable_size(p)),
                         std::memory_order_relaxed);
  }
  std::free(p);
}

void* allocate(std::size_t size) noexcept {
  // operator new(0) must return a unique non-null pointer; malloc(0) need not.
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p != nullptr) count_in(p);
  return p;
}

void* allocate_aligned(std::size_t size, std::align_val_t alignment) noexcept {
  const auto align = static_cast<std::size_t>(alignment);
  // aligned_alloc wants a size that is a non-zero multiple of the alignment (C11 7.22.3.1);
  // glibc is lenient, AddressSanitizer reports it.
  const std::size_t rounded = size == 0 ? align : (size + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p != nullptr) count_in(p);
  return p;
}

// The throwing forms retry through the installed new_handler, as the default ones must
// ([new.delete.single]/4), and throw bad_alloc when there is none.
template <class Allocate>
void* allocate_or_throw(Allocate allocate_once) {
  for (;;) {
    if (void* p = allocate_once()) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

}  // namespace

namespace idem_test {

std::size_t allocations_on_this_thread() noexcept {
  return allocations;
}

std::ptrdiff_t live_heap_bytes() noexcept {
  return live_bytes.load(std::memory_order_relaxed);
}

void count_heap_bytes(bool on) noexcept {
  counting_bytes.store(on, std::memory_order_relaxed);
}

}  // namespace idem_test

// --- allocation ------------------------------------------------------------------------------

void* operator new(std::size_t size) {
  return allocate_or_throw([=] { return allocate(size); });
}
void* operator new[](std::size_t size) {
  return allocate_or_throw([=] { return allocate(size); });
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return allocate(size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return allocate(size);
}

void* operator new(std::size_t size, std::align_val_t alignment) {
  return allocate_or_throw([=] { return allocate_aligned(size, alignment); });
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return allocate_or_throw([=] { return allocate_aligned(size, alignment); });
}
void* operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate_aligned(size, alignment);
}
void* operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate_aligned(size, alignment);
}

// --- deallocation ----------------------------------------------------------------------------
// aligned_alloc'd memory is released with free() too, so every form ends in release().

void operator delete(void* p) noexcept {
  release(p);
}
void operator delete[](void* p) noexcept {
  release(p);
}
void operator delete(void* p, std::size_t) noexcept {
  release(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  release(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  release(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  release(p);
}

void operator delete(void* p, std::align_val_t) noexcept {
  release(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  release(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  release(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  release(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  release(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  release(p);
}
