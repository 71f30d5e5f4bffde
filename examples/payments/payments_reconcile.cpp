// payments_reconcile: finishes the payments the servers left unfinished, and reports what it
// cannot finish. Run after (or beside) the servers, on their store:
//
//   * a payment whose server died mid-handler, and whose client never came back, is stuck: in
//     progress past its lease. Its record kept its request (resumable records, service.hpp), so
//     idem::reconciler takes it over (fenced, as a retry would) and runs the servers' own handler
//     on it: the charge step resumes from its recovery point, or calls the processor again under
//     the same downstream key and gets the charge it made back; the payment row and its message
//     are written, the record completes, and a client that retries later gets the replay;
//   * a payment it cannot finish (its handler fails again, its record is unreadable) is compared
//     with the processor's ledger by the charge's downstream key (GET /v1/charges/{key}): landed,
//     not_landed, or unknown when the ledger does not answer. Nothing is ever corrected at the
//     processor: a refund is for a person.
//
// It writes the report as JSON Lines (--report), prints the summary table, and exits with the
// summary's exit status: 0 nothing needs a person, 1 a person is needed (landed or unknown rows),
// 2 the pass did not finish (the store failed), or bad options.
#include "service.hpp"

#include <idem/idem.hpp>
#include <idem/reconciler.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <thread>

namespace {

constexpr const char* usage = R"(payments_reconcile: finish abandoned payments, report the rest

  --store SPEC          the servers' store: sqlite:PATH | postgres:CONNINFO | redis:HOST:PORT
  --processor URL       the card network, called to finish a payment and asked for its ledger
                        (default http://127.0.0.1:8081)
  --lease-ms N          the servers' --lease-ms (default 5000): a resumed payment's own lease;
                        calls to the processor stop at half of it
  --wait-ms N           wait N ms before the pass, so that the claims of servers that just died
                        are past their lease (default 0)
  --report PATH         the report, one JSON line per discrepancy (default
                        payments-reconcile.jsonl)

Exit status: 0 nothing needs a person, 1 a person is needed (landed or unknown rows), 2 the pass
did not finish (the store failed) or bad options.
)";

struct settings {
  payments::endpoint processor;
  std::chrono::milliseconds lease{5000};
  std::chrono::milliseconds wait{0};
  std::string report_path;
};

/// The reconciler's lookup: the processor's ledger, by the charge's downstream key (the
/// Idempotency-Key the server sent). 200 landed, 404 not landed; anything else throws, which the
/// reconciler reports as unknown.
idem::landing ask_ledger(const payments::endpoint& processor, const idem::lookup_query& query) {
  if (query.step != "charge") {
    throw std::runtime_error("the ledger knows charges only, not step '" + std::string(query.step) +
                             "'");
  }
  httplib::Client client(processor.host, processor.port);
  client.set_connection_timeout(std::chrono::seconds{1});
  client.set_read_timeout(std::chrono::seconds{5});
  const auto res = client.Get("/v1/charges/" + std::string(query.reference));
  if (!res) payments::throw_transport_error(res.error());
  if (res->status == 200) return idem::landing::landed;
  if (res->status == 404) return idem::landing::not_landed;
  throw std::runtime_error("the ledger answered " + std::to_string(res->status));
}

template <class Store>
struct reconcile_policies : idem::default_reconciler_policies {
  using store = Store;
  // The servers' clock and response codec (server_policies keeps idem's defaults).
  using clock = typename payments::server_policies<Store>::clock;
  using response_codec = typename payments::server_policies<Store>::response_codec;
};

template <class Store, class Book>
int reconcile(const settings& config, Store store, Book& book) {
  book.prepare();  // the payments table, as a server makes it before its first payment
  payments::processor_client processor(config.processor, config.lease / 2);
  // The servers' wrapper, with their handler, minus their crashes.
  payments::payments_endpoint<Store, Book> endpoint(
      payments::payment_handler<Book>{payments::payment_charge{&processor, 0, 0}, &book},
      payments::endpoint_options<Store, Book>(store, config.lease));

  idem::reconciler<reconcile_policies<Store>> reconciler(std::move(store));
  reconciler.template resume_with<idem::http_request>(endpoint);
  reconciler.lookup_with(
      [&](const idem::lookup_query& query) { return ask_ledger(config.processor, query); });

  if (config.wait.count() > 0) std::this_thread::sleep_for(config.wait);
  const idem::reconcile_report report = reconciler.run_once();

  std::ofstream out(config.report_path, std::ios::trunc);
  out << idem::json_lines(report.rows);
  out.close();
  if (!out) {
    std::fprintf(stderr, "payments_reconcile: cannot write the report to %s\n",
                 config.report_path.c_str());
    return 2;
  }
  std::printf("%s", idem::summary_table(report.summary).c_str());
  std::printf("report               %zu row(s) in %s\n", report.rows.size(),
              config.report_path.c_str());
  return report.summary.exit_status();
}

}  // namespace

int main(int argc, char** argv) {
  const payments::command_line args(argc, argv,
                                    {"store", "processor", "lease-ms", "wait-ms", "report"}, usage);
  settings config;
  config.lease = std::chrono::milliseconds{args.integer("lease-ms", 5000, 10, 3'600'000)};
  config.wait = std::chrono::milliseconds{args.integer("wait-ms", 0, 0, 3'600'000)};
  config.report_path = args.text("report", "payments-reconcile.jsonl");
  const std::string spec = args.text("store", "");
  try {
    config.processor = payments::endpoint::parse(args.text("processor", "http://127.0.0.1:8081"));
  } catch (const std::exception& e) {
    args.fail(std::string("--processor: ") + e.what());
  }
  // A memory store dies with its server: there is nothing another process could reconcile.
  if (spec.empty() || spec == "memory") {
    args.fail("--store wants the servers' sqlite:PATH, postgres:CONNINFO or redis:HOST:PORT");
  }

  std::optional<int> status;
  try {
    status = payments::with_store(
        spec, [&](auto store, auto& book) { return reconcile(config, std::move(store), book); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "payments_reconcile: %s\n", e.what());
    return 2;
  }
  if (!status) {
    args.fail("--store wants sqlite:PATH, postgres:CONNINFO or redis:HOST:PORT, not '" + spec +
              "'");
  }
  return *status;
}
