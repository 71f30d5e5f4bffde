// payments_relay: sends the payment.succeeded messages payments_server committed in its store's
// outbox on to a Redis stream (idem:outbox:payments), where payments_receipts reads them.
//
// idem::outbox_relay over the store's outbox reader (SQLite's or PostgreSQL's) into
// idem::redis_streams::sink: a row is marked published only after Redis answered its XADD, so a
// relay killed at any moment loses nothing; what it had sent and not yet marked is sent again by
// the next one, and the consumer drops that duplicate by message id.
//
// Runs until killed; a store or Redis that cannot be reached is waited for, not fatal.
// --crash-after-publish kills it (SIGKILL) where a relay's death costs the most: Redis has the
// batch and the outbox does not say so yet.
#include "common.hpp"

#include <idem/outbox/relay.hpp>
#include <idem/redis_streams/sink.hpp>
#include <idem/store/postgres/outbox_reader.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/outbox_reader.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <span>
#include <stop_token>
#include <string>
#include <thread>

namespace {

constexpr const char* usage = R"(payments_relay: the payments outbox, relayed to Redis Streams

  --store SPEC        payments_server's store: sqlite:PATH | postgres:CONNINFO (required)
  --table NAME        the PostgreSQL store's records table (default payments_idempotency, the
                      server's); its outbox is NAME_outbox
  --redis HOST:PORT   where the stream is written (default 127.0.0.1:6379)
  --lease-ms N        SQLite: how long the relay's lease lasts, so how soon a relay restarted
                      after kill -9 takes over (default 1000)
  --idle-ms N         how long the relay waits for new rows before it looks again (default
                      100; SQLite also wakes at the next commit)
  --crash-after-publish P
                      SIGKILL itself with probability P per batch after Redis took it and
                      before the batch is marked published (default 0)
)";

/// The Redis sink, and a death now and then right after it delivered a batch.
struct crashing_sink {
  idem::redis_streams::sink* sink;
  double crash_after_publish;

  void publish(std::span<const idem::outbox_entry> batch, std::span<idem::sink_result> results) {
    sink->publish(batch, results);
    if (payments::chance(crash_after_publish)) {
      std::fprintf(stderr, "payments_relay: crashing (--crash-after-publish) after %zu sent\n",
                   batch.size());
      ::kill(::getpid(), SIGKILL);
    }
  }
};

template <class Outbox>
[[noreturn]] void relay_forever(Outbox& outbox, crashing_sink& sink,
                                std::chrono::milliseconds idle) {
  idem::relay_options options;
  options.idle_wait = idle;
  options.unavailable_cap = std::chrono::seconds{1};
  idem::outbox_relay<Outbox, crashing_sink> relay(outbox, sink, options);
  std::printf("payments_relay: relaying\n");
  std::fflush(stdout);
  for (;;) {
    try {
      relay.run(std::stop_token{});  // a token without a source: runs until killed
    } catch (const std::exception& e) {
      // The outbox's database is unreachable or locked: nothing of the batch was settled.
      std::fprintf(stderr, "payments_relay: %s (trying again)\n", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds{200});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const payments::command_line args(
      argc, argv, {"store", "table", "redis", "lease-ms", "idle-ms", "crash-after-publish"}, usage);
  const std::string spec = args.text("store", "");
  const auto lease = std::chrono::milliseconds{args.integer("lease-ms", 1000, 100, 3'600'000)};
  const auto idle = std::chrono::milliseconds{args.integer("idle-ms", 100, 1, 60'000)};
  idem::redis_streams::sink::options sink_options;
  try {
    const auto redis = payments::endpoint::parse("http://" + args.text("redis", "127.0.0.1:6379"));
    sink_options.server.host = redis.host;
    sink_options.server.port = redis.port;
  } catch (const std::exception& e) {
    args.fail(std::string("--redis: ") + e.what());
  }

  try {
    idem::redis_streams::sink redis_sink(sink_options);
    crashing_sink sink{&redis_sink, args.probability("crash-after-publish")};
    if (spec.starts_with("sqlite:") && spec.size() > 7) {
      const std::string path = spec.substr(7);
      const idem::sqlite_store store{path};  // makes or migrates the schema the reader needs
      idem::sqlite_outbox::reader outbox(path, {.lease = lease, .holder = "payments_relay"});
      relay_forever(outbox, sink, idle);
    }
    if (spec.starts_with("postgres:")) {
      idem::postgres_outbox::reader::options options;
      options.conninfo = spec.substr(9);
      options.table = args.text("table", "payments_idempotency");
      options.connect_at_start = false;  // the database may come up after the relay
      idem::postgres_outbox::reader outbox(options);
      relay_forever(outbox, sink, idle);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "payments_relay: %s\n", e.what());
    return 1;
  }
  args.fail("--store wants sqlite:PATH or postgres:CONNINFO, not '" + spec + "'");
}
