// expect: Policies::fingerprint must be a hash function
// A fingerprint that returns a number instead of an idem::digest.
#include <idem/idem.hpp>

struct numeric_fingerprint {
  unsigned long operator()(const idem::request_view& request) const { return request.body.size(); }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using fingerprint = idem::sha256;
};
#else
struct policies : idem::default_policies {
  using fingerprint = numeric_fingerprint;
};
#endif

int main() {
  auto handler = [](const std::string& body) { return body; };
  idem::idempotent<decltype(handler), policies> guarded{handler};
  return guarded("scope", "key", std::string("body")).has_value() ? 0 : 1;
}
