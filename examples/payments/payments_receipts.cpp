// payments_receipts: mails one receipt per payment, however often the payment.succeeded message
// arrives. The "mailer" counts: a receipt sent is a row in payments_receipts, written in the
// transaction in which the consumer's inbox records the message id, so a receipt is there
// exactly when its message counts as handled, and the report below counts sent, duplicate and
// missing receipts exactly.
//
//   --mode consume (default)  one consumer of the group on the stream idem:outbox:payments:
//       idem::stream_consumer, its inbox (keyed by the message id) in --store, a SQLite file or
//       PostgreSQL. A delivery of a message already recorded is suppressed; each suppression is
//       appended to --suppressed-log as it happens (one write(2) of one line, kept by the
//       kernel when the process is killed with -9). --crash-after-commit kills it (SIGKILL)
//       where a consumer's death costs the most: the receipt committed, the entry not
//       acknowledged, so it is delivered again.
//   --mode report             compares payments_server's payments (--payments) with the
//       receipts (--store): receipts sent, duplicate and missing receipts, deliveries suppressed,
//       lag from commit to receipt; with --wait-s, first waits (bounded) until everything
//       committed went through (outbox relayed, stream read, nothing pending, every payment
//       receipted). Exits 0 when every payment has exactly one receipt, 1 otherwise.
#include "common.hpp"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <idem/redis_streams/consumer.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/sqlite.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char* usage = R"(payments_receipts: one receipt per payment, exactly

  --mode consume|report   consume the stream (default), or report on what was receipted
  --store SPEC            the receipts and the inbox: sqlite:PATH | postgres:CONNINFO (required)
  --redis HOST:PORT       where the stream is (default 127.0.0.1:6379)
  --group NAME            the consumer group (default receipts)
  --consumer NAME         this consumer's name in the group (default receipts-1)
  --claim-idle-ms N       a delivery pending this long (its consumer died) is claimed again;
                          also the inbox's lease (default 1000)
  --suppressed-log PATH   one line per duplicate delivery suppressed (default: none)
  --crash-after-commit P  SIGKILL itself with probability P per receipt, after it committed
                          and before XACK (default 0)
report only:
  --payments SPEC         payments_server's store, whose payments are counted: sqlite:PATH |
                          postgres:CONNINFO (required)
  --wait-s N              first wait up to N seconds for everything to drain (default 0)
)";

// --- the databases, for the tables the demo keeps itself ----------------------------------------

/// sqlite:PATH or postgres:CONNINFO.
struct database {
  bool postgres = false;
  std::string where;

  static database parse(const std::string& spec) {
    if (spec.starts_with("sqlite:") && spec.size() > 7) return {false, spec.substr(7)};
    if (spec.starts_with("postgres:")) return {true, spec.substr(9)};
    throw std::invalid_argument("wants sqlite:PATH or postgres:CONNINFO, not '" + spec + "'");
  }
};

using rows = std::vector<std::vector<std::string>>;

/// Runs `sql` (one or more statements) on a connection of its own; answers the last one's rows.
rows query(const database& db, const std::string& sql) {
  rows answer;
  if (db.postgres) {
    const std::unique_ptr<PGconn, decltype(&PQfinish)> conn(PQconnectdb(db.where.c_str()),
                                                            &PQfinish);
    if (PQstatus(conn.get()) != CONNECTION_OK) {
      throw std::runtime_error(std::string("PostgreSQL: ") + PQerrorMessage(conn.get()));
    }
    const std::unique_ptr<PGresult, decltype(&PQclear)> result(PQexec(conn.get(), sql.c_str()),
                                                               &PQclear);
    const auto status = PQresultStatus(result.get());
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
      throw std::runtime_error(std::string("PostgreSQL: ") + PQresultErrorMessage(result.get()));
    }
    for (int r = 0; r < PQntuples(result.get()); ++r) {
      auto& row = answer.emplace_back();
      for (int c = 0; c < PQnfields(result.get()); ++c)
        row.emplace_back(PQgetvalue(result.get(), r, c));
    }
    return answer;
  }
  sqlite3* handle = nullptr;
  const int opened = sqlite3_open(db.where.c_str(), &handle);
  const std::unique_ptr<sqlite3, decltype(&sqlite3_close)> conn(handle, &sqlite3_close);
  if (opened != SQLITE_OK) {
    throw std::runtime_error("SQLite: cannot open " + db.where + ": " + sqlite3_errmsg(handle));
  }
  sqlite3_busy_timeout(handle, 5000);
  char* error = nullptr;
  const auto collect = [](void* out, int columns, char** values, char**) {
    auto& row = static_cast<rows*>(out)->emplace_back();
    for (int c = 0; c < columns; ++c)
      row.emplace_back(values[c] != nullptr ? values[c] : "");
    return 0;
  };
  if (sqlite3_exec(handle, sql.c_str(), collect, &answer, &error) != SQLITE_OK) {
    const std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    throw std::runtime_error("SQLite: " + message);
  }
  return answer;
}

