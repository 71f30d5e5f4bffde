// Telemetry of an outbox relay: the events idem::outbox_relay reports, the RelayObserver concept
// an observer policy satisfies, and two observers: no_relay_observer (the default: empty inline
// members, so a relay that watches nothing pays nothing) and counting_relay_observer (totals and
// the last lag in atomics, shared by copies, for tests and dashboards).
//
// Lag is what an operator watches: how many rows wait and how old the oldest is. It grows while
// a sink is down (nothing is lost: the rows wait) and falls back once the relay drains them.
// Standard library only.
#ifndef IDEM_OUTBOX_RELAY_OBSERVER_HPP
#define IDEM_OUTBOX_RELAY_OBSERVER_HPP

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include <idem/outbox/sink.hpp>

namespace idem {

/// What one pass of a relay did (fetch, publish, settle); also what run_once answers, and,
/// summed, what drain answers.
struct relay_pass {
  /// Rows the outbox handed the relay (the batch).
  std::size_t fetched = 0;
  /// Acknowledged by the sink and marked published.
  std::size_t published = 0;
  /// Failed by the sink: attempts + 1, tried again after a backoff.
  std::size_t retried = 0;
  /// Moved to the dead letters: rejected, or failed for the max_attempts-th time.
  std::size_t dead_lettered = 0;
  /// Failed behind an earlier failed message of the same partition key in the batch: left as
  /// they were, without an attempt counted (the earlier one holds them back anyway).
  std::size_t held_back = 0;
  /// The sink threw: nothing was settled and no attempt counted; the relay waits `back_off`.
  bool sink_unavailable = false;
  /// The outbox said this relay's claim was lost (SQLite: another relay took the expired
  /// lease): nothing was settled; the rows are the new holder's.
  bool claim_lost = false;
  /// How long the relay waits before its next pass after a sink outage (zero otherwise).
  std::chrono::nanoseconds back_off{};

  relay_pass& operator+=(const relay_pass& other) noexcept {
    fetched += other.fetched;
    published += other.published;
    retried += other.retried;
    dead_lettered += other.dead_lettered;
    held_back += other.held_back;
    sink_unavailable = sink_unavailable || other.sink_unavailable;
    claim_lost = claim_lost || other.claim_lost;
    back_off = other.back_off;
    return *this;
  }
};

/// A failed message will be sent again from `next_attempt_at`.
struct relay_retry_event {
  const outbox_entry& entry;
  /// Attempts made so far, this one included.
  std::uint32_t attempts;
  std::string_view error;
  std::chrono::system_clock::time_point next_attempt_at;
  /// The retry budget was spent, so the wait is relay_options::spent_budget_wait, not the backoff.
  bool budget_spent;
};

/// A message moved to the dead letters (after its settle committed).
struct relay_dead_letter_event {
  const outbox_entry& entry;
  /// Attempts made, this one included.
  std::uint32_t attempts;
  std::string_view reason;
  /// true: the sink rejected it; false: it failed max_attempts times.
  bool rejected;
};

/// The sink threw: the batch is kept as it was and the relay backs off.
struct relay_sink_unavailable_event {
  std::string_view reason;
  /// Passes in a row that found the sink unavailable, this one included.
  std::uint32_t consecutive;
  /// Entries of the batch that stay as they were.
  std::size_t kept;
  std::chrono::nanoseconds back_off;
};

/// How far the relay is behind.
struct relay_backlog_event {
  /// Unpublished rows, due or waiting for a retry.
  std::size_t waiting;
  std::optional<std::chrono::system_clock::time_point> oldest_created_at;
  /// The age of the oldest unpublished row (zero when none waits): the lag.
  std::chrono::nanoseconds lag;
};

/// The outbox answered outbox_claim_lost for a batch: nothing of it was written.
struct relay_claim_lost_event {
  std::string_view reason;
  std::size_t batch;
};

/// Published rows past the retention window were deleted.
struct relay_purge_event {
  std::size_t deleted;
};

/// What a relay observer policy must provide. Copies are taken, so an observer that keeps
/// totals shares them between its copies (as counting_relay_observer does).
template <class O>
concept RelayObserver = std::copy_constructible<O> &&
    requires(O& observer, const relay_pass& pass, const relay_retry_event& retry,
             const relay_dead_letter_event& dead, const relay_sink_unavailable_event& unavailable,
             const relay_backlog_event& backlog, const relay_claim_lost_event& lost,
             const relay_purge_event& purge) {
  observer.on_pass(pass);
  observer.on_retry(retry);
  observer.on_dead_letter(dead);
  observer.on_sink_unavailable(unavailable);
  observer.on_backlog(backlog);
  observer.on_claim_lost(lost);
  observer.on_purge(purge);
};

/// Watches nothing, costs nothing.
struct no_relay_observer {
  constexpr void on_pass(const relay_pass&) const noexcept {}
  constexpr void on_retry(const relay_retry_event&) const noexcept {}
  constexpr void on_dead_letter(const relay_dead_letter_event&) const noexcept {}
  constexpr void on_sink_unavailable(const relay_sink_unavailable_event&) const noexcept {}
  constexpr void on_backlog(const relay_backlog_event&) const noexcept {}
  constexpr void on_claim_lost(const relay_claim_lost_event&) const noexcept {}
  constexpr void on_purge(const relay_purge_event&) const noexcept {}
};

/// Totals and the last reported lag, shared by copies, safe to read from any thread.
class counting_relay_observer {
 public:
  counting_relay_observer() : counts_(std::make_shared<counters>()) {}

