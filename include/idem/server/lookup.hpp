// What a lookup against a downstream system of record answers: did the effect of a call land?
//
// For a downstream that takes no idempotency key, repeating a call whose answer was lost can make
// its effect twice. What such a downstream usually offers instead is a search by a reference the
// caller chose (a payment's description or metadata, a transfer's end-to-end id). A step given a
// lookup (handler_context::step(name, fn, lookup)) asks it before it calls again, and the
// reconciler (idem/reconciler.hpp) asks one for every step a record shows as started and never
// finished. Three answers, and only the second lets a call be made again:
//
//   landed      the effect exists (for a step, with its result, which is then recorded)
//   not_landed  the downstream has no effect under the reference: calling again is safe
//   unknown     no definite answer (the lookup failed, or the downstream cannot tell yet)
#ifndef IDEM_SERVER_LOOKUP_HPP
#define IDEM_SERVER_LOOKUP_HPP

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace idem {

enum class landing : std::uint8_t { landed, not_landed, unknown };

constexpr std::string_view to_string(landing value) noexcept {
  switch (value) {
    case landing::landed:
      return "landed";
    case landing::not_landed:
      return "not_landed";
    case landing::unknown:
      return "unknown";
  }
  return "unknown";
}

/// A step's lookup answer: landed with the step's result R (nothing for void), not_landed, or
/// unknown with why.
template <class R>
class lookup_answer {
 public:
  static lookup_answer landed(R result) {
    lookup_answer answer{landing::landed, {}};
    answer.result_.emplace(std::move(result));
    return answer;
  }
  static lookup_answer not_landed() { return lookup_answer{landing::not_landed, {}}; }
  static lookup_answer unknown(std::string why) {
    return lookup_answer{landing::unknown, std::move(why)};
  }

  landing status() const noexcept { return status_; }
  /// The result of the call that landed; only for landed.
  R& result() { return *result_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  lookup_answer(landing status, std::string reason) : status_(status), reason_(std::move(reason)) {}

  landing status_;
  std::string reason_;
  std::optional<R> result_;
};

template <>
class lookup_answer<void> {
 public:
  static lookup_answer landed() { return lookup_answer{landing::landed, {}}; }
  static lookup_answer not_landed() { return lookup_answer{landing::not_landed, {}}; }
  static lookup_answer unknown(std::string why) {
    return lookup_answer{landing::unknown, std::move(why)};
  }

  landing status() const noexcept { return status_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  lookup_answer(landing status, std::string reason) : status_(status), reason_(std::move(reason)) {}

  landing status_;
  std::string reason_;
};

/// Thrown by a step with a lookup when it cannot tell whether its effect landed: the lookup
/// answered unknown or threw. The step did not call its function. The claim is kept (not
/// released, whatever the failure policy says), so the record stays in progress, appears among
/// the stuck records once its lease ends, and the reconciler's report lists it; a retry after
/// the lease asks the lookup again.
class effect_unknown : public std::runtime_error {
 public:
  effect_unknown(std::string_view step, const std::string& why)
      : std::runtime_error("idem: whether step '" + std::string(step) +
                           "' took effect is unknown (" + why +
                           "); it was not called again, and the claim is kept for the "
                           "reconciler"),
        step_(step) {}
  const std::string& step() const noexcept { return step_; }

 private:
  std::string step_;
};

}  // namespace idem

#endif  // IDEM_SERVER_LOOKUP_HPP
