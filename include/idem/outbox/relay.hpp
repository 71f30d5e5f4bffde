// idem::outbox_relay: moves committed outbox rows to a sink, and marks each published only after
// the sink acknowledged it.
//
//   idem::sqlite_outbox::reader outbox(path);           // any idem::Outbox
//   my_sink sink;                                       // any idem::Sink
//   idem::outbox_relay<idem::sqlite_outbox::reader, my_sink> relay(outbox, sink);
//   std::jthread worker([&](std::stop_token stop) { relay.run(stop); });
//
// What it promises (docs/outbox_relay.md says it in full):
// * At least once, never lost: a row is marked published in a transaction that runs only after
//   the sink acknowledged it. A crash between the two sends it again; nothing else removes an
//   unpublished row but dead-lettering, which keeps it in the dead-letter table.
// * Per partition key, in sequence order: the outbox hands the relay a row only when every
//   earlier unpublished row of its key is in the batch before it (idem/outbox/source.hpp), and a
//   failed row holds the later rows of its key back until it is published or dead. Rows of
//   different keys are not ordered with each other. Sequence order is commit order on SQLite
//   (one writer); the PostgreSQL reader's page says what it is there.
// * An outage is not a failure: a sink that throws leaves the batch as it was, counts no attempt
//   against any row and makes the relay back off; nothing is dead-lettered for an outage,
//   however long. Only a sink's `failed` (max_attempts times) or `rejected` dead-letters.
//
// One relay object is driven by one thread (run, or run_once / drain from the caller). Standard
// library only; the stores' readers need their client libraries, this header does not.
#ifndef IDEM_OUTBOX_RELAY_HPP
#define IDEM_OUTBOX_RELAY_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <idem/core/clock.hpp>
#include <idem/core/policy/backoff.hpp>
#include <idem/core/policy/budget.hpp>
#include <idem/core/policy/random.hpp>
#include <idem/outbox/detail/relay_rules.hpp>
#include <idem/outbox/relay_observer.hpp>
#include <idem/outbox/relay_policies.hpp>
#include <idem/outbox/sink.hpp>
#include <idem/outbox/source.hpp>

namespace idem {

/// How a relay paces itself. Every field has a default (docs/outbox_relay.md has the table).
struct relay_options {
  /// Rows fetched and handed to the sink at a time.
  std::size_t batch_size = 64;
  /// Sends a message may fail (`failed` from the sink) before it is dead-lettered, the first
  /// included. Outages (the sink throwing) never count.
  std::uint32_t max_attempts = 16;
  /// How long published rows are kept before purge deletes them: a window in which an operator
  /// can still see what was sent, and when.
  std::chrono::seconds retention = std::chrono::hours{24};
  /// How often run() purges (the first time at its start).
  std::chrono::seconds purge_every = std::chrono::minutes{1};
  /// Rows deleted per purge statement, so a purge never holds the database's write lock long.
  std::size_t purge_batch = 1000;
  /// How long run() waits for new rows when nothing is due (the outbox's wait_for_rows); also
  /// how often it reports the backlog.
  std::chrono::milliseconds idle_wait = std::chrono::seconds{1};
  /// The wait after a sink outage: equal jitter from this base, doubling per outage in a row...
  std::chrono::milliseconds unavailable_base = std::chrono::milliseconds{100};
  /// ... up to this cap, so a sink that comes back is noticed within it.
  std::chrono::milliseconds unavailable_cap = std::chrono::seconds{10};
  /// The wait of a failed message when the retry budget is spent (instead of its backoff).
  std::chrono::seconds spent_budget_wait = std::chrono::minutes{5};
};

/// Drives an Outbox (a store's reader) into a Sink. See the top of this header.
template <class OutboxType, class SinkType, class Policies = default_relay_policies>
class outbox_relay {
  static_assert(Outbox<OutboxType>,
                "outbox_relay's first parameter must satisfy idem::Outbox: fetch(limit, now) "
                "answering its batch type, batch.entries() answering entries, settle(batch, "
                "settlements, now), purge(before, limit), backlog(now) answering outbox_backlog "
                "and wait_for_rows(timeout) (idem/outbox/source.hpp).");
  static_assert(Sink<SinkType>,
                "outbox_relay's second parameter must satisfy idem::Sink: "
                "publish(std::span<const outbox_entry>, std::span<sink_result>) returning void "
                "(idem/outbox/sink.hpp).");

