// idem::reconciler: finishes the work clients abandoned, and reports what it cannot finish.
//
//   idem::reconciler<my_reconciler_policies> reconciler(store);
//   reconciler.resume_with<idem::http_request>(payments);       // a resumable wrapper, by name
//   reconciler.lookup_with([&](const idem::lookup_query& q) {   // the downstream system of record
//     return ledger.has(q.reference) ? idem::landing::landed : idem::landing::not_landed;
//   });
//   idem::reconcile_report report = reconciler.run_once();
//   std::fputs(idem::json_lines(report.rows).c_str(), report_file);
//   return report.summary.exit_status();                       // 1: a person is needed
//
// A pass walks the store's stuck records (in progress past their lease: stuck()) in batches. For
// each one:
//   * a record that kept its request (a wrapper with options::max_kept_request_bytes) and whose
//     wrapper is registered: the wrapper resumes it (idempotent::resume). It is taken over under
//     fence + 1, exactly as a client's retry would take it, and the handler runs from its
//     recovery points with the same downstream keys, so each step's effect happens once; a
//     client that retries later gets the replay. Whoever wins the claim runs: a client's retry,
//     another reconciler or this one; the losers change nothing. Fencing decides, never a read
//     followed by a write.
//   * any other record (kept no request, an unreadable one, one no registered wrapper takes), or
//     one whose handler fails again: taken over too, so that it is reported once per pass and
//     nothing runs its steps while the lookup is asked, then reported. The claim is kept, never
//     released, and ends with its lease (options.lease), after which a client's retry may take
//     it; the next pass reports it again if it is still stuck.
// The report has one row per step of such a record: landed for a step it recorded; for a step it
// started and never recorded, what the downstream lookup answers (by the step's reference: its
// downstream key); one not_landed row for a record that never started a step. Nothing is ever
// written downstream: corrections are for a person (idem/reconcile/report.hpp).
//
// Taking over each record it looks at is also what moves a pass forward: a record taken over is
// no longer stuck, so the next batch lists the next records. A pass stops when a batch brings
// nothing it could move (the store failing on every record of it), after max_records_per_pass,
// or when no stuck record is left. Its cost is the stuck records' and what the store's stuck()
// reads to list them: an index by lease on SQLite and Redis, so the store's size does not count
// there (docs/performance.md, "The reconciler", has the figures for every store).
//
// One reconciler object is driven by one thread. Standard library only.
#ifndef IDEM_RECONCILER_HPP
#define IDEM_RECONCILER_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/client/redacted_key.hpp>
#include <idem/core/clock.hpp>
#include <idem/core/codec.hpp>
#include <idem/reconcile/observer.hpp>
#include <idem/reconcile/report.hpp>
#include <idem/server/detail/recovery_bytes.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/lookup.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/server/resumption.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/memory.hpp>

namespace idem {

/// How a reconciler paces itself. Every field has a default (docs/reconciler.md has the table).
struct reconciler_options {
  /// Stuck records listed at a time.
  std::size_t batch_size = 256;
  /// The most stuck records one pass looks at.
  std::size_t max_records_per_pass = 100'000;
  /// How long the reconciler holds a record it reports (its takeover's lease): a client's retry
  /// may take it over after that. Resumed records take their wrapper's lease.
  std::chrono::nanoseconds lease = std::chrono::seconds{30};
  /// A claim needs one; a record the reconciler claims anew (released meanwhile) is released at
  /// once, so it never lasts.
  std::chrono::nanoseconds retention = std::chrono::hours{24};
  /// run_for: the pause between passes.
  std::chrono::milliseconds idle_wait = std::chrono::seconds{1};
};

/// What the report's lookup is asked, for a step a record started and never recorded. Views,
/// valid for the call.
struct lookup_query {
  std::string_view scope;
  std::string_view handler;  // the wrapper's name the record kept (may be empty)
  std::string_view step;
  std::string_view reference;  // the step's downstream key: what its call was made under
};

/// The report's lookup against the downstream system of record. A throw counts as unknown.
using downstream_lookup = std::function<landing(const lookup_query&)>;

struct default_reconciler_policies {
  /// The store whose stuck records the reconciler walks: the one its wrappers use.
  using store = idem::memory_store;
  /// Where it reads the time, and how run_for waits: the wrappers' clock (manual_clock in tests).
  using clock = idem::coarse_clock;
  /// Opens recovery bytes to read them: the response codec the wrappers use.
  using response_codec = idem::plain_response_codec;
  /// Telemetry: none; counting_reconciler_observer keeps totals.
  using observer = idem::no_reconciler_observer;
};

namespace detail {

// A record's recovery bytes, read: its kept request, the steps it recorded, the steps it started.
struct recovery_contents {
  bool kept = false;
  std::string handler;
  std::string request;
  std::vector<std::string> recorded;
  std::vector<std::pair<std::string, std::string>> started;  // name, reference (empty: default)

