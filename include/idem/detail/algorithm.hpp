// The few algorithms the core needs, without <algorithm>.
//
// <algorithm> costs a translation unit that includes idem more to parse than everything the core
// takes from it: std::min and std::max, two binary searches, a heap and a sort (the ranges
// algorithms and their concepts come with it in C++20). These keep the standard ones'
// contracts, for the core's own use; a user's code is free to include <algorithm> itself.
#ifndef IDEM_DETAIL_ALGORITHM_HPP
#define IDEM_DETAIL_ALGORITHM_HPP

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

// The binary max-heaps of std::make_heap, std::push_heap and std::pop_heap, by `less` (the
// element at `first` is one no other is greater than): a heap made here is one for the standard
// functions too, and the other way round. sort is insertion sort, quickest on the short runs most
// calls sort, and a heap sort for longer ones.

template <class RandomIt, class Less>
constexpr void insertion_sort(RandomIt first, RandomIt last, Less& less) {
  if (first == last) return;
  for (RandomIt next = first + 1; next != last; ++next) {
    auto value = std::move(*next);
    RandomIt hole = next;
    for (; hole != first && less(value, *(hole - 1)); --hole)
      *hole = std::move(*(hole - 1));
    *hole = std::move(value);
  }
}

// Puts `value` into the max-heap first[0..count) whose element `hole` is vacant. The hole goes
// down to a leaf along the larger children and `value` then climbs back up from there, as in
// std::sort_heap: `value` usually comes from the heap's end and belongs near the bottom, so this
// makes about half the comparisons of checking `value` against the children on the way down.
template <class RandomIt, class Difference, class Value, class Less>
constexpr void sift_down(RandomIt first, Difference hole, Difference count, Value value,
                         Less& less) {
  const Difference top = hole;
  for (Difference child = 2 * hole + 1; child < count; child = 2 * hole + 1) {
    if (child + 1 < count && less(first[child], first[child + 1])) ++child;
    first[hole] = std::move(first[child]);
    hole = child;
  }
  while (hole > top) {
    const Difference parent = (hole - 1) / 2;
    if (!less(first[parent], value)) break;
    first[hole] = std::move(first[parent]);
    hole = parent;
  }
  first[hole] = std::move(value);
}

/// Arranges [first, last) as a heap, in O(n).
template <class RandomIt, class Less>
constexpr void make_heap(RandomIt first, RandomIt last, Less less) {
  const auto count = last - first;
  for (auto start = count / 2; start-- > 0;)
    detail::sift_down(first, start, count, std::move(first[start]), less);
}

/// Adds *(last - 1) to the heap [first, last - 1).
template <class RandomIt, class Less>
constexpr void push_heap(RandomIt first, RandomIt last, Less less) {
  auto hole = (last - first) - 1;
  if (hole <= 0) return;
  auto value = std::move(first[hole]);
  while (hole > 0) {
    const auto parent = (hole - 1) / 2;
    if (!less(first[parent], value)) break;
    first[hole] = std::move(first[parent]);
    hole = parent;
  }
  first[hole] = std::move(value);
}

/// Moves the heap's largest element to *(last - 1) and makes [first, last - 1) a heap again.
template <class RandomIt, class Less>
constexpr void pop_heap(RandomIt first, RandomIt last, Less less) {
  const auto count = last - first;
  if (count <= 1) return;
  auto value = std::move(first[count - 1]);
  first[count - 1] = std::move(first[0]);
  detail::sift_down(first, decltype(count){0}, count - 1, std::move(value), less);
}

/// Sorts [first, last) by `less`, a strict weak order, as std::sort: O(n log n) comparisons in
/// the worst case, not stable. The worst case matters more here than the average: what the core
/// sorts (a JSON object's members) can come from a client, so a sequence chosen to make a
/// quicksort quadratic must not be able to.
template <class RandomIt, class Less>
constexpr void sort(RandomIt first, RandomIt last, Less less) {
  using difference = decltype(last - first);
  constexpr difference short_run = 16;  // where libstdc++'s std::sort turns to insertion sort
  const difference count = last - first;
  if (count <= short_run) {
    detail::insertion_sort(first, last, less);
    return;
  }
  detail::make_heap(first, last, less);
  for (RandomIt end = last; end - first > 1; --end)
    detail::pop_heap(first, end, less);
}

}  // namespace idem::detail

#endif  // IDEM_DETAIL_ALGORITHM_HPP
