// payments_server: the service under protection. A payment is charged through the processor
// exactly once per (account, Idempotency-Key), however often the request is repeated, whichever
// replica it reaches, and whenever a replica dies.
//
//   POST /v1/payments   Authorization: Bearer <A's API key>   Idempotency-Key: K
//                       {"amount","currency","source"}
//        201 {"id","amount","currency","charge_id"}; a repeat gets the stored answer byte for
//        byte (Idempotent-Replayed: true); 400 bad key or body, 401 no API key or a forged one,
//        403 an X-Account naming another account than the key's (or two), 409 in flight
//        (Retry-After: the lease left), 422 same key with another body, 502 processor failing,
//        503 store unavailable; idem's refusals are application/problem+json (RFC 9457)
//   GET  /idempotency   the keys' specification (the draft's section 2.5): HTML, or JSON
//   GET  /v1/payments/{id}   Authorization: Bearer <A's API key>   200 the payment, 404 unknown
//        (or another account's)
//   POST /v1/webhooks/processor   Webhook-Signature: t=..,v1=..   the processor's events about
//        its charges, each applied once (webhook_receiver.hpp; with --webhook-db)
//
// The account (the scope of the idempotency keys, what is charged) comes from the API key alone
// (auth.hpp); a request is authenticated, and its framing checked (idem/http/framing.hpp),
// before its body is read.
//
// How the guarantee is built (README, "The payments demo"):
//   * idem::idempotent claims (A, K) atomically in the shared store before anything happens;
//   * the charge is a recovery point (ctx.step, idem::with_next_write): its start is written
//     under the claim's fence before the processor is called, its result with the completion;
//   * the processor is called through idem::retrying under ctx.downstream_key("charge"), the
//     same key on every attempt and after every takeover, so a charge whose answer was lost is
//     answered from the processor's own record instead of being made twice;
//   * the payment row is written with an insert that ignores an existing row, so writing it
//     again after a crash changes nothing;
//   * with SQLite or PostgreSQL, the row commits with a `payment.succeeded` message in the
//     outbox (payments_relay sends it on, payments_receipts mails its receipt) and the completed
//     record, or none of them does: the handler answers idem::commit_with, whose writes
//     (tx.exec, tx.publish) idempotent makes in the transaction that completes the record once
//     the charge is made, so nothing is held while the processor answers;
//   * each record keeps its request until it completes (resumable records), so that
//     payments_reconcile finishes, with this very handler (service.hpp), a payment whose client
//     gave up while its server died.
//
// Two servers in one program, with one set of rules (service.hpp: validation, the handler's
// charge, step and downstream keys, the verdicts' answers; auth.hpp: who is calling):
//   * --async, Boost.Beast on event loops (async_server.hpp), what scripts/demo.sh runs: one
//     io_context per thread, idem::async_idempotent with its lease kept alive by the heartbeat,
//     the processor called through idem::async_retrying;
//   * without it, cpp-httplib (blocking_server.hpp): a thread per connection from a pool of 32,
//     idem::idempotent behind idem's cpp-httplib binding (idem/http/httplib.hpp: the key, the
//     verdicts' answers, harden() for the framing). A slow or idle client holds one of its threads:
//     it needs a proxy in front (docs/demo.md, "Framing and slow clients"; docs/http.md).
#include "auth.hpp"
#include "blocking_server.hpp"
#include "server_settings.hpp"
#include "service.hpp"
#include "webhook_receiver.hpp"

#include <idem/http/httplib.hpp>
#include <idem/idem.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

namespace {

constexpr const char* usage = R"(payments_server: payments charged exactly once per key

