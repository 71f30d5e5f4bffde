// What the shared client cases are written with (retry_cases.hpp, retry_guard_cases.hpp): a
// scripted dependency, policies on a manual clock, and wrap<Driver>(call, options), which asks the
// including file's driver for a wrapper.
#ifndef IDEM_TESTS_UNIT_CLIENT_RETRY_SUPPORT_HPP
#define IDEM_TESTS_UNIT_CLIENT_RETRY_SUPPORT_HPP

#include <idem/idem.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace retry_cases {

using namespace std::chrono_literals;

struct response {
  int status;
  std::string retry_after{};
};

// A manual clock and no budget: each test adds what it is about.
struct manual_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using budget = idem::unlimited_budget;
};

struct constant_policies : manual_policies {
  using backoff = idem::constant_backoff;
};

// A scripted dependency: answers with the given statuses in turn, then repeats the last.
struct scripted {
  std::vector<int> statuses;
  std::vector<std::string> keys{};
  std::string retry_after{};
  response operator()(const idem::attempt_context& attempt) {
    keys.emplace_back(attempt.key());
    const auto i = std::min(keys.size(), statuses.size()) - 1;
    return {statuses[i], retry_after};
  }
  int calls() const { return static_cast<int>(keys.size()); }
};

/// The parts of a wrapper under `Policies`, whatever it wraps and whichever driver runs it.
template <class Policies = manual_policies>
using retry_options = typename idem::retrying<void (*)(), Policies>::options;

// The parts on a manual clock, with a fixed seed.
template <class Policies = manual_policies>
retry_options<Policies> options_with(idem::manual_clock clock,
                                     int max_attempts = Policies::max_attempts,
                                     std::chrono::nanoseconds deadline = Policies::deadline) {
  retry_options<Policies> o;
  o.clock = clock;
  o.seed = 42;
  o.limits = {max_attempts, deadline};
  return o;
}

// A wrapper of the driver's over `call`. Wrappers are neither copyable nor movable; the
// returned prvalue initialises the caller's variable in place.
template <class Driver, class Policies = manual_policies, class Call>
auto wrap(Call call, retry_options<Policies> o) {
  return Driver::template wrap<Policies>(std::move(call), std::move(o));
}
template <class Driver, class Policies = manual_policies, class Call>
auto wrap_manual(Call call, idem::manual_clock clock) {
  return wrap<Driver, Policies>(std::move(call), options_with<Policies>(clock));
}

}  // namespace retry_cases

#endif  // IDEM_TESTS_UNIT_CLIENT_RETRY_SUPPORT_HPP
