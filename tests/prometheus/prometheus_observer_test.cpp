// idem::prometheus_observer (idem/prometheus.hpp): each event lands in its series, read back from
// the registry as a scrape would read it, and over HTTP from prometheus-cpp's Exposer.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/prometheus.hpp>
#include <idem/testing/faulty_store.hpp>

#include <httplib.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

using namespace std::chrono_literals;

namespace {

// One series of `family` with the label `name`=`value` (or the only series, for an empty
// name): its counter value, or its histogram's count.
const prometheus::ClientMetric* series(const prometheus::Registry& registry,
                                       std::vector<prometheus::MetricFamily>& families,
                                       std::string_view family, std::string_view name = {},
                                       std::string_view value = {}) {
  families = registry.Collect();
  for (const auto& f : families) {
    if (f.name != family) continue;
    for (const auto& metric : f.metric) {
      if (name.empty()) return &metric;
      for (const auto& label : metric.label) {
        if (label.name == name && label.value == value) return &metric;
      }
    }
  }
  return nullptr;
}

double counter(const prometheus::Registry& registry, std::string_view family,
               std::string_view name = {}, std::string_view value = {}) {
  std::vector<prometheus::MetricFamily> families;
  const prometheus::ClientMetric* found = series(registry, families, family, name, value);
  return found != nullptr ? found->counter.value : -1;
}

// The series of `family` that carries both labels: its gauge's or its counter's value.
double breaker_series(const prometheus::Registry& registry, std::string_view family,
                      std::pair<std::string_view, std::string_view> first,
                      std::pair<std::string_view, std::string_view> second) {
  for (const auto& f : registry.Collect()) {
    if (f.name != family) continue;
    for (const auto& metric : f.metric) {
      int matched = 0;
      for (const auto& label : metric.label) {
        for (const auto& [name, value] : {first, second})
          matched += label.name == name && label.value == value ? 1 : 0;
      }
      if (matched == 2)
        return f.type == prometheus::MetricType::Gauge ? metric.gauge.value : metric.counter.value;
    }
  }
  return -1;
}

double gauge(const prometheus::Registry& registry, std::string_view dependency,
             std::string_view state) {
  return breaker_series(registry, "idem_breaker_state", {"dependency", dependency},
                        {"state", state});
}

double changes(const prometheus::Registry& registry, std::string_view dependency,
               std::string_view to) {
  return breaker_series(registry, "idem_breaker_changes_total", {"dependency", dependency},
                        {"to", to});
}

double histogram_sum(const prometheus::Registry& registry, std::string_view family) {
  std::vector<prometheus::MetricFamily> families;
  const prometheus::ClientMetric* found = series(registry, families, family);
  return found != nullptr ? found->histogram.sample_sum : -1;
}

std::uint64_t histogram_count(const prometheus::Registry& registry, std::string_view family) {
  std::vector<prometheus::MetricFamily> families;
  const prometheus::ClientMetric* found = series(registry, families, family);
  return found != nullptr ? found->histogram.sample_count : 0;
}

using faulty = idem::testing::faulty_store<idem::memory_store>;

struct server_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using store = faulty;
  using server_observer = idem::prometheus_observer;
};

struct client_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using observer = idem::prometheus_observer;
};

const idem::http_request charge{"POST", "/charges", {}, "{\"amount\":5}"};
const idem::http_request other{"POST", "/charges", {}, "{\"amount\":6}"};

}  // namespace

TEST_CASE("prometheus: each server verdict is counted under its own label") {
  prometheus::Registry registry;
  idem::prometheus_observer metrics{registry};
  idem::manual_clock clock;
  faulty store;
  std::function<idem::http_response()> body;
  auto handler = [&](const idem::http_request&) { return body(); };
  using guard_type = idem::idempotent<decltype(handler), server_policies>;
  guard_type::options options;
  options.clock = clock;
  options.store = store;
  options.max_body_bytes = 64;
  options.server_observer = metrics;
  guard_type guard{handler, options};
  body = [&] {
    clock.advance(20ms);
    CHECK(guard("s", "k1", charge).verdict() == idem::verdict::in_progress);
    return idem::http_response{201, {}, "ok"};
  };

  CHECK(guard("s", "k1", charge).verdict() == idem::verdict::executed);
  CHECK(guard("s", "k1", charge).verdict() == idem::verdict::replayed);
  CHECK(guard("s", "k1", charge).verdict() == idem::verdict::replayed);
  CHECK(guard("s", "k1", other).verdict() == idem::verdict::mismatch);
  CHECK(guard("s", std::nullopt, charge).verdict() == idem::verdict::missing_key);
  CHECK(guard("s", "", charge).verdict() == idem::verdict::invalid_key);
  const idem::http_request large{"POST", "/charges", {}, std::string(65, 'x')};
  CHECK(guard("s", "k3", large).verdict() == idem::verdict::body_too_large);
  store.fail(faulty::mode::unavailable);
  CHECK(guard("s", "k2", charge).verdict() == idem::verdict::store_unavailable);
  CHECK(guard("s", "k2", charge).verdict() == idem::verdict::store_unavailable);
  store.fail(faulty::mode::full);
  CHECK(guard("s", "k2", charge).verdict() == idem::verdict::store_full);

  CHECK(counter(registry, "idem_requests_total", "verdict", "executed") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "replayed") == 2);
  CHECK(counter(registry, "idem_requests_total", "verdict", "in_progress") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "mismatch") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "missing_key") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "invalid_key") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "body_too_large") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "store_unavailable") == 2);
  CHECK(counter(registry, "idem_requests_total", "verdict", "store_full") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "coalesced") == 0);
  CHECK(histogram_count(registry, "idem_request_seconds") == 11);
  CHECK(histogram_count(registry, "idem_handler_seconds") == 1);
}

