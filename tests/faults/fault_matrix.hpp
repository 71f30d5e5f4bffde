// The store failing at each step of the protocol, for any store: what the caller of idempotent
// sees, how many effects happen across its retries, and whether a completion can be lost.
//
// One guarded call touches the store at: claim, checkpoint (twice per step: the lease renewal
// before the step's effect, then the recording of its result), complete, and, off the happy
// path, release (a handler that failed before any effect) and find (an attempt whose claim was
// taken over while it ran). Each of those calls is made to fail once, with nothing written
// (before_store) or written and the answer lost (after_store, what a timeout looks like), as
// "unavailable" and, where a store can say so, "full". Then the caller retries as a client
// would: again after a 503, again after the lease when told 409.
//
// The effect is a charge at a downstream provider, made inside ctx.step with
// ctx.downstream_key("charge"), as the README tells handlers to do. The provider counts calls
// and distinct keys. What must hold in every case:
//   * the failed call gets a clear error: a 503 verdict, a store_error, or a response marked
//     not recorded, each with the store's message;
//   * one effect: the provider sees one distinct downstream key, and is called once, except in
//     the one window no store can close (the step's effect happened and recording it failed
//     before the store: the takeover runs the step again with the same downstream key, which
//     the provider deduplicates; handler_context.hpp documents it);
//   * no lost completion: once any caller has been given a response, every later call replays
//     it byte for byte.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <idem/policies.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/store/contract.hpp>
#include <idem/testing/faulty_store.hpp>

namespace idem::testing::faults {

using namespace std::chrono_literals;

/// The downstream system of record: deduplicates by the idempotency key it is given.
class provider {
 public:
  std::string charge(std::string_view downstream_key) const {
    const std::lock_guard lock(state_->mutex);
    ++state_->calls;
    auto [at, inserted] = state_->charges.try_emplace(
        std::string(downstream_key), "ch_" + std::to_string(state_->charges.size() + 1));
    return at->second;
  }
  int calls() const {
    const std::lock_guard lock(state_->mutex);
    return state_->calls;
  }
  std::size_t distinct() const {
    const std::lock_guard lock(state_->mutex);
    return state_->charges.size();
  }

 private:
  struct state {
    std::mutex mutex;
    int calls = 0;
    std::map<std::string, std::string> charges;
  };
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

/// What the handler does before its effect on its first run.
enum class first_run : std::uint8_t {
  pays,             // the plain path
  declines,         // throws before the step: the key is released (release is exercised)
  loses_its_lease,  // pays, then pauses past its lease while a retry takes over and completes
};

struct declined : std::runtime_error {
  declined() : std::runtime_error("declined before any effect") {}
};

template <Store S>
struct scenario_policies : default_policies {
  using store = faulty_store<S>;
  using clock = manual_clock;
};

template <Store S>
struct charge_handler {
  provider downstream;
  first_run mode = first_run::pays;
  std::shared_ptr<int> runs = std::make_shared<int>(0);
  // The wrapper itself, for the retry that overtakes a paused first run.
  std::shared_ptr<idempotent<charge_handler, scenario_policies<S>>*> self =
      std::make_shared<idempotent<charge_handler, scenario_policies<S>>*>(nullptr);
  std::shared_ptr<std::optional<std::string>> overtaken_answer =
      std::make_shared<std::optional<std::string>>();

