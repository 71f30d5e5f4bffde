// expect-first: idem::idempotent: the handler must be callable as
// expect-first: R\(const Request&\), R\(idem::handler_context&, const Request&\)
// A handler taking the context after the request: the sentence names the signatures it may
// have, instead of an unsatisfied disjunction. The control takes them in order.
#include <idem/idem.hpp>

int main() {
#ifdef IDEM_COMPILE_FAIL_CONTROL
  auto handler = [](idem::handler_context& context, const std::string& body) {
    return body + std::string(context.key());
  };
#else
  auto handler = [](const std::string& body, idem::handler_context& context) {
    return body + std::string(context.key());
  };
#endif
  idem::idempotent guarded{handler};
  return guarded("scope", "key", std::string("body")).has_value() ? 0 : 1;
}
