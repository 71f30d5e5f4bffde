// payments_server: the service under protection. A payment is charged through the processor
// exactly once per (account, Idempotency-Key), however often the request is repeated, whichever
// replica it reaches, and whenever a replica dies.
//
//   POST /v1/payments   Idempotency-Key: K   X-Account: A   {"amount","currency","source"}
//        201 {"id","amount","currency","charge_id"}; a repeat gets the stored answer byte for
//        byte (Idempotent-Replayed: true); 400 bad key or body, 401 no account, 409 in flight,
//        422 same key with another body, 502 processor failing, 503 store unavailable
//   GET  /v1/payments/{id}   X-Account: A   200 the payment, 404 unknown (or another account's)
//
// How the guarantee is built (README, "The payments demo"):
//   * idem::idempotent claims (A, K) atomically in the shared store before anything happens;
//   * the charge is a recovery point (ctx.step): recorded under the claim's fence before the
//     handler goes on, so a replica that takes over after a crash never charges again;
//   * the processor is called through idem::retrying under ctx.downstream_key("charge"), the
//     same key on every attempt and after every takeover, so a charge whose answer was lost is
//     answered from the processor's own record instead of being made twice;
//   * the payment row is written with an insert that ignores an existing row, so writing it
//     again after a crash changes nothing;
//   * with SQLite or PostgreSQL, the row commits with a `payment.succeeded` message in the
//     outbox (payments_relay sends it on, payments_receipts mails its receipt): on PostgreSQL
//     through tx.publish in the transaction that completes the record, on SQLite in the row's
//     own transaction under the id tx.publish would give (docs/demo.md says why);
//   * each record keeps its request until it completes (resumable records), so that
//     payments_reconcile finishes, with this very handler (service.hpp), a payment whose client
//     gave up while its server died.
#include "service.hpp"

#include <idem/idem.hpp>

#include <chrono>
#include <exception>
#include <string>

namespace {

constexpr const char* usage = R"(payments_server: payments charged exactly once per key

  --port N                  listen on 127.0.0.1:N (default 0: any free port, printed at start)
  --processor URL           the card network (default http://127.0.0.1:8081)
  --store SPEC              where idempotency records and payments live (default memory):
                              memory | sqlite:PATH | postgres:CONNINFO | redis:HOST:PORT
  --lease-ms N              how long a claim is honoured before another replica may take it
                            over (default 5000); calls to the processor stop at half of it
  --crash-after-charge P    abort() with probability P after the processor charged and before
                            the record is completed (default 0)
  --crash-when-asked P      the same, with probability P, for a request carrying the header
                            "X-Chaos-Crash: after-charge" (payments_chaos --give-up-crash sends
                            it; default 0: the header is ignored)

Each payment's record keeps its request until it completes (resumable records), so that
payments_reconcile can finish a payment whose client gave up.
)";

using payments::book_error;
using payments::processor_client;
using payments::processor_failed;

struct settings {
  int port = 0;
  payments::endpoint processor;
  std::chrono::milliseconds lease{5000};
  double crash_after_charge = 0;
  double crash_when_asked = 0;
};

void reply_json(httplib::Response& res, int status, std::string_view message) {
  res.status = status;
  res.set_content(payments::error_body(message), "application/json");
}

template <class Store, class Book>
int serve(const settings& config, Store store, Book& book) {
  processor_client processor(config.processor, config.lease / 2);
  payments::payments_endpoint<Store, Book> payments_endpoint(
      payments::payment_handler<Book>{
          payments::payment_charge{&processor, config.crash_after_charge, config.crash_when_asked},
          &book},
      payments::endpoint_options<Store, Book>(std::move(store), config.lease));

  httplib::Server server;
  server.new_task_queue = [] { return new httplib::ThreadPool(32); };

  server.Post("/v1/payments", [&](const httplib::Request& req, httplib::Response& res) {
    const std::string account = req.get_header_value("X-Account");
    if (account.empty()) return reply_json(res, 401, "X-Account names the account paying");
    // Refused before the key is claimed, so a corrected retry under the same key runs.
    if (const auto [parsed, reason] = payments::intent::parse(req.body); !parsed) {
      return reply_json(res, 400, reason);
    }
    book.prepare();  // book_error: 503, before the key is claimed
    idem::http_request request{"POST", "/v1/payments", {}, req.body};
    if (req.has_header("Idempotency-Key")) {
      request.headers.emplace_back("Idempotency-Key", req.get_header_value("Idempotency-Key"));
    }
    if (config.crash_when_asked > 0 && req.has_header(payments::chaos_crash_header.data())) {
      request.headers.emplace_back(payments::chaos_crash_header,
                                   req.get_header_value(payments::chaos_crash_header.data()));
    }
    try {
      const auto outcome = payments_endpoint(account, request);
      if (!outcome) return reply_json(res, outcome.http_status(), outcome.message());
      res.status = outcome->status;
      for (const auto& [name, value] : outcome->headers)
        if (name != "Content-Type") res.set_header(name, value);
      if (outcome.verdict() == idem::verdict::replayed) {
        res.set_header("Idempotent-Replayed", "true");
      }
      res.set_content(outcome->body, std::string(outcome->header("Content-Type")));
    } catch (const processor_failed& e) {
      reply_json(res, 502, e.what());  // the key was released: a retry charges
    } catch (const book_error& e) {
      reply_json(res, 503, e.what());
    }
  });

  server.Get(R"(/v1/payments/([A-Za-z0-9_]+))",
             [&](const httplib::Request& req, httplib::Response& res) {
               const std::string account = req.get_header_value("X-Account");
               if (account.empty()) return reply_json(res, 401, "X-Account names the account");
               const auto found = book.find(req.matches[1], account);
               if (!found) return reply_json(res, 404, "no such payment");
               res.set_content(*found, "application/json");
             });

  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const book_error& e) {
          return reply_json(res, 503, e.what());
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        reply_json(res, 500, what);
      });

  return payments::listen_and_serve(server, "payments_server", config.port);
}

}  // namespace

int main(int argc, char** argv) {
  const payments::command_line args(
      argc, argv,
      {"port", "processor", "store", "lease-ms", "crash-after-charge", "crash-when-asked"}, usage);
  settings config;
  config.port = static_cast<int>(args.integer("port", 0, 0, 65535));
  config.lease = std::chrono::milliseconds{args.integer("lease-ms", 5000, 10, 3'600'000)};
  config.crash_after_charge = args.probability("crash-after-charge");
  config.crash_when_asked = args.probability("crash-when-asked");
  const std::string spec = args.text("store", "memory");
  try {
    config.processor = payments::endpoint::parse(args.text("processor", "http://127.0.0.1:8081"));
  } catch (const std::exception& e) {
    args.fail(std::string("--processor: ") + e.what());
  }

  std::optional<int> status;
  try {
    status = payments::with_store(
        spec, [&](auto store, auto& book) { return serve(config, std::move(store), book); });
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