  bool recorded_step(std::string_view name) const {
    for (const std::string& each : recorded)
      if (each == name) return true;
    return false;
  }
};

// Throws codec_error for bytes that are not recovery entries.
inline recovery_contents read_recovery(std::string_view plain) {
  recovery_contents out;
  for_each_entry(plain, [&](std::string_view name, std::string_view value) {
    if (name == kept_request_entry) {
      std::string_view rest = value;
      out.handler = std::string(take_bytes(rest, "kept request's handler name"));
      out.request = std::string(rest);
      out.kept = true;
    } else if (name.starts_with(started_entry_prefix)) {
      out.started.emplace_back(std::string(name.substr(started_entry_prefix.size())),
                               std::string(value));
    } else if (!reserved_entry(name)) {
      out.recorded.emplace_back(name);
    }
  });
  return out;
}

}  // namespace detail

template <class Policies = default_reconciler_policies>
class reconciler {
 public:
  using store_type = typename Policies::store;
  using clock_type = typename Policies::clock;
  using response_codec_type = typename Policies::response_codec;
  using observer_type = typename Policies::observer;
  /// What a reconciler is built from (reconciler_options, above); settings() answers them.
  using options = reconciler_options;
  static_assert(Store<store_type>,
                "A reconciler's store must satisfy idem::Store (idem/store/contract.hpp).");
  static_assert(Clock<clock_type>,
                "A reconciler's clock must satisfy idem::Clock (idem/core/clock.hpp).");
  static_assert(ResponseCodec<response_codec_type>,
                "A reconciler's response_codec must satisfy idem::ResponseCodec "
                "(idem/server/response_codec.hpp).");
  static_assert(ReconcilerObserver<observer_type>,
                "A reconciler's observer must provide on_stuck, on_record, on_discrepancy and "
                "on_pass (idem/reconcile/observer.hpp).");

  explicit reconciler(store_type store, reconciler_options options = {}, clock_type clock = {},
                      response_codec_type codec = {}, observer_type observer = {})
      : store_(std::move(store)),
        options_(options),
        clock_(std::move(clock)),
        codec_(std::move(codec)),
        observer_(std::move(observer)) {
    if (options_.batch_size == 0 || options_.max_records_per_pass == 0) {
      throw std::invalid_argument(
          "idem::reconciler: batch_size and max_records_per_pass must be positive");
    }
    if (options_.lease <= std::chrono::nanoseconds::zero() ||
        options_.retention <= options_.lease) {
      throw std::invalid_argument(
          "idem::reconciler: the lease must be positive and the retention longer than it");
    }
  }

  /// Resumes the records `wrapper` kept (its options' max_kept_request_bytes), found by its
  /// options' name, their requests decoded as `Request`. The wrapper must outlive the
  /// reconciler, use its store, and seal with its response codec.
  template <class Request, class Wrapper>
  reconciler& resume_with(Wrapper& wrapper) {
    const std::string& name = wrapper.settings().name;
    if (wrapper.settings().max_kept_request_bytes == 0) {
      throw std::invalid_argument("idem::reconciler: the wrapper '" + name +
                                  "' keeps no requests (max_kept_request_bytes is 0), so it has "
                                  "nothing to resume");
    }
    const bool added = targets_
                           .emplace(name,
                                    [&wrapper](const record& stuck, std::string_view request) {
                                      return wrapper.template resume<Request>(stuck, request);
                                    })
                           .second;
    if (!added) {
      throw std::invalid_argument("idem::reconciler: two wrappers named '" + name +
                                  "'; give each wrapper that shares a store its own name");
    }
    return *this;
  }

  /// The report's lookup against the downstream system of record. Without one, every step a
  /// record started and never recorded is reported unknown.
  reconciler& lookup_with(downstream_lookup lookup) {
    lookup_ = std::move(lookup);
    return *this;
  }

