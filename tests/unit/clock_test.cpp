// The clocks' readings: the default coarse_clock against the exact system clock it stands in for.
#include <catch2/catch.hpp>

#include <idem/policies.hpp>
#include <idem/policy/clock.hpp>

#include <algorithm>
#include <chrono>
#include <type_traits>

using namespace std::chrono_literals;

TEST_CASE("the default clock is coarse_clock: steady deadlines, a cheap wall time") {
  STATIC_REQUIRE(std::is_same_v<idem::default_policies::clock, idem::coarse_clock>);
  STATIC_REQUIRE(idem::Clock<idem::coarse_clock>);
  STATIC_REQUIRE(
      std::is_same_v<idem::coarse_clock::time_point, std::chrono::steady_clock::time_point>);
}

TEST_CASE("coarse_clock's wall time is the system's, never ahead of it and at most a tick behind") {
  const idem::coarse_clock clock;
  const std::chrono::nanoseconds tick = idem::coarse_clock::resolution();
#if defined(__linux__)
  // Linux ticks at 100 to 1,000 Hz.
  CHECK(tick > 0ns);
  CHECK(tick <= 10ms);
#endif
  std::chrono::nanoseconds most_behind = 0ns;
  int ahead = 0;
  for (int i = 0; i < 100'000; ++i) {
    const auto coarse = clock.wall_now();
    const auto exact = std::chrono::system_clock::now();  // read after: never earlier
    if (coarse > exact) ++ahead;
    most_behind = std::max<std::chrono::nanoseconds>(most_behind, exact - coarse);
  }
  CHECK(ahead == 0);
  // A tick is due every `tick`; one delayed by a busy host still lands within a second.
  CAPTURE(tick.count(), most_behind.count());
  CHECK(most_behind < 1s);
}

TEST_CASE("coarse_clock's wall time moves with the system clock") {
  const idem::coarse_clock clock;
  const auto first = clock.wall_now();
  const auto exact_first = std::chrono::system_clock::now();
  while (std::chrono::system_clock::now() - exact_first < 50ms) {
  }
  const auto later = clock.wall_now();
  // 50 ms of wall time passed; the coarse reading moved by that, less at most a tick at each
  // end, and a delayed tick on a busy host.
  CHECK(later - first >= 10ms);
  CHECK(later - first < 10s);
}

TEST_CASE("coarse_clock's deadlines are std::chrono::steady_clock's") {
  const idem::coarse_clock clock;
  const auto before = std::chrono::steady_clock::now();
  const auto reading = clock.now();
  const auto after = std::chrono::steady_clock::now();
  CHECK(before <= reading);
  CHECK(reading <= after);
}