  void on_pass(const relay_pass& pass) noexcept {
    add(counts_->passes, 1);
    add(counts_->fetched, pass.fetched);
    add(counts_->published, pass.published);
  }
  void on_retry(const relay_retry_event&) noexcept { add(counts_->retried, 1); }
  void on_dead_letter(const relay_dead_letter_event&) noexcept { add(counts_->dead_lettered, 1); }
  void on_sink_unavailable(const relay_sink_unavailable_event&) noexcept {
    add(counts_->unavailable, 1);
  }
  void on_backlog(const relay_backlog_event& backlog) noexcept {
    counts_->waiting.store(static_cast<long long>(backlog.waiting), std::memory_order_relaxed);
    counts_->lag_ns.store(backlog.lag.count(), std::memory_order_relaxed);
    auto highest = counts_->max_lag_ns.load(std::memory_order_relaxed);
    while (highest < backlog.lag.count() &&
           !counts_->max_lag_ns.compare_exchange_weak(highest, backlog.lag.count(),
                                                      std::memory_order_relaxed)) {
    }
    add(counts_->backlog_reports, 1);
  }
  void on_claim_lost(const relay_claim_lost_event&) noexcept { add(counts_->claims_lost, 1); }
  void on_purge(const relay_purge_event& purge) noexcept { add(counts_->purged, purge.deleted); }

  long long passes() const noexcept { return get(counts_->passes); }
  long long fetched() const noexcept { return get(counts_->fetched); }
  long long published() const noexcept { return get(counts_->published); }
  long long retried() const noexcept { return get(counts_->retried); }
  long long dead_lettered() const noexcept { return get(counts_->dead_lettered); }
  long long sink_unavailable() const noexcept { return get(counts_->unavailable); }
  long long claims_lost() const noexcept { return get(counts_->claims_lost); }
  long long purged() const noexcept { return get(counts_->purged); }
  long long backlog_reports() const noexcept { return get(counts_->backlog_reports); }
  /// From the last backlog report: rows waiting, and the oldest one's age.
  long long waiting() const noexcept { return get(counts_->waiting); }
  std::chrono::nanoseconds lag() const noexcept {
    return std::chrono::nanoseconds{counts_->lag_ns.load(std::memory_order_relaxed)};
  }
  /// The largest lag any backlog report carried.
  std::chrono::nanoseconds max_lag() const noexcept {
    return std::chrono::nanoseconds{counts_->max_lag_ns.load(std::memory_order_relaxed)};
  }

 private:
  struct counters {
    std::atomic<long long> passes{0}, fetched{0}, published{0}, retried{0}, dead_lettered{0},
        unavailable{0}, claims_lost{0}, purged{0}, backlog_reports{0}, waiting{0};
    std::atomic<std::chrono::nanoseconds::rep> lag_ns{0}, max_lag_ns{0};
  };
  static void add(std::atomic<long long>& counter, std::size_t amount) noexcept {
    counter.fetch_add(static_cast<long long>(amount), std::memory_order_relaxed);
  }
  static long long get(const std::atomic<long long>& counter) noexcept {
    return counter.load(std::memory_order_relaxed);
  }
  std::shared_ptr<counters> counts_;
};

}  // namespace idem

#endif  // IDEM_OUTBOX_RELAY_OBSERVER_HPP
