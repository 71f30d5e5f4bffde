// idem::prometheus_observer: idem's telemetry as Prometheus metrics (prometheus-cpp).
//
// One observer for both sides: a server_observer policy for idempotent and async_idempotent
// (idem/server/observer.hpp) and an observer policy for retrying (idem/client/policy/observer.hpp).
// It registers its metric families in a prometheus::Registry the service exposes (an Exposer's
// /metrics, docs/metrics.md), and every series it will ever write is made when it is built, so
// that a call only adds to a counter it already holds.
//
//   prometheus::Registry registry;
//   idem::prometheus_observer metrics{registry};
//   struct observed : idem::default_policies {
//     using server_observer = idem::prometheus_observer;
//   };
//   idem::idempotent<Handler, observed> payments{handler, {.server_observer = metrics}};
//
// Copies share the metric families (a handle, as a store is); the registry must outlive them.
// Labels are bounded: verdicts and dispositions only, never a key or a scope; a breaker's gauge
// is labelled with the dependency name the service gives it.
//
// Breakers report their state through a listener (idem/client/policy/breaker.hpp):
//
//   idem::consecutive_failure_breaker breaker{{.on_change = metrics.watch_breaker("ledger")}};
//
// sets idem_breaker_state{dependency="ledger",state="closed|open|half_open"} (1 for the state
// it is in, 0 for the others: OpenMetrics' state set) and counts idem_breaker_changes_total.
#ifndef IDEM_PROMETHEUS_HPP
#define IDEM_PROMETHEUS_HPP

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <idem/client/attempt.hpp>
#include <idem/client/policy/breaker.hpp>
#include <idem/client/policy/observer.hpp>
#include <idem/server/observer.hpp>
#include <idem/server/outcome.hpp>

namespace idem {

class prometheus_observer {
 public:
  /// The latency buckets, in seconds, when none are given: 1 ms to 10 s, as a service answers.
  static std::vector<double> default_buckets() {
    return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  }

  /// Registers idem's metric families in `registry`, with `buckets` (seconds) for the latency
  /// histograms.
  explicit prometheus_observer(prometheus::Registry& registry,
                               const std::vector<double>& buckets = default_buckets())
      : metrics_(std::make_shared<metrics>(registry, buckets)) {}

  /// An observer with a registry of its own (registry() answers it): what a wrapper's options
  /// hold until they are given the observer built on the registry the service exposes.
  prometheus_observer() : prometheus_observer(std::make_shared<prometheus::Registry>()) {}

  /// The registry this observer's families are in when it made its own; null otherwise.
  const std::shared_ptr<prometheus::Registry>& registry() const noexcept { return own_; }

  // --- server side: one event a call, one a handler run -----------------------------------
  void on_call(const server_call_event& e) const {
    if (e.coalesced) {
      metrics_->coalesced->Increment();
    } else {
      metrics_->requests[static_cast<std::size_t>(e.verdict)]->Increment();
    }
    metrics_->request_seconds->Observe(seconds(e.duration));
  }
  void on_handler(const handler_event& e) const {
    metrics_->handler_seconds->Observe(seconds(e.duration));
  }

  // --- client side: attempts, waits, ends -------------------------------------------------
  void on_attempt(const attempt_event& e) const {
    metrics_->attempts[static_cast<std::size_t>(e.record.kind)]->Increment();
    metrics_->attempt_seconds->Observe(seconds(e.duration));
  }
  void on_delay(const delay_event&) const { metrics_->retries->Increment(); }
  void on_finish(const finish_event& e) const {
    metrics_->operations[static_cast<std::size_t>(e.verdict)]->Increment();
    metrics_->operation_seconds->Observe(seconds(e.elapsed));
  }

  /// A listener for a breaker's `settings::on_change` that keeps the state set of the breaker
  /// in front of `dependency` (a name of the service's choosing: one per breaker, bounded). The
  /// series are made here, reading closed, as a breaker starts.
  breaker_listener watch_breaker(const std::string& dependency) const {
    auto gauges = std::make_shared<breaker_series>();
    for (std::size_t s = 0; s < breaker_states; ++s) {
      const std::string state{to_string(static_cast<breaker_state>(s))};
      gauges->state[s] =
          &metrics_->breaker_gauges->Add({{"dependency", dependency}, {"state", state}});
      gauges->changes[s] =
          &metrics_->breaker_changes->Add({{"dependency", dependency}, {"to", state}});
    }
    gauges->state[static_cast<std::size_t>(breaker_state::closed)]->Set(1);
    // The metrics are kept alive with the listener: it may outlive this observer.
    return [gauges, metrics = metrics_](breaker_state entered) {
      const auto now = static_cast<std::size_t>(entered);
      for (std::size_t s = 0; s < breaker_states; ++s)
        gauges->state[s]->Set(s == now ? 1 : 0);
      gauges->changes[now]->Increment();
    };
  }

