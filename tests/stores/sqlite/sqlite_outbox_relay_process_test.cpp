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

#include "support/outbox_test_sinks.hpp"
#include "support/temporary_directory.hpp"

using namespace std::chrono_literals;

namespace {

// The relay worker with pipes to its stdin and stdout.
class relay_process {
 public:
  relay_process(const std::string& path, int batch_size) {
    int to_child[2];
    int from_child[2];
    REQUIRE(::pipe2(to_child, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(from_child, O_CLOEXEC) == 0);
    std::string program = IDEM_SQLITE_RELAY_WORKER;
    std::string mode = "relay";
    std::string db = path;
    std::string batch = std::to_string(batch_size);
    char* argv[] = {program.data(), mode.data(), db.data(), batch.data(), nullptr};
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec.
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], STDOUT_FILENO);
      ::execv(argv[0], argv);
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    input_ = to_child[1];
    output_ = from_child[0];
  }
  relay_process(const relay_process&) = delete;
  relay_process& operator=(const relay_process&) = delete;
  ~relay_process() {
    kill_and_wait();
    ::close(input_);
    ::close(output_);
  }

  // The next line printed; nothing at the end. Silence for two minutes fails the test.
  std::optional<std::string> line() {
    for (;;) {
      const auto end = buffered_.find('\n');
      if (end != std::string::npos) {
        std::string out = buffered_.substr(0, end);
        buffered_.erase(0, end + 1);
        return out;
      }
      pollfd readable{output_, POLLIN, 0};
      if (::poll(&readable, 1, 120000) == 0) FAIL("the relay worker printed nothing for 2 min");
      char chunk[4096];
      const ssize_t got = ::read(output_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return std::nullopt;
      buffered_.append(chunk, static_cast<std::size_t>(got));
    }
  }
  void send(char byte) { REQUIRE(::write(input_, &byte, 1) == 1); }
  // SIGKILL, and its wait status.
  int kill_and_wait() {
    if (pid_ <= 0) return 0;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int input_ = -1;
  int output_ = -1;
  std::string buffered_;
};

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
    relay_process worker(path, 4);
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
