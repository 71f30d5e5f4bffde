// Built against an installed idem with find_package(idem COMPONENTS httplib prometheus grpc): a
// guarded endpoint served by cpp-httplib on loopback is called twice with one key (executed,
// then replayed and marked so), a Prometheus observer counts both, and a gRPC status is
// classified. Exits 0 only if all of that happens.
#include <idem/grpc.hpp>
#include <idem/http/httplib.hpp>
#include <idem/idem.hpp>
#include <idem/prometheus.hpp>

#include <prometheus/registry.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace {

struct observed : idem::default_policies {
  using server_observer = idem::prometheus_observer;
};

double replayed_count(const prometheus::Registry& registry) {
  for (const auto& family : registry.Collect()) {
    if (family.name != "idem_requests_total") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "verdict" && label.value == "replayed") return metric.counter.value;
      }
    }
  }
  return -1;
}

}  // namespace

int main() {
  prometheus::Registry registry;
  const idem::prometheus_observer metrics{registry};
  int runs = 0;
  auto handler = [&runs](const idem::http::httplib_request& request) {
    ++runs;
    return idem::http_response{201, {}, std::string(request->body)};
  };
  idem::idempotent<decltype(handler), observed>::options options;
  options.server_observer = metrics;
  idem::idempotent<decltype(handler), observed> guarded{handler, options};

  httplib::Server server;
  server.Post("/charges", idem::http::post_handler(guarded, [](const httplib::Request&) {
                return std::string("tenant");
              }));
  const int port = server.bind_to_any_port("127.0.0.1");
  if (port <= 0) return 1;
  std::thread serving([&] { server.listen_after_bind(); });
  while (!server.is_running())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));

  httplib::Client client{"127.0.0.1", port};
  const httplib::Headers headers{{"Idempotency-Key", "\"k-1\""}};
  const auto first = client.Post("/charges", headers, "amount=5", "text/plain");
  const auto again = client.Post("/charges", headers, "amount=5", "text/plain");
  server.stop();
  serving.join();

  const idem::grpc_classifier classifier;
  const bool ok = first && again && first->status == 201 && again->status == 201 &&
                  again->get_header_value("Idempotent-Replayed") == "true" &&
                  again->body == "amount=5" && runs == 1 && replayed_count(registry) == 1 &&
                  classifier.classify(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")).kind ==
                      idem::disposition::transient;
  if (!ok) std::fputs("consumer: the bindings did not answer as expected\n", stderr);
  return ok ? 0 : 1;
}
