// expect-first: outbox_relay's second parameter must satisfy idem::Sink:
// expect-first: publish\(std::span<const outbox_entry>, std::span<sink_result>\) returning void
// A sink that answers one bool for the whole batch: the relay needs an answer per message. The
// sentence must come first, not the errors of the relay's body. The control publishes per entry.
#include <idem/outbox/relay.hpp>

#include <chrono>
#include <cstddef>
#include <span>

struct tiny_outbox {
  struct batch {
    std::span<const idem::outbox_entry> entries() const noexcept { return {}; }
  };
  batch fetch(std::size_t, std::chrono::system_clock::time_point) { return {}; }
  void settle(batch&, std::span<const idem::outbox_settlement>,
              std::chrono::system_clock::time_point) {}
  std::size_t purge(std::chrono::system_clock::time_point, std::size_t) { return 0; }
  idem::outbox_backlog backlog(std::chrono::system_clock::time_point) { return {}; }
  void wait_for_rows(std::chrono::milliseconds) {}
};

struct sink {
#ifdef IDEM_COMPILE_FAIL_CONTROL
  void publish(std::span<const idem::outbox_entry>, std::span<idem::sink_result>) {}
#else
  bool publish(std::span<const idem::outbox_entry>) {
    return true;
  }
#endif
};

int main() {
  tiny_outbox outbox;
  sink to;
  idem::outbox_relay<tiny_outbox, sink> relay(outbox, to);
  return static_cast<int>(relay.run_once().fetched);
}
