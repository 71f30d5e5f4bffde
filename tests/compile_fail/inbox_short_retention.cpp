// expect: Policies::retention must be longer than Policies::lease
// An inbox whose records would expire before their claims: caught where the policies are named,
// as idempotent does. The control keeps the records longer than the lease.
#include <idem/idem.hpp>

struct policies : idem::default_policies {
  static constexpr std::chrono::seconds lease{60};
#ifdef IDEM_COMPILE_FAIL_CONTROL
  static constexpr std::chrono::seconds retention{120};
#else
  static constexpr std::chrono::seconds retention{30};
#endif
};

int main() {
  idem::inbox<policies> consumed;
  return consumed.deduplicate("orders", "event-1", [] {}).has_value() ? 0 : 1;
}
