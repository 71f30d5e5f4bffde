// The payments service's core, shared by payments_server (which serves it over HTTP) and
// payments_reconcile (which finishes, without their clients, the payments the servers left
// unfinished): where payments are kept, the processor's client, the handler, and the idempotent
// wrapper's settings. Both programs build the same wrapper from these, so a payment resumed by
// the reconciler runs the very handler a server ran, with the same downstream keys.
#pragma once

#include "common.hpp"

#include <idem/http.hpp>
#include <idem/idem.hpp>
#include <idem/outbox/message.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/sqlite.hpp>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace payments {

// --- where payments are kept, beside the idempotency records ------------------------------------

/// A payment as its row keeps it.
struct payment_row {
  std::string id;
  std::string account;
  std::string body;  // the 201's body
};

/// The message a payment commits with: its id (outbox_message_id of the record's scope, key and
/// payment_succeeded) and the message.
struct payment_event {
  std::string id;
  idem::outbox_message message;
};

/// The payments table of the service. Every write is an insert that keeps an existing row, so a
/// replica that takes over a crashed request and writes the row again changes nothing. Each book
/// also has `insert(const payment_row&, const payment_event&)` (memory, Redis) or, in the store's
/// own database, a `transaction` type (the store's) and a static
/// `insert_within(transaction&, const payment_row&)` (SQLite, PostgreSQL), called through the
/// handler's template.
class payment_book {
 public:
  virtual ~payment_book() = default;
  /// The payment's body, when it exists and belongs to `account`.
  virtual std::optional<std::string> find(const std::string& id, const std::string& account) = 0;
  /// Makes the table when it is missing; called before every payment (a no-op once done).
  virtual void prepare() {}
};

struct book_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// No outbox: memory and Redis have no transaction a message could commit in with the row.
class memory_book final : public payment_book {
 public:
  void insert(const payment_row& row, const payment_event&) {
    const std::lock_guard lock(mutex_);
    rows_.try_emplace(row.id, row.account, row.body);
  }
  std::optional<std::string> find(const std::string& id, const std::string& account) override {
    const std::lock_guard lock(mutex_);
    const auto it = rows_.find(id);
    if (it == rows_.end() || it->second.first != account) return std::nullopt;
    return it->second.second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::pair<std::string, std::string>> rows_;
};

/// In the store's own SQLite file. The row is written in the record's transaction, with its
/// message (insert_within); reads go through a connection of its own.
class sqlite_book final : public payment_book {
 public:
  using transaction = idem::sqlite_store::transaction;

  explicit sqlite_book(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) fail("cannot open " + path);
    sqlite3_busy_timeout(db_, 5000);
    run("CREATE TABLE IF NOT EXISTS payments (id TEXT PRIMARY KEY, account TEXT NOT NULL, "
        "body TEXT NOT NULL)");
  }
  ~sqlite_book() override { sqlite3_close(db_); }
  sqlite_book(const sqlite_book&) = delete;
  sqlite_book& operator=(const sqlite_book&) = delete;

