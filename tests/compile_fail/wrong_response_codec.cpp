// expect: Policies::response_codec must be copyable and provide seal\(string_view,
// expect: open\(string_view, std::string&\) const members
// A response codec that returns the sealed bytes instead of appending them, and cannot open
// them again. The control uses the default codec.
#include <idem/idem.hpp>

struct returning_codec {
  std::string seal(std::string_view plain) const { return std::string(plain); }
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {};
#else
struct policies : idem::default_policies {
  using response_codec = returning_codec;
};
#endif

int main() {
  auto handler = [](const std::string& body) { return body; };
  idem::idempotent<decltype(handler), policies> guarded{handler};
  return guarded("scope", "key", std::string("body")).has_value() ? 0 : 1;
}
