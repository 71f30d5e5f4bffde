// A T held in a block of Asio's per-thread recycling allocator, beside a coroutine frame: what
// would make the frame pass the size Asio recycles per thread (about 1 KB), where a frame that
// large costs a malloc and a free per operation. Both asynchronous sides hold things here:
//
// * an async_retrying operation's retry_outcome (its key and inline history, some 600 bytes),
//   which would otherwise sit in the operation's coroutine frame twice (the local and the
//   promise's result) and once more in co_spawn's frame: an operation settles to no heap
//   allocation at all (bench/async_retrying_bench.cpp counts them);
// * an async_idempotent call's claim writer, handler context and heartbeat entry
//   (async_engine::run_started), so that the call's frame and its handler's are both recycled.
#ifndef IDEM_ASYNC_DETAIL_RECYCLED_HPP
#define IDEM_ASYNC_DETAIL_RECYCLED_HPP

#include <memory>
#include <new>
#include <utility>

#include <idem/async/asio.hpp>

namespace idem::detail {

template <class T>
class recycled {
 public:
  recycled() noexcept = default;
  /// A T made by `make()` (a prvalue, made in place).
  template <class Make>
  static recycled made_by(Make&& make) {
    asio::recycling_allocator<T> allocator;
    T* block = allocator.allocate(1);
    try {
      ::new (static_cast<void*>(block)) T(std::forward<Make>(make)());
    } catch (...) {
      allocator.deallocate(block, 1);
      throw;
    }
    return recycled{block};
  }

  recycled(recycled&& other) noexcept : value_(std::exchange(other.value_, nullptr)) {}
  recycled& operator=(recycled&& other) noexcept {
    if (this != &other) {
      reset();
      value_ = std::exchange(other.value_, nullptr);
    }
    return *this;
  }
  ~recycled() { reset(); }

  explicit operator bool() const noexcept { return value_ != nullptr; }
  T& operator*() const noexcept { return *value_; }
  T* operator->() const noexcept { return value_; }

 private:
  explicit recycled(T* value) noexcept : value_(value) {}
  void reset() noexcept {
    if (value_ != nullptr) {
      value_->~T();
      asio::recycling_allocator<T>{}.deallocate(value_, 1);
      value_ = nullptr;
    }
  }

  T* value_ = nullptr;
};

}  // namespace idem::detail

#endif  // IDEM_ASYNC_DETAIL_RECYCLED_HPP
