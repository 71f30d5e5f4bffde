// idem::detail::invoke: std::invoke, without <functional>.
//
// <functional> is one of the costliest standard headers to parse (std::function, the searchers,
// std::bind, the hash specialisations), and idem needs only std::invoke from it: calling a
// wrapped call, a handler or a callback that may be a function object, a function pointer or a
// pointer to a member. This is the same contract (INVOKE, [func.require]), with the same result
// type, value category and noexcept, for the core's own use.
#ifndef IDEM_DETAIL_INVOKE_HPP
#define IDEM_DETAIL_INVOKE_HPP

#include <concepts>
#include <type_traits>
#include <utility>

namespace idem::detail {

/// The class a pointer to member belongs to: C for `T C::*`, functions included.
template <class M>
struct member_pointer_class;
template <class T, class C>
struct member_pointer_class<T C::*> {
  using type = C;
};

// std::reference_wrapper is declared in <functional>, so it cannot be named here. INVOKE treats
// it apart only to call `get()` on it; a type with `type`, `get()` returning `type&` and an
// implicit conversion to `type&` is unwrapped the same way, and for it get() and the conversion
// name the same object, so nothing can tell the two rules apart.
template <class R>
concept reference_wrapper_like = requires(const R& r) {
  typename R::type;
  { r.get() } -> std::same_as<typename R::type&>;
}
&&std::is_convertible_v<const R&, typename R::type&>;

// The object a pointer to a member of C is applied to, as INVOKE finds it: the argument itself
// when it is a C (or derived from C), what a reference wrapper refers to, else what the argument
// points to (a raw or smart pointer).
template <class C, class Object>
constexpr decltype(auto) member_target(Object&& object) {
  using plain = std::remove_cvref_t<Object>;
  if constexpr (std::is_base_of_v<C, plain>) {
    return std::forward<Object>(object);
  } else if constexpr (reference_wrapper_like<plain>) {
    return object.get();
  } else {
    return *std::forward<Object>(object);
  }
}

template <class Member, class Object, class... Args>
constexpr decltype(auto) invoke_member(Member member, Object&& object, Args&&... args) {
  using C = typename member_pointer_class<Member>::type;
  if constexpr (std::is_member_function_pointer_v<Member>) {
    return (detail::member_target<C>(std::forward<Object>(object)).*
            member)(std::forward<Args>(args)...);
  } else {
    static_assert(sizeof...(Args) == 0, "A pointer to a data member takes only the object.");
    return (detail::member_target<C>(std::forward<Object>(object)).*member);
  }
}

/// Calls `f` with `args` as std::invoke does: `f(args...)` for a function object or a function
/// pointer; for a pointer to a member function, the first argument's member called with the
/// rest; for a pointer to a data member, that member of the only argument. The first argument
/// may be an object, a reference wrapper or a pointer (raw or smart).
template <class F, class... Args>
constexpr decltype(auto) invoke(F&& f,
                                Args&&... args) noexcept(std::is_nothrow_invocable_v<F, Args...>) {
  if constexpr (std::is_member_pointer_v<std::remove_cvref_t<F>>) {
    return detail::invoke_member(f, std::forward<Args>(args)...);
  } else {
    return std::forward<F>(f)(std::forward<Args>(args)...);
  }
}

}  // namespace idem::detail

#endif  // IDEM_DETAIL_INVOKE_HPP
