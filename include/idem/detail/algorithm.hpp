// The few algorithms the core needs, without <algorithm>.
//
// <algorithm> costs a translation unit that includes idem more to parse than everything the core
// takes from it: std::min and std::max, two binary searches and a sort (the ranges algorithms and
// their concepts come with it in C++20). These are the same contracts, for the core's own use;
// a user's code is free to include <algorithm> itself.
#pragma once

namespace idem::detail {

/// The smaller of `a` and `b`; `a` when they are equal, as std::min.
template <class T>
constexpr const T& min(const T& a, const T& b) noexcept(noexcept(b < a)) {
  return b < a ? b : a;
}

/// The larger of `a` and `b`; `a` when they are equal, as std::max.
template <class T>
constexpr const T& max(const T& a, const T& b) noexcept(noexcept(a < b)) {
  return a < b ? b : a;
}

/// `value` held within [low, high], as std::clamp; low must not be above high.
template <class T>
constexpr const T& clamp(const T& value, const T& low, const T& high) noexcept(
    noexcept(value < low)) {
  return value < low ? low : (high < value ? high : value);
}

/// The first position in the sorted range [first, last) whose element is not less than `value`.
template <class RandomIt, class T>
constexpr RandomIt lower_bound(RandomIt first, RandomIt last, const T& value) {
  auto count = last - first;
  while (count > 0) {
    const auto half = count / 2;
    const RandomIt middle = first + half;
    if (*middle < value) {
      first = middle + 1;
      count -= half + 1;
    } else {
      count = half;
    }
  }
  return first;
}

/// The first position in the sorted range [first, last) whose element is greater than `value`.
template <class RandomIt, class T>
constexpr RandomIt upper_bound(RandomIt first, RandomIt last, const T& value) {
  auto count = last - first;
  while (count > 0) {
    const auto half = count / 2;
    const RandomIt middle = first + half;
    if (value < *middle) {
      count = half;
    } else {
      first = middle + 1;
      count -= half + 1;
    }
  }
  return first;
}

}  // namespace idem::detail