 public:
  using clock_type = typename Policies::clock;
  using random_type = typename Policies::random;
  using backoff_type = typename Policies::backoff;
  using budget_type = typename Policies::budget;
  using observer_type = typename Policies::observer;
  /// What a relay is built from (relay_options, above): every configurable type has its
  /// `options`, and settings() answers the ones it was given.
  using options = relay_options;

  static_assert(Clock<clock_type>,
                "Policies::clock must satisfy idem::Clock: now(), wall_now() and sleep_for().");
  static_assert(RandomSource<random_type>,
                "Policies::random must be a uniform random bit generator constructible from an "
                "idem::random_seed (idem::xoshiro256ss is one).");
  static_assert(Backoff<backoff_type, random_type>,
                "Policies::backoff must provide delay(retry_index, previous, rng) answering "
                "std::chrono::nanoseconds (any backoff of idem/core/policy/backoff.hpp).");
  static_assert(Budget<budget_type>,
                "Policies::budget must provide on_request(), try_acquire_retry(retry_reason) "
                "answering bool and on_success(retry_reason) (idem/core/policy/budget.hpp).");
  static_assert(RelayObserver<observer_type>,
                "Policies::observer must be copyable and provide on_pass, on_retry, "
                "on_dead_letter, on_sink_unavailable, on_backlog, on_claim_lost and on_purge "
                "(idem/outbox/relay_observer.hpp).");

  /// The policies' objects, for a relay that needs its own (a test's manual clock, an observer
  /// whose totals it reads, a budget shared with other relays, a fixed seed).
  struct policy_objects {
    clock_type clock{};
    backoff_type backoff{};
    budget_type budget{};
    observer_type observer{};
    random_seed seed = nondeterministic_seed();
  };

  /// Throws std::invalid_argument for a batch_size, max_attempts or purge_batch of 0, or a
  /// negative wait. The relay keeps references to `outbox` and `sink`: they outlive it.
  outbox_relay(OutboxType& outbox, SinkType& sink, relay_options options = {},
               policy_objects objects = {})
      : outbox_(outbox),
        sink_(sink),
        options_(checked(options)),
        clock_(std::move(objects.clock)),
        backoff_(std::move(objects.backoff)),
        budget_(std::move(objects.budget)),
        observer_(std::move(objects.observer)),
        random_(objects.seed) {}

  /// One pass: fetch a batch, hand it to the sink, settle what the sink answered. Answers what
  /// it did; an empty `fetched` means nothing was due (or another relay holds the claim). The
  /// sink throwing is an answer too (sink_unavailable, nothing settled), as is a lost claim
  /// (claim_lost, nothing settled). The outbox's own errors (the database unreachable) are
  /// thrown: nothing of the batch was settled, and its rows are sent again by a later pass.
  relay_pass run_once() {
    fetched_ = 0;
    try {
      return pass_once();
    } catch (const outbox_claim_lost& lost) {
      relay_pass nothing;
      nothing.fetched = fetched_;
      nothing.claim_lost = true;
      observer_.on_claim_lost(relay_claim_lost_event{lost.what(), fetched_});
      observer_.on_pass(nothing);
      return nothing;
    }
  }

  /// Passes until nothing is due: a pass that fetched nothing, found the sink unavailable, or
  /// lost the claim ends it. Answers the passes' totals.
  relay_pass drain() {
    relay_pass total;
    for (;;) {
      const relay_pass pass = run_once();
      total += pass;
      if (pass.fetched == 0 || pass.sink_unavailable || pass.claim_lost) return total;
    }
  }

