// expect: max_attempts counts the first attempt
// A user's policies struct with max_attempts = 0; the control build swaps in a correct one.
#include <idem/idem.hpp>

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  static constexpr int max_attempts = 1;
};
#else
struct policies : idem::default_policies {
  static constexpr int max_attempts = 0;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
