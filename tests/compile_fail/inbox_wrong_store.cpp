// expect: Policies::store must be a copyable handle providing claim\(claim_request\)
// An inbox over a store that forgot the fenced operations: the same sentence idempotent gives.
// The control uses the reference store.
#include <idem/idem.hpp>

struct store_without_fences {
  idem::claim_result claim(const idem::claim_request&) { return {}; }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using store = idem::locked_store;
};
#else
struct policies : idem::default_policies {
  using store = store_without_fences;
};
#endif

int main() {
  idem::inbox<policies> consumed;
  return consumed.deduplicate("orders", "event-1", [] {}).has_value() ? 0 : 1;
}
