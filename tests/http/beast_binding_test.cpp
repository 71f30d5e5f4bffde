// idem/http/beast.hpp over real sockets: a Boost.Beast server on loopback (an acceptor on port 0,
// a coroutine per connection, one io_context run by one thread), a Beast client sending real
// requests, and every verdict the draft and idem give, against the memory store and SQLite (each
// store behind faulty_store, so that the same server can also be down or full). The handler is a
// coroutine that can be held at a gate (a timer the test cancels), so that a second request
// finds the first one running while the event loop goes on serving.
#include <catch2/catch.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <idem/asio.hpp>
#include <idem/http/beast.hpp>
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/testing/faulty_store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/temporary_directory.hpp"

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
namespace http = idem::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

using message = beast_http::request<beast_http::string_body>;
using key_fields = std::vector<std::string>;

/// A gate a handler awaits until the test opens it: a timer that never expires, cancelled to
/// let the waiters through. Awaiting it suspends the handler, never the event loop.
class async_gate {
 public:
  explicit async_gate(const asio::any_io_executor& loop)
      : timer_(loop, asio::steady_timer::time_point::max()) {}

  asio::awaitable<void> pass() {
    {
      const std::lock_guard lock(mutex_);
      ++entered_;
      changed_.notify_all();
    }
    // Checked and waited on the loop's thread, where open() cancels the timer: no waiter is
    // missed between the two.
    if (!open_) {
      (void)co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
      // Let through by the caller's cancellation, not by open(): the handler fails.
      if (!open_) throw std::runtime_error("the handler was cancelled at the gate");
    }
  }
  int entered() {
    const std::lock_guard lock(mutex_);
    return entered_;
  }
  /// Waits (on the test's thread) until `count` handlers reached the gate.
  void wait_until_entered(int count = 1) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return entered_ >= count; });
  }
  void close() { open_ = false; }
  void open() {
    open_ = true;
    asio::post(timer_.get_executor(), [this] { timer_.cancel(); });
  }

 private:
  asio::steady_timer timer_;
  std::atomic<bool> open_{true};
  std::mutex mutex_;
  std::condition_variable changed_;
  int entered_ = 0;
};

/// Charges: 201 and the charge's number; a JSON body {"amount": N} is the request. A body with a
/// "hold" member waits at the gate first.
struct charge_handler {
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<async_gate> door;

  asio::awaitable<idem::http_response> operator()(const http::beast_request<>& req) const {
    const std::string& body = req->body();
    if (body.find("\"hold\"") != std::string::npos) co_await door->pass();
    const int n = ++*runs;
    if (body.find("\"decline\"") != std::string::npos) {
      co_return idem::http_response{
          402, {{"Content-Type", "application/json"}}, R"({"error":"declined"})"};
    }
    if (body.find("\"big\"") != std::string::npos) {
      co_return idem::http_response{201, {{"Content-Type", "text/plain"}}, std::string(4096, 'x')};
    }
    std::string text =
        R"({"charge":)" + std::to_string(n) + R"(,"target":")" + std::string(req->target()) + "\"}";
    co_return idem::http_response{
        201,
        {{"Content-Type", "application/json"}, {"X-Charge", std::to_string(n)}},
        std::move(text)};
  }
};

struct memory_factory {
  idem::memory_store make() { return idem::memory_store{}; }
};

struct sqlite_factory {
  idem::testing::temporary_directory directory{"idem-beast"};
  idem::sqlite_store make() { return idem::sqlite_store{directory.file("keys.db")}; }
};

using route_function = std::function<asio::awaitable<http::beast_response>(const message&)>;
using document_function = std::function<http::beast_response(const message&)>;

/// A Beast server on 127.0.0.1 (port 0), its io_context run by one thread: POST /charges and
/// GET /idempotency go to the routes given, anything else is 404.
class loopback_server {
 public:
  explicit loopback_server(asio::io_context& loop) : loop_(loop), acceptor_(loop) {}
  loopback_server(const loopback_server&) = delete;
  loopback_server& operator=(const loopback_server&) = delete;
  ~loopback_server() { stop(); }

