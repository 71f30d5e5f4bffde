// Deadline propagation over real sockets: a client calls server A, whose handler works a while
// and then calls server B under its downstream key through idem::retrying. The client's
// deadline travels in Request-Timeout-Ms; A's handler gives what is left of it to its retrying
// call, which sends it on. When the client's deadline runs out in A, B never starts the work
// the client abandoned; without propagation (the control), it does.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <idem/http/httplib.hpp>
#include <idem/idem.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

namespace http = idem::http;
using namespace std::chrono_literals;

namespace {

/// An httplib server on loopback, serving until destroyed.
class running_server {
 public:
  running_server() = default;
  running_server(const running_server&) = delete;
  running_server& operator=(const running_server&) = delete;
  ~running_server() {
    server.stop();
    if (serving_.joinable()) serving_.join();
  }
  void start() {
    port = server.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    serving_ = std::thread([this] { server.listen_after_bind(); });
    while (!server.is_running())
      std::this_thread::sleep_for(1ms);
  }

  httplib::Server server;
  int port = 0;

 private:
  std::thread serving_;
};

/// B: does its work, which takes at least 100 ms (minimum_time_left), and counts its runs.
struct inner_work {
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);
  idem::http_response operator()(const http::httplib_request&) const {
    ++*runs;
    return {200, {{"Content-Type", "text/plain"}}, "inner done"};
  }
};

/// What A's retrying call to B returns: an HTTP-like answer idem's classifier reads.
struct inner_answer {
  int status = 0;
  std::string body;
  std::string retry_after;
};

/// A: works for `work`, then calls B under its downstream key, with what the caller has left
/// (or, without propagation, with a deadline of its own and no field).
struct outer_work {
  int inner_port = 0;
  std::chrono::milliseconds work{250};
  bool propagate = true;

  idem::http_response operator()(idem::handler_context& ctx, const http::httplib_request&) const {
    std::this_thread::sleep_for(work);
    std::chrono::nanoseconds left = 5s;  // A's own, when it passes nothing on
    if (propagate) {
      left = ctx.time_left().value_or(5s);
      if (left <= 0ns) return {504, {{"Content-Type", "text/plain"}}, "out of time before B"};
    }
    const bool send_deadline = propagate;
    const int port = inner_port;
    auto call_inner = [port, send_deadline](const idem::attempt_context& attempt) {
      httplib::Client client("127.0.0.1", port);
      client.set_read_timeout(5s);
      const http::attempt_field_values fields = http::attempt_fields(attempt);
      httplib::Headers headers{{std::string(http::key_field), fields.key}};
      if (send_deadline) headers.emplace(std::string(http::deadline_field), fields.deadline);
      auto res = client.Post("/inner", headers, "{}", "application/json");
      if (!res) return inner_answer{503, "unreachable", ""};
      return inner_answer{res->status, res->body, res->get_header_value("Retry-After")};
    };
    using inner_call = decltype(call_inner);
    typename idem::retrying<inner_call>::options options;
    options.limits = {3, left};
    idem::retrying<inner_call> to_inner(call_inner, std::move(options));
    const auto outcome = to_inner.with_key(ctx.downstream_key("inner").view());
    // The last answer B gave, whether retrying ended in success or not; 502 for none.
    const int status = outcome.has_value() ? outcome.value().status : 502;
    return {status, {{"Content-Type", "text/plain"}}, "inner answered " + std::to_string(status)};
  }
};

struct chain {
  inner_work inner_handler;
  std::unique_ptr<idem::idempotent<inner_work>> inner;
  std::unique_ptr<idem::idempotent<outer_work>> outer;
  running_server b;
  running_server a;

  explicit chain(bool propagate, std::chrono::milliseconds outer_work_time = 250ms) {
    idem::idempotent<inner_work>::options inner_options;
    inner_options.minimum_time_left = 100ms;
    inner = std::make_unique<idem::idempotent<inner_work>>(inner_handler, std::move(inner_options));
    b.server.Post("/inner",
                  http::post_handler(*inner, [](const httplib::Request&) { return "a"; }));
    b.start();
    outer = std::make_unique<idem::idempotent<outer_work>>(
        outer_work{b.port, outer_work_time, propagate});
    a.server.Post("/outer",
                  http::post_handler(*outer, [](const httplib::Request&) { return "client"; }));
    a.start();
  }

  httplib::Result call(const std::string& key, std::chrono::milliseconds deadline) {
    httplib::Client client("127.0.0.1", a.port);
    client.set_read_timeout(10s);
    const httplib::Headers headers{{"Idempotency-Key", key},
                                   {"Request-Timeout-Ms", std::to_string(deadline.count())}};
    return client.Post("/outer", headers, "{}", "application/json");
  }
  int inner_runs() const { return inner_handler.runs->load(); }
};

}  // namespace

TEST_CASE("deadline: a client's deadline that runs out in A keeps B from starting the work",
          "[http][deadline]") {
  chain c(true);
  // 300 ms for A's 250 ms of work and B's 100: B is offered 50 ms at most, and refuses.
  const auto res = c.call("order-1", 300ms);
  REQUIRE(res);
  CHECK(res->status == 504);
  CHECK(c.inner_runs() == 0);
}

TEST_CASE("deadline: without propagation B starts work the client abandoned (the control)",
          "[http][deadline]") {
  chain c(false);
  const auto res = c.call("order-1", 300ms);
  REQUIRE(res);
  CHECK(c.inner_runs() == 1);  // what propagation prevents
}

TEST_CASE("deadline: a client with time enough gets the whole chain's work done once",
          "[http][deadline]") {
  chain c(true);
  const auto res = c.call("order-1", 5000ms);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == "inner answered 200");
  CHECK(c.inner_runs() == 1);
  // A repeat of the client's request is A's stored answer: B is not asked again.
  const auto again = c.call("order-1", 5000ms);
  REQUIRE(again);
  CHECK(again->get_header_value("Idempotent-Replayed") == "true");
  CHECK(c.inner_runs() == 1);
}

TEST_CASE("deadline: A refuses a client whose deadline has already passed, and B never hears of it",
          "[http][deadline]") {
  chain c(true);
  const auto res = c.call("order-1", 0ms);
  REQUIRE(res);
  CHECK(res->status == 504);
  CHECK(res->get_header_value("Content-Type") == "application/problem+json");
  CHECK(c.inner_runs() == 0);
}
