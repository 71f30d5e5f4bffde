// Webhooks over real sockets between real processes: idem_webhook_receiver (a cpp-httplib server
// with webhook_handler over an inbox on a SQLite file) and idem_webhook_sender (a provider that
// signs each attempt afresh and retries on anything but a 2xx), the receiver killed with SIGKILL
// where a crash hurts most. What is counted is what the receiver's database holds: one row in
// `effects` per event that took effect, and each charge's final status.
#include <sqlite3.h>
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/child_process.hpp"
#include "support/loopback.hpp"
#include "support/temporary_directory.hpp"

namespace {

using idem::testing::child_process;

constexpr const char* secret = "whsec_test_1";

/// A port nobody listens on now, so that a receiver started again after a kill listens where
/// the sender keeps sending.
int free_port() {
  const int port = idem_test::unused_loopback_port();
  REQUIRE(port > 0);
  return port;
}

struct event {
  std::string id;
  std::string type = "charge.succeeded";
  std::string charge = "ch_1";
  int amount = 100;
  int version = 1;
};

class site {
 public:
  explicit site(std::string mode) : mode_(std::move(mode)) {}

  /// Starts the receiver (again), with `extra` arguments; waits until it listens.
  void start(std::vector<std::string> extra = {}) {
    std::vector<std::string> arguments{"--db=" + db_, "--port=" + std::to_string(port_),
                                       std::string("--secret=") + secret, "--mode=" + mode_,
                                       "--lease-ms=1000"};
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    receiver_ = std::make_unique<child_process>(IDEM_WEBHOOK_RECEIVER, arguments);
    const auto line = receiver_->line();
    REQUIRE(line);
    REQUIRE(*line == "listening " + std::to_string(port_));
  }

  child_process& receiver() { return *receiver_; }

  /// A sender process delivering `e` `copies` times from `threads` threads.
  std::unique_ptr<child_process> send(const event& e, int copies = 1, int threads = 1,
                                      int spacing_ms = 0) {
    return std::make_unique<child_process>(
        IDEM_WEBHOOK_SENDER,
        std::vector<std::string>{
            "--port=" + std::to_string(port_), std::string("--secret=") + secret, "--id=" + e.id,
            "--type=" + e.type, "--charge=" + e.charge, "--amount=" + std::to_string(e.amount),
            "--version=" + std::to_string(e.version), "--copies=" + std::to_string(copies),
            "--threads=" + std::to_string(threads), "--spacing-ms=" + std::to_string(spacing_ms)});
  }

  /// Every line a sender printed, and its exit status checked to be 0.
  static std::vector<std::string> lines_of(child_process& sender) {
    std::vector<std::string> lines;
    while (auto line = sender.line())
      lines.push_back(*line);
    const int status = sender.wait();
    CAPTURE(lines);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    return lines;
  }

  /// Rows in `effects` per event id.
  std::map<std::string, int> effects() const {
    std::map<std::string, int> counted;
    query("SELECT event, count(*) FROM effects GROUP BY event", [&](sqlite3_stmt* row) {
      counted[reinterpret_cast<const char*>(sqlite3_column_text(row, 0))] =
          sqlite3_column_int(row, 1);
    });
    return counted;
  }

  std::string status_of(const std::string& charge) const {
    std::string status;
    query("SELECT status FROM charges WHERE id = '" + charge + "'", [&](sqlite3_stmt* row) {
      status = reinterpret_cast<const char*>(sqlite3_column_text(row, 0));
    });
    return status;
  }

 private:
  template <class OnRow>
  void query(const std::string& sql, OnRow on_row) const {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(db_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* statement = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK);
    while (sqlite3_step(statement) == SQLITE_ROW)
      on_row(statement);
    sqlite3_finalize(statement);
    sqlite3_close(db);
  }