  /// One pass over the stuck records (see the top of this header).
  reconcile_report run_once() {
    reconcile_report report;
    const store_time listed_at = clock_.wall_now();
    std::size_t seen = 0;
    while (seen < options_.max_records_per_pass) {
      const std::size_t asked = std::min(options_.batch_size, options_.max_records_per_pass - seen);
      std::vector<record> batch;
      try {
        batch = store_.stuck(listed_at, asked);
      } catch (const store_error&) {
        ++report.summary.store_failures;
        break;
      }
      bool moved = false;
      for (record& stuck : batch) {
        ++seen;
        moved = examine(stuck, report) || moved;
      }
      // A short batch was the last of what is stuck: asking again would only answer nothing.
      if (!moved || batch.size() < asked) break;
    }
    observer_.on_pass(report.summary);
    return report;
  }

  /// Passes until `how_long` has passed or `stop` is requested, idle_wait apart; their reports
  /// summed.
  reconcile_report run_for(std::chrono::nanoseconds how_long, const std::stop_token& stop = {}) {
    reconcile_report total;
    const auto end = clock_.now() + how_long;
    while (!stop.stop_requested()) {
      total += run_once();
      const auto now = clock_.now();
      if (now >= end) break;
      clock_.sleep_for(std::min<std::chrono::nanoseconds>(options_.idle_wait, end - now));
    }
    return total;
  }

  store_type& store() noexcept { return store_; }
  clock_type& clock() noexcept { return clock_; }
  observer_type& observer() noexcept { return observer_; }
  const reconciler_options& settings() const noexcept { return options_; }

 private:
  // One stuck record: resumed, or reported. Answers whether the record moved (no longer stuck
  // for this pass), which a store failure does not do.
  bool examine(record& stuck, reconcile_report& report) {
    reconcile_summary& summary = report.summary;
    ++summary.examined;
    const std::chrono::nanoseconds age = clock_.wall_now() - stuck.created_at;
    const std::size_t bucket = stuck_age_bucket(age);
    ++summary.stuck_by_age[bucket];
    observer_.on_stuck(reconcile_stuck_event{stuck.scope, age, bucket});

    std::optional<detail::recovery_contents> contents;
    std::string unreadable;
    try {
      contents = detail::read_recovery(opened(stuck.recovery));
    } catch (const std::exception& error) {
      unreadable = std::string("the recovery bytes do not open or read: ") + error.what();
    }
    if (contents && contents->kept) {
      const auto target = targets_.find(contents->handler);
      if (target == targets_.end()) {
        return report_record(
            stuck, age, *contents,
            "no wrapper named '" + contents->handler + "' is registered with this reconciler",
            report);
      }
      resume_result resumed = target->second(stuck, contents->request);
      switch (resumed.what) {
        case resumption::resumed:
          ++summary.resumed;
          break;
        case resumption::settled:
          ++summary.settled;
          break;
        case resumption::lost:
          ++summary.lost;
          break;
        case resumption::store_failed:
          ++summary.store_failures;
          break;
        case resumption::unreadable:
          return report_record(stuck, age, *contents, resumed.message, report);
        case resumption::failed: {
          ++summary.failed;
          detail::recovery_contents left = *contents;
          try {
            if (!resumed.recovery.empty()) left = detail::read_recovery(resumed.recovery);
          } catch (const std::exception&) {
            // The run's bytes do not read: the listed ones are the best account there is.
          }
          add_rows(stuck, age, left, "resumed, but the handler failed again: " + resumed.message,
                   report);
          observer_.on_record(reconcile_record_event{stuck.scope, resumption::failed, true});
          return true;
        }
      }
      observer_.on_record(reconcile_record_event{stuck.scope, resumed.what, false});
      return resumed.what != resumption::store_failed;
    }
    if (!contents) {
      return report_record(stuck, age, detail::recovery_contents{}, unreadable, report);
    }
    return report_record(stuck, age, *contents,
                         "not resumable: the record keeps no request (its wrapper's "
                         "max_kept_request_bytes is 0, or it was claimed before it was set)",
                         report);
  }

