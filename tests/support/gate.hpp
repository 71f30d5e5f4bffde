// A gate a test holds a handler at: the handler calls pass() and waits there until the test
// opens the gate, so that a second request finds the first still running. The tests of the
// blocking bindings (cpp-httplib, gRPC) share it.
#ifndef IDEM_TESTS_SUPPORT_GATE_HPP
#define IDEM_TESTS_SUPPORT_GATE_HPP

#include <condition_variable>
#include <mutex>

namespace idem_test {

struct gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool entered = false;
  bool open = true;

  /// Called by the handler: says it got here, then waits while the gate is shut.
  void pass() {
    std::unique_lock lock(mutex);
    entered = true;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
  }
  /// Called by the test: waits until a handler has reached the gate.
  void wait_until_entered() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return entered; });
  }
  void set(bool is_open) {
    std::lock_guard lock(mutex);
    open = is_open;
    changed.notify_all();
  }
};

}  // namespace idem_test

#endif  // IDEM_TESTS_SUPPORT_GATE_HPP
