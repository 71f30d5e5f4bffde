// expect: Policies::server_observer must be default-constructible and copyable and provide on_call
// A user's policies struct with a server observer that forgot on_handler; the control build swaps
// in a correct one.
#include <idem/idem.hpp>

struct observer_without_handler {
  void on_call(const idem::server_call_event&) {}
};

#ifdef IDEM_COMPILE_FAIL_CONTROL
struct policies : idem::default_policies {
  using server_observer = idem::no_server_observer;
};
#else
struct policies : idem::default_policies {
  using server_observer = observer_without_handler;
};
#endif

int main() {
  auto handler = [](const idem::http_request&) { return idem::http_response{201, {}, "ok"}; };
  idem::idempotent<decltype(handler), policies> guarded{handler};
  const idem::http_request request{"POST", "/charges", {}, "{}"};
  return guarded("scope", "key", request) ? 0 : 1;
}