TEST_CASE(
    "prometheus: a duplicate that waited for the response counts as coalesced, not replayed") {
  struct coalescing_policies : idem::default_policies {
    using clock = idem::steady_clock;
    using server_observer = idem::prometheus_observer;
  };
  prometheus::Registry registry;
  idem::prometheus_observer metrics{registry};
  std::atomic<bool> release{false};
  std::atomic<bool> running{false};
  auto handler = [&](const idem::http_request&) {
    running = true;
    while (!release)
      std::this_thread::sleep_for(1ms);
    return idem::http_response{201, {}, "ok"};
  };
  using guard_type = idem::idempotent<decltype(handler), coalescing_policies>;
  guard_type::options options;
  options.coalesce = 10s;
  options.server_observer = metrics;
  guard_type guard{handler, options};

  std::thread first([&] { CHECK(guard("s", "k", charge).verdict() == idem::verdict::executed); });
  while (!running)
    std::this_thread::sleep_for(1ms);
  std::thread duplicate(
      [&] { CHECK(guard("s", "k", charge).verdict() == idem::verdict::replayed); });
  std::this_thread::sleep_for(30ms);
  release = true;
  first.join();
  duplicate.join();
  CHECK(guard("s", "k", charge).verdict() == idem::verdict::replayed);

  CHECK(counter(registry, "idem_requests_total", "verdict", "executed") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "coalesced") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "replayed") == 1);
  CHECK(counter(registry, "idem_requests_total", "verdict", "in_progress") == 0);
}

TEST_CASE("prometheus: copies of one observer share its metric families") {
  prometheus::Registry registry;
  idem::prometheus_observer metrics{registry};
  const idem::prometheus_observer copy = metrics;
  copy.on_call({idem::verdict::executed, false, 1ms});
  metrics.on_call({idem::verdict::executed, false, 1ms});
  CHECK(counter(registry, "idem_requests_total", "verdict", "executed") == 2);
  CHECK(registry.Collect().size() == 8);  // the breaker families are empty until one is watched
  const idem::breaker_listener listener = copy.watch_breaker("ledger");
  CHECK(registry.Collect().size() == 10);
}

TEST_CASE("prometheus: client attempts, retries and a budget refusal are counted") {
  prometheus::Registry registry;
  idem::prometheus_observer metrics{registry};
  idem::manual_clock clock;
  int status = 503;
  auto dependency = [&](const idem::attempt_context&) {
    clock.advance(250ms);
    return idem::http_response{status, {}, ""};
  };
  idem::retrying<decltype(dependency), client_policies>::options options;
  options.clock = clock;
  options.observer = metrics;
  // Room for exactly one retry, and no refill.
  options.budget = idem::token_bucket({.max_tokens = 5,
                                       .retry_cost = 5,
                                       .ambiguous_retry_cost = 10,
                                       .success_deposit = 0,
                                       .retry_ratio = 0});
  idem::retrying<decltype(dependency), client_policies> call{dependency, options};

  CHECK(call().verdict() == idem::retry_verdict::budget_exhausted);  // 503, retry, 503, refused
  CHECK(call().verdict() == idem::retry_verdict::budget_exhausted);  // 503, refused
  status = 200;
  CHECK(call().verdict() == idem::retry_verdict::succeeded);

  CHECK(counter(registry, "idem_attempts_total", "outcome", "transient") == 3);
  CHECK(counter(registry, "idem_attempts_total", "outcome", "success") == 1);
  CHECK(counter(registry, "idem_retries_total") == 1);
  CHECK(counter(registry, "idem_operations_total", "verdict", "budget_exhausted") == 2);
  CHECK(counter(registry, "idem_operations_total", "verdict", "succeeded") == 1);
  CHECK(counter(registry, "idem_operations_total", "verdict", "circuit_open") == 0);
  CHECK(histogram_count(registry, "idem_operation_seconds") == 3);
  CHECK(histogram_count(registry, "idem_attempt_seconds") == 4);
  CHECK(histogram_sum(registry, "idem_attempt_seconds") == Approx(1.0));
}

