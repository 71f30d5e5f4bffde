// idem::detail::invoke, the core's std::invoke without <functional>: the same result, type,
// value category and noexcept as std::invoke, which the test (not the core) may include.
#include <catch2/catch.hpp>
#include <idem/detail/invoke.hpp>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace {

struct base {
  int value = 1;
  int get() const noexcept { return value; }
  int add(int n) { return value += n; }
  std::string by_category() & { return "lvalue"; }
  std::string by_category() && { return "rvalue"; }
  std::string by_category() const& { return "const lvalue"; }
};
struct derived : base {};

int twice(int n) noexcept {
  return 2 * n;
}
long may_throw(int n) {
  return n;
}

struct overloaded {
  std::string operator()() & { return "lvalue"; }
  std::string operator()() && { return "rvalue"; }
  std::string operator()() const& { return "const lvalue"; }
};

// Checks that both give the same type (value category included) and noexcept, and returns both
// results for the caller to compare.
template <class F, class... Args>
auto both(F&& f, Args&&... args) {
  using ours = decltype(idem::detail::invoke(std::forward<F>(f), std::forward<Args>(args)...));
  using theirs = decltype(std::invoke(std::forward<F>(f), std::forward<Args>(args)...));
  STATIC_REQUIRE(std::is_same_v<ours, theirs>);
  STATIC_REQUIRE(noexcept(idem::detail::invoke(std::forward<F>(f), std::forward<Args>(args)...)) ==
                 noexcept(std::invoke(std::forward<F>(f), std::forward<Args>(args)...)));
  return std::pair{idem::detail::invoke(f, args...), std::invoke(f, args...)};
}

}  // namespace

TEST_CASE("detail::invoke calls function objects and function pointers as std::invoke does") {
  auto lambda = [](int a, int b) { return a * 10 + b; };
  auto [l1, l2] = both(lambda, 4, 2);
  CHECK(l1 == 42);
  CHECK(l1 == l2);

  auto [p1, p2] = both(&twice, 21);
  CHECK(p1 == 42);
  CHECK(p1 == p2);
  auto [r1, r2] = both(twice, 5);  // a function reference
  CHECK(r1 == r2);
  auto [t1, t2] = both(may_throw, 5);
  CHECK(t1 == t2);

  // The call is made on the value category it is given.
  overloaded o;
  const overloaded& co = o;
  CHECK(idem::detail::invoke(o) == "lvalue");
  CHECK(idem::detail::invoke(std::move(o)) == "rvalue");
  CHECK(idem::detail::invoke(co) == "const lvalue");
}

TEST_CASE("detail::invoke forwards move-only arguments and returns void") {
  int seen = 0;
  auto take = [&](std::unique_ptr<int> p) { seen = *p; };
  STATIC_REQUIRE(std::is_void_v<decltype(idem::detail::invoke(take, std::make_unique<int>(7)))>);
  idem::detail::invoke(take, std::make_unique<int>(7));
  CHECK(seen == 7);
}

TEST_CASE("detail::invoke calls member functions on objects, references, pointers and wrappers") {
  derived d;
  const derived& cd = d;
  auto owned = std::make_unique<derived>();
  auto shared = std::make_shared<derived>();

  CHECK(both(&base::get, d).first == 1);
  CHECK(both(&base::get, cd).first == 1);
  CHECK(both(&base::get, &d).first == 1);
  CHECK(both(&base::get, &cd).first == 1);
  CHECK(both(&base::get, owned).first == 1);
  CHECK(both(&base::get, shared).first == 1);
  CHECK(both(&base::get, std::ref(d)).first == 1);
  CHECK(both(&base::get, std::cref(d)).first == 1);

  CHECK(idem::detail::invoke(&base::add, d, 2) == 3);
  CHECK(idem::detail::invoke(&base::add, &d, 2) == 5);
  CHECK(idem::detail::invoke(&base::add, std::ref(d), 2) == 7);
  CHECK(idem::detail::invoke(&base::add, owned, 2) == 3);
  CHECK(d.value == 7);

  // Ref-qualified members see the object's value category.
  using by_category_lvalue = std::string (base::*)()&;
  using by_category_rvalue = std::string (base::*)()&&;
  using by_category_const = std::string (base::*)() const&;
  CHECK(idem::detail::invoke(static_cast<by_category_lvalue>(&base::by_category), d) == "lvalue");
  CHECK(idem::detail::invoke(static_cast<by_category_rvalue>(&base::by_category), derived{}) ==
        "rvalue");
  CHECK(idem::detail::invoke(static_cast<by_category_const>(&base::by_category), cd) ==
        "const lvalue");
  CHECK(idem::detail::invoke(static_cast<by_category_const>(&base::by_category), std::cref(d)) ==
        "const lvalue");
}

TEST_CASE("detail::invoke reads data members with the object's value category, as std::invoke") {
  derived d;
  d.value = 9;
  const derived& cd = d;
  auto owned = std::make_unique<derived>();

  // both() checks the types: int& for an lvalue, const int& for a const one, int&& for an
  // rvalue, int& through any pointer or wrapper.
  CHECK(both(&base::value, d).first == 9);
  CHECK(both(&base::value, cd).first == 9);
  CHECK(both(&base::value, std::move(d)).first == 9);
  CHECK(both(&base::value, &d).first == 9);
  CHECK(both(&base::value, &cd).first == 9);
  CHECK(both(&base::value, owned).first == 1);
  CHECK(both(&base::value, std::ref(d)).first == 9);
  CHECK(both(&base::value, std::cref(d)).first == 9);

  idem::detail::invoke(&base::value, d) = 11;
  CHECK(d.value == 11);
  CHECK(&idem::detail::invoke(&base::value, std::ref(d)) == &d.value);
}

TEST_CASE("detail::invoke is usable in constant expressions") {
  struct point {
    int x;
    constexpr int sum(int y) const { return x + y; }
  };
  constexpr point p{40};
  STATIC_REQUIRE(idem::detail::invoke(&point::sum, p, 2) == 42);
  STATIC_REQUIRE(idem::detail::invoke(&point::x, p) == 40);
  STATIC_REQUIRE(idem::detail::invoke([](int a) { return a + 1; }, 41) == 42);
}
