// idem_crash_consumer_worker: one stream consumer in a process of its own, for the consumer's
// crash matrix (consumer_crash_test.cpp). Its inbox is an SQLite file or a PostgreSQL store's
// table, and its effect a row of an effects table written in the transaction that records the
// message (the transactional inbox). It drains the stream: polls until nothing new came and the
// group holds nothing pending, claiming what a killed worker left once it is claim_idle old.
//
//   idem_crash_consumer_worker --store=sqlite --inbox=FILE
//                              | --store=postgres --conninfo=INFO --inbox=TABLE
//                              --redis-host=HOST --redis-port=PORT --prefix=PREFIX
//                              --topic=TOPIC --group=GROUP --consumer=NAME --claim-idle-ms=MS
//                              [--die=POINT --victim=MESSAGE_ID]
//
// The effects table is `effects` in the SQLite file, `TABLE_effects` on PostgreSQL
// (message_id, consumer). POINT names where it kills itself (SIGKILL: no unwinding, no flush,
// no rollback sent) while handling MESSAGE_ID, after printing "at MESSAGE_ID":
//   after_effect   in the handler, after its row, before the transaction commits with the record
//   after_commit   after the inbox recorded it (the processed event), before the XACK
// Without --die it drains and prints "done PROCESSED DUPLICATES CLAIMED"; a worker told to die
// that gets there prints "survived" and exits 6.
//
// Each line is one write(2) (support/worker_io.hpp), so the test sees it even when the next
// instant is the SIGKILL.
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <idem/redis_streams/consumer.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/sqlite.hpp>

#include "crash/worker_postgres.hpp"
#include "support/worker_io.hpp"