 private:
  // The enums' sizes: every value of verdict, disposition and retry_verdict has its series.
  static constexpr std::size_t verdicts = static_cast<std::size_t>(verdict::deadline_exceeded) + 1;
  static constexpr std::size_t dispositions = static_cast<std::size_t>(disposition::permanent) + 1;
  static constexpr std::size_t retry_verdicts =
      static_cast<std::size_t>(retry_verdict::rate_limited) + 1;
  static constexpr std::size_t breaker_states =
      static_cast<std::size_t>(breaker_state::half_open) + 1;

  // One breaker's series: its state set and its change counters, by state.
  struct breaker_series {
    std::array<prometheus::Gauge*, breaker_states> state{};
    std::array<prometheus::Counter*, breaker_states> changes{};
  };

  static double seconds(std::chrono::nanoseconds d) noexcept {
    return std::chrono::duration<double>(d).count();
  }

  struct metrics {
    metrics(prometheus::Registry& registry, const std::vector<double>& buckets) {
      auto& requests_family =
          prometheus::BuildCounter()
              .Name("idem_requests_total")
              .Help(
                  "Guarded calls by verdict; coalesced: replays answered after waiting for a "
                  "duplicate in progress (not counted under replayed)")
              .Register(registry);
      for (std::size_t v = 0; v < verdicts; ++v) {
        requests[v] =
            &requests_family.Add({{"verdict", std::string(to_string(static_cast<verdict>(v)))}});
      }
      coalesced = &requests_family.Add({{"verdict", "coalesced"}});
      request_seconds = &prometheus::BuildHistogram()
                             .Name("idem_request_seconds")
                             .Help("Guarded calls' duration, from arrival to answer")
                             .Register(registry)
                             .Add({}, buckets);
      handler_seconds = &prometheus::BuildHistogram()
                             .Name("idem_handler_seconds")
                             .Help("Handler runs' duration")
                             .Register(registry)
                             .Add({}, buckets);
      auto& attempts_family = prometheus::BuildCounter()
                                  .Name("idem_attempts_total")
                                  .Help("Client attempts by how they were classified")
                                  .Register(registry);
      for (std::size_t d = 0; d < dispositions; ++d) {
        attempts[d] = &attempts_family.Add(
            {{"outcome", std::string(to_string(static_cast<disposition>(d)))}});
      }
      attempt_seconds = &prometheus::BuildHistogram()
                             .Name("idem_attempt_seconds")
                             .Help("Client attempts' duration, each attempt alone")
                             .Register(registry)
                             .Add({}, buckets);
      retries = &prometheus::BuildCounter()
                     .Name("idem_retries_total")
                     .Help("Client retries: waits before another attempt")
                     .Register(registry)
                     .Add({});
      auto& operations_family = prometheus::BuildCounter()
                                    .Name("idem_operations_total")
                                    .Help("Retried operations by how they ended")
                                    .Register(registry);
      for (std::size_t v = 0; v < retry_verdicts; ++v) {
        operations[v] = &operations_family.Add(
            {{"verdict", std::string(to_string(static_cast<retry_verdict>(v)))}});
      }
      operation_seconds = &prometheus::BuildHistogram()
                               .Name("idem_operation_seconds")
                               .Help("Retried operations' duration, attempts and waits together")
                               .Register(registry)
                               .Add({}, buckets);
      breaker_gauges = &prometheus::BuildGauge()
                            .Name("idem_breaker_state")
                            .Help("Circuit breakers' state: 1 for the state each is in, else 0")
                            .Register(registry);
      breaker_changes = &prometheus::BuildCounter()
                             .Name("idem_breaker_changes_total")
                             .Help("Circuit breakers' state changes, by the state entered")
                             .Register(registry);
    }

    std::array<prometheus::Counter*, verdicts> requests{};
    prometheus::Counter* coalesced = nullptr;
    prometheus::Histogram* request_seconds = nullptr;
    prometheus::Histogram* handler_seconds = nullptr;
    std::array<prometheus::Counter*, dispositions> attempts{};
    prometheus::Histogram* attempt_seconds = nullptr;
    prometheus::Counter* retries = nullptr;
    std::array<prometheus::Counter*, retry_verdicts> operations{};
    prometheus::Histogram* operation_seconds = nullptr;
    prometheus::Family<prometheus::Gauge>* breaker_gauges = nullptr;
    prometheus::Family<prometheus::Counter>* breaker_changes = nullptr;
  };

  explicit prometheus_observer(std::shared_ptr<prometheus::Registry> own)
      : metrics_(std::make_shared<metrics>(*own, default_buckets())), own_(std::move(own)) {}

  std::shared_ptr<metrics> metrics_;
  std::shared_ptr<prometheus::Registry> own_;
};

static_assert(ServerObserver<prometheus_observer>);
static_assert(Observer<prometheus_observer>);

}  // namespace idem

#endif  // IDEM_PROMETHEUS_HPP
