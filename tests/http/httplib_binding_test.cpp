// idem/http/httplib.hpp over real sockets: a cpp-httplib server on loopback, an httplib client,
// and every verdict the draft and idem give, against the memory store and SQLite (each store
// behind faulty_store, so that the same server can also be down or full).
#include <catch2/catch.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <idem/http/httplib.hpp>
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/testing/faulty_store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/gate.hpp"
#include "support/temporary_directory.hpp"

namespace http = idem::http;
using namespace std::chrono_literals;

namespace {

using idem_test::gate;

/// Charges: 201 and the charge's number; a JSON body {"amount": N} is the request.
struct charge_handler {
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<gate> door = std::make_shared<gate>();

  idem::http_response operator()(const http::httplib_request& req) const {
    door->pass();
    const int n = ++*runs;
    if (req->body.find("\"decline\"") != std::string::npos) {
      return {402, {{"Content-Type", "application/json"}}, R"({"error":"declined"})"};
    }
    if (req->body.find("\"big\"") != std::string::npos) {
      return {201, {{"Content-Type", "text/plain"}}, std::string(4096, 'x')};
    }
    const std::string body =
        R"({"charge":)" + std::to_string(n) + R"(,"path":")" + req->path + "\"}";
    return {201, {{"Content-Type", "application/json"}, {"X-Charge", std::to_string(n)}}, body};
  }
};

struct memory_factory {
  idem::memory_store make() { return idem::memory_store{}; }
};

struct sqlite_factory {
  idem::testing::temporary_directory directory{"idem-http"};
  idem::sqlite_store make() { return idem::sqlite_store{directory.file("keys.db")}; }
};

template <class Factory>
struct binding_fixture {
  using inner_store = decltype(std::declval<Factory&>().make());
  using store_type = idem::testing::faulty_store<inner_store>;
  struct policies : idem::default_policies {
    using store = store_type;
    using fingerprint = idem::canonical_json<>;
  };
  using guarded_type = idem::idempotent<charge_handler, policies>;

  Factory factory;
  store_type store{factory.make()};
  charge_handler handler;
  std::unique_ptr<guarded_type> charges;
  httplib::Server server;
  std::thread serving;
  int port = 0;

  binding_fixture() {
    typename guarded_type::options parts;
    parts.store = store;
    parts.lease = 20s;
    parts.max_body_bytes = 256;
    parts.max_response_bytes = 1024;
    charges = std::make_unique<guarded_type>(handler, std::move(parts));
    server.Post("/charges", http::post_handler(*charges, [](const httplib::Request& req) {
                  return req.get_header_value("X-Account");
                }));
    server.Get("/idempotency", http::specification_handler(http::specification::of(*charges)));
    port = server.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    serving = std::thread([this] { server.listen_after_bind(); });
    while (!server.is_running())
      std::this_thread::sleep_for(1ms);
  }
  ~binding_fixture() {
    handler.door->set(true);
    server.stop();
    serving.join();
  }
  binding_fixture(const binding_fixture&) = delete;
  binding_fixture& operator=(const binding_fixture&) = delete;

  httplib::Result post(const httplib::Headers& keys, const std::string& body,
                       const std::string& account = "acct-1") {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(10s);
    httplib::Headers headers = keys;
    headers.emplace("X-Account", account);
    return client.Post("/charges", headers, body, "application/json");
  }
  httplib::Result post(const std::string& key, const std::string& body) {
    return post(httplib::Headers{{"Idempotency-Key", key}}, body);
  }
  int runs() const { return handler.runs->load(); }
};

/// The problem body of a refusal, checked to be one: its media type, its members.
nlohmann::json problem_of(const httplib::Result& res) {
  REQUIRE(res);
  CHECK(res->get_header_value("Content-Type") == "application/problem+json");
  CHECK(res->get_header_value("Content-Language") == "en");
  const nlohmann::json body = nlohmann::json::parse(res->body);
  CHECK(body.at("status") == res->status);
  CHECK_FALSE(body.at("title").get<std::string>().empty());
  CHECK_FALSE(body.at("detail").get<std::string>().empty());
  return body;
}

std::string type_of(const httplib::Result& res) {
  return problem_of(res).at("type").get<std::string>();
}

}  // namespace

