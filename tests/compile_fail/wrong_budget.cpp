// expect: Policies::budget must be copyable and provide on_request
// A user's policies struct with a budget without on_request(); the control build swaps in a correct
// one.
#include <idem/idem.hpp>

struct budget_without_deposit {
  bool try_acquire_retry(idem::retry_reason) const { return true; }
  void on_success(idem::retry_reason) const {}
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using budget = idem::unlimited_budget;
};
#else
struct policies : idem::default_policies {
  using budget = budget_without_deposit;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
