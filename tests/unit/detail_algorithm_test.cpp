// idem::detail's stand-ins for <algorithm>: the same answers as the standard ones, which the test
// (not the core) may include.
#include <catch2/catch.hpp>
#include <idem/detail/algorithm.hpp>

#include <algorithm>
#include <cstdint>
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