TEST_CASE("prometheus: a breaker's state set follows it through open, half-open and closed") {
  struct breaker_policies : client_policies {
    using breaker = idem::consecutive_failure_breaker;
  };
  prometheus::Registry registry;
  idem::prometheus_observer metrics{registry};
  idem::manual_clock clock;
  int status = 503;
  auto dependency = [&](const idem::attempt_context&) {
    return idem::http_response{status, {}, ""};
  };
  using call_type = idem::retrying<decltype(dependency), breaker_policies>;
  call_type::options options;
  options.clock = clock;
  options.observer = metrics;
  options.limits.max_attempts = 1;
  options.breaker = idem::consecutive_failure_breaker(
      {.threshold = 2, .open_for = 10s, .probes = 1, .on_change = metrics.watch_breaker("ledger")});
  call_type call{dependency, options};
  const auto state_is = [&](std::string_view state) {
    for (std::string_view s : {"closed", "open", "half_open"}) {
      if (gauge(registry, "ledger", s) != (s == state ? 1 : 0)) return false;
    }
    return true;
  };

  CHECK(state_is("closed"));
  CHECK(call().verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK(state_is("closed"));
  CHECK(call().verdict() == idem::retry_verdict::attempts_exhausted);  // the second: it opens
  CHECK(state_is("open"));
  CHECK(call().verdict() == idem::retry_verdict::circuit_open);
  CHECK(state_is("open"));

  clock.advance(10s);  // the next call is a probe, and it fails: open again
  CHECK(call().verdict() == idem::retry_verdict::attempts_exhausted);
  CHECK(state_is("open"));
  clock.advance(10s);
  status = 200;  // a probe that succeeds closes it
  CHECK(call().verdict() == idem::retry_verdict::succeeded);
  CHECK(state_is("closed"));

  CHECK(changes(registry, "ledger", "open") == 2);
  CHECK(changes(registry, "ledger", "half_open") == 2);
  CHECK(changes(registry, "ledger", "closed") == 1);
  CHECK(counter(registry, "idem_operations_total", "verdict", "circuit_open") == 1);
}

TEST_CASE("prometheus: breakers of two dependencies keep series of their own") {
  prometheus::Registry registry;
  idem::prometheus_observer metrics{registry};
  idem::failure_rate_breaker ledger{{.window = 2,
                                     .minimum_calls = 2,
                                     .threshold_percent = 50,
                                     .open_for = 1s,
                                     .probes = 1,
                                     .on_change = metrics.watch_breaker("ledger")}};
  idem::consecutive_failure_breaker fx{{.on_change = metrics.watch_breaker("fx")}};
  ledger.on_success(0s);
  ledger.on_failure(0s);
  CHECK(ledger.state(0s) == idem::breaker_state::open);
  CHECK(gauge(registry, "ledger", "open") == 1);
  CHECK(gauge(registry, "ledger", "closed") == 0);
  CHECK(gauge(registry, "fx", "closed") == 1);
  CHECK(gauge(registry, "fx", "open") == 0);
  CHECK(changes(registry, "fx", "open") == 0);
}

TEST_CASE("prometheus: the counters are served in the text exposition over HTTP") {
  auto registry = std::make_shared<prometheus::Registry>();
  idem::prometheus_observer metrics{*registry};
  metrics.on_call({idem::verdict::executed, false, 2ms});
  metrics.on_call({idem::verdict::mismatch, false, 1ms});
  prometheus::Exposer exposer{"127.0.0.1:0"};
  exposer.RegisterCollectable(registry);
  REQUIRE(exposer.GetListeningPorts().size() == 1);

  httplib::Client client{"127.0.0.1", exposer.GetListeningPorts().front()};
  const httplib::Result scraped = client.Get("/metrics");
  REQUIRE(scraped);
  CHECK(scraped->status == 200);
  CHECK(scraped->body.find("idem_requests_total{verdict=\"executed\"} 1") != std::string::npos);
  CHECK(scraped->body.find("idem_requests_total{verdict=\"mismatch\"} 1") != std::string::npos);
  CHECK(scraped->body.find("idem_handler_seconds_count 0") != std::string::npos);
}
