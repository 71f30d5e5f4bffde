// The few algorithms the core needs, without <algorithm>.
//
// <algorithm> costs a translation unit that includes idem more to parse than everything the core
// takes from it: std::min and std::max, two binary searches, a heap and a sort (the ranges
// algorithms and their concepts come with it in C++20). These keep the standard ones'
// contracts, for the core's own use; a user's code is free to include <algorithm> itself.
#pragma once

#include <iterator>
#include <utility>

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
constexpr const T& clamp(const T& value, const T& low,
                         const T& high) noexcept(noexcept(value < low)) {
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

// The binary heaps of std::push_heap and std::pop_heap, with `before(a, b)` ordering a below b
// (so the element at `first` is one no other comes after): a heap made here is one for the
// standard functions too, and the other way round.

// Moves the element at `hole` down to its place among [first, first + size).
template <class RandomIt, class Compare>
constexpr void sift_down(RandomIt first, std::iter_difference_t<RandomIt> size,
                         std::iter_difference_t<RandomIt> hole, Compare before) {
  std::iter_value_t<RandomIt> moving = std::move(first[hole]);
  for (;;) {
    auto child = 2 * hole + 1;
    if (child >= size) break;
    if (child + 1 < size && before(first[child], first[child + 1])) ++child;
    if (!before(moving, first[child])) break;
    first[hole] = std::move(first[child]);
    hole = child;
  }
  first[hole] = std::move(moving);
}

/// Arranges [first, last) as a heap, in O(n).
template <class RandomIt, class Compare>
constexpr void make_heap(RandomIt first, RandomIt last, Compare before) {
  const auto size = last - first;
  for (auto parent = size / 2; parent-- > 0;)
    sift_down(first, size, parent, before);
}

/// Adds *(last - 1) to the heap [first, last - 1).
template <class RandomIt, class Compare>
constexpr void push_heap(RandomIt first, RandomIt last, Compare before) {
  auto hole = (last - first) - 1;
  if (hole <= 0) return;
  std::iter_value_t<RandomIt> moving = std::move(first[hole]);
  while (hole > 0) {
    const auto parent = (hole - 1) / 2;
    if (!before(first[parent], moving)) break;
    first[hole] = std::move(first[parent]);
    hole = parent;
  }
  first[hole] = std::move(moving);
}

/// Moves the heap's top to *(last - 1) and makes [first, last - 1) a heap again.
template <class RandomIt, class Compare>
constexpr void pop_heap(RandomIt first, RandomIt last, Compare before) {
  const auto size = last - first;
  if (size <= 1) return;
  std::iter_value_t<RandomIt> top = std::move(first[0]);
  first[0] = std::move(first[size - 1]);
  first[size - 1] = std::move(top);
  sift_down(first, size - 1, std::iter_difference_t<RandomIt>{0}, before);
}

}  // namespace idem::detail
