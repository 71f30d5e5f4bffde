// A type named so that it depends on a template's parameter, to keep a class template's
// standard containers from being instantiated where the template is only declared.
//
// Clang instantiates what a call needs as soon as it reads the call, when nothing in it depends
// on the template around it: `std::vector<record> out; out.push_back(r);` in a member of a store
// that is never used still instantiates push_back and its reallocation in every unit that
// includes the store. Declaring `out` as lazy_t<Lazy, std::vector<record>> makes the call
// dependent, so it waits until the store is used, as it does with g++ already.
#ifndef IDEM_DETAIL_LAZY_HPP
#define IDEM_DETAIL_LAZY_HPP

namespace idem::detail {

template <class Lazy, class T>
struct lazy_type {
  using type = T;
};

/// `T` itself, as a type that depends on `Lazy`.
template <class Lazy, class T>
using lazy_t = typename lazy_type<Lazy, T>::type;

}  // namespace idem::detail

#endif  // IDEM_DETAIL_LAZY_HPP
