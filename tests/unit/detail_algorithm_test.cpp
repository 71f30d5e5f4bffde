// idem::detail's stand-ins for <algorithm>: the same answers as the standard ones, which the test
// (not the core) may include.
#include <catch2/catch.hpp>
#include <idem/detail/algorithm.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

TEST_CASE("detail::min, max and clamp answer as the standard ones, ties included") {
  CHECK(idem::detail::min(3, 5) == 3);
  CHECK(idem::detail::max(3, 5) == 5);
  CHECK(idem::detail::clamp(7, 1, 5) == 5);
  CHECK(idem::detail::clamp(-2, 1, 5) == 1);
  CHECK(idem::detail::clamp(4, 1, 5) == 4);
  // On a tie both return their first argument, as std::min and std::max do.
  struct item {
    int rank;
    int id;
    bool operator<(const item& other) const { return rank < other.rank; }
  };
  const item a{1, 10}, b{1, 20};
  CHECK(idem::detail::min(a, b).id == 10);
  CHECK(idem::detail::max(a, b).id == 10);
  CHECK(&idem::detail::min(a, b) == &std::min(a, b));
  CHECK(&idem::detail::max(a, b) == &std::max(a, b));
}

TEST_CASE("detail::lower_bound and upper_bound find what the standard ones find") {
  std::mt19937_64 rng(20261202);
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::int64_t> sorted(rng() % 40);
    for (auto& value : sorted)
      value = static_cast<std::int64_t>(rng() % 16);
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t probe = -1; probe <= 17; ++probe) {
      INFO("size " << sorted.size() << ", probe " << probe);
      CHECK(idem::detail::lower_bound(sorted.cbegin(), sorted.cend(), probe) ==
            std::lower_bound(sorted.cbegin(), sorted.cend(), probe));
      CHECK(idem::detail::upper_bound(sorted.cbegin(), sorted.cend(), probe) ==
            std::upper_bound(sorted.cbegin(), sorted.cend(), probe));
    }
  }
}

TEST_CASE("detail::sort orders as std::sort does, duplicates included") {
  std::mt19937_64 rng(20261203);
  // Lengths around the switch from insertion sort to heap sort, and well past it; values from
  // a small range, so most sequences hold duplicates.
  for (int round = 0; round < 3000; ++round) {
    const std::size_t size = round < 2000 ? rng() % 48 : rng() % 2000;
    const std::uint64_t values = 1 + rng() % (round % 3 == 0 ? 4 : 1000);
    std::vector<std::uint64_t> data(size);
    for (auto& value : data)
      value = rng() % values;
    std::vector<std::uint64_t> expected = data;
    std::sort(expected.begin(), expected.end());
    idem::detail::sort(data.begin(), data.end(),
                       [](std::uint64_t a, std::uint64_t b) { return a < b; });
    INFO("round " << round << ", size " << size);
    REQUIRE(data == expected);
  }
}

TEST_CASE("detail::sort takes the order it is given and sorts what is already ordered") {
  std::vector<int> ascending(1000), descending(1000), equal(1000, 7);
  for (int i = 0; i < 1000; ++i)
    ascending[static_cast<std::size_t>(i)] = i;
  descending.assign(ascending.rbegin(), ascending.rend());
  const auto greater = [](int a, int b) { return a > b; };
  std::vector<int> sorted = ascending;
  idem::detail::sort(sorted.begin(), sorted.end(), greater);
  CHECK(sorted == descending);
  idem::detail::sort(sorted.begin(), sorted.end(), greater);
  CHECK(sorted == descending);
  idem::detail::sort(sorted.begin(), sorted.end(), [](int a, int b) { return a < b; });
  CHECK(sorted == ascending);
  sorted = equal;
  idem::detail::sort(sorted.begin(), sorted.end(), greater);
  CHECK(sorted == equal);
  std::vector<int> empty;
  idem::detail::sort(empty.begin(), empty.end(), greater);
  CHECK(empty.empty());
}

TEST_CASE("detail::sort moves elements that cannot be copied, and sorts raw pointers") {
  std::vector<std::unique_ptr<int>> owned;
  for (int value : {5, 3, 9, 1, 7, 3, 0, 8, 2, 6, 4, 11, 10, 15, 13, 12, 14, 16, 3})
    owned.push_back(std::make_unique<int>(value));
  idem::detail::sort(owned.begin(), owned.end(),
                     [](const auto& a, const auto& b) { return *a < *b; });
  for (std::size_t i = 1; i < owned.size(); ++i)
    CHECK(*owned[i - 1] <= *owned[i]);
  int raw[] = {4, 2, 8, 6, 1, 9, 3, 7, 5, 0, 12, 11, 10, 19, 18, 17, 16, 15, 14, 13};
  idem::detail::sort(raw, raw + 20, [](int a, int b) { return a < b; });
  for (int i = 0; i < 20; ++i)
    CHECK(raw[i] == i);
}

TEST_CASE("detail's heap keeps the standard heap's shape and pops in the same order") {
  std::mt19937_64 rng(7);
  const auto later = [](std::uint64_t a, std::uint64_t b) { return a > b; };  // a min-heap
  for (int round = 0; round < 500; ++round) {
    std::vector<std::uint64_t> ours(rng() % 64), theirs;
    for (auto& value : ours)
      value = rng() % 32;  // duplicates on purpose
    theirs = ours;
    const std::size_t pushed_after = ours.empty() ? 0 : rng() % ours.size();
    // The first part made a heap in one go, the rest pushed one by one (as sweep does).
    idem::detail::make_heap(ours.begin(), ours.begin() + static_cast<long>(pushed_after), later);
    std::make_heap(theirs.begin(), theirs.begin() + static_cast<long>(pushed_after), later);
    for (std::size_t end = pushed_after + 1; end <= ours.size(); ++end) {
      idem::detail::push_heap(ours.begin(), ours.begin() + static_cast<long>(end), later);
      std::push_heap(theirs.begin(), theirs.begin() + static_cast<long>(end), later);
    }
    REQUIRE(std::is_heap(ours.begin(), ours.end(), later));
    std::vector<std::uint64_t> popped_ours, popped_theirs;
    while (!ours.empty()) {
      idem::detail::pop_heap(ours.begin(), ours.end(), later);
      popped_ours.push_back(ours.back());
      ours.pop_back();
      REQUIRE(std::is_heap(ours.begin(), ours.end(), later));
      std::pop_heap(theirs.begin(), theirs.end(), later);
      popped_theirs.push_back(theirs.back());
      theirs.pop_back();
    }
    CHECK(popped_ours == popped_theirs);
    CHECK(std::is_sorted(popped_ours.begin(), popped_ours.end()));
  }
}