  /// The row's insert, in the transaction that completes the record; keeps an existing row.
  static void insert_within(transaction& tx, const payment_row& row) {
    (void)tx.exec(
        "INSERT INTO payments (id, account, body) VALUES (?1, ?2, ?3) "
        "ON CONFLICT (id) DO NOTHING",
        row.id, row.account, row.body);
  }
  std::optional<std::string> find(const std::string& id, const std::string& account) override {
    const std::lock_guard lock(mutex_);
    statement s(db_, "SELECT body FROM payments WHERE id = ? AND account = ?");
    s.bind(1, id).bind(2, account);
    const int rc = sqlite3_step(s.get());
    if (rc == SQLITE_DONE) return std::nullopt;
    if (rc != SQLITE_ROW) fail("cannot read the payment");
    return std::string(reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0)));
  }

 private:
  class statement {
   public:
    statement(sqlite3* db, const char* sql) {
      if (sqlite3_prepare_v2(db, sql, -1, &handle_, nullptr) != SQLITE_OK) {
        throw book_error(std::string("payments table: ") + sqlite3_errmsg(db));
      }
    }
    ~statement() { sqlite3_finalize(handle_); }
    statement(const statement&) = delete;
    statement& operator=(const statement&) = delete;
    statement& bind(int index, const std::string& text) {
      sqlite3_bind_text(handle_, index, text.data(), static_cast<int>(text.size()),
                        SQLITE_TRANSIENT);
      return *this;
    }
    sqlite3_stmt* get() const { return handle_; }

   private:
    sqlite3_stmt* handle_ = nullptr;
  };

  void run(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail("payments table");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw book_error(what + ": " + (db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory"));
  }

  sqlite3* db_ = nullptr;
  std::mutex mutex_;
};

/// In the store's PostgreSQL database. The row is written in the record's transaction, with its
/// message (insert_within); reads go through a connection of its own (reopened when lost).
class postgres_book final : public payment_book {
 public:
  using transaction = idem::postgres_store::transaction;

  explicit postgres_book(std::string conninfo) : conninfo_(std::move(conninfo)) {}
  ~postgres_book() override {
    if (conn_ != nullptr) PQfinish(conn_);
  }
  postgres_book(const postgres_book&) = delete;
  postgres_book& operator=(const postgres_book&) = delete;

  /// The row's insert, which keeps an existing row: $1 id, $2 account, $3 body.
  static constexpr const char* insert_sql =
      "INSERT INTO idem_demo_payments (id, account, body) VALUES ($1, $2, $3) "
      "ON CONFLICT (id) DO NOTHING";

  static void insert_within(idem::postgres_store::transaction& tx, const payment_row& row) {
    tx.exec(insert_sql, {row.id, row.account, row.body});
  }
  void prepare() override {
    const std::lock_guard lock(mutex_);
    connect();
  }
  std::optional<std::string> find(const std::string& id, const std::string& account) override {
    const std::lock_guard lock(mutex_);
    auto rows =
        query("SELECT body FROM idem_demo_payments WHERE id = $1 AND account = $2", {id, account});
    if (rows.empty()) return std::nullopt;
    return rows.front();
  }

 private:
  std::vector<std::string> query(const char* sql, const std::vector<std::string>& params) {
    connect();
    std::vector<const char*> values;
    for (const auto& p : params)
      values.push_back(p.c_str());
    PGresult* result = PQexecParams(conn_, sql, static_cast<int>(values.size()), nullptr,
                                    values.data(), nullptr, nullptr, 0);
    const auto status = PQresultStatus(result);
    std::vector<std::string> rows;
    if (status == PGRES_TUPLES_OK) {
      for (int r = 0; r < PQntuples(result); ++r)
        rows.emplace_back(PQgetvalue(result, r, 0));
    }
    const std::string error = PQresultErrorMessage(result);
    PQclear(result);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
      if (PQstatus(conn_) != CONNECTION_OK) {
        PQfinish(conn_);
        conn_ = nullptr;
      }
      throw book_error("payments table: " + error);
    }
    return rows;
  }

  void connect() {
    if (conn_ != nullptr) return;
    conn_ = PQconnectdb(conninfo_.c_str());
    // "relation ... already exists, skipping" and the like are for nobody.
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
    if (PQstatus(conn_) != CONNECTION_OK) {
      const std::string error = PQerrorMessage(conn_);
      PQfinish(conn_);
      conn_ = nullptr;
      throw book_error("payments database: " + error);
    }
    // Replicas starting together create the table once: the advisory lock serialises them.
    PQclear(PQexec(conn_, "SELECT pg_advisory_lock(7260315)"));
    PGresult* created = PQexec(conn_,
                               "CREATE TABLE IF NOT EXISTS idem_demo_payments (id text PRIMARY "
                               "KEY, account text NOT NULL, body text NOT NULL)");
    const bool ok = PQresultStatus(created) == PGRES_COMMAND_OK;
    const std::string error = PQresultErrorMessage(created);
    PQclear(created);
    PQclear(PQexec(conn_, "SELECT pg_advisory_unlock(7260315)"));
    if (!ok) throw book_error("payments table: " + error);
  }

  std::string conninfo_;
  PGconn* conn_ = nullptr;
  std::mutex mutex_;
};

/// In the store's Redis, as "idem-demo:payment:<id>" holding "<account>\n<body>", set only if
/// absent.
class redis_book final : public payment_book {
 public:
  redis_book(std::string host, int port) : host_(std::move(host)), port_(port) {}
  ~redis_book() override {
    if (conn_ != nullptr) redisFree(conn_);
  }
  redis_book(const redis_book&) = delete;
  redis_book& operator=(const redis_book&) = delete;

