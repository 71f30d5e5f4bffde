// expect-first: commit_mode::one_commit: the handler must take the store's transaction
// One commit with a handler that cannot write its effect in the transaction (it does not take
// it): one commit is only for effects local to the store's database. The control takes it.
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include <string>

struct policies : idem::default_policies {
  using store = idem::sqlite_store;
  static constexpr idem::commit_mode commit = idem::commit_mode::one_commit;
};

struct handler {
#ifdef IDEM_COMPILE_FAIL_CONTROL
  std::string operator()(idem::handler_context&, const std::string& body,
                         idem::sqlite_store::transaction&) const {
    return body;
  }
#else
  std::string operator()(idem::handler_context&, const std::string& body) const {
    return body;
  }
#endif
};

int main() {
  idem::idempotent<handler, policies> guarded{handler{}};
  return guarded("tenant", std::string_view{"k"}, std::string("body")).has_value() ? 0 : 1;
}