TEMPLATE_TEST_CASE("httplib: a first request runs and its repeat replays it byte for byte",
                   "[http][httplib]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const auto first = f.post(R"("k-1")", R"({"amount":100})");
  REQUIRE(first);
  CHECK(first->status == 201);
  CHECK(first->get_header_value("Content-Type") == "application/json");
  CHECK(first->get_header_value("X-Charge") == "1");
  CHECK_FALSE(first->has_header("Idempotent-Replayed"));
  // The bare key is the same key; the fingerprint reads JSON, so spacing is no other request.
  const auto repeat = f.post("k-1", R"({ "amount": 100 })");
  REQUIRE(repeat);
  CHECK(repeat->status == 201);
  CHECK(repeat->body == first->body);
  CHECK(repeat->get_header_value("X-Charge") == "1");
  CHECK(repeat->get_header_value("Idempotent-Replayed") == "true");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("httplib: an error the handler answered is replayed as it was",
                   "[http][httplib]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  CHECK(f.post(R"("k-1")", R"({"card":"decline"})")->status == 402);
  const auto repeat = f.post(R"("k-1")", R"({"card":"decline"})");
  CHECK(repeat->status == 402);
  CHECK(repeat->get_header_value("Idempotent-Replayed") == "true");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("httplib: a key reused with another body is 422 key-reused", "[http][httplib]",
                   memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  (void)f.post(R"("k-1")", R"({"amount":100})");
  const auto reused = f.post(R"("k-1")", R"({"amount":999})");
  CHECK(reused->status == 422);
  CHECK(type_of(reused) == "/idempotency#key-reused");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE(
    "httplib: a repeat while the first runs is 409 with the lease left as Retry-After",
    "[http][httplib]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  f.handler.door->set(false);
  std::optional<httplib::Result> first;
  std::thread original([&] { first.emplace(f.post(R"("k-1")", R"({"amount":100})")); });
  f.handler.door->wait_until_entered();
  const auto concurrent = f.post(R"("k-1")", R"({"amount":100})");
  f.handler.door->set(true);
  original.join();
  REQUIRE(concurrent);
  CHECK(concurrent->status == 409);
  CHECK(type_of(concurrent) == "/idempotency#request-outstanding");
  const int retry_after = std::stoi(concurrent->get_header_value("Retry-After"));
  CHECK(retry_after > 0);
  CHECK(retry_after <= 20);  // the lease
  REQUIRE(first);
  CHECK((*first)->status == 201);
  CHECK(f.runs() == 1);
}

TEST_CASE("httplib: a retrying client repeats a 409 after its Retry-After and gets the replay") {
  binding_fixture<memory_factory> f;
  f.handler.door->set(false);
  std::thread original([&] { CHECK(f.post(R"("k-1")", R"({"amount":100})")->status == 201); });
  f.handler.door->wait_until_entered();

  // The client's attempts: the same key each time (retrying's own key is not used here: the
  // holder is another caller). Its clock is manual, so the Retry-After wait passes at once.
  struct answer {
    int status = 0;
    std::string retry_after;
    bool replayed = false;
  };
  struct client_policies : idem::default_policies {
    using clock = idem::manual_clock;
  };
  std::vector<int> statuses;
  auto attempt = [&](const idem::attempt_context&) {
    const auto res = f.post(R"("k-1")", R"({"amount":100})");
    REQUIRE(res);
    statuses.push_back(res->status);
    if (res->status == 409) {
      // The holder finishes while this client waits out the Retry-After.
      f.handler.door->set(true);
      original.join();
    }
    return answer{res->status, res->get_header_value("Retry-After"),
                  res->get_header_value("Idempotent-Replayed") == "true"};
  };
  using client_type = idem::retrying<decltype(attempt), client_policies>;
  client_type::options options;
  options.limits.deadline = 60s;  // room for the lease's Retry-After (up to 20 s)
  client_type call{attempt, options};
  const auto outcome = call();
  if (original.joinable()) original.join();

  CHECK(outcome.verdict() == idem::retry_verdict::succeeded);
  CHECK(statuses == std::vector<int>{409, 201});
  REQUIRE(outcome.has_value());
  CHECK(outcome.value().replayed);
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("httplib: key misuse is 400 before anything is claimed", "[http][httplib]",
                   memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const auto missing = f.post(httplib::Headers{}, R"({"amount":100})");
  CHECK(missing->status == 400);
  CHECK(type_of(missing) == "/idempotency#missing-key");

  const auto twice =
      f.post(httplib::Headers{{"Idempotency-Key", R"("k-1")"}, {"Idempotency-Key", R"("k-2")"}},
             R"({"amount":100})");
  CHECK(twice->status == 400);
  CHECK(type_of(twice) == "/idempotency#several-keys");

  for (const std::string malformed : {R"("k-1)", R"("k-1", "k-2")", R"("")", R"("a b")"}) {
    CAPTURE(malformed);
    const auto refused = f.post(malformed, R"({"amount":100})");
    CHECK(refused->status == 400);
    CHECK(type_of(refused) == "/idempotency#invalid-key");
  }
  CHECK(f.runs() == 0);
  // Nothing was claimed: each key, sent well, runs.
  CHECK(f.post(R"("k-1")", R"({"amount":100})")->status == 201);
  CHECK(f.post(R"("k-2")", R"({"amount":100})")->status == 201);
}

TEMPLATE_TEST_CASE("httplib: a body that cannot be fingerprinted is 400, a long one 413",
                   "[http][httplib]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const auto not_json = f.post(R"("k-1")", "{not json");
  CHECK(not_json->status == 400);
  CHECK(type_of(not_json) == "/idempotency#invalid-request");
  const auto long_body = f.post(R"("k-2")", R"({"pad":")" + std::string(300, 'x') + "\"}");
  CHECK(long_body->status == 413);
  CHECK(type_of(long_body) == "/idempotency#body-too-large");
  CHECK(f.runs() == 0);
}

TEMPLATE_TEST_CASE("httplib: a response too large to keep reaches its caller, its repeats get 500",
                   "[http][httplib]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const auto first = f.post(R"("k-1")", R"({"size":"big"})");
  REQUIRE(first);
  CHECK(first->status == 201);
  CHECK(first->body == std::string(4096, 'x'));
  const auto repeat = f.post(R"("k-1")", R"({"size":"big"})");
  CHECK(repeat->status == 500);
  CHECK(type_of(repeat) == "/idempotency#response-too-large");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("httplib: a store that is down or full is 503 and runs nothing",
                   "[http][httplib]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  using mode = typename binding_fixture<TestType>::store_type::mode;
  f.store.fail(mode::unavailable);
  const auto down = f.post(R"("k-1")", R"({"amount":100})");
  CHECK(down->status == 503);
  CHECK(type_of(down) == "/idempotency#store-unavailable");
  f.store.fail(mode::full);
  const auto full = f.post(R"("k-1")", R"({"amount":100})");
  CHECK(full->status == 503);
  CHECK(type_of(full) == "/idempotency#store-full");
  CHECK(f.runs() == 0);
  f.store.heal();
  CHECK(f.post(R"("k-1")", R"({"amount":100})")->status == 201);
}

TEMPLATE_TEST_CASE("httplib: keys belong to their scope: another account's same key runs",
                   "[http][httplib]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  CHECK(f.post(httplib::Headers{{"Idempotency-Key", "k-1"}}, R"({"amount":1})", "a")->status ==
        201);
  const auto other = f.post(httplib::Headers{{"Idempotency-Key", "k-1"}}, R"({"amount":1})", "b");
  CHECK(other->status == 201);
  CHECK_FALSE(other->has_header("Idempotent-Replayed"));
  CHECK(f.runs() == 2);
}

TEST_CASE("httplib: the specification is served as HTML, or as JSON to who asks for it",
          "[http][httplib]") {
  binding_fixture<memory_factory> f;
  httplib::Client client("127.0.0.1", f.port);
  const auto html = client.Get("/idempotency");
  REQUIRE(html);
  CHECK(html->status == 200);
  CHECK(html->get_header_value("Content-Type").starts_with("text/html"));
  CHECK(html->body.find("id=\"request-outstanding\"") != std::string::npos);
  const auto json = client.Get("/idempotency", httplib::Headers{{"Accept", "application/json"}});
  REQUIRE(json);
  const nlohmann::json spec = nlohmann::json::parse(json->body);
  CHECK(spec.at("key_field") == "Idempotency-Key");
  CHECK(spec.at("lease_seconds") == 20);
  CHECK(spec.at("retention_seconds") == 86400);
  CHECK(spec.at("problems").size() == std::size(http::all_problem_kinds));
}
