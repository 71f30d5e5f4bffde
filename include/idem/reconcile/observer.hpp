// Telemetry of a reconciler: the events idem::reconciler reports, the ReconcilerObserver concept an
// observer policy satisfies, and two observers: no_reconciler_observer (the default, at no cost)
// and counting_reconciler_observer (totals in atomics, shared by copies, for tests and
// dashboards: stuck records by age bucket, resumed, reported, rows by classification).
// Standard library only.
#ifndef IDEM_RECONCILE_OBSERVER_HPP
#define IDEM_RECONCILE_OBSERVER_HPP

#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <memory>

#include <idem/reconcile/report.hpp>
#include <idem/server/resumption.hpp>

namespace idem {

/// A stuck record the pass looked at.
struct reconcile_stuck_event {
  std::string_view scope;
  std::chrono::nanoseconds age;
  std::size_t age_bucket;  // index into stuck_age_labels
};

/// What became of one stuck record: resumption's answer (resumed, settled, lost, failed,
/// unreadable, store_failed), or settled/lost for a record the reconciler could not resume
/// and only reported.
struct reconcile_record_event {
  std::string_view scope;
  resumption what;
  bool reported;  // its rows went into the report
};

template <class O>
concept ReconcilerObserver = std::copy_constructible<O> &&
    requires(O& observer, const reconcile_stuck_event& stuck, const reconcile_record_event& done,
             const discrepancy& row, const reconcile_summary& pass) {
  observer.on_stuck(stuck);
  observer.on_record(done);
  observer.on_discrepancy(row);
  observer.on_pass(pass);
};

struct no_reconciler_observer {
  constexpr void on_stuck(const reconcile_stuck_event&) const noexcept {}
  constexpr void on_record(const reconcile_record_event&) const noexcept {}
  constexpr void on_discrepancy(const discrepancy&) const noexcept {}
  constexpr void on_pass(const reconcile_summary&) const noexcept {}
};

/// Totals, shared by copies, safe to read from any thread.
class counting_reconciler_observer {
 public:
  counting_reconciler_observer() : counts_(std::make_shared<counters>()) {}

  void on_stuck(const reconcile_stuck_event& stuck) noexcept {
    add(counts_->by_age[stuck.age_bucket]);
  }
  void on_record(const reconcile_record_event& done) noexcept {
    if (done.what == resumption::resumed) add(counts_->resumed);
    if (done.reported) add(counts_->reported);
  }
  void on_discrepancy(const discrepancy& row) noexcept {
    add(counts_->by_class[static_cast<std::size_t>(row.classification)]);
  }
  void on_pass(const reconcile_summary&) noexcept { add(counts_->passes); }

  long long passes() const noexcept { return get(counts_->passes); }
  long long resumed() const noexcept { return get(counts_->resumed); }
  long long reported() const noexcept { return get(counts_->reported); }
  /// Stuck records seen aged within stuck_age_labels[bucket].
  long long stuck(std::size_t bucket) const noexcept { return get(counts_->by_age.at(bucket)); }
  long long rows(landing classification) const noexcept {
    return get(counts_->by_class.at(static_cast<std::size_t>(classification)));
  }

 private:
  struct counters {
    std::atomic<long long> passes{0}, resumed{0}, reported{0};
    std::array<std::atomic<long long>, stuck_age_labels.size()> by_age{};
    std::array<std::atomic<long long>, 3> by_class{};
  };
  static void add(std::atomic<long long>& counter) noexcept {
    counter.fetch_add(1, std::memory_order_relaxed);
  }
  static long long get(const std::atomic<long long>& counter) noexcept {
    return counter.load(std::memory_order_relaxed);
  }
  std::shared_ptr<counters> counts_;
};

}  // namespace idem

#endif  // IDEM_RECONCILE_OBSERVER_HPP
