// expect-first: idem::inbox::deduplicate_batch: the function must be callable as
// expect-first: R\(std::size_t index\)
// A batch consumer function taking the event id, which deduplicate_batch does not pass (it
// passes the event's position in the batch). The control takes the position.
#include <idem/idem.hpp>

#include <string>
#include <vector>

int main() {
  idem::inbox<> consumed;
  const std::vector<std::string> ids{"event-1", "event-2"};
  std::size_t shipped = 0;
#ifdef IDEM_COMPILE_FAIL_CONTROL
  auto ship = [&](std::size_t index) { shipped += ids[index].size(); };
#else
  auto ship = [&](const std::string& id) { shipped += id.size(); };
#endif
  return consumed.deduplicate_batch("orders", ids, ship).size() == 2 ? 0 : 1;
}
