// expect: Policies::failure must provide stored_response<Response>\(const failure_info&\)
// expect: returning std::optional<Response>
// A failure policy whose stored_response answers a bare response, with no way to say "release
// the key". The control uses the default policy.
#include <idem/idem.hpp>

struct always_store {
  template <class Response>
  Response stored_response(const idem::failure_info& /*info*/) const {
    return Response{};
  }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {};
#else
struct policies : idem::default_policies {
  using failure = always_store;
};
#endif

int main() {
  auto handler = [](const std::string& body) { return body; };
  idem::idempotent<decltype(handler), policies> guarded{handler};
  return guarded("scope", "key", std::string("body")).has_value() ? 0 : 1;
}
