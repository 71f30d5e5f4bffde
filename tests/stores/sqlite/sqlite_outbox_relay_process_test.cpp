// The relay survives kill -9: a relay process (idem_sqlite_relay_worker) killed after its sink
// took a batch and before the relay settled it leaves the rows unpublished, and the relay that
// takes over sends them again: every message reaches the sink at least once, none is lost, and
// each key's messages come in order in each relay's deliveries.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <idem/outbox/relay.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/outbox.hpp>
#include <idem/store/sqlite/outbox_reader.hpp>

#include "support/child_process.hpp"
#include "support/outbox_test_sinks.hpp"
#include "support/temporary_directory.hpp"

using namespace std::chrono_literals;

namespace {

struct takeover_policies : idem::default_relay_policies {
  using clock = idem::manual_clock;
};

}  // namespace

TEST_CASE(
    "a relay killed after its sink took a batch and before it settled loses nothing: the "
    "next relay sends the batch again",
    "[sqlite][outbox][relay][crash]") {
  idem::testing::temporary_directory directory;
  const std::string path = directory.file("idem.sqlite3");
  { idem::sqlite_store store{path}; }
  sqlite3* app = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &app) == SQLITE_OK);
  sqlite3_busy_timeout(app, 5000);
  std::vector<std::string> written;
  REQUIRE(sqlite3_exec(app, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  for (int i = 0; i < 12; ++i) {
    const std::string key = "acct-" + std::to_string(i % 3);
    const std::string id = key + "/" + std::to_string(i);
    idem::sqlite_outbox::publish(
        app, id, {.topic = "t", .partition_key = key, .payload = std::to_string(i)});
    written.push_back(id);
  }
  REQUIRE(sqlite3_exec(app, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK);

  // The worker settles its first batch (4 rows) and is killed holding the second.
  std::vector<std::string> seen_by_consumer;
  std::vector<std::string> killed_batch;
  {
    idem::testing::child_process worker(IDEM_SQLITE_RELAY_WORKER, {"relay", path, "4"});
    for (int batch = 0; batch < 2; ++batch) {
      for (;;) {
        const std::optional<std::string> line = worker.line();
        REQUIRE(line);
        if (*line == "acknowledged") break;
        REQUIRE(line->rfind("sent ", 0) == 0);
        seen_by_consumer.push_back(line->substr(5));
        if (batch == 1) killed_batch.push_back(line->substr(5));
      }
      if (batch == 0) worker.send('y');
    }
    const int status = worker.kill_and_wait();
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  }
  REQUIRE(killed_batch.size() == 4);
  const auto unpublished = [&] {
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(app, "SELECT count(*) FROM idem_outbox WHERE published_at IS NULL",
                               -1, &statement, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(statement) == SQLITE_ROW);
    const auto count = sqlite3_column_int64(statement, 0);
    sqlite3_finalize(statement);
    return count;
  };
  CHECK(unpublished() == 8);  // the first batch settled; the killed one did not

  // The next relay: its clock a minute ahead, so the dead worker's lease (30 s) has run out.
  idem::sqlite_outbox::reader outbox(path, {.holder = "successor"});
  idem::testing::recording_sink sink;
  idem::manual_clock clock{std::chrono::system_clock::now() + 1min};
  idem::outbox_relay<idem::sqlite_outbox::reader, idem::testing::recording_sink, takeover_policies>
      relay(outbox, sink, {}, {.clock = clock});
  CHECK(relay.drain().published == 8);
  CHECK(unpublished() == 0);
  CHECK(outbox.lease().fence == 2);

  // At least once: everything written reached the sink; exactly the killed batch twice.
  std::map<std::string, int> deliveries;
  for (const std::string& id : seen_by_consumer)
    ++deliveries[id];
  for (const std::string& id : sink.ids())
    ++deliveries[id];
  for (const std::string& id : written) {
    INFO(id);
    CHECK(deliveries[id] == (std::count(killed_batch.begin(), killed_batch.end(), id) ? 2 : 1));
  }
  // In order per key, in the successor's deliveries.
  for (int key = 0; key < 3; ++key) {
    std::vector<std::string> payloads = sink.payloads_of("acct-" + std::to_string(key));
    CHECK(std::is_sorted(
        payloads.begin(), payloads.end(),
        [](const std::string& a, const std::string& b) { return std::stoi(a) < std::stoi(b); }));
  }
  sqlite3_close(app);
}