  void insert(const payment_row& row, const payment_event&) {
    const std::lock_guard lock(mutex_);
    const std::string key = "idem-demo:payment:" + row.id;
    const std::string value = row.account + "\n" + row.body;
    command("SET %b %b NX", key.data(), key.size(), value.data(), value.size());
  }
  std::optional<std::string> find(const std::string& id, const std::string& account) override {
    const std::lock_guard lock(mutex_);
    const std::string key = "idem-demo:payment:" + id;
    auto value = command("GET %b", key.data(), key.size());
    if (!value || !value->starts_with(account + "\n")) return std::nullopt;
    return value->substr(account.size() + 1);
  }

 private:
  template <class... Args>
  std::optional<std::string> command(const char* format, Args... args) {
    if (conn_ == nullptr) {
      conn_ = redisConnect(host_.c_str(), port_);
      if (conn_ == nullptr || conn_->err != 0) {
        const std::string error = conn_ != nullptr ? conn_->errstr : "out of memory";
        if (conn_ != nullptr) redisFree(conn_);
        conn_ = nullptr;
        throw book_error("payments in Redis: " + error);
      }
    }
    auto* reply = static_cast<redisReply*>(redisCommand(conn_, format, args...));
    if (reply == nullptr) {
      const std::string error = conn_->errstr;
      redisFree(conn_);
      conn_ = nullptr;
      throw book_error("payments in Redis: " + error);
    }
    std::optional<std::string> value;
    const bool failed = reply->type == REDIS_REPLY_ERROR;
    if (reply->type == REDIS_REPLY_STRING) value.emplace(reply->str, reply->len);
    const std::string error = failed ? std::string(reply->str, reply->len) : std::string{};
    freeReplyObject(reply);
    if (failed) throw book_error("payments in Redis: " + error);
    return value;
  }

  std::string host_;
  int port_;
  redisContext* conn_ = nullptr;
  std::mutex mutex_;
};

// --- the processor, called through idem::retrying ---------------------------------------------

struct processor_answer {
  int status = 0;
  std::string body;
  std::string retry_after;  // read by idem's HTTP classifier
};

struct processor_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct processor_policies : idem::default_policies {};

/// How both clients retry a charge: 6 attempts within `deadline`, full jitter 20–400 ms.
template <class Options>
Options processor_retry_options(std::chrono::milliseconds deadline) {
  Options options;
  options.backoff =
      idem::full_jitter{std::chrono::milliseconds{20}, std::chrono::milliseconds{400}};
  options.limits = {6, deadline};
  return options;
}

/// The charge's JSON from the processor's last answer (201 or 200), for either client; throws
/// processor_failed, saying why, when it did not charge.
template <class Outcome>
std::string charged_body(const Outcome& outcome) {
  if (outcome && (outcome.value().status == 201 || outcome.value().status == 200)) {
    return outcome.value().body;
  }
  std::string why = std::string(idem::to_string(outcome.verdict())) + " after " +
                    std::to_string(outcome.attempts()) + " attempts";
  if (outcome.has_value()) why += ", last status " + std::to_string(outcome.value().status);
  throw processor_failed("the processor did not charge: " + why);
}

class processor_client {
 public:
  processor_client(endpoint where, std::chrono::milliseconds deadline)
      : retrying_(call{std::move(where)}, options_for(deadline)) {}

  /// The processor's JSON for the charge made under `key`, made now or earlier.
  std::string charge(std::string_view key, const intent& charge) {
    return charged_body(retrying_.with_key(key, charge));
  }

 private:
  struct call {
    endpoint where;
    processor_answer operator()(const idem::attempt_context& attempt, const intent& charge) const {
      httplib::Client client(where.host, where.port);
      client.set_connection_timeout(std::chrono::milliseconds{500});
      const auto left =
          std::max<std::chrono::nanoseconds>(attempt.time_left(), std::chrono::milliseconds{1});
      client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(left));
      const httplib::Headers headers{{"Idempotency-Key", std::string(attempt.key())}};
      auto res = client.Post("/v1/charges", headers, charge.json(), "application/json");
      if (!res) throw_transport_error(res.error());
      return {res->status, res->body, res->get_header_value("Retry-After")};
    }
  };
  using retrying_type = idem::retrying<call, processor_policies>;

  static retrying_type::options options_for(std::chrono::milliseconds deadline) {
    return processor_retry_options<retrying_type::options>(deadline);
  }

  retrying_type retrying_;
};

// --- the handler -------------------------------------------------------------------------------

/// --crash-after-charge and --crash-when-asked: whether a run dies once the money moved, and
/// where: inside the charge's step, or once it returned. The charge's result is written with the
/// completion (idem::with_next_write), so at either point the takeover calls the processor again
/// under the same key and gets this very charge back. Drawn once per run, by both servers'
/// handlers.
struct crash_plan {
  bool crashes = false;
  bool inside_step = false;

