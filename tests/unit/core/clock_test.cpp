// The clocks' readings: the default coarse_clock against the exact system clock it stands in for.
#include <catch2/catch.hpp>

#include <idem/core/clock.hpp>
#include <idem/policies.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <type_traits>

#include <pthread.h>
#include <signal.h>

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

namespace {
std::atomic<int> interruptions{0};
}  // namespace

TEST_CASE("a real clock sleeps its whole delay, over a second and through signals") {
  // nanosleep returns early, with EINTR, whenever a signal handler runs on the sleeping thread;
  // the sleep must go on for what is left. Over a second the delay is split into seconds and
  // nanoseconds, and a split that left 10^9 nanoseconds or more would be refused at once.
  struct sigaction action {};
  action.sa_handler = [](int) { interruptions.fetch_add(1); };
  sigemptyset(&action.sa_mask);
  struct sigaction previous {};
  REQUIRE(sigaction(SIGUSR1, &action, &previous) == 0);
  interruptions = 0;

  const pthread_t sleeper = pthread_self();
  std::atomic<bool> done{false};
  std::thread interrupter([&] {
    while (!done.load()) {
      pthread_kill(sleeper, SIGUSR1);
      std::this_thread::sleep_for(20ms);
    }
  });
  const auto start = std::chrono::steady_clock::now();
  idem::steady_clock{}.sleep_for(1050ms);
  const auto slept = std::chrono::steady_clock::now() - start;
  done = true;
  interrupter.join();
  sigaction(SIGUSR1, &previous, nullptr);

  CAPTURE(interruptions.load());
  CHECK(interruptions.load() > 0);  // the sleep was interrupted, and still lasted
  CHECK(slept >= 1050ms);
}

TEST_CASE("a real clock's sleep of nothing, or less, returns at once") {
  const auto start = std::chrono::steady_clock::now();
  idem::coarse_clock{}.sleep_for(0ns);
  idem::system_clock{}.sleep_for(-5s);
  CHECK(std::chrono::steady_clock::now() - start < 1s);
}