/// The receipts the mailer sent: one row each. No unique constraint on payment_id, on purpose:
/// a second receipt for one payment is a row too, and the report counts it.
void create_receipts_table(const database& db) {
  if (db.postgres) {
    // Consumers starting together create it once: the advisory lock serialises them.
    query(db,
          "SET client_min_messages = warning; SELECT pg_advisory_lock(7260316); CREATE TABLE IF "
          "NOT EXISTS payments_receipts "
          "(number bigserial PRIMARY KEY, payment_id text NOT NULL, message_id text NOT NULL, "
          "account text NOT NULL, amount int8 NOT NULL, lag_ns int8 NOT NULL); "
          "SELECT pg_advisory_unlock(7260316)");
  } else {
    query(db,
          "CREATE TABLE IF NOT EXISTS payments_receipts (number INTEGER PRIMARY KEY "
          "AUTOINCREMENT, payment_id TEXT NOT NULL, message_id TEXT NOT NULL, account TEXT NOT "
          "NULL, amount INTEGER NOT NULL, lag_ns INTEGER NOT NULL)");
  }
}

// --- consuming ---------------------------------------------------------------------------------

/// The mailer: a receipt is sent by writing its row in the inbox's transaction, so it commits
/// with the message id's record, or not at all. The lag is from the payment's commit (the
/// message's created_at, the server's clock) to now (this machine's: the demo runs on one).
struct mailer {
  struct receipt {
    payments::receipt_event event;
    std::string amount;
    std::string lag_ns;
  };

  static receipt of(const idem::outbox_entry& entry) {
    auto event = payments::receipt_event::parse(entry.message.payload);
    const auto lag = std::chrono::system_clock::now() - entry.created_at;
    std::string amount = std::to_string(event.amount);
    return {std::move(event), std::move(amount),
            std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(lag).count())};
  }

  void operator()(const idem::outbox_entry& entry, idem::sqlite_store::transaction& tx) const {
    const receipt r = of(entry);
    tx.exec(
        "INSERT INTO payments_receipts (payment_id, message_id, account, amount, lag_ns) "
        "VALUES (?, ?, ?, CAST(? AS INTEGER), CAST(? AS INTEGER))",
        r.event.payment_id, entry.id, r.event.account, r.amount, r.lag_ns);
  }

  void operator()(const idem::outbox_entry& entry, idem::postgres_store::transaction& tx) const {
    const receipt r = of(entry);
    tx.exec(
        "INSERT INTO payments_receipts (payment_id, message_id, account, amount, lag_ns) "
        "VALUES ($1, $2, $3, $4, $5)",
        {r.event.payment_id, entry.id, r.event.account, r.amount, r.lag_ns});
  }
};

/// Appends a line per duplicate delivery suppressed to a file (no file: counts nothing). One
/// write(2) per line, so a line written is kept when the process is killed the next instant.
/// Also --crash-after-commit: the processed event comes after the inbox committed and before
/// the XACK (idem/redis_streams/consumer_observer.hpp).
struct suppressed_log {
  int fd = -1;
  double crash_after_commit = 0;

  void on_stream_event(const idem::stream_event& event) const {
    if (event.kind == idem::stream_event_kind::processed && payments::chance(crash_after_commit)) {
      std::fprintf(stderr, "payments_receipts: crashing (--crash-after-commit) before XACK\n");
      ::kill(::getpid(), SIGKILL);
    }
    if (fd < 0 || event.kind != idem::stream_event_kind::duplicate) return;
    const std::string line =
        std::string(event.message_id) + " " + std::string(event.entry_id) + "\n";
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      std::perror("payments_receipts: --suppressed-log");
    }
  }
};

template <class Store>
struct receipt_policies : idem::stream_consumer_policies {
  using store = Store;
  using stream_observer = suppressed_log;
};

struct consume_settings {
  payments::endpoint redis;
  std::string group;
  std::string consumer;
  std::chrono::milliseconds claim_idle{1000};
  int suppressed_fd = -1;
  double crash_after_commit = 0;
};

