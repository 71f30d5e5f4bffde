// expect: Policies::classifier must provide classify
// A user's policies struct with a classifier that cannot judge exceptions; the control build swaps
// in a correct one.
#include <idem/idem.hpp>

struct classifier_without_exceptions {
  template <class R>
  idem::classification classify(const R&) const {
    return {};
  }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using classifier = idem::default_classifier;
};
#else
struct policies : idem::default_policies {
  using classifier = classifier_without_exceptions;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