  /// The relay's loop until `stop` is requested: pass after pass while rows are due; purge every
  /// purge_every and report the backlog every idle_wait (both at the start, and on time even
  /// while a long backlog drains, which is when the lag matters); when nothing is due, wait for
  /// rows (idle_wait); after a sink outage, back off. The outbox's errors are thrown out of it
  /// (the caller decides whether to restart).
  void run(std::stop_token stop) {
    auto next_purge = clock_.now();
    auto next_report = clock_.now();
    while (!stop.stop_requested()) {
      const relay_pass pass = run_once();
      if (clock_.now() >= next_purge) {
        purge();
        next_purge = clock_.now() + options_.purge_every;
      }
      if (clock_.now() >= next_report || pass.sink_unavailable) {
        (void)backlog();
        next_report = clock_.now() + options_.idle_wait;
      }
      if (stop.stop_requested()) return;
      if (pass.sink_unavailable) {
        pause(pass.back_off, stop);
      } else if (pass.fetched == 0 || pass.claim_lost) {
        outbox_.wait_for_rows(options_.idle_wait);
      }
    }
  }

  /// Deletes the rows published more than `retention` ago, purge_batch at a time. Answers how
  /// many.
  std::size_t purge() {
    const auto before =
        clock_.wall_now() -
        std::chrono::duration_cast<std::chrono::system_clock::duration>(options_.retention);
    std::size_t deleted = 0;
    for (;;) {
      const std::size_t some = outbox_.purge(before, options_.purge_batch);
      deleted += some;
      if (some < options_.purge_batch) break;
    }
    observer_.on_purge(relay_purge_event{deleted});
    return deleted;
  }

  /// What waits, reported to the observer with its lag (the oldest waiting row's age).
  outbox_backlog backlog() {
    const auto now = clock_.wall_now();
    outbox_backlog waiting = outbox_.backlog(now);
    std::chrono::nanoseconds lag{};
    if (waiting.oldest_created_at && *waiting.oldest_created_at < now) {
      lag = now - *waiting.oldest_created_at;
    }
    observer_.on_backlog(relay_backlog_event{waiting.waiting, waiting.oldest_created_at, lag});
    return waiting;
  }

  const relay_options& settings() const noexcept { return options_; }
  observer_type& observer() noexcept { return observer_; }
  clock_type& clock() noexcept { return clock_; }

 private:
  static relay_options checked(const relay_options& options) {
    const auto refuse = [](const char* why) {
      throw std::invalid_argument(std::string("idem::outbox_relay: ") + why);
    };
    if (options.batch_size == 0) refuse("batch_size must be at least 1");
    if (options.max_attempts == 0) refuse("max_attempts must be at least 1");
    if (options.purge_batch == 0) refuse("purge_batch must be at least 1");
    if (options.retention.count() < 0 || options.purge_every.count() < 0 ||
        options.idle_wait.count() < 0 || options.unavailable_base.count() < 0 ||
        options.unavailable_cap.count() < 0 || options.spent_budget_wait.count() < 0) {
      refuse("retention and the waits must not be negative");
    }
    return options;
  }

  // run_once without the lost claim, which the outbox may throw from fetch or settle.
  relay_pass pass_once() {
    relay_pass pass;
    auto batch = outbox_.fetch(options_.batch_size, clock_.wall_now());
    const std::span<const outbox_entry> entries = batch.entries();
    pass.fetched = fetched_ = entries.size();
    if (entries.empty()) {
      observer_.on_pass(pass);
      return pass;
    }
    results_.assign(entries.size(), sink_result{});
    try {
      sink_.publish(entries, std::span<sink_result>(results_));
    } catch (const std::exception& error) {
      return unavailable(pass, error.what());
    } catch (...) {
      return unavailable(pass, "the sink threw something that is not a std::exception");
    }
    outages_ = 0;
    // First sends deposit into the budget once the sink answered: a batch offered again and
    // again during an outage would otherwise fill the bucket with sends that never happened.
    for (const outbox_entry& entry : entries) {
      if (entry.attempts == 0) budget_.on_request();
    }
    const auto settled_at = clock_.wall_now();
    detail::relay_verdicts(entries, results_, options_.max_attempts, verdicts_);
    decide(entries, settled_at, pass);
    outbox_.settle(batch, settlements_, settled_at);
    // Reported once written, so an observer never counts a retry or dead letter that a failed
    // settle did not keep.
    report(entries);
    observer_.on_pass(pass);
    return pass;
  }

