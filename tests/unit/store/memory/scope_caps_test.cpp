// The per-scope cap alone: a scope is refused past its cap of records that have not expired,
// each scope on its own, and what is given back (or expires) makes room again.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/scope_caps.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using idem::detail::memory::scope_caps;
using idem::detail::memory::scope_expiries;

namespace {
const idem::detail::siphash_key key{1, 2};
}

TEST_CASE("scope caps: a scope is refused past its cap, and other scopes are not",
          "[memory_store][scope_caps]") {
  scope_caps<> caps(3, key);
  for (std::int64_t i = 0; i < 3; ++i)
    CHECK(caps.reserve("tenant", 0, 0, 100 + i));
  CHECK_FALSE(caps.reserve("tenant", 0, 0, 200));
  CHECK(caps.reserve("other", 0, 0, 200));
  CHECK(caps.reserve("", 0, 0, 200));  // the empty scope is a scope like any other
  // Giving one back makes room for exactly one.
  caps.give_back("tenant", 101);
  CHECK(caps.reserve("tenant", 0, 0, 300));
  CHECK_FALSE(caps.reserve("tenant", 0, 0, 301));
  // A give back of an expiry it does not hold changes nothing.
  caps.give_back("tenant", 999);
  caps.give_back("nobody", 100);
  CHECK_FALSE(caps.reserve("tenant", 0, 0, 302));
}

TEST_CASE("scope caps: expired records do not count, and a replaced one is not counted twice",
          "[memory_store][scope_caps]") {
  scope_caps<> caps(2, key);
  CHECK(caps.reserve("s", 0, 0, 10));
  CHECK(caps.reserve("s", 0, 0, 20));
  CHECK_FALSE(caps.reserve("s", 5, 0, 30));
  // At 10 the first has expired (held until swept, but not live): room for one more.
  CHECK(caps.reserve("s", 10, 0, 30));
  CHECK_FALSE(caps.reserve("s", 10, 0, 40));
  // A claim that replaces a live record of the scope counts the others only.
  CHECK(caps.reserve("s", 10, 1, 40));
  CHECK_FALSE(caps.reserve("s", 10, 1, 50));
}

TEST_CASE("scope caps: unlimited refuses nothing", "[memory_store][scope_caps]") {
  scope_caps<> caps(std::numeric_limits<std::size_t>::max(), key);
  for (int i = 0; i < 1000; ++i)
    REQUIRE(caps.reserve("s", 0, 0, 100));
  caps.give_back("s", 100);
}

TEST_CASE("scope expiries: counts the live ones through erases at the front and in the middle",
          "[memory_store][scope_caps]") {
  // Against a plain vector, through the compaction an erase at the front makes once half is
  // gone: the count of expiries after `now` is exact at every step.
  scope_expiries<> held;
  std::vector<std::int64_t> model;
  std::uint64_t seed = 88172645463325252ULL;
  const auto next = [&seed](std::uint64_t below) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return static_cast<std::int64_t>(seed % below);
  };
  std::int64_t now = 0;
  for (int step = 0; step < 5000; ++step) {
    const std::int64_t action = next(10);
    if (action < 5) {
      const std::int64_t expiry = now + next(100);
      held.insert(expiry);
      model.push_back(expiry);
    } else if (action < 9 && !model.empty()) {
      // Mostly the oldest, as a sweep removes them; sometimes any.
      std::sort(model.begin(), model.end());
      const auto at = action < 8 ? 0 : next(static_cast<std::uint64_t>(model.size()));
      held.erase_one(model[static_cast<std::size_t>(at)]);
      model.erase(model.begin() + at);
    } else {
      now += next(20);
    }
    const auto live = static_cast<std::size_t>(
        std::count_if(model.begin(), model.end(), [now](std::int64_t e) { return e > now; }));
    CAPTURE(step);
    REQUIRE(held.live_after(now) == live);
    REQUIRE(held.empty() == model.empty());
  }
}