  void start(route_function post_charges, document_function specification) {
    post_charges_ = std::move(post_charges);
    specification_ = std::move(specification);
    const tcp::endpoint where(asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(where.protocol());
    acceptor_.bind(where);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(loop_, accept(), asio::detached);
    thread_ = std::thread([this] {
      loop_.run();
      stopped_ = true;
    });
  }
  /// Closes the acceptor and lets the loop run out of work: every connection was closed by its
  /// client. A loop still busy after 10 s is stopped.
  void stop() {
    if (!thread_.joinable()) return;
    asio::post(loop_, [this] { acceptor_.close(); });
    for (int waited = 0; !stopped_ && waited < 1000; ++waited)
      std::this_thread::sleep_for(10ms);
    if (!stopped_) loop_.stop();
    thread_.join();
  }
  unsigned short port() const noexcept { return port_; }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto [error, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (error) co_return;  // closed: the test is over
      asio::co_spawn(loop_, serve(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    boost::beast::flat_buffer buffer;
    for (;;) {
      beast_http::request_parser<beast_http::string_body> parser;
      parser.body_limit(std::uint64_t{64} *
                        1024);  // the wrapper's own limit (256 bytes) is the one tested
      const auto [read_error, read] = co_await beast_http::async_read(
          socket, buffer, parser, asio::as_tuple(asio::use_awaitable));
      if (read_error) break;
      const message& request = parser.get();
      http::beast_response response = co_await route(request);
      const auto [write_error, written] =
          co_await beast_http::async_write(socket, response, asio::as_tuple(asio::use_awaitable));
      if (write_error || !response.keep_alive()) break;
    }
    boost::system::error_code ignored;
    (void)socket.shutdown(tcp::socket::shutdown_send, ignored);
  }

  asio::awaitable<http::beast_response> route(const message& request) {
    if (request.method() == beast_http::verb::post && request.target() == "/charges") {
      co_return co_await post_charges_(request);
    }
    if (request.method() == beast_http::verb::get && request.target() == "/idempotency") {
      co_return specification_(request);
    }
    http::beast_response missing{beast_http::status::not_found, request.version()};
    missing.keep_alive(request.keep_alive());
    missing.prepare_payload();
    co_return missing;
  }

  asio::io_context& loop_;
  tcp::acceptor acceptor_;
  route_function post_charges_;
  document_function specification_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  unsigned short port_ = 0;
};

/// One request on a connection of its own, with a Beast client on a loop of its own; its
/// response read whole. A server that does not answer within 10 s fails the test (throws)
/// instead of hanging it: the client's operations are asynchronous only for that deadline.
beast_http::response<beast_http::string_body> send(unsigned short port, message request) {
  asio::io_context client;
  boost::beast::tcp_stream stream(client);
  stream.expires_after(10s);
  request.keep_alive(false);
  request.prepare_payload();
  boost::beast::flat_buffer buffer;
  beast_http::response<beast_http::string_body> response;
  boost::system::error_code failure;
  const tcp::endpoint server(asio::ip::make_address("127.0.0.1"), port);
  stream.async_connect(server, [&](boost::system::error_code connected) {
    if (connected) {
      failure = connected;
      return;
    }
    beast_http::async_write(stream, request, [&](boost::system::error_code written, std::size_t) {
      if (written) {
        failure = written;
        return;
      }
      beast_http::async_read(stream, buffer, response,
                             [&](boost::system::error_code read, std::size_t) { failure = read; });
    });
  });
  client.run();
  if (failure) throw boost::system::system_error(failure, "the test's client");
  return response;
}

/// Opens a gate when it leaves its scope: a test that fails while a handler is held lets it
/// finish, so that its client's thread and the server stop.
struct opened_at_exit {
  async_gate& gate;
  ~opened_at_exit() { gate.open(); }
};

/// A request sent from a thread of its own, answered or not.
class background_request {
 public:
  template <class Send>
  explicit background_request(Send send)
      : thread_([this, send = std::move(send)] {
          try {
            answer_.emplace(send());
          } catch (...) {
            // answer() stays empty: the test's REQUIRE reports it
          }
          answered_ = true;
        }) {}
  bool answered() const noexcept { return answered_; }
  /// Waits for the answer; empty when the request failed.
  const std::optional<beast_http::response<beast_http::string_body>>& answer() {
    if (thread_.joinable()) thread_.join();
    return answer_;
  }

 private:
  std::optional<beast_http::response<beast_http::string_body>> answer_;
  std::atomic<bool> answered_{false};
  std::jthread thread_;
};

message charge_request(const key_fields& keys, const std::string& body,
                       const std::string& account) {
  message request{beast_http::verb::post, "/charges", 11};
  request.set(beast_http::field::host, "127.0.0.1");
  request.set(beast_http::field::content_type, "application/json");
  request.set("X-Account", account);
  for (const std::string& key : keys)
    request.insert("Idempotency-Key", key);  // insert: two keys are two fields
  request.body() = body;
  return request;
}

template <class Factory>
struct beast_fixture {
  using inner_store = decltype(std::declval<Factory&>().make());
  using store_type = idem::testing::faulty_store<inner_store>;
  struct policies : idem::default_policies {
    using store = store_type;
    using fingerprint = idem::canonical_json<>;
  };
  using guarded_type = idem::async_idempotent<charge_handler, policies>;

  // Declared in the order they are needed, so destroyed after what uses them.
  asio::io_context loop{1};
  asio::thread_pool blocking_calls{2};  // SQLite's store calls, never on the loop
  Factory factory;
  store_type store{factory.make()};
  charge_handler handler{.door = std::make_shared<async_gate>(loop.get_executor())};
  std::unique_ptr<guarded_type> charges;
  loopback_server server{loop};

  beast_fixture() {
    typename guarded_type::options parts;
    parts.store = store;
    parts.lease = 20s;
    parts.max_body_bytes = 256;
    parts.max_response_bytes = 1024;
    parts.store_executor = blocking_calls.get_executor();
    charges = std::make_unique<guarded_type>(loop.get_executor(), handler, std::move(parts));
    server.start(
        http::post_handler(*charges, [](const message& request) { return request["X-Account"]; }),
        http::specification_handler(http::specification::of(*charges)));
  }
  ~beast_fixture() {
    handler.door->open();
    server.stop();
  }
  beast_fixture(const beast_fixture&) = delete;
  beast_fixture& operator=(const beast_fixture&) = delete;

  beast_http::response<beast_http::string_body> post(const key_fields& keys,
                                                     const std::string& body,
                                                     const std::string& account = "acct-1") {
    return send(server.port(), charge_request(keys, body, account));
  }
  beast_http::response<beast_http::string_body> post(const std::string& key,
                                                     const std::string& body) {
    return post(key_fields{key}, body);
  }
  int runs() const { return handler.runs->load(); }
};

using answer = beast_http::response<beast_http::string_body>;

std::string field(const answer& response, std::string_view name) {
  return std::string(response[boost::beast::string_view(name.data(), name.size())]);
}

/// The problem body of a refusal, checked to be one: its media type, its members.
nlohmann::json problem_of(const answer& response) {
  CHECK(field(response, "Content-Type") == "application/problem+json");
  CHECK(field(response, "Content-Language") == "en");
  nlohmann::json body = nlohmann::json::parse(response.body());
  CHECK(body.at("status") == response.result_int());
  CHECK_FALSE(body.at("title").get<std::string>().empty());
  CHECK_FALSE(body.at("detail").get<std::string>().empty());
  return body;
}

std::string type_of(const answer& response) {
  return problem_of(response).at("type").get<std::string>();
}

}  // namespace

TEMPLATE_TEST_CASE("beast: a first request runs and its repeat replays it byte for byte",
                   "[http][beast]", memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  const answer first = f.post(R"("k-1")", R"({"amount":100})");
  CHECK(first.result_int() == 201);
  CHECK(field(first, "Content-Type") == "application/json");
  CHECK(field(first, "X-Charge") == "1");
  CHECK(first.count("Idempotent-Replayed") == 0);
  // The bare key is the same key; the fingerprint reads JSON, so spacing is no other request.
  const answer repeat = f.post("k-1", R"({ "amount": 100 })");
  CHECK(repeat.result_int() == 201);
  CHECK(repeat.body() == first.body());
  CHECK(field(repeat, "Content-Type") == "application/json");
  CHECK(field(repeat, "X-Charge") == "1");
  CHECK(field(repeat, "Idempotent-Replayed") == "true");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("beast: an error the handler answered is replayed as it was", "[http][beast]",
                   memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  CHECK(f.post(R"("k-1")", R"({"card":"decline"})").result_int() == 402);
  const answer repeat = f.post(R"("k-1")", R"({"card":"decline"})");
  CHECK(repeat.result_int() == 402);
  CHECK(repeat.body() == R"({"error":"declined"})");
  CHECK(field(repeat, "Idempotent-Replayed") == "true");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("beast: a key reused with another body is 422 key-reused", "[http][beast]",
                   memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  (void)f.post(R"("k-1")", R"({"amount":100})");
  const answer reused = f.post(R"("k-1")", R"({"amount":999})");
  CHECK(reused.result_int() == 422);
  CHECK(type_of(reused) == "/idempotency#key-reused");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("beast: a repeat while the first runs is 409 with the lease left as Retry-After",
                   "[http][beast]", memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  f.handler.door->close();
  const std::string held = R"({"amount":100,"hold":true})";
  background_request original([&] { return f.post(R"("k-1")", held); });
  const opened_at_exit opens{*f.handler.door};
  f.handler.door->wait_until_entered();
  const answer concurrent = f.post(R"("k-1")", held);
  f.handler.door->open();
  const auto& first = original.answer();
  CHECK(concurrent.result_int() == 409);
  CHECK(type_of(concurrent) == "/idempotency#request-outstanding");
  const int retry_after = std::stoi(field(concurrent, "Retry-After"));
  CHECK(retry_after > 0);
  CHECK(retry_after <= 20);  // the lease
  REQUIRE(first);
  CHECK(first->result_int() == 201);
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("beast: the event loop serves other requests while a handler awaits",
                   "[http][beast]", memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  f.handler.door->close();
  background_request original([&] { return f.post(R"("k-1")", R"({"amount":100,"hold":true})"); });
  const opened_at_exit opens{*f.handler.door};
  f.handler.door->wait_until_entered();
  // One thread runs the loop, and the first handler is suspended at the gate: another key's
  // request runs its handler to the end, and the specification is served, meanwhile.
  const answer other = f.post(key_fields{R"("k-2")"}, R"({"amount":5})", "acct-2");
  CHECK(other.result_int() == 201);
  CHECK(field(other, "X-Charge") == "1");
  const answer spec = send(f.server.port(), message{beast_http::verb::get, "/idempotency", 11});
  CHECK(spec.result_int() == 200);
  CHECK_FALSE(original.answered());
  f.handler.door->open();
  const auto& held = original.answer();
  REQUIRE(held);
  CHECK(held->result_int() == 201);
  CHECK(f.runs() == 2);
}

TEMPLATE_TEST_CASE("beast: key misuse is 400 before anything is claimed", "[http][beast]",
                   memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  const answer missing = f.post(key_fields{}, R"({"amount":100})");
  CHECK(missing.result_int() == 400);
  CHECK(type_of(missing) == "/idempotency#missing-key");

  const answer twice = f.post(key_fields{R"("k-1")", R"("k-2")"}, R"({"amount":100})");
  CHECK(twice.result_int() == 400);
  CHECK(type_of(twice) == "/idempotency#several-keys");

  for (const std::string malformed : {R"("k-1)", R"("k-1", "k-2")", R"("")", R"("a b")"}) {
    CAPTURE(malformed);
    const answer refused = f.post(malformed, R"({"amount":100})");
    CHECK(refused.result_int() == 400);
    CHECK(type_of(refused) == "/idempotency#invalid-key");
  }
  CHECK(f.runs() == 0);
  // Nothing was claimed: each key, sent well, runs.
  CHECK(f.post(R"("k-1")", R"({"amount":100})").result_int() == 201);
  CHECK(f.post(R"("k-2")", R"({"amount":100})").result_int() == 201);
}

TEMPLATE_TEST_CASE("beast: a caller out of time is 504, a deadline that is no number 400",
                   "[http][beast]", memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  message late = charge_request(key_fields{"k-1"}, R"({"amount":100})", "acct-1");
  late.set("Request-Timeout-Ms", "0");
  const answer refused = send(f.server.port(), late);
  CHECK(refused.result_int() == 504);
  CHECK(type_of(refused) == "/idempotency#deadline-exceeded");
  message wrong = charge_request(key_fields{"k-1"}, R"({"amount":100})", "acct-1");
  wrong.set("Request-Timeout-Ms", "-5");
  const answer invalid = send(f.server.port(), wrong);
  CHECK(invalid.result_int() == 400);
  CHECK(type_of(invalid) == "/idempotency#invalid-deadline");
  CHECK(f.runs() == 0);
  // Nothing was claimed: with time enough the key runs.
  message in_time = charge_request(key_fields{"k-1"}, R"({"amount":100})", "acct-1");
  in_time.set("Request-Timeout-Ms", "5000");
  CHECK(send(f.server.port(), in_time).result_int() == 201);
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("beast: a body that cannot be fingerprinted is 400, a long one 413",
                   "[http][beast]", memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  const answer not_json = f.post(R"("k-1")", "{not json");
  CHECK(not_json.result_int() == 400);
  CHECK(type_of(not_json) == "/idempotency#invalid-request");
  const answer long_body = f.post(R"("k-2")", R"({"pad":")" + std::string(300, 'x') + "\"}");
  CHECK(long_body.result_int() == 413);
  CHECK(type_of(long_body) == "/idempotency#body-too-large");
  CHECK(f.runs() == 0);
}

TEMPLATE_TEST_CASE("beast: a response too large to keep reaches its caller, its repeats get 500",
                   "[http][beast]", memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  const answer first = f.post(R"("k-1")", R"({"size":"big"})");
  CHECK(first.result_int() == 201);
  CHECK(first.body() == std::string(4096, 'x'));
  const answer repeat = f.post(R"("k-1")", R"({"size":"big"})");
  CHECK(repeat.result_int() == 500);
  CHECK(type_of(repeat) == "/idempotency#response-too-large");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("beast: a store that is down or full is 503 and runs nothing", "[http][beast]",
                   memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  using mode = typename beast_fixture<TestType>::store_type::mode;
  f.store.fail(mode::unavailable);
  const answer down = f.post(R"("k-1")", R"({"amount":100})");
  CHECK(down.result_int() == 503);
  CHECK(type_of(down) == "/idempotency#store-unavailable");
  f.store.fail(mode::full);
  const answer full = f.post(R"("k-1")", R"({"amount":100})");
  CHECK(full.result_int() == 503);
  CHECK(type_of(full) == "/idempotency#store-full");
  CHECK(f.runs() == 0);
  f.store.heal();
  CHECK(f.post(R"("k-1")", R"({"amount":100})").result_int() == 201);
}

TEMPLATE_TEST_CASE("beast: keys belong to their scope: another account's same key runs",
                   "[http][beast]", memory_factory, sqlite_factory) {
  beast_fixture<TestType> f;
  CHECK(f.post(key_fields{"k-1"}, R"({"amount":1})", "a").result_int() == 201);
  const answer other = f.post(key_fields{"k-1"}, R"({"amount":1})", "b");
  CHECK(other.result_int() == 201);
  CHECK(other.count("Idempotent-Replayed") == 0);
  CHECK(f.runs() == 2);
}

TEST_CASE("beast: the specification is served as HTML, or as JSON to who asks for it",
          "[http][beast]") {
  beast_fixture<memory_factory> f;
  const answer html = send(f.server.port(), message{beast_http::verb::get, "/idempotency", 11});
  CHECK(html.result_int() == 200);
  CHECK(field(html, "Content-Type").starts_with("text/html"));
  CHECK(html.body().find("id=\"request-outstanding\"") != std::string::npos);
  message asks_json{beast_http::verb::get, "/idempotency", 11};
  asks_json.set(beast_http::field::accept, "application/json");
  const answer json = send(f.server.port(), std::move(asks_json));
  CHECK(field(json, "Content-Type") == "application/json");
  const nlohmann::json spec = nlohmann::json::parse(json.body());
  CHECK(spec.at("key_field") == "Idempotency-Key");
  CHECK(spec.at("lease_seconds") == 20);
  CHECK(spec.at("retention_seconds") == 86400);
  CHECK(spec.at("problems").size() == std::size(http::all_problem_kinds));
}

namespace {

/// Orders: the handler's request is an idem::http_request built from Beast's, its Content-Type
/// kept and nothing else.
struct order_handler {
  asio::awaitable<idem::http_response> operator()(const idem::http_request& request) const {
    std::string text = request.method + " " + request.target + " " +
                       std::string(request.header("Content-Type")) + " " +
                       std::to_string(request.headers.size()) + " " + request.body;
    co_return idem::http_response{201, {{"Content-Type", "text/plain"}}, std::move(text)};
  }
};

}  // namespace

TEST_CASE("beast: a handler may take a request the caller builds from Beast's", "[http][beast]") {
  asio::io_context loop{1};
  idem::async_idempotent orders{loop.get_executor(), order_handler{}};
  loopback_server server{loop};
  const auto spec = http::specification::of(orders);
  server.start(
      http::post_handler(
          orders, [](const message&) { return "acct-1"; },
          [](const message& request) { return http::http_request_of(request, {"Content-Type"}); },
          spec),
      http::specification_handler(spec));
  message request = charge_request(key_fields{"k-1"}, R"({"amount":1})", "acct-1");
  request.set(beast_http::field::authorization, "Bearer secret");
  const answer first = send(server.port(), request);
  CHECK(first.result_int() == 201);
  // Only the kept field reached the handler: never the Authorization.
  CHECK(first.body() == R"(POST /charges application/json 1 {"amount":1})");
  const answer repeat = send(server.port(), request);
  CHECK(repeat.body() == first.body());
  CHECK(field(repeat, "Idempotent-Replayed") == "true");
}

TEST_CASE("beast: async_serve takes any completion token and hears its cancellation slot",
          "[http][beast]") {
  asio::io_context loop{1};
  charge_handler handler{.door = std::make_shared<async_gate>(loop.get_executor())};
  idem::async_idempotent charges{loop.get_executor(), handler};
  const auto spec = http::specification::of(charges);
  const message request = charge_request(key_fields{"k-1"}, R"({"amount":1})", "acct-1");

  // A plain callback: the exchange runs on the wrapper's executor and completes through it.
  std::optional<http::beast_response> answered;
  http::async_serve(charges, "acct-1", request, spec,
                    [&](const std::exception_ptr& error, http::beast_response response) {
                      CHECK_FALSE(error);
                      answered.emplace(std::move(response));
                    });
  loop.run();
  loop.restart();
  REQUIRE(answered);
  CHECK(answered->result_int() == 201);
  CHECK(answered->has_content_length());

  // Cancelled through the slot bound to its handler while the handler awaits: 503 cancelled,
  // and the key released, so a retry runs.
  handler.door->close();
  const message other = charge_request(key_fields{"k-2"}, R"({"amount":2,"hold":true})", "acct-1");
  asio::cancellation_signal cancel;
  std::optional<http::beast_response> cancelled;
  http::async_serve(charges, "acct-1", other, spec,
                    asio::bind_cancellation_slot(cancel.slot(), [&](const std::exception_ptr& error,
                                                                    http::beast_response response) {
                      CHECK_FALSE(error);
                      cancelled.emplace(std::move(response));
                    }));
  // The memory store answers inline: a few handlers and the call's handler is at the gate.
  for (int turn = 0; turn < 100 && handler.door->entered() == 0; ++turn)
    loop.poll();
  REQUIRE(handler.door->entered() == 1);
  CHECK_FALSE(cancelled);
  cancel.emit(asio::cancellation_type::terminal);
  loop.run();
  loop.restart();
  REQUIRE(cancelled);
  CHECK(cancelled->result_int() == 503);
  CHECK(type_of(*cancelled) == "/idempotency#cancelled");

  handler.door->open();
  std::optional<http::beast_response> retried;
  http::async_serve(charges, "acct-1", other, spec,
                    [&](const std::exception_ptr&, http::beast_response response) {
                      retried.emplace(std::move(response));
                    });
  loop.run();
  REQUIRE(retried);
  CHECK(retried->result_int() == 201);
}

TEST_CASE("beast: a request framed two ways never reaches the handler: 501, 400, 400",
          "[http][beast]") {
  asio::io_context loop{1};
  charge_handler handler{.door = std::make_shared<async_gate>(loop.get_executor())};
  idem::async_idempotent charges{loop.get_executor(), handler};
  const auto spec = http::specification::of(charges);
  // Each as Beast's parser hands it on: it passes a coding it does not know before chunked,
  // and keeps a CR a folded or smuggled value left (a loop that reads the head itself refuses
  // these earlier, with check_request_head).
  message unknown_coding = charge_request(key_fields{"k-1"}, R"({"amount":1})", "acct-1");
  unknown_coding.set(beast_http::field::transfer_encoding, "gzip, chunked");
  message smuggled_field = charge_request(key_fields{"k-2"}, R"({"amount":1})", "acct-1");
  smuggled_field.set("X-Account", "acct-1\r\nX-Account: acct-2");
  message two_hosts = charge_request(key_fields{"k-3"}, R"({"amount":1})", "acct-1");
  two_hosts.insert(beast_http::field::host, "elsewhere");
  const std::pair<const message*, unsigned> cases[] = {
      {&unknown_coding, 501}, {&smuggled_field, 400}, {&two_hosts, 400}};
  for (const auto& [request, status] : cases) {
    std::optional<http::beast_response> answered;
    http::async_serve(charges, "acct-1", *request, spec,
                      [&](const std::exception_ptr& error, http::beast_response response) {
                        CHECK_FALSE(error);
                        answered.emplace(std::move(response));
                      });
    loop.run();
    loop.restart();
    REQUIRE(answered);
    CHECK(answered->result_int() == status);
    CHECK_FALSE(answered->keep_alive());  // the rest of such a connection cannot be framed
    CHECK(field(*answered, "Content-Type") == "application/problem+json");
    CHECK(nlohmann::json::parse(answered->body()).at("type") == "about:blank");
  }
  CHECK(handler.runs->load() == 0);
}

namespace {

/// A webhook delivery of `body`, signed with `secret` at `at` (now by default).
message webhook_request(
    const std::string& body, const std::string& secret,
    std::chrono::sys_seconds at =
        std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now())) {
  message request{beast_http::verb::post, "/charges", 11};
  request.set("Webhook-Signature", http::sign_webhook(secret, at, body));
  request.set(beast_http::field::content_type, "application/json");
  request.body() = body;
  return request;
}

}  // namespace

TEST_CASE("beast: webhooks through an async_inbox, one effect per event however delivered",
          "[http][beast]") {
  asio::io_context loop{1};
  idem::async_inbox<> events{loop.get_executor()};
  http::webhook_sender provider;
  provider.name = "provider";
  provider.secrets = {"whsec_new", "whsec_old"};
  std::map<std::string, int> effects;  // on the loop's thread only
  int fail_next = 0;
  loopback_server server{loop};
  server.start(
      http::webhook_handler(events, http::webhook_receiver{provider},
                            [&](const http::webhook_event& event) -> asio::awaitable<void> {
                              if (fail_next > 0) {
                                --fail_next;
                                throw std::runtime_error("the ledger is down");
                              }
                              // Suspends, so that concurrent deliveries meet.
                              asio::steady_timer pause{co_await asio::this_coro::executor, 5ms};
                              co_await pause.async_wait(asio::use_awaitable);
                              ++effects[event.id];
                            }),
      http::specification_handler(http::specification{}));
  const std::string body = R"({"id":"evt_1","type":"charge.succeeded"})";
  const auto now =
      std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now());

  const answer first = send(server.port(), webhook_request(body, "whsec_new"));
  CHECK(first.result_int() == 200);
  CHECK(first.body() == R"({"event":"evt_1","outcome":"processed"})");
  // Redeliveries, re-signed at other times and with the old secret: duplicates.
  for (int i = 1; i <= 3; ++i) {
    const answer again = send(server.port(), webhook_request(body, "whsec_old", now - 10s * i));
    CHECK(again.result_int() == 200);
    CHECK(again.body() == R"({"event":"evt_1","outcome":"duplicate"})");
    CHECK(field(again, "Idempotent-Replayed") == "true");
  }
  // Ten deliveries of a new event at once, from ten clients.
  const std::string burst = R"({"id":"evt_2","type":"charge.succeeded"})";
  std::vector<int> statuses(10);
  {
    std::vector<std::thread> clients;
    for (std::size_t i = 0; i < statuses.size(); ++i) {
      clients.emplace_back([&, i] {
        statuses[i] = send(server.port(), webhook_request(burst, "whsec_new")).result_int();
      });
    }
    for (auto& client : clients)
      client.join();
  }
  for (const int status : statuses)
    CHECK((status == 200 || status == 409));
  // Refused before the inbox: another secret, a stale signature, no event id.
  const answer forged = send(server.port(), webhook_request(R"({"id":"evt_3"})", "whsec_x"));
  CHECK(forged.result_int() == 400);
  CHECK(forged.body().find("#invalid-signature") != std::string::npos);
  const answer stale = send(server.port(), webhook_request(R"({"id":"evt_3"})", "whsec_new",
                                                           now - std::chrono::hours{1}));
  CHECK(stale.result_int() == 400);
  CHECK(stale.body().find("#stale-webhook") != std::string::npos);
  const answer anonymous = send(server.port(), webhook_request(R"({"type":"x"})", "whsec_new"));
  CHECK(anonymous.result_int() == 400);
  CHECK(anonymous.body().find("#missing-event-id") != std::string::npos);
  // A handler that fails: 500, and the redelivery runs it.
  asio::post(loop, [&] { fail_next = 1; });
  const std::string failing = R"({"id":"evt_4"})";
  CHECK(send(server.port(), webhook_request(failing, "whsec_new")).result_int() == 500);
  CHECK(send(server.port(), webhook_request(failing, "whsec_new")).result_int() == 200);
  server.stop();
  CHECK(effects == std::map<std::string, int>{{"evt_1", 1}, {"evt_2", 1}, {"evt_4", 1}});
}