  std::string operator()(handler_context& context, const std::string& body) {
    const int run = ++*runs;
    if (run == 1 && mode == first_run::declines) throw declined{};
    const std::string id =
        context.step("charge", [&] { return downstream.charge(context.downstream_key("charge")); });
    if (run == 1 && mode == first_run::loses_its_lease) {
      // Paused past the lease: a retry takes the claim over, resumes from the recorded step and
      // completes; this attempt's complete then finds its fence gone.
      auto& guarded = **self;
      guarded.clock().advance(scenario_policies<S>::lease + 1s);
      const auto retry = guarded("tenant", "order-1", body);
      REQUIRE(retry.verdict() == verdict::executed);
      *overtaken_answer = retry.value();
    }
    return "paid " + body + " with " + id;
  }
};

/// What one scenario saw.
struct observed {
  std::vector<std::string> errors;     // what each failed call said
  std::vector<std::string> responses;  // every response a caller was given
  int attempts = 0;
};

/// Calls `payments` as a client retrying one request would (again after a 503 or an error, again
/// after the lease when told 409) until a response is on record in the store; answers it. Every
/// error must carry `source` (the store's own words, not a generic failure).
template <class Guarded, class Body>
std::string call_until_recorded(Guarded& payments, manual_clock& clock, const Body& body,
                                observed& seen, const std::string& source) {
  const auto lease = std::chrono::seconds{31};
  for (;;) {
    REQUIRE(++seen.attempts <= 6);
    try {
      const auto outcome = payments("tenant", "order-1", body);
      switch (outcome.verdict()) {
        case verdict::executed:
          seen.responses.push_back(outcome.value());
          if (outcome.recorded()) return outcome.value();
          // Executed, but the store did not acknowledge the response: told so, plainly.
          CHECK_THAT(std::string(outcome.message()),
                     Catch::Matchers::Contains("not stored") && Catch::Matchers::Contains(source));
          seen.errors.emplace_back(outcome.message());
          break;
        case verdict::replayed:
          seen.responses.push_back(outcome.value());
          return outcome.value();
        case verdict::in_progress:
          // Another attempt holds the key (or held it and stopped): try again after its lease.
          clock.advance(lease);
          break;
        case verdict::store_unavailable:
        case verdict::store_full:
          CHECK(outcome.http_status() == 503);
          CHECK_THAT(std::string(outcome.message()), Catch::Matchers::Contains(source));
          seen.errors.emplace_back(outcome.message());
          clock.advance(1s);
          break;
        default:
          FAIL("unexpected verdict " << to_string(outcome.verdict()) << ": " << outcome.message());
      }
    } catch (const store_error& error) {
      // A recovery point the store could not write: the handler stops, the error passes.
      CHECK_THAT(std::string(error.what()), Catch::Matchers::Contains(source));
      seen.errors.emplace_back(error.what());
      clock.advance(1s);
    } catch (const declined&) {
      seen.errors.emplace_back("declined");
      clock.advance(1s);
    }
  }
}

/// No lost completion: later calls, within the lease and past it, replay `on_record`, and every
/// response a caller was given is that one.
template <class Guarded, class Body>
void require_replays(Guarded& payments, manual_clock& clock, const Body& body, const observed& seen,
                     const std::string& on_record) {
  for (int repeat = 0; repeat < 2; ++repeat) {
    const auto again = payments("tenant", "order-1", body);
    REQUIRE(again.verdict() == verdict::replayed);
    CHECK(again.value() == on_record);
    clock.advance(std::chrono::seconds{31});
  }
  for (const std::string& response : seen.responses)
    CHECK(response == on_record);
}

/// Runs one scenario on a fresh store: arms `fault`, calls until a response is on record, then
/// checks the three promises above.
template <Store S>
void run_scenario(S fresh, typename faulty_store<S>::fault fault, first_run mode) {
  using policies = scenario_policies<S>;
  using guarded_type = idempotent<charge_handler<S>, policies>;
  faulty_store<S> store(std::move(fresh));
  manual_clock clock;
  charge_handler<S> handler;
  handler.mode = mode;
  typename guarded_type::options parts;
  parts.store = store;
  parts.clock = clock;
  guarded_type payments(handler, std::move(parts));
  *handler.self = &payments;
  const provider downstream = handler.downstream;
  const std::shared_ptr<std::optional<std::string>> overtaken = handler.overtaken_answer;

  INFO("fault at " << to_string(fault.operation) << " call " << fault.skip + 1 << ", "
                   << (fault.timing == fault_timing::before_store ? "before" : "after")
                   << " the store, "
                   << (fault.failure == faulty_store<S>::mode::full ? "full" : "unavailable"));
  store.inject(fault);

  observed seen;
  const std::string body = "10 EUR";
  const std::string on_record = call_until_recorded(payments, clock, body, seen, "faulty_store");

  // The fault struck, and the caller heard about it.
  CHECK(store.faults_struck() == 1);
  CHECK_FALSE(seen.errors.empty());
  require_replays(payments, clock, body, seen, on_record);
  if (*overtaken) CHECK(**overtaken == on_record);

  // One effect.
  CHECK(downstream.distinct() == 1);
  const bool unrecorded_step = fault.operation == store_operation::checkpoint && fault.skip == 1 &&
                               fault.timing == fault_timing::before_store;
  if (unrecorded_step) {
    // The documented window: the charge happened, recording it failed, the takeover charged
    // again under the same downstream key, and the provider answered with the first charge.
    CHECK(downstream.calls() == 2);
  } else {
    CHECK(downstream.calls() == 1);
  }
}

/// For real faults on a real store: a plain store, a manual clock, and a handler that charges in
/// a step and then runs `after_step` once (where a test makes the store fail for real).
template <Store S>
struct real_policies : default_policies {
  using store = S;
  using clock = manual_clock;
};

struct charging {
  provider downstream;
  std::shared_ptr<std::function<void()>> after_step = std::make_shared<std::function<void()>>();

