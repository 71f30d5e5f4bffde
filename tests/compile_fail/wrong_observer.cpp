// expect: Policies::observer must be copyable and provide on_attempt
// A user's policies struct with an observer that forgot on_finish; the control build swaps in a
// correct one.
#include <idem/idem.hpp>

struct observer_without_finish {
  void on_attempt(const idem::attempt_event&) {}
  void on_delay(const idem::delay_event&) {}
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using observer = idem::counting_observer;
};
#else
struct policies : idem::default_policies {
  using observer = observer_without_finish;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
