// expect-first: deduplicate's function must return void or a storable type
// A consumer function returning a type idem cannot store. The control returns a number.
#include <idem/idem.hpp>

struct receipt {
  int id;
};

int main() {
  idem::inbox<> consumed;
#ifdef IDEM_COMPILE_FAIL_CONTROL
  auto ship = [] { return 7; };
#else
  auto ship = [] { return receipt{7}; };
#endif
  return consumed.deduplicate("orders", "event-1", ship).has_value() ? 0 : 1;
}
