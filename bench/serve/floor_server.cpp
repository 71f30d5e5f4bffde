// payments_floor_server: the payments demo's server (examples/payments/payments_server.cpp) with
// its idempotency written by hand (recipe.hpp) instead of idem's, so that scripts/serve_bench.sh
// shows what idem's server costs above the floor a user could write. The same HTTP API for what
// payments_chaos --mode bench sends, the same servers and the same processor call:
//
//   POST /v1/payments   Authorization: Bearer KEY   Idempotency-Key: K
//   {"amount","currency","source"}
//        201 {"id","amount","currency","charge_id"}; a repeat gets the stored answer
//        (Idempotent-Replayed: true); 400 bad key or body, 401 no or a forged API key, 403 an
//        X-Account naming another account, 409 in flight (Retry-After: 1), 422 same key with
//        another body, 502 processor failing, 503 store failing; the refusals of the key are
//        application/problem+json under idem's types
//   GET  /v1/payments/{id}   Authorization: Bearer KEY   200 the payment, 404 unknown (or
//        another account's)
//
// The caller is authenticated as the demo's servers do it (auth.hpp: the account is the API
// key's, an HMAC under --auth-secret-file), before the body is read and again for the account.
//
//   * by default, cpp-httplib, a thread per connection from a pool of 32, as the demo's;
//   * --async, the demo's Boost.Beast server on event loops (async_server.hpp), one io_context
//     per thread (floor_server_async.cpp).
// The processor is called through the demo's clients (service.hpp's processor_client,
// async_processor_client.hpp), retries and all. The stores: sqlite:PATH (sqlite_records.hpp),
// postgres:CONNINFO (postgres_records.hpp, async_postgres_records.hpp), each with the pools and
// threads the demo's idem server gives its store. Nothing here survives a crash mid-request as
// idem's server does (recipe.hpp says what the floor leaves out): it is a benchmark's floor.
#include "auth.hpp"
#include "blocking_server.hpp"
#include "floor_settings.hpp"
#include "postgres_records.hpp"
#include "recipe.hpp"
#include "server_settings.hpp"
#include "service.hpp"
#include "sqlite_records.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <variant>

namespace floor_server {
namespace {

constexpr const char* usage = R"(payments_floor_server: the payments API, idempotent by hand

  --port N              listen on 127.0.0.1:N (default 0: any free port, printed at start)
  --processor URL       the card network (default http://127.0.0.1:8081)
  --store SPEC          sqlite:PATH | postgres:CONNINFO
  --read-timeout-ms N   a connection that takes longer than N ms to send a request, or stays
                        idle that long between two, is closed (default 10000)
  --async               serve on event loops (Boost.Beast) instead of a thread per connection
  --threads N           with --async: the event loops (default: the hardware's threads)
  --auth-secret-file F  the secret the callers' API keys are checked under (default: the demo's
                        built-in development secret, as payments_server's)
)";

using payments::header;
using payments::send;

using payments::caller_of;

/// One POST /v1/payments, by the recipe.
template <class Records>
reply pay(Records& records, payments::processor_client& processor,
          const payments::payment_post& post) {
  if (auto refused = payments::refused_before_claim(post)) return *refused;
  const key_read key = read_key(post.key);
  if (key.refusal) return *key.refusal;
  const std::string hash = request_hash(post.body);
  if (const auto existing = records.claim(post.account, key.key, hash)) {
    return *existing ? answer_for(**existing, hash) : answer_released();
  }
  const payments::intent payment = *payments::intent::parse(post.body).first;
  const derived_keys keys = derive(post.account, key.key);
  std::string charged;
  try {
    charged = processor.charge(keys.charge_key, payment);
  } catch (...) {
    // The charge failed (502): a retry must run it, so the claim goes. Failing to release
    // leaves the key answering 409; the processor's failure is the one reported.
    try {
      records.release(post.account, key.key);
    } catch (const std::exception&) {
    }
    throw;
  }
  const completion done = describe(keys, post.account, payment, charged);
  records.complete(post.account, key.key, done);
  return {201, {}, "application/json", done.body};
}

template <class Records>
int serve(const settings& config, Records& records) {
  const payments::api_keys keys = payments::keys_from(config.auth_secret_file, program, true);
  payments::processor_client processor(config.processor, blocking_processor_deadline);

  httplib::Server server;
  // As payments_server (blocking_server.hpp): 32 threads, strict framing and the caller
  // authenticated before the body is read; serving, not idempotency, so the same.
  payments::set_up_blocking_server(server, config.read_timeout, keys);
  server.Post("/v1/payments", [&](const httplib::Request& req, httplib::Response& res) {
    auto caller = caller_of(keys, req);  // admitted: checked again for the account
    if (const reply* refusal = std::get_if<reply>(&caller)) return send(res, *refusal);
    const payments::payment_post post{std::move(std::get<std::string>(caller)), req.body,
                                      header(req, "Idempotency-Key"), std::nullopt};
    send(res, pay(records, processor, post));
  });
  server.Get(R"(/v1/payments/([A-Za-z0-9_]+))", [&](const httplib::Request& req,
                                                    httplib::Response& res) {
    const auto caller = caller_of(keys, req);
    if (const reply* refusal = std::get_if<reply>(&caller)) return send(res, *refusal);
    send(res, payments::lookup_reply(records.find(req.matches[1], std::get<std::string>(caller))));
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        send(res, payments::failure_reply(error));
      });
  return payments::listen_and_serve(server, program, config.port);
}

}  // namespace
}  // namespace floor_server

int main(int argc, char** argv) {
  using namespace floor_server;
  const bool async = payments::take_flag(argc, argv, "--async");
  const payments::command_line args(
      argc, argv, {"port", "processor", "store", "read-timeout-ms", "threads", "auth-secret-file"},
      usage);
  settings config;
  config.port = static_cast<int>(args.integer("port", 0, 0, 65535));
  config.read_timeout =
      std::chrono::milliseconds{args.integer("read-timeout-ms", 10000, 10, 3'600'000)};
  const long long cores = std::max(1U, std::thread::hardware_concurrency());
  config.threads = static_cast<std::size_t>(args.integer("threads", cores, 1, 1024));
  if (!async && args.text("threads", "") != "") args.fail("--threads needs --async");
  const std::string spec = args.text("store", "");
  config.auth_secret_file = args.text("auth-secret-file", "");
  try {
    config.processor = payments::endpoint::parse(args.text("processor", "http://127.0.0.1:8081"));
  } catch (const std::exception& e) {
    args.fail(std::string("--processor: ") + e.what());
  }

  std::optional<int> status;
  try {
    if (async) {
      status = serve_async(config, spec);
    } else if (spec.starts_with("sqlite:") && spec.size() > 7) {
      sqlite_records records(spec.substr(7));
      status = serve(config, records);
    } else if (spec.starts_with("postgres:")) {
      postgres_records records(spec.substr(9));
      status = serve(config, records);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
  if (!status) args.fail("--store wants sqlite:PATH or postgres:CONNINFO, not '" + spec + "'");
  return *status;
}