  --port N                  listen on 127.0.0.1:N (default 0: any free port, printed at start)
  --processor URL           the card network (default http://127.0.0.1:8081)
  --store SPEC              where idempotency records and payments live (default memory):
                              memory | sqlite:PATH | postgres:CONNINFO | redis:HOST:PORT
  --lease-ms N              how long a claim is honoured before another replica may take it
                            over (default 5000); calls to the processor stop at half of it
                            (--async: the lease is renewed while the call runs, and calls to
                            the processor stop after 10 s)
  --crash-after-charge P    abort() with probability P after the processor charged and before
                            the record is completed (default 0)
  --crash-when-asked P      the same, with probability P, for a request carrying the header
                            "X-Chaos-Crash: after-charge" (payments_chaos --give-up-crash sends
                            it; default 0: the header is ignored)
  --read-timeout-ms N       a connection that takes longer than N ms to send a request (its
                            head and body, from its first byte), or stays idle that long
                            before it, is closed (default 10000; the blocking server counts
                            whole seconds, rounded up, and each read alone)
  --auth-secret-file PATH   the secret the callers' API keys are checked under (default: a
                            built-in development secret, with a warning)
  --issue-key ACCOUNT       print ACCOUNT's API key under that secret and exit
  --async                   serve on event loops (Boost.Beast) instead of a thread per
                            connection (what scripts/demo.sh runs)
  --threads N               with --async: the event loops, one io_context and one thread each
                            (default: the hardware's threads)
  --max-connections N       with --async: the most connections held; one more closes the one
                            idle the longest (default 10000)
  --webhook-db PATH         receive the processor's webhooks at POST /v1/webhooks/processor,
                            their inbox and the charges' provider status in this SQLite file
                            (the replicas share it; default: not received)
  --webhook-secret-file PATH   the secret the webhooks are signed with (needed with --webhook-db)
  --crash-in-webhook P      abort() with probability P while handling a webhook, before or
                            after its effect commits (default 0)

Each payment's record keeps its request until it completes (resumable records), so that
payments_reconcile can finish a payment whose client gave up.
)";

using payments::reply;

using payments::header;
using payments::send;

using payments::caller_of;

template <class Store, class Book>
int serve(const payments::server_settings& config, Store store, Book& book) {
  const payments::api_keys keys =
      payments::keys_from(config.auth_secret_file, "payments_server", true);
  payments::processor_client processor(config.processor, config.lease / 2);
  payments::payments_endpoint<Store, Book> payments_endpoint(
      payments::payment_handler<Book>{
          payments::payment_charge{&processor, config.crash_after_charge, config.crash_when_asked},
          &book},
      payments::endpoint_options<Store, Book>(std::move(store), config.lease));

  // What a client must know of the keys (the draft, section 2.5), served at /idempotency.
  const idem::http::specification specification = idem::http::specification::of(payments_endpoint);

  httplib::Server server;
  // As docs/demo.md says, "Framing and slow clients" (blocking_server.hpp): 32 threads, strict
  // framing and the caller authenticated before the body is read.
  payments::set_up_blocking_server(server, config.read_timeout, keys);

  server.Post("/v1/payments", [&](const httplib::Request& req, httplib::Response& res) {
    auto caller = caller_of(keys, req);  // admitted: harden's check passed
    if (reply* refusal = std::get_if<reply>(&caller)) return send(res, *refusal);
    const payments::payment_post post{std::move(std::get<std::string>(caller)), req.body,
                                      header(req, "Idempotency-Key"),
                                      header(req, payments::chaos_crash_header.data())};
    if (auto refused = payments::refused_before_claim(post)) return send(res, *refused);
    book.prepare();  // book_error: 503, before the key is claimed
    const idem::http_request request = payments::payment_request(post, config.crash_when_asked);
    // The key read as the draft says, the charge made once, the answer (a replay marked, a
    // refusal as application/problem+json) written by idem's binding.
    idem::http::serve(payments_endpoint, post.account, req, request, res, specification);
  });
  server.Get("/idempotency", idem::http::specification_handler(specification));

  server.Get(
      R"(/v1/payments/([A-Za-z0-9_]+))", [&](const httplib::Request& req, httplib::Response& res) {
        const auto caller = caller_of(keys, req);
        if (const reply* refusal = std::get_if<reply>(&caller)) return send(res, *refusal);
        send(res, payments::lookup_reply(book.find(req.matches[1], std::get<std::string>(caller))));
      });

  // The processor's webhooks: signed, their effect once per event (webhook_receiver.hpp).
  std::unique_ptr<idem::inbox<payments::webhook_policies>> webhook_inbox;
  std::unique_ptr<payments::provider_status> provider;
  if (!config.webhook_db.empty()) {
    provider =
        std::make_unique<payments::provider_status>(config.webhook_db, config.crash_in_webhook);
    idem::inbox<payments::webhook_policies>::options options;
    options.store = idem::sqlite_store{config.webhook_db};
    options.lease = config.lease;
    webhook_inbox = std::make_unique<idem::inbox<payments::webhook_policies>>(std::move(options));
    server.Post(
        std::string(payments::processor_webhook_path),
        idem::http::webhook_handler(
            *webhook_inbox,
            payments::processor_webhooks(payments::secret_from_file(config.webhook_secret_file)),
            [&provider](const idem::http::webhook_event& event) { provider->apply(event); }));
  }

  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        send(res, payments::failure_reply(error));
      });

  return payments::listen_and_serve(server, "payments_server", config.port);
}

}  // namespace

