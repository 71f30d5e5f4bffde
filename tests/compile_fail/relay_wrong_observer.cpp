// expect-first: Policies::observer must be copyable and provide on_pass, on_retry,
// expect-first: on_dead_letter, on_sink_unavailable, on_backlog, on_claim_lost and on_purge
// The client side's observer given to a relay: it hears attempts, not passes. The control uses
// the relay's counting observer.
#include <idem/client/policy/observer.hpp>
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
  void publish(std::span<const idem::outbox_entry>, std::span<idem::sink_result>) {}
};

struct policies : idem::default_relay_policies {
#ifdef IDEM_COMPILE_FAIL_CONTROL
  using observer = idem::counting_relay_observer;
#else
  using observer = idem::counting_observer;
#endif
};

int main() {
  tiny_outbox outbox;
  sink to;
  idem::outbox_relay<tiny_outbox, sink, policies> relay(outbox, to);
  return static_cast<int>(relay.run_once().fetched);
}