  static crash_plan draw(const idem::http_request& request, double crash_after_charge,
                         double crash_when_asked) {
    const bool asked = request.header(chaos_crash_header) == "after-charge";
    const bool crashes = chance(crash_after_charge) || (asked && chance(crash_when_asked));
    return {crashes, chance(0.5)};
  }
  /// Inside the charge's step, once the processor answered.
  void after_processor() const {
    if (crashes && inside_step) crash("inside the charge's step, once the processor answered");
  }
  /// Once the step returned, before the completion.
  void after_step() const {
    if (crashes && !inside_step) crash("once the charge's step returned");
  }
  [[noreturn]] static void crash(const char* where) {
    std::fprintf(stderr, "payments_server: crashing (--crash-after-charge or asked) %s\n", where);
    std::abort();
  }
};

/// A charged payment, described: its row, its message and the 201.
struct charged {
  payment_row row;
  idem::outbox_message message;
  idem::http_response response;
};

/// The payment `ctx` handles, once the processor answered `charged_json` for it. The same in
/// the blocking and the asynchronous handler, so both write the same row, message and answer.
inline charged describe_payment(const idem::handler_context& ctx, const intent& payment,
                                const std::string& charged_json) {
  const auto charge = nlohmann::json::parse(charged_json);
  const std::string id = "pay_" + std::string(ctx.downstream_key("payment").view().substr(0, 24));
  const std::string account(ctx.scope());
  const std::string body = nlohmann::ordered_json{
      {"id", id},
      {"amount", payment.amount},
      {"currency", payment.currency},
      {"charge_id",
       charge.at("charge_id")}}.dump();
  receipt_event event{id, account, payment.amount, payment.currency,
                      charge.at("charge_id").get<std::string>()};
  return {
      {id, account, body}, event.message(), {201, {{"Content-Type", "application/json"}}, body}};
}

/// The id the payment's message is published under: tx.publish's, for the record's scope and
/// key, so that a takeover writing it again adds nothing.
inline std::string payment_event_id(const idem::handler_context& ctx) {
  return idem::outbox_message_id(ctx.scope(), ctx.key(), payment_succeeded);
}

/// What every store's blocking handler does: charge once, then describe the payment and its
/// message.
struct payment_charge {
  processor_client* processor;
  double crash_after_charge = 0;
  // --crash-when-asked: the probability of the same crash for a request carrying
  // "X-Chaos-Crash: after-charge". payments_reconcile runs this handler with both at 0.
  double crash_when_asked = 0;

  charged operator()(idem::handler_context& ctx, const idem::http_request& request) const {
    const auto [parsed, reason] = intent::parse(request.body);
    const intent& payment = parsed.value();  // validated before the call
    const crash_plan plan = crash_plan::draw(request, crash_after_charge, crash_when_asked);

    // The effect, as a recovery point: its start written under the fence (the reconciler sees
    // it), its result with the completion (idem::with_next_write): the processor deduplicates
    // by the downstream key, so a takeover that calls it again gets this charge back.
    const std::string charged_json = ctx.step(
        "charge",
        [&] {
          std::string answer = processor->charge(ctx.downstream_key("charge"), payment);
          plan.after_processor();
          return answer;
        },
        idem::with_next_write);
    plan.after_step();
    return describe_payment(ctx, payment, charged_json);
  }
};

/// A book in the store's own database (SQLite, PostgreSQL): its row is written in the
/// transaction that completes the record.
template <class Book>
concept transactional_book = requires(typename Book::transaction& tx, const payment_row& row) {
  Book::insert_within(tx, row);
};

/// The writes a charged payment commits with its record: the row and its message, in the
/// transaction that completes the record (idem::commit_with's), so that row, message and record
/// commit together or not at all. The message's id is the record's (tx.publish's), so a takeover
/// writing both again adds neither.
template <transactional_book Book>
std::function<void(typename Book::transaction&)> payment_writes(charged& done) {
  return [row = std::move(done.row),
          message = std::move(done.message)](typename Book::transaction& tx) {
    Book::insert_within(tx, row);
    (void)tx.publish(payment_succeeded, message);
  };
}

/// The handler for a book outside any transaction of the store (memory, Redis).
template <class Book>
struct payment_handler {
  payment_charge charge;
  Book* book;

  idem::http_response operator()(idem::handler_context& ctx,
                                 const idem::http_request& request) const {
    auto done = charge(ctx, request);
    book->insert(done.row, {payment_event_id(ctx), std::move(done.message)});
    return std::move(done.response);
  }
};

