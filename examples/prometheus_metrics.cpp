// idem's metrics for Prometheus: one idem::prometheus_observer watches a payment endpoint
// (idempotent) and a client that retries (retrying), and prometheus-cpp's Exposer serves them
// at /metrics for a Prometheus server to scrape.
//
//   example_prometheus_metrics            serves on a free port, scrapes itself once, and exits
//   example_prometheus_metrics --serve 9464   serves on 127.0.0.1:9464 until killed
//
// Labels are verdicts and dispositions only, never a key or a scope: a series per key would
// grow without end (docs/metrics.md lists them).
#include <idem/idem.hpp>
#include <idem/prometheus.hpp>

#include <httplib.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace {

// Both sides report to one observer: set it as the server_observer and the observer policy.
struct observed_policies : idem::default_policies {
  using server_observer = idem::prometheus_observer;
  using observer = idem::prometheus_observer;
};

}  // namespace

int main(int argc, char** argv) {
  const bool serve = argc >= 2 && std::string_view(argv[1]) == "--serve";
  const std::string port = serve && argc >= 3 ? argv[2] : "0";

  auto registry = std::make_shared<prometheus::Registry>();
  const idem::prometheus_observer metrics{*registry};

  // The server side: a payment endpoint, called as a client's retries would call it.
  auto charge = [](const idem::http_request& request) {
    return idem::http_response{201, {}, "charged " + request.body};
  };
  using payments_type = idem::idempotent<decltype(charge), observed_policies>;
  payments_type::options options;
  options.server_observer = metrics;
  payments_type payments{charge, options};
  const idem::http_request request{"POST", "/charges", {}, "5 EUR"};
  (void)payments("acct_1", "order-1", request);  // executed
  (void)payments("acct_1", "order-1", request);  // replayed
  (void)payments("acct_1", "order-1", idem::http_request{"POST", "/charges", {}, "6 EUR"});  // 422
  (void)payments("acct_1", std::nullopt, request);                                           // 400

  // The client side: a provider that fails once with 503, then answers.
  int calls = 0;
  auto provider = [&](const idem::attempt_context&) {
    return idem::http_response{++calls == 1 ? 503 : 200, {}, ""};
  };
  using client_type = idem::retrying<decltype(provider), observed_policies>;
  client_type::options client_options;
  client_options.observer = metrics;
  client_type client{provider, client_options};
  (void)client();

  prometheus::Exposer exposer{"127.0.0.1:" + port};
  exposer.RegisterCollectable(registry);
  const int bound = exposer.GetListeningPorts().front();
  std::printf("serving http://127.0.0.1:%d/metrics\n", bound);
  if (serve) {
    for (;;)
      std::this_thread::sleep_for(std::chrono::hours{1});
  }

  // Scrape once, as Prometheus would, and show idem's series.
  httplib::Client scraper{"127.0.0.1", bound};
  const httplib::Result scraped = scraper.Get("/metrics");
  if (!scraped || scraped->status != 200) {
    std::fprintf(stderr, "the scrape failed\n");
    return EXIT_FAILURE;
  }
  std::printf("%s", scraped->body.c_str());
  const bool found =
      scraped->body.find("idem_requests_total{verdict=\"executed\"} 1") != std::string::npos &&
      scraped->body.find("idem_requests_total{verdict=\"replayed\"} 1") != std::string::npos &&
      scraped->body.find("idem_retries_total 1") != std::string::npos;
  return found ? EXIT_SUCCESS : EXIT_FAILURE;
}