  idem::testing::temporary_directory directory_{"idem-webhooks"};
  std::string mode_;
  std::string db_ = directory_.file("receiver.sqlite3");
  int port_ = free_port();
  std::unique_ptr<child_process> receiver_;
};

int count_starting(const std::vector<std::string>& lines, const std::string& prefix) {
  int n = 0;
  for (const auto& line : lines)
    n += line.starts_with(prefix) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("webhooks between processes: one event delivered 20 times in a row, one effect") {
  for (const char* mode : {"tx", "gate"}) {
    CAPTURE(mode);
    site s(mode);
    s.start();
    const auto sender = s.send(event{"evt_seq"}, 20);
    const auto lines = site::lines_of(*sender);
    CHECK(count_starting(lines, "delivered 200 processed") == 1);
    CHECK(count_starting(lines, "delivered 200 duplicate") == 19);
    CHECK(s.effects() == std::map<std::string, int>{{"evt_seq", 1}});
    CHECK(s.status_of("ch_1") == "succeeded");
  }
}

TEST_CASE(
    "webhooks between processes: one event from three senders of seven threads at once, "
    "one effect") {
  site s("tx");
  s.start();
  std::vector<std::unique_ptr<child_process>> senders;
  for (int i = 0; i < 3; ++i)
    senders.push_back(s.send(event{"evt_burst"}, 7, 7));
  int processed = 0;
  int delivered = 0;
  for (auto& sender : senders) {
    const auto lines = site::lines_of(*sender);
    processed += count_starting(lines, "delivered 200 processed");
    delivered += count_starting(lines, "delivered 200");
  }
  CHECK(delivered == 21);
  CHECK(processed == 1);
  CHECK(s.effects() == std::map<std::string, int>{{"evt_burst", 1}});
}

TEST_CASE(
    "webhooks between processes: a redelivery re-signed seconds later is the same event, "
    "and two events with the same payload are two") {
  site s("tx");
  s.start();
  // Two copies 1.1 s apart: two timestamps, two signatures, one event.
  auto lines = site::lines_of(*s.send(event{"evt_resent"}, 2, 1, 1100));
  CHECK(lines ==
        std::vector<std::string>{"delivered 200 processed 1", "delivered 200 duplicate 1"});
  // A second charge of the same amount on the same charge object: only the id differs.
  lines = site::lines_of(*s.send(event{"evt_second"}));
  CHECK(lines == std::vector<std::string>{"delivered 200 processed 1"});
  CHECK(s.effects() == std::map<std::string, int>{{"evt_resent", 1}, {"evt_second", 1}});
}

TEST_CASE(
    "webhooks between processes: a refund delivered before its charge's success ends "
    "refunded (the version gate)") {
  site s("gate");
  s.start();
  event refunded{"evt_refund", "charge.refunded", "ch_9", 100, 2};
  event succeeded{"evt_success", "charge.succeeded", "ch_9", 100, 1};
  CHECK(site::lines_of(*s.send(refunded)) == std::vector<std::string>{"delivered 200 processed 1"});
  // The older event is received (2xx: the sender stops) but changes nothing.
  CHECK(site::lines_of(*s.send(succeeded)) ==
        std::vector<std::string>{"delivered 200 processed 1"});
  CHECK(s.status_of("ch_9") == "refunded");
  CHECK(s.effects() == std::map<std::string, int>{{"evt_refund", 1}});
  // And each again: duplicates, nothing changes.
  site::lines_of(*s.send(refunded, 2));
  site::lines_of(*s.send(succeeded, 2));
  CHECK(s.status_of("ch_9") == "refunded");
  CHECK(s.effects() == std::map<std::string, int>{{"evt_refund", 1}});
}

TEST_CASE(
    "webhooks between processes: the receiver killed between its effect and its answer, "
    "the sender's retry finds the event done") {
  struct row {
    const char* mode;
    const char* point;
    const char* answer;  // what the sender's retry is answered
  };
  // Killed after the commit: the retry is a duplicate. Killed before it: nothing took effect,
  // the claim waits out its lease (409, retried), and the retry processes the event. Killed
  // between the gate's commit and the inbox's record: the retry runs the handler again, and the
  // gate finds the version applied.
  for (const row r : {row{"tx", "before_answer", "delivered 200 duplicate"},
                      row{"tx", "in_handler", "delivered 200 processed"},
                      row{"gate", "before_answer", "delivered 200 duplicate"},
                      row{"gate", "in_handler", "delivered 200 processed"},
                      row{"gate", "after_effect", "delivered 200 processed"}}) {
    {
      const std::string mode = r.mode, point = r.point;
      CAPTURE(mode, point);
      site s(mode);
      s.start({"--die=" + point, "--victim=evt_crash"});
      const auto sender = s.send(event{"evt_crash"});
      const auto died = s.receiver().line();
      REQUIRE(died);
      CHECK(*died == "dying " + point);
      s.receiver().wait();
      // The sender's attempt was cut; it retries until a receiver answers.
      s.start();
      const auto lines = site::lines_of(*sender);
      REQUIRE(lines.size() == 1);
      CHECK(lines[0].starts_with(r.answer));
      CHECK(s.effects() == std::map<std::string, int>{{"evt_crash", 1}});
      CHECK(s.status_of("ch_1") == "succeeded");
    }
  }
}
