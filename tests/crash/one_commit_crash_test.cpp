// The one-commit crash matrix (issue #34), with real processes: a worker
// (idem_crash_one_commit_worker, one_commit_worker.cpp) sends one request through idempotent in
// commit_mode::one_commit, on an SQLite file (synchronous = full) or a PostgreSQL table, and
// kills itself with SIGKILL at one point of the transaction:
//   * after the claim, before the handler's writes;
//   * in the handler, after its effect row;
//   * after the record's completion, before COMMIT (on PostgreSQL, with COMMIT in flight: the
//     two leave in one pipeline, so the server may commit it or not);
//   * after COMMIT, before it answers.
// Then, for every run, a fresh process (the restart) finds nothing at all (no record, no effect)
// for the first three points and everything (the completed record and exactly one effect) for
// the last: never the effect without its record nor the record without its effect. The retry
// that follows runs the request (executed) where nothing was left and replays it otherwise,
// and leaves exactly one effect either way.
// Runs per point per store: IDEM_CRASH_RUNS (crash_support.hpp), 4 by default (3 in the
// sanitizer builds); runs_at_once of them at a time, each with its own database.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "crash/crash_support.hpp"

using idem_crash::finished;
using idem_crash::on_postgres;
using idem_crash::on_sqlite;

namespace {

enum class left { nothing, everything, either };

struct crash_point {
  const char* name;
  left sqlite;    // what the restart must find on SQLite
  left postgres;  // and on PostgreSQL
};

// On PostgreSQL the completion and COMMIT leave in one pipeline (one round trip): a worker that
// dies as the completion runs has sent its COMMIT already, and the server may commit it. Either
// is right; a part of it never is.
constexpr crash_point points[] = {
    {"after_claim", left::nothing, left::nothing},
    {"after_effect", left::nothing, left::nothing},
    {"before_commit", left::nothing, left::either},
    {"after_commit", left::everything, left::everything},
};

std::vector<std::string> with(std::vector<std::string> arguments,
                              std::initializer_list<std::string> more) {
  arguments.insert(arguments.end(), more.begin(), more.end());
  return arguments;
}

}  // namespace

TEMPLATE_TEST_CASE("a crash at any point of a one-commit transaction leaves nothing or everything",
                   "[concurrency][one_commit]", on_sqlite, on_postgres) {
  const int runs = idem_crash::runs_per_point(4);
  for (const crash_point& point : points) {
    for (int start = 0; start < runs; start += idem_crash::runs_at_once) {
      const int count = std::min(idem_crash::runs_at_once, runs - start);
      std::vector<std::unique_ptr<TestType>> stores;
      std::vector<std::vector<std::string>> dying, inspecting, retrying;
      for (int i = 0; i < count; ++i) {
        stores.push_back(std::make_unique<TestType>());
        const std::vector<std::string> base =
            with(stores.back()->worker_arguments("db"), {"--key=order-" + std::to_string(i)});
        dying.push_back(with(base, {std::string("--die=") + point.name}));
        inspecting.push_back(with(base, {"--inspect=yes"}));
        retrying.push_back(base);
      }
      const std::vector<finished> died =
          idem_crash::run_together(IDEM_CRASH_ONE_COMMIT_WORKER, dying);
      const std::vector<finished> found =
          idem_crash::run_together(IDEM_CRASH_ONE_COMMIT_WORKER, inspecting);
      const std::vector<finished> retried =
          idem_crash::run_together(IDEM_CRASH_ONE_COMMIT_WORKER, retrying);
      const std::vector<finished> after =
          idem_crash::run_together(IDEM_CRASH_ONE_COMMIT_WORKER, inspecting);
      for (int i = 0; i < count; ++i) {
        const auto index = static_cast<std::size_t>(i);
        INFO(TestType::name << ", point " << point.name << ", run " << start + i << "\n"
                            << died[index].text() << found[index].text() << retried[index].text());
        REQUIRE(died[index].killed());
        REQUIRE(died[index].line_after("at ") == std::string(point.name));
        REQUIRE(found[index].exited_ok());
        // Nothing or everything, as the restart finds it.
        const std::optional<std::string> state = found[index].line_after("state ");
        REQUIRE(state);
        const bool everything = *state == "completed effects 1";
        CHECK((everything || *state == "none effects 0"));
        const left expected =
            TestType::name == std::string("SQLite") ? point.sqlite : point.postgres;
        if (expected != left::either) CHECK(everything == (expected == left::everything));
        REQUIRE(retried[index].exited_ok());
        CHECK(retried[index].line_after("answer ") ==
              std::string(everything ? "replayed paid 10 EUR" : "executed paid 10 EUR"));
        CHECK(after[index].line_after("state ") == std::string("completed effects 1"));
      }
    }
  }
}
