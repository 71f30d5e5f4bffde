// The relay against a real sink that goes away: idem::outbox_relay running (run(), on a thread
// of its own) from an SQLite outbox into the Redis Streams sink on a private redis-server, which
// the test kills with SIGKILL for 10 s while writers go on committing messages, then starts
// again on the same port and data. Nothing is lost, the lag the relay reports grows through
// the outage, and everything drains after it, in order per partition key.
#include <catch2/catch.hpp>

#include <idem/outbox/relay.hpp>
#include <idem/redis_streams/entry.hpp>
#include <idem/redis_streams/sink.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/outbox.hpp>
#include <idem/store/sqlite/outbox_reader.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "redis_test_support.hpp"
#include "stores/sqlite/file_connection.hpp"
#include "support/temporary_directory.hpp"

using namespace std::chrono_literals;

namespace {

struct outage_policies : idem::default_relay_policies {
  using observer = idem::counting_relay_observer;
};

// Waits (in real time, up to `limit`) until `done` holds; answers whether it did.
template <class Done>
bool wait_until(Done done, std::chrono::seconds limit = 30s) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

}  // namespace

TEST_CASE(
    "a Redis sink down for 10 s under live writers: nothing lost, the lag grows and is "
    "reported, and everything drains after, in order per key",
    "[redis][outbox][relay][outage]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  { idem::sqlite_store store{path}; }
  idem_sqlite_test::file_connection app{path};
  int written = 0;
  const auto write = [&] {
    const int n = written++;
    app.exec("BEGIN IMMEDIATE");
    idem::sqlite_outbox::publish(app.get(), "m" + std::to_string(n),
                                 {.topic = "payments",
                                  .partition_key = "acct-" + std::to_string(n % 4),
                                  .payload = std::to_string(n)});
    app.exec("COMMIT");
  };

  idem_redis_test::private_redis redis;
  idem::redis_streams::sink::options sink_options;
  sink_options.server.host = "127.0.0.1";
  sink_options.server.port = redis.port();
  sink_options.server.connect_timeout = 500ms;
  sink_options.stream_prefix = idem_redis_test::unique_prefix() + ":";
  idem::redis_streams::sink sink{sink_options};
  idem::sqlite_outbox::reader outbox{path, {.holder = "outage"}};
  idem::counting_relay_observer observer;
  idem::relay_options options;
  options.idle_wait = 50ms;
  options.unavailable_cap = 1s;
  idem::outbox_relay<idem::sqlite_outbox::reader, idem::redis_streams::sink, outage_policies> relay(
      outbox, sink, options, {.observer = observer});

  std::jthread runner([&](std::stop_token stop) { relay.run(stop); });
  for (int i = 0; i < 20; ++i)
    write();
  REQUIRE(wait_until([&] { return observer.published() == 20; }));

  // Down for 10 s while writers go on: two messages a second.
  redis.kill9();
  const auto outage_start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - outage_start < 10s) {
    write();
    std::this_thread::sleep_for(500ms);
  }
  const int during = written - 20;
  CHECK(observer.published() == 20);
  CHECK(observer.sink_unavailable() > 0);
  // The relay reports the backlog after each failed pass, its back-off at most 1 s apart.
  CHECK(wait_until([&] { return observer.waiting() == during; }, 5s));
  CHECK(observer.lag() >= 9s);  // the oldest waiting message is nearly as old as the outage
  CHECK(observer.retried() == 0);
  CHECK(observer.dead_lettered() == 0);

  redis.start();
  REQUIRE(wait_until([&] { return observer.published() == written; }));
  REQUIRE(wait_until([&] { return observer.waiting() == 0 && observer.lag() == 0ns; }));
  runner.request_stop();
  runner.join();
  CHECK(observer.max_lag() >= 9s);

  // What a consumer of the stream sees: every message, each key's in the order written (a
  // batch in flight when the server died may come twice: at least once, then deduplicated).
  const auto context = redis.connect();
  std::set<std::string> ids;
  std::map<std::string, std::vector<int>> by_key;
  for (const idem::outbox_entry& entry : idem_redis_test::read_stream(
           context.get(), sink_options.stream_prefix + "payments", "payments")) {
    if (!ids.insert(entry.id).second) continue;  // a redelivery
    by_key[entry.message.partition_key].push_back(std::stoi(entry.message.payload));
  }
  CHECK(static_cast<int>(ids.size()) == written);
  for (const auto& [key, payloads] : by_key) {
    INFO(key);
    CHECK(std::is_sorted(payloads.begin(), payloads.end()));
  }
}
