// Which retry layer an asynchronous operation runs in, carried by its executor.
//
// The blocking retrying counts layers per thread: a call inside another on the same thread is
// nested. Coroutines break that: two unrelated operations interleave on one thread, and one
// operation hops threads between its waits. So an async_retrying operation runs on its own
// executor, a layered_executor that wraps the one it was given and says how deep it is; code
// in its attempts sees that executor (asio::this_coro::executor, and the associated executor of
// every handler it makes), and an async_retrying started there finds the layer in it and makes
// one attempt. An unrelated operation, started from anywhere else, sees no layer.
//
// layered_executor forwards every query, require and prefer to the executor it wraps, so it is
// an executor wherever that one is, and any_io_executor holds it. Wrapping an io_context's
// executor keeps it small enough for any_io_executor's inline storage (no allocation);
// anything else is wrapped as an any_io_executor.
#ifndef IDEM_CLIENT_DETAIL_ASYNC_LAYER_HPP
#define IDEM_CLIENT_DETAIL_ASYNC_LAYER_HPP

#include <type_traits>
#include <typeinfo>
#include <utility>

#include <idem/async/asio.hpp>

namespace idem::detail {

template <class Inner>
class layered_executor {
 public:
  layered_executor(Inner inner, int depth) noexcept(std::is_nothrow_move_constructible_v<Inner>)
      : inner_(std::move(inner)), depth_(depth) {}

  /// 1 for an outermost operation, 2 for one started inside its attempts, and so on.
  int depth() const noexcept { return depth_; }
  const Inner& inner() const noexcept { return inner_; }

  template <class Property>
  auto query(const Property& property) const
      noexcept(noexcept(asio::query(std::declval<const Inner&>(), property)))
          -> decltype(asio::query(std::declval<const Inner&>(), property)) {
    return asio::query(inner_, property);
  }
  template <class Property>
  auto require(const Property& property) const -> layered_executor<
      std::decay_t<decltype(asio::require(std::declval<const Inner&>(), property))>> {
    return {asio::require(inner_, property), depth_};
  }
  template <class Property>
  auto prefer(const Property& property) const -> layered_executor<
      std::decay_t<decltype(asio::prefer(std::declval<const Inner&>(), property))>> {
    return {asio::prefer(inner_, property), depth_};
  }
  template <class Function>
  void execute(Function&& function) const {
    asio::execution::execute(inner_, std::forward<Function>(function));
  }

  friend bool operator==(const layered_executor& a, const layered_executor& b) noexcept {
    return a.depth_ == b.depth_ && a.inner_ == b.inner_;
  }
  friend bool operator!=(const layered_executor& a, const layered_executor& b) noexcept {
    return !(a == b);
  }

 private:
  Inner inner_;
  int depth_;
};

// The io_context executors a layer wraps as they are: with and without outstanding work
// tracked (what prefer(outstanding_work.tracked) turns the first into).
using io_executor = asio::io_context::executor_type;
using tracked_io_executor = std::decay_t<decltype(asio::prefer(
    std::declval<const io_executor&>(), asio::execution::outstanding_work.tracked))>;

// The checks compare types, the plain io_context executor first: an outermost operation on an
// io_context, the common case, costs one comparison that succeeds at once (a type_info compared
// with another type is a string comparison in libstdc++). Kept out of line (once per operation,
// a call is nothing): inlined where the executor is a local, GCC 12 reads the type-checked
// target<> of a larger executor as an access past the local's end (-Warray-bounds).

/// The executor of type T that `executor` holds, or null. (Asio 1.22's target<T>() does not
/// check the type itself.)
template <class T>
const T* held(const asio::any_io_executor& executor) noexcept {
  if (!executor || executor.target_type() != typeid(T)) return nullptr;
  return executor.target<T>();
}

/// The layer an operation started on `executor` runs in: its depth (1 for an outermost one) and
/// its executor, `executor` wrapped with that depth.
struct layer {
  int depth;
  asio::any_io_executor executor;
};

[[gnu::noinline]] inline layer next_layer(const asio::any_io_executor& executor) {
  if (const auto* io = held<io_executor>(executor)) {
    return {1, layered_executor<io_executor>{*io, 1}};
  }
  if (const auto* layered = held<layered_executor<io_executor>>(executor)) {
    return {layered->depth() + 1,
            layered_executor<io_executor>{layered->inner(), layered->depth() + 1}};
  }
  if (const auto* layered = held<layered_executor<tracked_io_executor>>(executor)) {
    return {layered->depth() + 1,
            layered_executor<tracked_io_executor>{layered->inner(), layered->depth() + 1}};
  }
  if (const auto* io = held<tracked_io_executor>(executor)) {
    return {1, layered_executor<tracked_io_executor>{*io, 1}};
  }
  if (const auto* layered = held<layered_executor<asio::any_io_executor>>(executor)) {
    return {layered->depth() + 1,
            layered_executor<asio::any_io_executor>{layered->inner(), layered->depth() + 1}};
  }
  return {1, layered_executor<asio::any_io_executor>{executor, 1}};
}

/// The depth of the operation whose executor is `executor`: 0 outside any.
[[gnu::noinline]] inline int layer_of(const asio::any_io_executor& executor) noexcept {
  if (held<io_executor>(executor) != nullptr) return 0;
  if (const auto* layered = held<layered_executor<io_executor>>(executor)) {
    return layered->depth();
  }
  if (const auto* layered = held<layered_executor<tracked_io_executor>>(executor)) {
    return layered->depth();
  }
  if (const auto* layered = held<layered_executor<asio::any_io_executor>>(executor)) {
    return layered->depth();
  }
  return 0;
}

}  // namespace idem::detail

#endif  // IDEM_CLIENT_DETAIL_ASYNC_LAYER_HPP
