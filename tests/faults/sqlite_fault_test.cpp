// The store failing at each step of the protocol with sqlite_store behind the faults, and a real
// fault: the database file held locked by another connection (BEGIN IMMEDIATE) past the busy
// timeout, at the claim and at the completion.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <chrono>
#include <memory>
#include <string>

#include <idem/store/sqlite.hpp>

#include "fault_matrix.hpp"
#include "support/temporary_directory.hpp"

namespace faults = idem::testing::faults;
using namespace std::chrono_literals;

namespace {

struct sqlite_factory {
  std::unique_ptr<idem::testing::temporary_directory> directory =
      std::make_unique<idem::testing::temporary_directory>("idem-faults-sqlite");
  int made = 0;

  idem::sqlite_store operator()() {
    idem::sqlite_store::options options;
    options.path = directory->file("store-" + std::to_string(made++) + ".sqlite3");
    options.synchronous = idem::sqlite_store::synchronous_mode::normal;
    return idem::sqlite_store{options};
  }
};

// Another process's connection to the same file, holding its write lock while it is open.
class write_lock {
 public:
  explicit write_lock(const std::string& path) {
    REQUIRE(sqlite3_open(path.c_str(), &db_) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  write_lock(const write_lock&) = delete;
  write_lock& operator=(const write_lock&) = delete;
  ~write_lock() {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace

IDEM_FAULT_MATRIX_TESTS("sqlite", sqlite_factory)

TEST_CASE("a file locked by another connection at the claim: 503, and nothing runs",
          "[faults][sqlite]") {
  const idem::testing::temporary_directory directory{"idem-faults-sqlite"};
  idem::sqlite_store::options options;
  options.path = directory.file("locked.sqlite3");
  options.busy_timeout = 50ms;
  idem::manual_clock clock;
  faults::charging handler;
  auto payments = faults::guard_real(idem::sqlite_store{options}, clock, handler);

  faults::observed seen;
  {
    const write_lock other(options.path);
    const auto refused = (*payments)("tenant", "order-1", std::string("10 EUR"));
    CHECK(refused.verdict() == idem::verdict::store_unavailable);
    CHECK_THAT(std::string(refused.message()), Catch::Matchers::Contains("locked"));
    CHECK(handler.downstream.calls() == 0);
  }
  const std::string on_record = faults::call_until_recorded(*payments, clock, std::string("10 EUR"),
                                                            seen, "idem::sqlite_store");
  faults::require_replays(*payments, clock, std::string("10 EUR"), seen, on_record);
  CHECK(handler.downstream.calls() == 1);
}

TEST_CASE(
    "a file locked by another connection at the completion: told not stored, then one "
    "effect and the same response",
    "[faults][sqlite]") {
  const idem::testing::temporary_directory directory{"idem-faults-sqlite"};
  idem::sqlite_store::options options;
  options.path = directory.file("locked.sqlite3");
  options.busy_timeout = 50ms;
  idem::manual_clock clock;
  faults::charging handler;
  auto payments = faults::guard_real(idem::sqlite_store{options}, clock, handler);

  // The lock is taken after the charge was recorded, before the response is: complete waits out
  // the busy timeout and fails; the claim stays, so the retry after the lease resumes from the
  // recorded charge instead of charging again.
  std::unique_ptr<write_lock> other;
  *handler.after_step = [&] { other = std::make_unique<write_lock>(options.path); };
  const auto first = (*payments)("tenant", "order-1", std::string("10 EUR"));
  CHECK(first.verdict() == idem::verdict::executed);
  CHECK_FALSE(first.recorded());
  CHECK_THAT(std::string(first.message()),
             Catch::Matchers::Contains("not stored") && Catch::Matchers::Contains("locked"));
  other.reset();

  faults::observed seen;
  seen.responses.push_back(first.value());
  const std::string on_record = faults::call_until_recorded(*payments, clock, std::string("10 EUR"),
                                                            seen, "idem::sqlite_store");
  faults::require_replays(*payments, clock, std::string("10 EUR"), seen, on_record);
  CHECK(handler.downstream.calls() == 1);
}
