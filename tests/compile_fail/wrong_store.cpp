// expect: Policies::store must be a copyable handle providing claim\(claim_request\)
// A store that forgot the fenced operations; the control build uses the reference store.
#include <idem/idem.hpp>

struct store_without_fences {
  idem::claim_result claim(const idem::claim_request&) { return {}; }
  std::optional<idem::record> find(std::string_view, std::string_view, idem::store_time) {
    return std::nullopt;
  }
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
  auto handler = [](const std::string& body) { return body; };
  idem::idempotent<decltype(handler), policies> guarded{handler};
  return guarded("scope", "key", std::string("body")).has_value() ? 0 : 1;
}
