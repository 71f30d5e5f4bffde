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
    for (auto& value : sorted) value = static_cast<std::int64_t>(rng() % 16);
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
