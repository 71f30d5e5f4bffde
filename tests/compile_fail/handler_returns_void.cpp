// expect-first: The handler must return a storable response: it is called as
// expect-first: R\(const Request&\), R\(idem::handler_context&, const Request&\)
// A handler that returns nothing: a repeat would have nothing to replay. The sentence must be
// the first error, not the last of many about std::optional<void>. The control returns the body.
#include <idem/idem.hpp>

int main() {
#ifdef IDEM_COMPILE_FAIL_CONTROL
  auto handler = [](const std::string& body) { return body; };
#else
  auto handler = [](const std::string& body) { (void)body; };
#endif
  idem::idempotent guarded{handler};
  return guarded("scope", "key", std::string("body")).has_value() ? 0 : 1;
}
