// idem_stream_consumer_worker: one stream consumer in a process of its own, for the crash test
// (redis_consumer_crash_test.cpp). Its inbox is a SQLite store, and its effect a row written in
// the transaction that records the message (the transactional inbox). It drains the stream:
// polls until nothing new came and the group holds nothing pending, claiming what a killed
// worker left once it is claim_idle old.
//
//   HOST PORT PREFIX TOPIC GROUP CONSUMER DB CLAIM_IDLE_MS POINT MESSAGE_ID
//
// POINT names where it kills itself (SIGKILL, no unwinding, no flush) while handling
// MESSAGE_ID, after printing "at MESSAGE_ID":
//   none           never: drains and prints "done PROCESSED DUPLICATES CLAIMED"
//   after_effect   in the handler, after its row, before the transaction commits with the record
//   after_commit   after the inbox recorded it (the processed event), before the XACK
// Each line is one write(2), so the test sees it even when the next instant is a SIGKILL.
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include <idem/redis_streams/consumer.hpp>
#include <idem/store/sqlite.hpp>

namespace {

void say(const std::string& line) {
  const std::string text = line + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t written = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (written <= 0) std::_Exit(3);
    done += static_cast<std::size_t>(written);
  }
}

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

struct worker_policies : idem::stream_consumer_policies {
  using store = idem::sqlite_store;
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

int consume(char** argv) {
  const std::string host = argv[1];
  const int port = std::atoi(argv[2]);
  const std::string db_path = argv[7];
  const std::chrono::milliseconds claim_idle{std::atoi(argv[8])};
  crash_point = argv[9];
  crash_id = argv[10];

  idem::sqlite_store::options store_options;
  store_options.path = db_path;
  store_options.busy_timeout = std::chrono::seconds{30};
  idem::sqlite_store store(store_options);
  {
    sqlite3* db = nullptr;
    if (sqlite3_open(db_path.c_str(), &db) != SQLITE_OK ||
        sqlite3_exec(db,
                     "CREATE TABLE IF NOT EXISTS effects (message_id TEXT NOT NULL, "
                     "consumer TEXT NOT NULL)",
                     nullptr, nullptr, nullptr) != SQLITE_OK) {
      throw std::runtime_error("cannot create the effects table");
    }
    sqlite3_close(db);
  }
  const std::string consumer_name = argv[6];
  auto handler = [&](const idem::outbox_entry& entry, idem::sqlite_store::transaction& txn) {
    txn.exec("INSERT INTO effects (message_id, consumer) VALUES (?, ?)", entry.id, consumer_name);
    maybe_die("after_effect", entry.id);
  };
  using consumer_type = idem::stream_consumer<decltype(handler), worker_policies>;
  consumer_type::options options;
  options.server.host = host;
  options.server.port = port;
  options.stream_prefix = argv[3];
  options.topic = argv[4];
  options.group = argv[5];
  options.consumer = consumer_name;
  options.batch = 8;
  options.claim_idle = claim_idle;
  options.inbox.store = store;
  options.inbox.lease = claim_idle;
  consumer_type consumer(handler, std::move(options));

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  while (std::chrono::steady_clock::now() < deadline) {
    if (consumer.poll_once().delivered > 0) continue;
    if (pending(host, port, consumer.stream(), argv[5]) == 0) {
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 11) {
    std::fprintf(stderr,
                 "idem_stream_consumer_worker: bad arguments (see the top of its source)\n");
    return 2;
  }
  try {
    return consume(argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "idem_stream_consumer_worker: %s\n", error.what());
    return 1;
  }
}
