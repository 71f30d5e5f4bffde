// The one compile-cost device idem keeps: code that compiles only where it is used.
//
// A class that is not a template is compiled in every translation unit that includes it, used
// or not: its inline members are checked and every standard template they call (a vector's
// push_back, an unordered_map's operator[], make_shared of its state) is instantiated. Where a
// header holds a lot of such code that most translation units never use, its classes are
// templates whose parameter means nothing (`template <class Lazy = void>`, with the public
// name an alias: `using memory_store = basic_memory_store<>;`), and the members whose types
// would otherwise be fixed are named through lazy_t, so that even clang++, which instantiates
// what a call needs as soon as it reads a call that depends on no template parameter, waits
// until the class is used.
//
// Kept only where a measurement shows it saves at least 10% of what #include <idem/idem.hpp>
// adds to a typical translation unit (docs/performance.md, "Compile cost"): the memory store and
// the JSON canonicalizer. Everything else is plain code.
#ifndef IDEM_CORE_DETAIL_LAZY_HPP
#define IDEM_CORE_DETAIL_LAZY_HPP

namespace idem::detail {

template <class Lazy, class T>
struct lazy_type {
  using type = T;
};

/// `T` itself, as a type that depends on `Lazy`.
template <class Lazy, class T>
using lazy_t = typename lazy_type<Lazy, T>::type;

}  // namespace idem::detail

#endif  // IDEM_CORE_DETAIL_LAZY_HPP