template <class Store>
[[noreturn]] void consume(const consume_settings& config, Store store) {
  using consumer_type = idem::stream_consumer<mailer, receipt_policies<Store>>;
  typename consumer_type::options options;
  options.server.host = config.redis.host;
  options.server.port = config.redis.port;
  options.topic = std::string(payments::payments_topic);
  options.group = config.group;
  options.consumer = config.consumer;
  options.block = std::chrono::milliseconds{100};
  options.claim_idle = config.claim_idle;
  // The demo kills consumers every few seconds, each maybe holding a batch: deliveries that
  // died with their consumer count, so allow many before a message is dead-lettered.
  options.max_deliveries = 50;
  options.inbox.store = std::move(store);
  options.inbox.lease = config.claim_idle;
  options.observer = suppressed_log{config.suppressed_fd, config.crash_after_commit};
  std::unique_ptr<consumer_type> consumer;
  for (;;) {
    try {
      if (!consumer) consumer = std::make_unique<consumer_type>(mailer{}, options);
      std::printf("payments_receipts: %s consuming %s\n", config.consumer.c_str(),
                  consumer->stream().c_str());
      std::fflush(stdout);
      consumer->run(std::stop_token{});  // a token without a source: runs until killed
    } catch (const std::exception& e) {
      // Redis or the inbox's database unreachable: what was not recorded stays pending.
      std::fprintf(stderr, "payments_receipts: %s (trying again)\n", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds{200});
    }
  }
}

// --- reporting ---------------------------------------------------------------------------------

/// One Redis command (argv form); answers the reply, or throws.
std::unique_ptr<redisReply, decltype(&freeReplyObject)> redis_command(
    const payments::endpoint& redis, std::vector<std::string> args) {
  const timeval limit{2, 0};
  const std::unique_ptr<redisContext, decltype(&redisFree)> context(
      redisConnectWithTimeout(redis.host.c_str(), redis.port, limit), &redisFree);
  if (!context || context->err != 0) throw std::runtime_error("cannot reach Redis");
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(
      static_cast<redisReply*>(redisCommandArgv(context.get(), static_cast<int>(argv.size()),
                                                argv.data(), lengths.data())),
      &freeReplyObject);
  if (!reply || reply->type == REDIS_REPLY_ERROR) {
    throw std::runtime_error("Redis refused " + args.front() +
                             (reply ? ": " + std::string(reply->str, reply->len) : ""));
  }
  return reply;
}

std::string field_of(const redisReply* map, std::string_view name) {
  for (std::size_t i = 0; i + 1 < map->elements; i += 2) {
    const redisReply* key = map->element[i];
    const redisReply* value = map->element[i + 1];
    if (std::string_view(key->str, key->len) != name) continue;
    if (value->type == REDIS_REPLY_INTEGER) return std::to_string(value->integer);
    if (value->type == REDIS_REPLY_STRING || value->type == REDIS_REPLY_STATUS) {
      return {value->str, value->len};
    }
    return {};
  }
  return {};
}

struct report_settings {
  database receipts;
  database payments;
  payments::endpoint redis;
  std::string group;
  std::string suppressed_log;
  int wait_s = 0;
};

struct tally {
  std::size_t payments = 0;
  std::size_t sent = 0;
  std::size_t duplicates = 0;  // receipts beyond the first of a payment
  std::size_t missing = 0;     // payments without a receipt
  std::size_t unknown = 0;     // receipts of no committed payment
  std::vector<double> lag_ms;
};

tally count(const report_settings& config) {
  std::map<std::string, std::size_t> receipts_of;
  for (const auto& row :
       query(config.payments, config.payments.postgres ? "SELECT id FROM idem_demo_payments"
                                                       : "SELECT id FROM payments")) {
    receipts_of.emplace(row.at(0), 0);
  }
  tally t;
  t.payments = receipts_of.size();
  for (const auto& row :
       query(config.receipts, "SELECT payment_id, lag_ns FROM payments_receipts")) {
    ++t.sent;
    t.lag_ms.push_back(std::stod(row.at(1)) / 1e6);
    const auto it = receipts_of.find(row.at(0));
    if (it == receipts_of.end()) {
      ++t.unknown;
    } else if (++it->second > 1) {
      ++t.duplicates;
    }
  }
  for (const auto& [id, n] : receipts_of)
    if (n == 0) ++t.missing;
  return t;
}