/// SQLite's and PostgreSQL's: the charge outside any transaction (no connection held, and on
/// SQLite no write lock, while the processor answers), then the row and its message as
/// idem::commit_with's writes, made in the transaction that completes the record.
template <transactional_book Book>
struct payment_handler<Book> {
  using answer = idem::commit_with<idem::http_response, typename Book::transaction>;

  payment_charge charge;
  Book* book;

  answer operator()(idem::handler_context& ctx, const idem::http_request& request) const {
    auto done = charge(ctx, request);
    return {std::move(done.response), payment_writes<Book>(done)};
  }
};

template <class Store>
struct server_policies : idem::default_policies {
  using store = Store;
  // {"amount":100} and { "amount": 100 } are the same request.
  using fingerprint = idem::canonical_json<>;
};

/// Resumable records: each payment's record keeps its request until it completes, so that
/// payments_reconcile can finish a payment whose client gave up. A payment's request is a small
/// JSON body and two headers; anything larger is refused (413) before it is claimed.
inline constexpr std::size_t max_kept_request_bytes = 16 * 1024;
/// The name the reconciler finds the payments wrapper by (the records keep it).
inline constexpr std::string_view endpoint_name = "payments";

/// The idempotent payments endpoint on `Store`, its payments in `Book`.
template <class Store, class Book>
using payments_endpoint = idem::idempotent<payment_handler<Book>, server_policies<Store>>;

/// The endpoint's settings, the same in every program and mode that builds it: `Options` is
/// idem::idempotent's or idem::async_idempotent's.
template <class Options, class Store>
Options endpoint_settings(Store store, std::chrono::milliseconds lease) {
  Options options;
  options.store = std::move(store);
  options.lease = lease;
  options.max_kept_request_bytes = max_kept_request_bytes;
  options.name = std::string(endpoint_name);
  // The charge is the handler's first step: the claim writes its start with the record (and
  // the kept request), so the charge writes none of its own, a commit less a payment.
  options.first_step = "charge";
  return options;
}

/// The blocking endpoint's settings.
template <class Store, class Book>
typename payments_endpoint<Store, Book>::options endpoint_options(Store store,
                                                                  std::chrono::milliseconds lease) {
  return endpoint_settings<typename payments_endpoint<Store, Book>::options>(std::move(store),
                                                                             lease);
}

/// The PostgreSQL store's settings for `conninfo`, in both servers and the other programs.
inline idem::postgres_store::options postgres_options(std::string conninfo) {
  idem::postgres_store::options options;
  options.conninfo = std::move(conninfo);
  options.pool_size = 16;
  // A replica may start before its database: requests answer 503 until it is reachable.
  options.connect_at_start = false;
  options.table = "payments_idempotency";  // beside the service's own tables
  return options;
}

/// Opens the store and the payments table that `spec` names (memory | sqlite:PATH |
/// postgres:CONNINFO | redis:HOST:PORT) and answers run(store, book); std::nullopt when `spec`
/// names none of them. Every program opening the servers' store opens it this way.
template <class Run>
std::optional<int> with_store(const std::string& spec, Run&& run) {
  if (spec == "memory") {
    memory_book book;
    return run(idem::memory_store{}, book);
  }
  if (spec.starts_with("sqlite:") && spec.size() > 7) {
    const std::string path = spec.substr(7);
    idem::sqlite_store store{path};  // creates the file and idem's tables
    sqlite_book book(path);
    return run(std::move(store), book);
  }
  if (spec.starts_with("postgres:")) {
    const idem::postgres_store::options options = postgres_options(spec.substr(9));
    postgres_book book(options.conninfo);
    return run(idem::postgres_store{options}, book);
  }
  if (spec.starts_with("redis:")) {
    const auto where = endpoint::parse("http://" + spec.substr(6));
    idem::redis_store::options options;
    options.host = where.host;
    options.port = where.port;
    options.pool_size = 16;
    redis_book book(where.host, where.port);
    return run(idem::redis_store{options}, book);
  }
  return std::nullopt;
}

// --- the HTTP rules, one piece for both servers ------------------------------------------------

/// An answer as both servers send it (cpp-httplib's and Beast's responses are made from it):
/// idem's, which the protocol layer writes outcomes into.
using reply = idem::http::reply;

/// {"error": message} under `status`.
inline reply error_reply(int status, std::string_view message) {
  return {status, {}, "application/json", error_body(message)};
}

