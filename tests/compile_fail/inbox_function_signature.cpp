// expect-first: idem::inbox::deduplicate: the function must be callable as R\(\),
// expect-first: R\(idem::handler_context&\)
// A consumer function taking the message, which deduplicate does not pass (the caller's lambda
// captures it). The control captures it.
#include <idem/idem.hpp>

int main() {
  idem::inbox<> consumed;
  const std::string message = "shipped";
  std::size_t shipped = 0;
#ifdef IDEM_COMPILE_FAIL_CONTROL
  auto ship = [&] { shipped += message.size(); };
#else
  auto ship = [&](const std::string& body) { shipped += body.size(); };
#endif
  return consumed.deduplicate("orders", "event-1", ship).has_value() ? 0 : 1;
}
