// expect: Policies::key_generator must provide generate
// A user's policies struct with a key generator returning std::string; the control build swaps in a
// correct one.
#include <idem/idem.hpp>

#include <string>
struct string_keys {
  template <class R, class C>
  std::string generate(R&, C&) const {
    return "key";
  }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using key_generator = idem::uuid_v7;
};
#else
struct policies : idem::default_policies {
  using key_generator = string_keys;
};
#endif

int main() {
  auto call = [](const idem::attempt_context&) { return std::error_code{}; };
  idem::retrying<decltype(call), policies> retried{call};
  return retried().succeeded() ? 0 : 1;
}
