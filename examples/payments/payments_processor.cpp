// payments_processor: stands in for a card network. It charges at most once per Idempotency-Key,
// using idem itself on its own SQLite file: the charge row and the idempotency record commit in
// one transaction, so a charge exists exactly when its record says so, across crashes.
//
//   POST /v1/charges   Idempotency-Key: K   {"amount": int, "currency": str, "source": str}
//        201 {"charge_id": str, "amount": int, "currency": str, "source": str}; a repeat of K
//        gets the same answer byte for byte (Idempotent-Replayed: true)
//   GET  /v1/charges   every charge with its key, as a JSON array
//   GET  /v1/charges/{key}   200 the charge made under Idempotency-Key `key`, 404 none: what
//        payments_reconcile asks the ledger for a charge a server started and never recorded
//
// Faults on demand: --fail-rate P answers 503 before charging, --latency-ms N delays every
// charge (so that callers' timeouts and in-flight duplicates happen).
//
// Webhooks (--webhook-targets-file, webhook_sender.hpp): each charge's `charge.succeeded` (and,
// for --refund-rate of them, `charge.refunded`) is written in the charge's transaction and
// delivered, signed under --webhook-secret-file, to the servers, at least once, sometimes twice
// on purpose, sometimes out of order: the merchant's second at-least-once path.
//   GET  /v1/webhooks   the sender's counts (events, delivered, pending, attempts, ...)
//
// Each request holds one of --threads threads (cpp-httplib's pool) for its whole time, the
// latency's sleep included: --threads bounds the charges in flight, and so the processor's rate
// at about threads / latency. Each charge commits twice (the claim, then the charge with its
// record), and with --synchronous full (the default) each commit waits for an fsync, one commit
// at a time: on a disk with slow fsync that, not the threads, bounds the rate.
// scripts/serve_bench.sh gives it more threads than the servers it drives have requests in
// flight, and --synchronous normal, so that it is not what their benchmark measures.
#include "common.hpp"
#include "webhook_sender.hpp"

#include <idem/http/httplib.hpp>
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace {

constexpr const char* usage = R"(payments_processor: a card network that charges once per key

  --port N          listen on 127.0.0.1:N (default 0: any free port, printed at start)
  --db PATH         the SQLite file of charges and idempotency records (default processor.sqlite3)
  --fail-rate P     answer 503 with probability P before charging (default 0)
  --latency-ms N    wait N ms before answering each charge (default 0)
  --threads N       requests served at once, each on a thread of its own (default 16)
  --synchronous M   full (default): each commit waits for its fsync, the charge survives power
                    loss; normal: no fsync at commit (WAL), a crash of the process still loses
                    nothing
  --webhook-targets-file PATH   send each charge's webhooks to the servers whose base URLs
                    the file lists, one a line (read until it lists some; default: no webhooks)
  --webhook-secret-file PATH    the secret webhooks are signed with (needed with targets)
  --refund-rate P   refund a charge with probability P: a charge.refunded event beside its
                    charge.succeeded (default 0.2)
  --webhook-duplicate-rate P    deliver an event that landed once more with probability P
                    (default 0.1)
)";

// The network's merchants are one scope here: the demo has a single merchant, the server.
constexpr std::string_view merchant = "merchant";

struct processor_policies : idem::default_policies {
  using store = idem::sqlite_store;
  using fingerprint = idem::canonical_json<>;
};

// Runs inside the transaction that completes the key's record: the charge row commits with it,
// and so do its webhooks when they are sent (refunded with probability refund_rate).
struct charge_handler {
  bool webhooks = false;
  double refund_rate = 0;

