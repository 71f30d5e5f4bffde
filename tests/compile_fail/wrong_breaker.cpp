// expect: Policies::breaker must be copyable and provide allow
// A user's policies struct with a breaker whose allow() takes no time; the control build swaps in a
// correct one.
#include <idem/idem.hpp>

struct breaker_without_time {
  bool allow() const { return true; }
  void on_success(std::chrono::nanoseconds) const {}
  void on_failure(std::chrono::nanoseconds) const {}
  idem::breaker_state state(std::chrono::nanoseconds) const { return idem::breaker_state::closed; }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using breaker = idem::no_breaker;
};
#else
struct policies : idem::default_policies {
  using breaker = breaker_without_time;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
