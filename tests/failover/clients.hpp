// What the failover tests' clients share (redis_failover_test.cpp, postgres_failover_test.cpp):
// the handler, whose effect is one entry in the ledger and whose response is that entry's token;
// the guarded wrapper over a store, with a lease longer than any test (a claim whose completion
// was ambiguous stays in progress and is never taken over, so a second effect can only come from
// a record the failover lost); and one call, classified as its client saw it.
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <utility>

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

}  // namespace idem::testing::failover