int main(int argc, char** argv) {
  const bool async = payments::take_flag(argc, argv, "--async");
  const payments::command_line args(
      argc, argv,
      {"port", "processor", "store", "lease-ms", "crash-after-charge", "crash-when-asked",
       "read-timeout-ms", "threads", "max-connections", "auth-secret-file", "issue-key",
       "webhook-db", "webhook-secret-file", "crash-in-webhook"},
      usage);
  payments::server_settings config;
  config.port = static_cast<int>(args.integer("port", 0, 0, 65535));
  config.lease = std::chrono::milliseconds{args.integer("lease-ms", 5000, 10, 3'600'000)};
  config.crash_after_charge = args.probability("crash-after-charge");
  config.crash_when_asked = args.probability("crash-when-asked");
  config.read_timeout =
      std::chrono::milliseconds{args.integer("read-timeout-ms", 10000, 10, 3'600'000)};
  const long long cores = std::max(1U, std::thread::hardware_concurrency());
  config.threads = static_cast<std::size_t>(args.integer("threads", cores, 1, 1024));
  if (!async && args.text("threads", "") != "") args.fail("--threads needs --async");
  config.max_connections =
      static_cast<std::size_t>(args.integer("max-connections", 10000, 1, 1'000'000));
  if (!async && args.text("max-connections", "") != "") {
    args.fail("--max-connections needs --async");
  }
  config.auth_secret_file = args.text("auth-secret-file", "");
  config.webhook_db = args.text("webhook-db", "");
  config.webhook_secret_file = args.text("webhook-secret-file", "");
  config.crash_in_webhook = args.probability("crash-in-webhook");
  if (!config.webhook_db.empty() && config.webhook_secret_file.empty()) {
    args.fail("--webhook-db needs --webhook-secret-file");
  }
  if (const std::string account = args.text("issue-key", ""); !account.empty()) {
    try {
      const payments::api_keys keys =
          payments::keys_from(config.auth_secret_file, "payments_server", false);
      std::printf("%s\n", keys.issue(account).c_str());
      return 0;
    } catch (const std::exception& e) {
      args.fail(std::string("--issue-key: ") + e.what());
    }
  }
  const std::string spec = args.text("store", "memory");
  try {
    config.processor = payments::endpoint::parse(args.text("processor", "http://127.0.0.1:8081"));
  } catch (const std::exception& e) {
    args.fail(std::string("--processor: ") + e.what());
  }

  std::optional<int> status;
  try {
    if (async) {
      status = payments::serve_async(config, spec);
    } else {
      status = payments::with_store(
          spec, [&](auto store, auto& book) { return serve(config, std::move(store), book); });
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "payments_server: %s\n", e.what());
    return 1;
  }
  if (!status) {
    args.fail("--store wants memory, sqlite:PATH, postgres:CONNINFO or redis:HOST:PORT, not '" +
              spec + "'");
  }
  return *status;
}
