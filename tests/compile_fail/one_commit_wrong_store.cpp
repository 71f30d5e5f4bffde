// expect-first: commit_mode::one_commit needs a OneCommitStore
// One commit asked of a store whose claim cannot share the handler's transaction (the memory
// store keeps no database the effect could be written to). The control uses sqlite_store.
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include <string>

#ifdef IDEM_COMPILE_FAIL_CONTROL
using store_type = idem::sqlite_store;
#else
using store_type = idem::memory_store;
#endif

struct policies : idem::default_policies {
  using store = store_type;
  static constexpr idem::commit_mode commit = idem::commit_mode::one_commit;
};

struct handler {
  std::string operator()(idem::handler_context&, const std::string& body,
                         idem::sqlite_store::transaction&) const {
    return body;
  }
};

int main() {
  idem::idempotent<handler, policies> guarded{handler{}};
  return guarded("tenant", std::string_view{"k"}, std::string("body")).has_value() ? 0 : 1;
}
