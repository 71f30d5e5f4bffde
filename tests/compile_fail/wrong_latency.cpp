// expect: Policies::latency must be copyable and provide record
// A user's policies struct with a latency tracker that keeps durations but cannot answer a
// quantile; the control build swaps in idem's own.
#include <idem/idem.hpp>

#include <chrono>

struct tracker_without_estimate {
  void record(std::chrono::nanoseconds) {}
  bool tracks(double) const { return true; }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using latency = idem::latency_tracker;
};
#else
struct policies : idem::default_policies {
  using latency = tracker_without_estimate;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
