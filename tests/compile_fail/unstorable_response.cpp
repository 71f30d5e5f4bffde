// expect: The handler must return a storable response
// A handler returning a type idem cannot store; the control build returns a string.
#include <idem/idem.hpp>

struct opaque_result {
  int value;
};

int main() {
#ifdef IDEM_COMPILE_FAIL_CONTROL
  auto handler = [](const std::string& body) { return body; };
#else
  auto handler = [](const std::string& body) {
    return opaque_result{static_cast<int>(body.size())};
  };
#endif
  idem::idempotent guarded{handler};
  return guarded("scope", "key", std::string("body")).has_value() ? 0 : 1;
}
