// expect: Policies::clock must provide now\(\)
// A user's policies struct with a clock that has no wall_now(); the control build swaps in a
// correct one.
#include <idem/idem.hpp>

struct clock_without_wall_time {
  using time_point = std::chrono::steady_clock::time_point;
  time_point now() const { return std::chrono::steady_clock::now(); }
  void sleep_for(std::chrono::nanoseconds) const {}
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using clock = idem::steady_clock;
};
#else
struct policies : idem::default_policies {
  using clock = clock_without_wall_time;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
