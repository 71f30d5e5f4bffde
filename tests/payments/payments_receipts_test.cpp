// The receipts report's counting, which the demo's verdict rests on: run against tables written
// here (the server's payments, the mailer's receipts), it must see a duplicate and a missing
// receipt, say so, and fail; and pass only when each payment has exactly one receipt.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include "support/child_process.hpp"
#include "support/temporary_directory.hpp"

#include <fstream>
#include <string>
#include <vector>

namespace {

const std::string bin_dir = IDEM_PAYMENTS_BIN_DIR;

void execute(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  INFO((error != nullptr ? error : ""));
  sqlite3_free(error);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

struct report {
  int status = -1;
  std::vector<std::string> lines;

  bool says(const std::string& line) const {
    for (const auto& l : lines)
      if (l.starts_with(line)) return true;
    return false;
  }
};

report run_report(const std::string& dir) {
  idem::testing::child_process child(
      bin_dir + "/payments_receipts",
      {"--mode", "report", "--store", "sqlite:" + dir + "/receipts.sqlite3", "--payments",
       "sqlite:" + dir + "/payments.sqlite3", "--suppressed-log", dir + "/suppressed.log"});
  report r;
  while (auto line = child.line())
    r.lines.push_back(*line);
  const int status = child.wait();
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void receipt(const std::string& dir, const std::string& payment_id) {
  execute(dir + "/receipts.sqlite3",
          "INSERT INTO payments_receipts (payment_id, message_id, account, amount, lag_ns) "
          "VALUES ('" +
              payment_id + "', 'm-" + payment_id + "', 'acct_1', 100, 2000000)");
}

}  // namespace

TEST_CASE("the receipts report counts duplicate and missing receipts, and only one each passes",
          "[payments]") {
  idem::testing::temporary_directory temp{"idem-receipts"};
  const std::string dir = temp.path().string();
  // payments_server's table, as it makes it.
  execute(dir + "/payments.sqlite3",
          "CREATE TABLE payments (id TEXT PRIMARY KEY, account TEXT NOT NULL, body TEXT NOT "
          "NULL); INSERT INTO payments VALUES ('pay_1', 'acct_1', '{}'), ('pay_2', 'acct_1', "
          "'{}'), ('pay_3', 'acct_2', '{}')");
  std::ofstream(dir + "/suppressed.log") << "m-pay_1 1-0\nm-pay_2 2-0\n";

  // Nothing receipted yet (the report makes the receipts table): all three missing.
  const report none = run_report(dir);
  INFO(Catch::Detail::stringify(none.lines));
  CHECK(none.status == 1);
  CHECK(none.says("missing receipts     3"));
  CHECK(none.says("receipts verdict     FAILED"));

  // pay_1 twice, pay_2 once, pay_3 never.
  receipt(dir, "pay_1");
  receipt(dir, "pay_1");
  receipt(dir, "pay_2");
  const report wrong = run_report(dir);
  INFO(Catch::Detail::stringify(wrong.lines));
  CHECK(wrong.status == 1);
  CHECK(wrong.says("receipts sent        3 for 3 payments"));
  CHECK(wrong.says("duplicate receipts   1"));
  CHECK(wrong.says("missing receipts     1"));
  CHECK(wrong.says("suppressed           2 duplicate deliveries"));
  CHECK(wrong.says("receipts verdict     FAILED"));

  // One each: exactly once.
  execute(dir + "/receipts.sqlite3",
          "DELETE FROM payments_receipts WHERE number = (SELECT max(number) FROM "
          "payments_receipts WHERE payment_id = 'pay_1')");
  receipt(dir, "pay_3");
  const report right = run_report(dir);
  INFO(Catch::Detail::stringify(right.lines));
  CHECK(right.status == 0);
  CHECK(right.says("duplicate receipts   0"));
  CHECK(right.says("missing receipts     0"));
  CHECK(right.says("relay lag p50 / p99  2.0 / 2.0 ms"));
  CHECK(right.says("receipts verdict     EXACTLY ONCE"));

  // A receipt of a payment that never committed is as wrong as a duplicate.
  receipt(dir, "pay_9");
  const report unknown = run_report(dir);
  INFO(Catch::Detail::stringify(unknown.lines));
  CHECK(unknown.status == 1);
  CHECK(unknown.says("unknown receipts     1"));
}
