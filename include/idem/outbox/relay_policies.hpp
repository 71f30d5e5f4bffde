// The policies of an outbox relay, in one struct users inherit from and override, as
// idem::default_policies is for retrying and idempotent:
//
//   struct test_relay_policies : idem::default_relay_policies {
//     using clock = idem::manual_clock;
//     using observer = idem::counting_relay_observer;
//   };
//   idem::outbox_relay<idem::sqlite_outbox::reader, my_sink, test_relay_policies> relay(...);
//
// Each type is checked against its concept by outbox_relay, with a sentence that says what is
// missing. Standard library only.
#ifndef IDEM_OUTBOX_RELAY_POLICIES_HPP
#define IDEM_OUTBOX_RELAY_POLICIES_HPP

#include <chrono>

#include <idem/core/clock.hpp>
#include <idem/core/policy/backoff.hpp>
#include <idem/core/policy/budget.hpp>
#include <idem/core/policy/random.hpp>
#include <idem/outbox/relay_observer.hpp>

namespace idem {

/// Full jitter with the relay's defaults: base 1 s, cap 5 min. A message a sink failed is
/// usually one the sink cannot take for a while (a partition without a leader, a quota), not a
/// lost packet: the client side's 100 ms / 20 s would spend the attempts of
/// relay_options::max_attempts within a minute. With these, 16 attempts take about 20 minutes.
struct relay_full_jitter : full_jitter {
  relay_full_jitter() : full_jitter{std::chrono::seconds{1}, std::chrono::minutes{5}} {}
};

struct default_relay_policies {
  /// Where the relay reads the time (wall_now() stamps settlements and is compared with the
  /// rows' times) and how it waits while the sink is down: manual_clock in tests. The exact
  /// clock, not idem::coarse_clock: writers stamp rows with the exact system clock, and a
  /// coarse reading up to a tick behind would find a row just committed not due yet. A relay
  /// reads the time twice a pass, so the exact reading costs nothing that shows.
  using clock = idem::steady_clock;
  /// The engine the backoff draws its jitter from.
  using random = idem::xoshiro256ss;
  /// The wait before a failed message is sent again: backoff.delay(attempts made before this
  /// one, 0, random). Any idem backoff (core/policy/backoff.hpp).
  using backoff = idem::relay_full_jitter;
  /// Caps retries at a share of first sends (the client side's token bucket): every message
  /// sent for the first time deposits, every retry takes. When the bucket is spent, a failed
  /// message waits relay_options::spent_budget_wait instead of its backoff, so a sink that fails
  /// most of what it is sent is not hammered with retries. Attempts are counted either way.
  using budget = idem::token_bucket;
  /// Telemetry: none, at no cost. counting_relay_observer keeps totals and the lag.
  using observer = idem::no_relay_observer;
};

}  // namespace idem

#endif  // IDEM_OUTBOX_RELAY_POLICIES_HPP