  idem::http_response operator()(idem::handler_context& ctx, const idem::http_request& request,
                                 idem::sqlite_store::transaction& tx) const {
    const auto [parsed, reason] = payments::intent::parse(request.body);
    const payments::intent& charge = parsed.value();  // validated before the call
    const std::string charge_id =
        "ch_" + std::string(ctx.downstream_key("charge_id").view().substr(0, 24));
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    tx.exec(
        "INSERT INTO charges (charge_id, idempotency_key, amount, currency, source, created_ns) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        charge_id, ctx.key(), charge.amount, charge.currency, charge.source,
        static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
    if (webhooks) payments::write_charge_events(tx, charge_id, charge.amount, refund_rate);
    const nlohmann::ordered_json body{{"charge_id", charge_id},
                                      {"amount", charge.amount},
                                      {"currency", charge.currency},
                                      {"source", charge.source}};
    return {201, {{"Content-Type", "application/json"}}, body.dump()};
  }
};

// The ledger's reader for GET /v1/charges and GET /v1/charges/{key}: its own read-only connection
// (WAL readers never wait for the writer).
class ledger {
 public:
  explicit ledger(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      throw std::runtime_error("cannot open " + path + ": " + sqlite3_errmsg(db_));
    }
    sqlite3_busy_timeout(db_, 5000);
  }
  ~ledger() { sqlite3_close(db_); }
  ledger(const ledger&) = delete;
  ledger& operator=(const ledger&) = delete;

  std::string all_charges() { return select(columns + " FROM charges ORDER BY created_ns", {}); }

  /// The charge made under `key`, when there is one.
  std::optional<std::string> charge(const std::string& key) {
    auto rows =
        nlohmann::json::parse(select(columns + " FROM charges WHERE idempotency_key = ?", key));
    if (rows.empty()) return std::nullopt;
    return rows.front().dump();
  }

 private:
  // A charge's columns, its state as the network ends it last: refunded when it has a refund
  // event.
  inline static const std::string columns =
      "SELECT charge_id, idempotency_key, amount, currency, source, CASE WHEN EXISTS (SELECT 1 "
      "FROM webhooks w WHERE w.charge_id = charges.charge_id AND w.type = 'charge.refunded') "
      "THEN 'refunded' ELSE 'succeeded' END";

  // The rows `sql` selects (its one parameter bound to `key` when given), as a JSON array.
  std::string select(const std::string& sql, std::optional<std::string> key) {
    const std::lock_guard lock(mutex_);
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
      throw std::runtime_error(std::string("cannot read the ledger: ") + sqlite3_errmsg(db_));
    }
    if (key) {
      sqlite3_bind_text(statement, 1, key->data(), static_cast<int>(key->size()), SQLITE_TRANSIENT);
    }
    auto text = [&](int column) {
      const auto* bytes = sqlite3_column_text(statement, column);
      return bytes == nullptr ? std::string{} : std::string(reinterpret_cast<const char*>(bytes));
    };
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    int rc = SQLITE_ROW;
    while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
      rows.push_back(nlohmann::ordered_json{{"charge_id", text(0)},
                                            {"key", text(1)},
                                            {"amount", sqlite3_column_int64(statement, 2)},
                                            {"currency", text(3)},
                                            {"source", text(4)},
                                            {"status", text(5)}});
    }
    sqlite3_finalize(statement);
    if (rc != SQLITE_DONE) {
      throw std::runtime_error(std::string("cannot read the ledger: ") + sqlite3_errmsg(db_));
    }
    return rows.dump();
  }

  sqlite3* db_ = nullptr;
  std::mutex mutex_;
};

void create_charges_table(const std::string& path) {
  sqlite3* db = nullptr;
  const int opened = sqlite3_open(path.c_str(), &db);
  char* error = nullptr;
  const std::string sql = std::string(
                              "PRAGMA busy_timeout = 5000;"
                              "CREATE TABLE IF NOT EXISTS charges ("
                              " charge_id TEXT PRIMARY KEY,"
                              " idempotency_key TEXT NOT NULL UNIQUE,"
                              " amount INTEGER NOT NULL,"
                              " currency TEXT NOT NULL,"
                              " source TEXT NOT NULL,"
                              " created_ns INTEGER NOT NULL);") +
                          payments::webhooks_table_sql;
  const int rc =
      opened != SQLITE_OK ? opened : sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  const std::string reason = error != nullptr ? error : (db ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_free(error);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error("cannot create the charges table: " + reason);
}

}  // namespace