/// An answer written to a cpp-httplib response (the blocking servers').
inline void send(httplib::Response& res, const reply& answer) {
  res.status = answer.status;
  for (const auto& [name, value] : answer.headers)
    res.set_header(name, value);
  res.set_content(answer.body, answer.content_type);
}

/// A request field of a cpp-httplib request, when it has one.
inline std::optional<std::string> header(const httplib::Request& req, const char* name) {
  if (!req.has_header(name)) return std::nullopt;
  return req.get_header_value(name);
}

/// The parts of a POST /v1/payments the service reads.
struct payment_post {
  std::string account;  // the API key's (auth.hpp): the scope of the idempotency key
  std::string body;
  std::optional<std::string> key;          // Idempotency-Key
  std::optional<std::string> chaos_crash;  // X-Chaos-Crash
};

/// What a request that names no account is answered (401): the demo's servers take the account
/// from the API key (auth.hpp) and never get here without one; the floor server of
/// scripts/serve_bench.sh (bench/serve), which reads X-Account, does.
inline constexpr std::string_view no_account = "X-Account names the account paying";
inline constexpr std::string_view lookup_needs_account = "X-Account names the account";

/// The refusal of a POST before its key is claimed (401 no account, 400 no payment in the
/// body), so that a corrected retry under the same key runs; std::nullopt to go on. The demo's
/// servers authenticated the caller before its body was read (auth.hpp).
inline std::optional<reply> refused_before_claim(const payment_post& post) {
  if (post.account.empty()) return error_reply(401, no_account);
  if (const auto [parsed, reason] = intent::parse(post.body); !parsed) {
    return error_reply(400, reason);
  }
  return std::nullopt;
}

/// The request the idempotent wrapper is given: the body, the key, and the chaos header when
/// --crash-when-asked listens for it.
inline idem::http_request payment_request(const payment_post& post, double crash_when_asked) {
  idem::http_request request{"POST", "/v1/payments", {}, post.body};
  if (post.key) request.headers.emplace_back("Idempotency-Key", *post.key);
  if (crash_when_asked > 0 && post.chaos_crash) {
    request.headers.emplace_back(chaos_crash_header, *post.chaos_crash);
  }
  return request;
}

/// The event-loop server's answer for the wrapper's outcome, as idem's protocol layer writes it:
/// the stored or fresh response (a replay marked Idempotent-Replayed: true), or the refusal its
/// verdict means as application/problem+json (400, 409 with Retry-After, 413, 422, 503). The
/// blocking server has idem's cpp-httplib binding do this and read the key.
inline reply outcome_reply(const idem::idempotent_outcome<idem::http_response>& outcome,
                           const idem::http::specification& spec) {
  reply answer;
  idem::http::write_outcome(outcome, spec, answer);
  return answer;
}

/// What a failure thrown through the wrapper or a route means: the processor failing is a 502
/// (the key was released: a retry charges), the payments table failing a 503, anything else a
/// 500 saying what.
inline reply failure_reply(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const processor_failed& e) {
    return error_reply(502, e.what());
  } catch (const book_error& e) {
    return error_reply(503, e.what());
  } catch (const std::exception& e) {
    return error_reply(500, e.what());
  } catch (...) {
    return error_reply(500, "unknown error");
  }
}

/// GET /v1/payments/{id}, its caller authenticated: 404 for a payment that is unknown or another
/// account's, else the payment.
inline reply lookup_reply(const std::optional<std::string>& found) {
  if (!found) return error_reply(404, "no such payment");
  return {200, {}, "application/json", *found};
}
/// The path of a payment: "/v1/payments/" then its id, letters, digits and '_'; the id, or
/// std::nullopt for another path.
inline std::optional<std::string> payment_id_in(std::string_view path) {
  constexpr std::string_view prefix = "/v1/payments/";
  if (!path.starts_with(prefix) || path.size() == prefix.size()) return std::nullopt;
  const std::string_view id = path.substr(prefix.size());
  for (const char c : id) {
    const bool word =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!word) return std::nullopt;
  }
  return std::string(id);
}

/// Whether the route of `method` on `path` (its query left out) needs its caller authenticated:
/// the payments' own, POST /v1/payments and GET /v1/payments/{id}. Every other request (the
/// specification, a route that does not exist) is answered without a caller.
inline bool route_needs_caller(std::string_view method, std::string_view path) {
  if (method == "POST") return path == "/v1/payments";
  if (method == "GET") return payment_id_in(path).has_value();
  return false;
}

}  // namespace payments
