// expect: Policies::backoff must provide delay
// A user's policies struct with a backoff whose delay returns milliseconds as a number; the control
// build swaps in a correct one.
#include <idem/idem.hpp>

struct backoff_returning_int {
  template <class R>
  long delay(int, std::chrono::nanoseconds, R&) const {
    return 100;
  }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using backoff = idem::full_jitter;
};
#else
struct policies : idem::default_policies {
  using backoff = backoff_returning_int;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