  relay_pass unavailable(relay_pass pass, std::string_view reason) {
    ++outages_;
    // Equal jitter: never less than half the exponential wait, so a sink that stays down is
    // not called again at once, as full jitter's draw near zero would.
    const equal_jitter outage{options_.unavailable_base, options_.unavailable_cap};
    pass.sink_unavailable = true;
    pass.back_off = outage.delay(static_cast<int>(std::min<std::uint32_t>(outages_ - 1, 62)),
                                 std::chrono::nanoseconds{}, random_);
    observer_.on_sink_unavailable(
        relay_sink_unavailable_event{reason, outages_, pass.fetched, pass.back_off});
    observer_.on_pass(pass);
    return pass;
  }

  // One settlement per entry from its verdict; the budget hears every outcome.
  void decide(std::span<const outbox_entry> entries,
              std::chrono::system_clock::time_point settled_at, relay_pass& pass) {
    settlements_.assign(entries.size(), outbox_settlement{});
    budget_spent_.assign(entries.size(), false);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const outbox_entry& entry = entries[i];
      outbox_settlement& settlement = settlements_[i];
      const retry_reason reason =
          entry.attempts == 0 ? retry_reason::none : retry_reason::transient;
      switch (verdicts_[i]) {
        case detail::relay_verdict::publish:
          settlement.what = outbox_settlement::kind::published;
          budget_.on_success(reason);
          ++pass.published;
          break;
        case detail::relay_verdict::retry: {
          settlement.what = outbox_settlement::kind::retry;
          settlement.error = results_[i].error;
          std::chrono::nanoseconds wait = options_.spent_budget_wait;
          if (budget_.try_acquire_retry(retry_reason::transient)) {
            wait = backoff_.delay(static_cast<int>(std::min<std::uint32_t>(entry.attempts, 62)),
                                  std::chrono::nanoseconds{}, random_);
          } else {
            budget_spent_[i] = true;
          }
          settlement.next_attempt_at =
              settled_at + std::chrono::duration_cast<std::chrono::system_clock::duration>(wait);
          ++pass.retried;
          break;
        }
        case detail::relay_verdict::dead_failed:
        case detail::relay_verdict::dead_rejected:
          settlement.what = outbox_settlement::kind::dead;
          settlement.error = results_[i].error;
          ++pass.dead_lettered;
          break;
        case detail::relay_verdict::held_back:
          settlement.what = outbox_settlement::kind::untouched;
          ++pass.held_back;
          break;
      }
    }
  }

  void report(std::span<const outbox_entry> entries) {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const outbox_settlement& settlement = settlements_[i];
      const std::uint32_t attempts = entries[i].attempts + 1;
      if (settlement.what == outbox_settlement::kind::retry) {
        observer_.on_retry(relay_retry_event{entries[i], attempts, settlement.error,
                                             settlement.next_attempt_at, budget_spent_[i]});
      } else if (settlement.what == outbox_settlement::kind::dead) {
        observer_.on_dead_letter(
            relay_dead_letter_event{entries[i], attempts, settlement.error,
                                    verdicts_[i] == detail::relay_verdict::dead_rejected});
      }
    }
  }

  // Waits `wait` on the clock policy in slices, so a stop request is heard within one slice
  // (the Clock concept's sleep_for cannot be interrupted).
  void pause(std::chrono::nanoseconds wait, const std::stop_token& stop) {
    constexpr std::chrono::nanoseconds slice = std::chrono::milliseconds{50};
    while (wait > std::chrono::nanoseconds::zero() && !stop.stop_requested()) {
      const auto step = std::min(wait, slice);
      clock_.sleep_for(step);
      wait -= step;
    }
  }

  OutboxType& outbox_;
  SinkType& sink_;
  relay_options options_;
  clock_type clock_;
  backoff_type backoff_;
  budget_type budget_;
  observer_type observer_;
  random_type random_;
  std::uint32_t outages_ = 0;
  std::size_t fetched_ = 0;  // the current pass's batch, for a claim lost in its settle
  // Reused from pass to pass, so a steady relay allocates only what the entries need.
  std::vector<sink_result> results_;
  std::vector<outbox_settlement> settlements_;
  std::vector<detail::relay_verdict> verdicts_;
  std::vector<bool> budget_spent_;
};

}  // namespace idem

#endif  // IDEM_OUTBOX_RELAY_HPP
