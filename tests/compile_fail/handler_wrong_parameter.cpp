// expect-first: idem::idempotent: the handler must be callable as R\(const Request&\)
// A handler taking something that is neither the request nor its body. The control takes the
// body.
#include <idem/idem.hpp>

struct order {
  int quantity;
};

int main() {
#ifdef IDEM_COMPILE_FAIL_CONTROL
  auto handler = [](const std::string& body) { return body; };
#else
  auto handler = [](const order& placed) { return std::to_string(placed.quantity); };
#endif
  idem::idempotent guarded{handler};
  return guarded("scope", "key", std::string("body")).has_value() ? 0 : 1;
}