  std::string operator()(handler_context& context, const std::string& body) const {
    const std::string id =
        context.step("charge", [&] { return downstream.charge(context.downstream_key("charge")); });
    if (*after_step) std::exchange(*after_step, {})();
    return "paid " + body + " with " + id;
  }
};

template <Store S>
using real_guarded = idempotent<charging, real_policies<S>>;

template <Store S>
std::unique_ptr<real_guarded<S>> guard_real(S store, manual_clock clock, const charging& handler) {
  typename real_guarded<S>::options parts;
  parts.store = std::move(store);
  parts.clock = std::move(clock);
  return std::make_unique<real_guarded<S>>(handler, std::move(parts));
}

/// Every fault at one step, for stores made by `make()` (a fresh, empty store each call).
template <class Make>
void run_fault_matrix(Make& make, store_operation operation) {
  using S = decltype(make());
  using fault = typename faulty_store<S>::fault;
  using mode = typename faulty_store<S>::mode;
  struct aimed {
    std::size_t skip;
    first_run mode;
  };
  std::vector<aimed> targets;
  switch (operation) {
    case store_operation::claim:
    case store_operation::complete:
      targets = {{0, first_run::pays}};
      break;
    case store_operation::checkpoint:
      targets = {{0, first_run::pays}, {1, first_run::pays}};  // renewal, then recording
      break;
    case store_operation::release:
      targets = {{0, first_run::declines}};
      break;
    case store_operation::find:
      targets = {{0, first_run::loses_its_lease}};
      break;
    case store_operation::sweep:
    case store_operation::stuck:
      FAIL("sweep and stuck are not on a request's path");
  }
  for (const aimed& target : targets) {
    for (const fault_timing timing : {fault_timing::before_store, fault_timing::after_store}) {
      for (const mode failure : {mode::unavailable, mode::full}) {
        run_scenario<S>(make(), fault{operation, target.skip, timing, failure}, target.mode);
      }
    }
  }
}

}  // namespace idem::testing::faults

// The five request-path operations, one test case each, for the stores a `Factory` makes: a
// default-constructible type whose operator()() answers a fresh, empty store and which lives as
// long as the test case (a temporary directory, a server connection).
#define IDEM_FAULT_CASE(store_name, Factory, operation)                                     \
  TEST_CASE(#operation " failing or timing out - " store_name, "[faults]") {                \
    Factory factory;                                                                        \
    ::idem::testing::faults::run_fault_matrix(factory,                                      \
                                              ::idem::testing::store_operation::operation); \
  }
#define IDEM_FAULT_MATRIX_TESTS(store_name, Factory) \
  IDEM_FAULT_CASE(store_name, Factory, claim)        \
  IDEM_FAULT_CASE(store_name, Factory, checkpoint)   \
  IDEM_FAULT_CASE(store_name, Factory, complete)     \
  IDEM_FAULT_CASE(store_name, Factory, release)      \
  IDEM_FAULT_CASE(store_name, Factory, find)