/// Why the run has not drained yet (empty: it has): messages still in the outbox, entries the
/// group has not read or not acknowledged.
std::string not_drained(const report_settings& config) {
  const std::string outbox =
      config.payments.postgres ? "payments_idempotency_outbox" : "idem_outbox";
  const auto waiting =
      query(config.payments, "SELECT count(*) FROM " + outbox + " WHERE published_at IS NULL")
          .at(0)
          .at(0);
  if (waiting != "0") return waiting + " messages not relayed yet";
  const std::string stream = std::string(idem::redis_streams::default_stream_prefix) +
                             std::string(payments::payments_topic);
  const auto groups = redis_command(config.redis, {"XINFO", "GROUPS", stream});
  const auto last = redis_command(config.redis, {"XINFO", "STREAM", stream});
  for (std::size_t i = 0; i < groups->elements; ++i) {
    const redisReply* group = groups->element[i];
    if (field_of(group, "name") != config.group) continue;
    if (const auto pending = field_of(group, "pending"); pending != "0") {
      return pending + " deliveries not acknowledged yet";
    }
    if (field_of(group, "last-delivered-id") != field_of(last.get(), "last-generated-id")) {
      return "entries the group has not read yet";
    }
    return {};  // a payment still without a receipt now never gets one: it is missing
  }
  return "no group " + config.group + " yet";
}

int report(const report_settings& config) {
  if (config.wait_s > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{config.wait_s};
    std::string why;
    for (;;) {
      try {
        why = not_drained(config);
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (why.empty() || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
    if (!why.empty()) std::printf("not drained after %d s: %s\n", config.wait_s, why.c_str());
  }
  const tally t = count(config);
  std::size_t suppressed = 0;
  if (!config.suppressed_log.empty()) {
    std::ifstream log(config.suppressed_log);
    for (std::string line; std::getline(log, line);)
      ++suppressed;
  }
  std::printf("receipts sent        %zu for %zu payments\n", t.sent, t.payments);
  std::printf("duplicate receipts   %zu\n", t.duplicates);
  std::printf("missing receipts     %zu\n", t.missing);
  if (t.unknown > 0) std::printf("unknown receipts     %zu (of no committed payment)\n", t.unknown);
  std::printf("suppressed           %zu duplicate deliveries (recognised by the inbox)\n",
              suppressed);
  std::printf("relay lag p50 / p99  %.1f / %.1f ms (payment commit to receipt)\n",
              payments::percentile(t.lag_ms, 0.50), payments::percentile(t.lag_ms, 0.99));
  const bool exact = t.duplicates == 0 && t.missing == 0 && t.unknown == 0;
  std::printf("receipts verdict     %s\n",
              exact ? "EXACTLY ONCE: every payment receipted once" : "FAILED");
  return exact ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const payments::command_line args(argc, argv,
                                    {"mode", "store", "redis", "group", "consumer", "claim-idle-ms",
                                     "suppressed-log", "crash-after-commit", "payments", "wait-s"},
                                    usage);
  const std::string mode = args.text("mode", "consume");
  if (mode != "consume" && mode != "report") {
    args.fail("--mode wants consume or report, not '" + mode + "'");
  }
  database receipts;
  payments::endpoint redis;
  try {
    receipts = database::parse(args.text("store", ""));
  } catch (const std::exception& e) {
    args.fail(std::string("--store ") + e.what());
  }
  try {
    redis = payments::endpoint::parse("http://" + args.text("redis", "127.0.0.1:6379"));
  } catch (const std::exception& e) {
    args.fail(std::string("--redis: ") + e.what());
  }
  const std::string group = args.text("group", "receipts");
  const std::string log_path = args.text("suppressed-log", "");

  try {
    if (mode == "report") {
      report_settings config{receipts, {},
                             redis,    group,
                             log_path, static_cast<int>(args.integer("wait-s", 0, 0, 3600))};
      try {
        config.payments = database::parse(args.text("payments", ""));
      } catch (const std::exception& e) {
        args.fail(std::string("--payments ") + e.what());
      }
      create_receipts_table(receipts);  // a run that receipted nothing reports zero
      return report(config);
    }
    consume_settings config{
        redis,
        group,
        args.text("consumer", "receipts-1"),
        std::chrono::milliseconds{args.integer("claim-idle-ms", 1000, 10, 3'600'000)},
        -1,
        args.probability("crash-after-commit")};
    if (!log_path.empty()) {
      config.suppressed_fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
      if (config.suppressed_fd < 0) args.fail("--suppressed-log: cannot open " + log_path);
    }
    create_receipts_table(receipts);
    if (receipts.postgres) {
      idem::postgres_store::options options;
      options.conninfo = receipts.where;
      options.table = "receipts_inbox";  // the consumer's records, beside its receipts
      consume(config, idem::postgres_store{options});
    }
    consume(config, idem::sqlite_store{receipts.where});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "payments_receipts: %s\n", e.what());
    return 1;
  }
}