int main(int argc, char** argv) {
  const payments::command_line args(
      argc, argv,
      {"port", "db", "fail-rate", "latency-ms", "threads", "synchronous", "webhook-targets-file",
       "webhook-secret-file", "refund-rate", "webhook-duplicate-rate"},
      usage);
  const int port = static_cast<int>(args.integer("port", 0, 0, 65535));
  const std::string path = args.text("db", "processor.sqlite3");
  const double fail_rate = args.probability("fail-rate");
  const auto latency = std::chrono::milliseconds{args.integer("latency-ms", 0, 0, 60'000)};
  const auto threads = static_cast<std::size_t>(args.integer("threads", 16, 1, 4096));
  const std::string synchronous = args.text("synchronous", "full");
  if (synchronous != "full" && synchronous != "normal") {
    args.fail("--synchronous wants full or normal, not '" + synchronous + "'");
  }

  payments::webhook_settings webhooks;
  webhooks.targets_file = args.text("webhook-targets-file", "");
  webhooks.refund_rate = args.probability("refund-rate", 0.2);
  webhooks.duplicate_rate = args.probability("webhook-duplicate-rate", 0.1);
  const bool sends_webhooks = !webhooks.targets_file.empty();

  using charges_type = idem::idempotent<charge_handler, processor_policies>;
  std::unique_ptr<charges_type> charges;
  std::unique_ptr<ledger> book;
  std::unique_ptr<payments::webhook_sender> sender;
  try {
    if (sends_webhooks) {
      const std::string secret_file = args.text("webhook-secret-file", "");
      if (secret_file.empty()) args.fail("--webhook-targets-file needs --webhook-secret-file");
      webhooks.secret = payments::secret_from_file(secret_file);
    }
    charges_type::options options;
    idem::sqlite_store::options store_options;
    store_options.path = path;
    store_options.synchronous = synchronous == "full"
                                    ? idem::sqlite_store::synchronous_mode::full
                                    : idem::sqlite_store::synchronous_mode::normal;
    options.store = idem::sqlite_store{store_options};  // creates the file and idem's tables
    create_charges_table(path);
    charges = std::make_unique<charges_type>(charge_handler{sends_webhooks, webhooks.refund_rate},
                                             std::move(options));
    book = std::make_unique<ledger>(path);
    if (sends_webhooks) sender = std::make_unique<payments::webhook_sender>(path, webhooks);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "payments_processor: %s\n", e.what());
    return 1;
  }

  const idem::http::specification specification = idem::http::specification::of(*charges);

  httplib::Server server;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Strict framing, before any body is read (idem/http/httplib.hpp, docs/http.md): a charge's
  // body is a few dozen bytes, far under the 64 KiB it allows.
  idem::http::harden(server);

  server.Post("/v1/charges", [&](const httplib::Request& req, httplib::Response& res) {
    if (latency.count() > 0) std::this_thread::sleep_for(latency);
    if (payments::chance(fail_rate)) {
      res.status = 503;
      res.set_content(payments::error_body("the network is busy; nothing was charged"),
                      "application/json");
      return;
    }
    if (const auto [parsed, reason] = payments::intent::parse(req.body); !parsed) {
      res.status = 400;  // answered before the key is claimed: a corrected retry is charged
      res.set_content(payments::error_body(reason), "application/json");
      return;
    }
    const idem::http_request request{"POST", "/v1/charges", {}, req.body};
    idem::http::serve(*charges, merchant, req, request, res, specification);
  });
  server.Get("/idempotency", idem::http::specification_handler(specification));

  server.Get("/v1/charges", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(book->all_charges(), "application/json");
  });

  server.Get("/v1/webhooks", [&](const httplib::Request&, httplib::Response& res) {
    if (!sender) {
      res.status = 404;
      res.set_content(payments::error_body("this processor sends no webhooks"), "application/json");
      return;
    }
    res.set_content(sender->status(), "application/json");
  });

  server.Get(R"(/v1/charges/([!-~]+))", [&](const httplib::Request& req, httplib::Response& res) {
    const auto found = book->charge(req.matches[1]);
    if (!found) {
      res.status = 404;
      res.set_content(payments::error_body("no charge under this key"), "application/json");
      return;
    }
    res.set_content(*found, "application/json");
  });

  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content(payments::error_body(what), "application/json");
      });

  // With the system's largest backlog: with hundreds of callers connecting at once,
  // cpp-httplib's 5 would have the kernel drop their SYNs, each then waiting a second to try again.
  return payments::listen_and_serve(server, "payments_processor", port);
}