namespace {

using idem::testing::say;
using idem::testing::worker_arguments;
using idem::testing::worker_usage_error;

constexpr const char* usage =
    "idem_crash_consumer_worker --store=sqlite|postgres --inbox=FILE|TABLE [--conninfo=INFO] "
    "--redis-host=HOST --redis-port=PORT --prefix=PREFIX --topic=TOPIC --group=GROUP "
    "--consumer=NAME --claim-idle-ms=MS [--die=after_effect|after_commit --victim=ID] (see "
    "tests/crash/consumer_worker.cpp)";

std::string crash_point;
std::string crash_id;

void maybe_die(std::string_view point, std::string_view message_id) {
  if (point != crash_point || message_id != crash_id) return;
  say("at " + std::string(message_id));
  ::kill(::getpid(), SIGKILL);
}

// Counts, and the after_commit crash point: the processed event comes after the inbox recorded
// the message and before its XACK (idem/redis_streams/consumer_observer.hpp).
struct crash_observer {
  idem::counting_stream_observer totals;
  void on_stream_event(const idem::stream_event& event) {
    totals.on_stream_event(event);
    if (event.kind == idem::stream_event_kind::processed) {
      maybe_die("after_commit", event.message_id);
    }
  }
};

template <class Store>
struct worker_policies : idem::stream_consumer_policies {
  using store = Store;
  using stream_observer = crash_observer;
};

long long pending(const std::string& host, int port, const std::string& stream,
                  const std::string& group) {
  const timeval limit{2, 0};
  const std::unique_ptr<redisContext, decltype(&redisFree)> context(
      redisConnectWithTimeout(host.c_str(), port, limit), &redisFree);
  if (!context || context->err != 0) throw std::runtime_error("cannot connect to redis");
  const char* argv[] = {"XPENDING", stream.c_str(), group.c_str()};
  const std::size_t lengths[] = {8, stream.size(), group.size()};
  const std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(
      static_cast<redisReply*>(redisCommandArgv(context.get(), 3, argv, lengths)),
      &freeReplyObject);
  if (!reply || reply->type != REDIS_REPLY_ARRAY) throw std::runtime_error("XPENDING failed");
  return reply->element[0]->integer;
}

template <class Store, class Handler>
int consume(Store store, Handler handler, const worker_arguments& arguments) {
  using consumer_type = idem::stream_consumer<Handler, worker_policies<Store>>;
  const std::string& host = arguments.option("redis-host");
  const int port = static_cast<int>(arguments.number("redis-port"));
  const std::chrono::milliseconds claim_idle{arguments.number("claim-idle-ms")};
  typename consumer_type::options options;
  options.server.host = host;
  options.server.port = port;
  options.stream_prefix = arguments.option("prefix");
  options.topic = arguments.option("topic");
  options.group = arguments.option("group");
  options.consumer = arguments.option("consumer");
  options.batch = 8;
  options.claim_idle = claim_idle;
  options.inbox.store = std::move(store);
  options.inbox.lease = claim_idle;
  consumer_type consumer(std::move(handler), std::move(options));

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  while (std::chrono::steady_clock::now() < deadline) {
    if (consumer.poll_once().delivered > 0) continue;
    if (pending(host, port, consumer.stream(), arguments.option("group")) == 0) {
      if (!crash_point.empty()) {
        say("survived");
        return 6;
      }
      const auto& totals = consumer.observer().totals;
      say("done " + std::to_string(totals.processed()) + " " + std::to_string(totals.duplicates()) +
          " " + std::to_string(totals.claimed()));
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  say("timeout");
  return 5;
}

int consume_with_sqlite(const worker_arguments& arguments) {
  const std::string& path = arguments.option("inbox");
  idem::sqlite_store::options store_options;
  store_options.path = path;
  store_options.busy_timeout = std::chrono::seconds{30};
  idem::sqlite_store store(store_options);
  sqlite3* db = nullptr;
  const bool made = sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
                    sqlite3_exec(db,
                                 "CREATE TABLE IF NOT EXISTS effects (message_id TEXT NOT NULL, "
                                 "consumer TEXT NOT NULL)",
                                 nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_close(db);
  if (!made) throw std::runtime_error("cannot create the effects table in " + path);
  auto handler = [consumer = arguments.option("consumer")](const idem::outbox_entry& entry,
                                                           idem::sqlite_store::transaction& txn) {
    txn.exec("INSERT INTO effects (message_id, consumer) VALUES (?, ?)", entry.id, consumer);
    maybe_die("after_effect", entry.id);
  };
  return consume(std::move(store), std::move(handler), arguments);
}

int consume_with_postgres(const worker_arguments& arguments) {
  const std::string& table = arguments.option("inbox");
  idem::postgres_store::options store_options;
  store_options.conninfo = arguments.option("conninfo");
  store_options.table = table;
  store_options.pool_size = 2;
  idem::postgres_store store(store_options);
  const std::string effects = "\"" + table + "_effects\"";
  idem_crash::worker_postgres(store_options.conninfo)
      .exec("CREATE TABLE IF NOT EXISTS " + effects +
            " (message_id text NOT NULL, consumer text NOT NULL)");
  auto handler = [insert = "INSERT INTO " + effects + " (message_id, consumer) VALUES ($1, $2)",
                  consumer = arguments.option("consumer")](const idem::outbox_entry& entry,
                                                           idem::postgres_store::transaction& txn) {
    txn.exec(insert, {entry.id, consumer});
    maybe_die("after_effect", entry.id);
  };
  return consume(std::move(store), std::move(handler), arguments);
}

int run(const worker_arguments& arguments) {
  arguments.expect_no_words();
  const std::string point = arguments.option_or("die", "");
  if (!point.empty()) {
    if (point != "after_effect" && point != "after_commit") {
      throw worker_usage_error("--die names no crash point: '" + point + "'");
    }
    crash_point = point;
    crash_id = arguments.option("victim");
  }
  const std::string& store = arguments.option("store");
  if (store == "sqlite") return consume_with_sqlite(arguments);
  if (store == "postgres") return consume_with_postgres(arguments);
  throw worker_usage_error("--store must be sqlite or postgres, not '" + store + "'");
}

}  // namespace

int main(int argc, char** argv) {
  return idem::testing::worker_main("idem_crash_consumer_worker", usage,
                                    [&] { return run(worker_arguments(argc, argv)); });
}