  // A record the reconciler cannot resume: taken over (so this pass moves on, and nothing runs
  // its steps while the lookup is asked), then reported from the bytes the takeover answered.
  bool report_record(const record& stuck, std::chrono::nanoseconds age,
                     const detail::recovery_contents& listed, const std::string& why,
                     reconcile_report& report) {
    reconcile_summary& summary = report.summary;
    claim_result claimed;
    try {
      claimed = store_.claim(claim_request{stuck.scope, stuck.key, stuck.fingerprint,
                                           clock_.wall_now(), options_.lease, options_.retention});
    } catch (const store_error&) {
      ++summary.store_failures;
      observer_.on_record(reconcile_record_event{stuck.scope, resumption::store_failed, false});
      return false;
    }
    resumption what = resumption::failed;
    switch (claimed.status) {
      case claim_status::taken_over:
        break;
      case claim_status::claimed:
        try {
          (void)store_.release(fenced_key{stuck.scope, stuck.key, claimed.fence});
        } catch (const store_error&) {
          // The claim ends with its lease.
        }
        what = resumption::settled;
        break;
      case claim_status::full:
        what = resumption::settled;
        break;
      case claim_status::existing:
        what = claimed.existing.state == record_state::in_progress &&
                       claimed.existing.fingerprint == stuck.fingerprint
                   ? resumption::lost
                   : resumption::settled;
        break;
    }
    if (what != resumption::failed) {
      ++(what == resumption::lost ? summary.lost : summary.settled);
      observer_.on_record(reconcile_record_event{stuck.scope, what, false});
      return true;
    }
    ++summary.not_resumable;
    detail::recovery_contents current = listed;
    try {
      current = detail::read_recovery(opened(claimed.existing.recovery));
    } catch (const std::exception&) {
      // The takeover's bytes are the listed ones, which did not read either.
    }
    add_rows(stuck, age, current, why, report);
    observer_.on_record(reconcile_record_event{stuck.scope, resumption::unreadable, true});
    return true;
  }

  // The rows of one record the reconciler did not finish.
  void add_rows(const record& stuck, std::chrono::nanoseconds age,
                const detail::recovery_contents& contents, const std::string& why,
                reconcile_report& report) {
    const auto row = [&](std::string_view step, std::string reference, landing classification,
                         evidence source, std::string reason) {
      discrepancy out;
      out.scope = stuck.scope;
      out.redacted_key = redacted_key(stuck.key).str();
      out.age = age;
      out.handler = contents.handler;
      out.step = std::string(step);
      out.downstream_key = std::move(reference);
      out.classification = classification;
      out.source = source;
      out.reason = std::move(reason);
      switch (classification) {
        case landing::landed:
          ++report.summary.landed;
          break;
        case landing::not_landed:
          ++report.summary.not_landed;
          break;
        case landing::unknown:
          ++report.summary.unknown;
          break;
      }
      observer_.on_discrepancy(out);
      report.rows.push_back(std::move(out));
    };
    const auto reference_of = [&](std::string_view step, const std::string& given) {
      return given.empty() ? std::string(downstream_key(stuck.scope, stuck.key, step).view())
                           : given;
    };
    for (const std::string& step : contents.recorded) {
      row(step, std::string(downstream_key(stuck.scope, stuck.key, step).view()), landing::landed,
          evidence::record, why + "; the step's result is recorded");
    }
    for (const auto& [step, given] : contents.started) {
      if (contents.recorded_step(step)) continue;
      std::string reference = reference_of(step, given);
      std::string said;
      const landing found = ask(stuck, contents.handler, step, reference, said);
      std::string reason = why;
      reason += "; ";
      reason += said;
      row(step, std::move(reference), found, evidence::lookup, std::move(reason));
    }
    if (contents.recorded.empty() && contents.started.empty()) {
      row({}, {}, landing::not_landed, evidence::record, why + "; no step was started");
    }
  }

  landing ask(const record& stuck, std::string_view handler, std::string_view step,
              std::string_view reference, std::string& said) {
    if (!lookup_) {
      said = "started and not recorded; no lookup was given to ask the downstream";
      return landing::unknown;
    }
    try {
      const landing found = lookup_(lookup_query{stuck.scope, handler, step, reference});
      said = "started and not recorded; the lookup answered " + std::string(to_string(found));
      return found;
    } catch (const std::exception& error) {
      said = std::string("started and not recorded; the lookup threw: ") + error.what();
    } catch (...) {
      said = "started and not recorded; the lookup threw";
    }
    return landing::unknown;
  }

  std::string opened(const std::string& sealed) const {
    if constexpr (std::is_same_v<response_codec_type, plain_response_codec>) {
      return sealed;
    } else {
      if (sealed.empty()) return {};
      std::string plain;
      codec_.open(sealed, plain);
      return plain;
    }
  }

  store_type store_;
  reconciler_options options_;
  clock_type clock_;
  response_codec_type codec_;
  observer_type observer_;
  downstream_lookup lookup_;
  std::map<std::string, std::function<resume_result(const record&, std::string_view)>, std::less<>>
      targets_;
};

}  // namespace idem

#endif  // IDEM_RECONCILER_HPP
