// What the failover tests' clients share (redis_failover_test.cpp, postgres_failover_test.cpp):
// the handler, whose effect is one entry in the ledger and whose response is that entry's token;
// the guarded wrapper over a store, with a lease longer than any test (a claim whose completion
// was ambiguous stays in progress and is never taken over, so a second effect can only come from
// a record the failover lost); one call, classified as its client saw it; and the threads that
// make the calls, stopped and joined however a case ends.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <idem/idem.hpp>

#include "failover/history.hpp"

namespace idem::testing::failover {

struct effect_handler {
  ledger* effects;
  std::string operator()(handler_context& ctx, const std::string& /*body*/) const {
    return effects->effect(ctx.key());
  }
};

template <class Store>
struct client_policies : default_policies {
  using store = Store;
  using clock = system_clock;
};

template <class Store>
using guarded = idempotent<effect_handler, client_policies<Store>>;

template <class Store>
guarded<Store> make_guarded(const Store& store, ledger& effects) {
  typename guarded<Store>::options parts;
  parts.store = store;
  parts.lease = std::chrono::hours{1};
  return guarded<Store>(effect_handler{&effects}, std::move(parts));
}

/// One call of `key` (scope "s") through `wrapper`, as its client saw it; `final` marks the
/// read-back after the last heal.
template <class Guarded>
call call_once(Guarded& wrapper, const std::string& key, bool final) {
  call made;
  made.key = key;
  made.final = final;
  made.invoked = now_ns();
  try {
    auto outcome = wrapper("s", key, std::string("body"));
    switch (outcome.verdict()) {
      case verdict::executed:
        made.executed = true;
        made.result = outcome.recorded() ? answer::acknowledged : answer::ambiguous;
        made.response = *outcome;
        break;
      case verdict::replayed:
        made.result = answer::acknowledged;
        made.response = *outcome;
        break;
      case verdict::store_unavailable:
      case verdict::store_full:
        made.result = answer::ambiguous;
        break;
      default:
        made.result = answer::refused;
        break;
    }
  } catch (const std::exception&) {
    made.result = answer::ambiguous;
  }
  made.returned = now_ns();
  return made;
}

/// The clients' threads, stopped and joined however the scope that owns them ends: a failed
/// REQUIRE throws past the join the case would reach, and a thread that outlived its case would
/// call into a store, a ledger and a history already destroyed. Declared after everything its
/// threads use (C++ destroys in reverse order), it is destroyed, and so joins them, first.
class client_threads {
 public:
  client_threads() = default;
  client_threads(const client_threads&) = delete;
  client_threads& operator=(const client_threads&) = delete;
  ~client_threads() { stop_and_join(); }

  /// Starts `body(stopping)`: it returns once `stopping()` says so.
  template <class Body>
  void start(Body body) {
    threads_.emplace_back(
        [this, body = std::move(body)]() mutable { body([this] { return stop_.load(); }); });
  }

  /// Asks every thread to stop (all at once: each may be inside a call that waits out a
  /// timeout), then joins them; the second time, nothing.
  void stop_and_join() noexcept {
    stop_ = true;
    join();
  }
  /// Joins every thread once it returns by itself.
  void join() noexcept {
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace idem::testing::failover
