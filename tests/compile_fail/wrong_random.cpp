// expect: Policies::random must be a std::uniform_random_bit_generator
// A user's policies struct with a 32-bit engine; the control build swaps in a correct one.
#include <idem/idem.hpp>

#include <random>

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using random = idem::xoshiro256ss;
};
#else
struct policies : idem::default_policies {
  using random = std::mt19937;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
