// expect-first: idem::retrying: the default classifier cannot tell whether this call's result
// failed expect: Give the result type an HTTP status A result the default classifier cannot judge:
// its 503 would be taken for a success and never retried. The control build says failures are
// exceptions (exception_classifier<>).
#include <idem/idem.hpp>

struct reply {
  int code;
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using classifier = idem::exception_classifier<>;
};
#else
using policies = idem::default_policies;
#endif

int main() {
  idem::retrying<reply (*)(), policies> call{[] { return reply{503}; }};
  return call().attempts() == 1 ? 0 : 1;
}
