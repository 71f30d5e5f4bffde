// The first step's start written by the claim (idempotent_options::first_step). A new record's
// claim carries the recovery bytes it starts with (kept_bytes): with a first step, those hold the
// step's started entry, after the kept request of a resumable wrapper. The context is told
// (handler_context::set_claimed_start), and the step, when it starts soon enough after the claim
// and before anything else was written, writes no start of its own: the claim's write checked
// the fence and set the lease a moment ago, as the step's start write would have.
//
// Both engines use it: the blocking engine's claims and kept requests, and the asynchronous
// engine's handler runs.
#ifndef IDEM_SERVER_DETAIL_CLAIMED_START_HPP
#define IDEM_SERVER_DETAIL_CLAIMED_START_HPP

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <idem/server/detail/held_claim.hpp>
#include <idem/server/detail/recovery_bytes.hpp>
#include <idem/server/handler_context.hpp>

namespace idem::detail {

/// The first step `options` name, or none (an inbox's options have no first step).
template <class Options>
std::string_view first_step_of(const Options& options) noexcept {
  if constexpr (requires { options.first_step; }) {
    return options.first_step;
  } else {
    return {};
  }
}

/// Appends `step`'s started entry to a claim's recovery bytes; nothing for no step.
inline void append_claimed_start(std::string& plain, std::string_view step) {
  if (!step.empty()) put_started(plain, step, {});
}

/// The recovery bytes a claim of a wrapper that keeps no request gives the store: the first
/// step's started entry, `seal`ed as the engine seals recovery bytes (or as it is); null for no
/// first step. Made once a wrapper, behind a pointer so that kept_bytes::stored stays valid
/// however the engine moves, and shared by its copies.
template <class Seal>
std::shared_ptr<const kept_bytes> claimed_start_bytes(std::string_view step, Seal seal) {
  if (step.empty()) return nullptr;
  auto bytes = std::make_shared<kept_bytes>();
  append_claimed_start(bytes->plain, step);
  seal(*bytes);
  return bytes;
}

/// The step whose start `claim` wrote, or none: its first step, for a new claim (not a
/// takeover, which keeps the recovery bytes it found) whose bytes hold the step's entry. Asked
/// before the claim's recovery bytes move into the context.
template <class Options>
std::string_view claimed_start(const held_claim& claim, const Options& options) {
  const std::string_view step = first_step_of(options);
  if (step.empty() || claim.resumed || !find_started(claim.recovery, step)) return {};
  return step;
}

/// Tells `context` that the claim wrote `step`'s start (claimed_start; nothing for none): the
/// step may count it as its own until a third of the lease has passed on `clock`, when the
/// heartbeat's first renewal would be due.
template <class Options, class Clock>
void mark_claimed_start(handler_context& context, std::string_view step, const Options& options,
                        Clock& clock) {
  if (!step.empty()) context.set_claimed_start(step, clock, clock.now() + options.lease / 3);
}

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_CLAIMED_START_HPP
