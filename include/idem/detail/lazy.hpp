// idem::detail::lazy_t<T, Lazy>: the type T, named so that it depends on a template parameter.
//
// clang++ instantiates what a call needs as soon as it reads the call, when the call does not
// depend on a template parameter, even inside a template that is never instantiated: a member
// `std::vector<attempt_record> spilled_` of basic_attempt_history<Lazy> has its push_back
// instantiated in every translation unit that includes the header. Declared as
// `lazy_t<std::vector<attempt_record>, Lazy>`, the member depends on Lazy, and what its calls
// need is instantiated only with the class template, where it is used. (g++ waits in both cases.)
#pragma once

namespace idem::detail {

template <class T, class Lazy>
struct lazy {
  using type = T;
};

template <class T, class Lazy>
using lazy_t = typename lazy<T, Lazy>::type;

}  // namespace idem::detail
