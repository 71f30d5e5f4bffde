// sqlite_version_gate: an entity's event applies only when its version is newer than the one
// stored, its consumer's writes commit with the bump or not at all, and deliveries racing from
// many threads end at the highest version with each entity's versions applied in increasing
// order. Each test case works on a file of its own, with an `effects` table the consumers
// write to in the gate's transaction: what committed there is what was applied.
#include <catch2/catch.hpp>

#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/version_gate.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "stores/sqlite/file_connection.hpp"
#include "support/temporary_directory.hpp"
#include "support/version_gate_cases.hpp"

namespace sqlite_version_gate_test {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::sqlite_store;
using idem::sqlite_version_gate;
using idem::store_error;
using idem::store_failure;
using idem::version_gate_outcome;
using idem::version_gate_verdict;
using idem_sqlite_test::file_connection;

namespace {

sqlite_store::options quick(const std::string& path) {
  sqlite_store::options options;
  options.path = path;
  options.synchronous = sqlite_store::synchronous_mode::normal;
  return options;
}

// A file with a store, a gate and the effects table the consumers write to (the fixture of
// tests/support/version_gate_cases.hpp).
struct fixture {
  using store_type = sqlite_store;
  using transaction = sqlite_store::transaction;
  idem::testing::temporary_directory directory{"idem-gate"};
  std::string path = directory.file("gate.sqlite3");
  sqlite_store store{quick(path)};
  sqlite_version_gate gate{store};
  file_connection check{path};

  fixture() {
    check.exec(
        "CREATE TABLE effects (sequence INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, "
        "entity TEXT NOT NULL, version INTEGER NOT NULL)");
  }

  // Applies (entity, version) in `scope` with a consumer that records it in effects.
  version_gate_outcome deliver(const std::string& entity, std::int64_t version,
                               const std::string& scope = "orders") {
    return gate.apply(scope, entity, version,
                      [&](transaction& t) { write_effect(t, entity, version, scope); });
  }

  static void write_effect(transaction& t, const std::string& entity, std::int64_t version,
                           const std::string& scope = "orders") {
    t.exec("INSERT INTO effects (scope, entity, version) VALUES (?1, ?2, ?3)", scope, entity,
           version);
  }

  // The versions recorded for `entity`, in the order they committed.
  std::string effects(const std::string& entity, const std::string& scope = "orders") {
    return check.text("SELECT version FROM effects WHERE scope = '" + scope + "' AND entity = '" +
                      entity + "' ORDER BY sequence");
  }

  long long rows() { return std::stoll(check.text("SELECT count(*) FROM idem_versions")); }
  long long outbox_rows(const std::string& id) {
    return std::stoll(check.text("SELECT count(*) FROM idem_outbox WHERE id = '" + id + "'"));
  }
};

// The consumer that must never run.
const auto never = [](sqlite_store::transaction&) { FAIL("the consumer ran"); };

template <class F>
store_error failure_of(F&& f) {
  try {
    f();
  } catch (const store_error& error) {
    return error;
  }
  FAIL("no store_error was thrown");
  throw std::logic_error("unreachable");
}

}  // namespace

IDEM_VERSION_GATE_CASES(fixture, "[sqlite][version_gate]")

TEST_CASE(
    "version gate: a consumer that ends the transaction itself is refused and nothing commits",
    "[sqlite][version_gate]") {
  fixture f;
  CHECK_THROWS_AS(f.gate.apply("orders", "order-1", 1,
                               [](sqlite_store::transaction& t) { t.exec("ROLLBACK"); }),
                  std::logic_error);
  CHECK_FALSE(f.gate.stored_version("orders", "order-1"));
}

TEST_CASE("version gate: an entity id past the length limit is refused", "[sqlite][version_gate]") {
  fixture f;
  CHECK_THROWS_AS(f.gate.apply("orders", std::string(256, 'x'), 1, never), std::invalid_argument);
  CHECK(f.deliver(std::string(255, 'x'), 1).applied());

  sqlite_version_gate::options shorter;
  shorter.table = "short_versions";
  shorter.max_entity_id_length = 8;
  sqlite_version_gate gate{f.store, shorter};
  CHECK_THROWS_WITH(gate.apply("orders", "order-1234", 1, never), Contains("1 to 8 bytes"));
  CHECK(f.check.text("SELECT count(*) FROM short_versions") == "0");
}

TEST_CASE("version gate: a table name that is not a plain identifier is refused at construction",
          "[sqlite][version_gate]") {
  fixture f;
  for (const std::string& bad :
       {std::string(), std::string("versions; DROP TABLE effects"), std::string("9versions"),
        std::string("my-versions"), std::string("\"quoted\""), std::string(51, 'v'),
        std::string("sqlite_versions"), std::string("SQLITE_versions")}) {
    INFO(bad);
    sqlite_version_gate::options options;
    options.table = bad;
    CHECK_THROWS_AS(sqlite_version_gate(f.store, options), std::invalid_argument);
  }
  sqlite_version_gate::options zero;
  zero.max_entity_id_length = 0;
  CHECK_THROWS_AS(sqlite_version_gate(f.store, zero), std::invalid_argument);
  // The effects table is still there, and no other table was made.
  CHECK(f.check.text("SELECT count(*) FROM effects") == "0");
  CHECK(f.check.text("SELECT count(*) FROM sqlite_schema WHERE name LIKE '%version%'") == "1");
}

TEST_CASE("version gate: a configured table name is made and used", "[sqlite][version_gate]") {
  fixture f;
  sqlite_version_gate::options options;
  options.table = "order_versions";
  sqlite_version_gate gate{f.store, options};
  CHECK(gate.apply("orders", "order-1", 1, [](sqlite_store::transaction&) {}).applied());
  CHECK(f.check.text("SELECT version FROM order_versions") == "1");
  CHECK(f.check.text("SELECT count(*) FROM idem_versions") == "0");
  // A second gate on the same table sees what the first applied.
  sqlite_version_gate again{f.store, options};
  CHECK(again.stored_version("orders", "order-1") == 1);
}

TEST_CASE("version gate: a table of that name that is not a gate's is refused with a store_error",
          "[sqlite][version_gate]") {
  fixture f;
  sqlite_version_gate::options options;
  options.table = "effects";
  const store_error error = failure_of([&] { sqlite_version_gate gate(f.store, options); });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THAT(error.what(), Contains("effects") && Contains("not a version gate's"));
}

TEST_CASE("version gate: a gate on a store without a database throws store_error",
          "[sqlite][version_gate]") {
  const store_error error = failure_of([] { sqlite_version_gate gate{sqlite_store{}}; });
  CHECK(error.failure() == store_failure::unavailable);
}

TEST_CASE("version gate: a database locked past the busy timeout fails apply and applies nothing",
          "[sqlite][version_gate]") {
  idem::testing::temporary_directory directory{"idem-gate"};
  const std::string path = directory.file("gate.sqlite3");
  sqlite_store::options options = quick(path);
  options.busy_timeout = 50ms;
  sqlite_store store{options};
  sqlite_version_gate gate{store};
  REQUIRE(gate.apply("orders", "order-1", 1, [](sqlite_store::transaction&) {}).applied());

  file_connection other(path);
  other.exec("BEGIN IMMEDIATE");
  const store_error error = failure_of([&] { (void)gate.apply("orders", "order-1", 2, never); });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THAT(error.what(), Contains(path) && Contains("locked"));
  // Readers do not wait for the writer.
  CHECK(gate.stored_version("orders", "order-1") == 1);
  other.exec("ROLLBACK");

  // Nothing was lost: the same event applies once the lock is gone.
  bool ran = false;
  CHECK(gate.apply("orders", "order-1", 2, [&](sqlite_store::transaction&) { ran = true; })
            .applied());
  CHECK(ran);
  CHECK(gate.stored_version("orders", "order-1") == 2);
}

TEST_CASE("version gate: deliveries racing from many threads apply each entity's versions in order",
          "[sqlite][version_gate][concurrency]") {
  // 12 threads on two stores (two pools of connections, as two processes would have) deliver
  // every version of 4 entities, each (entity, version) three times, each thread in its own
  // shuffled order. The consumer records what it applied in the gate's transaction. Without the
  // guard (an upsert that overwrites whatever is stored), an older version applies after a
  // newer one and the final version is not the highest.
  constexpr int threads = 12;
  constexpr int entities = 4;
  constexpr std::int64_t versions = 150;
  constexpr int copies = 3;
  constexpr int rounds = 3;
  idem::testing::temporary_directory directory{"idem-gate"};
  const std::string path = directory.file("gate.sqlite3");
  sqlite_store::options options = quick(path);
  options.busy_timeout = 30s;
  std::vector<sqlite_store> stores{sqlite_store{options}, sqlite_store{options}};
  std::vector<sqlite_version_gate> gates{sqlite_version_gate{stores[0]},
                                         sqlite_version_gate{stores[1]}};
  file_connection check{path};
  check.exec(
      "CREATE TABLE effects (sequence INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, "
      "entity TEXT NOT NULL, version INTEGER NOT NULL)");

  for (int round = 0; round < rounds; ++round) {
    const std::string scope = "round-" + std::to_string(round);
    // Every delivery, dealt to the threads at random.
    std::vector<std::pair<std::string, std::int64_t>> deliveries;
    for (int copy = 0; copy < copies; ++copy) {
      for (int e = 0; e < entities; ++e) {
        for (std::int64_t v = 1; v <= versions; ++v) {
          deliveries.emplace_back("entity-" + std::to_string(e), v);
        }
      }
    }
    std::mt19937_64 random{static_cast<std::uint64_t>(round) * 7919 + 1};
    std::shuffle(deliveries.begin(), deliveries.end(), random);

    std::atomic<int> applied{0};
    std::atomic<int> wrong{0};
    std::atomic<int> failed{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> workers;
    workers.reserve(threads);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        sqlite_version_gate& gate = gates[static_cast<std::size_t>(t % 2)];
        while (!go.load())
          std::this_thread::yield();
        for (std::size_t i = static_cast<std::size_t>(t); i < deliveries.size(); i += threads) {
          // Not a structured binding: clang 14 cannot capture one in the consumer's lambda.
          const std::string& entity = deliveries[i].first;
          const std::int64_t version = deliveries[i].second;
          version_gate_outcome outcome;
          try {
            outcome = gate.apply(scope, entity, version, [&](sqlite_store::transaction& txn) {
              txn.exec("INSERT INTO effects (scope, entity, version) VALUES (?1, ?2, ?3)", scope,
                       entity, version);
            });
          } catch (const std::exception&) {
            failed.fetch_add(1);
            continue;
          }
          // Each verdict must be true of the version it reports.
          const bool consistent =
              (outcome.verdict == version_gate_verdict::applied &&
               outcome.stored_version == version) ||
              (outcome.verdict == version_gate_verdict::duplicate &&
               outcome.stored_version == version) ||
              (outcome.verdict == version_gate_verdict::stale && outcome.stored_version > version);
          if (!consistent) wrong.fetch_add(1);
          if (outcome.applied()) applied.fetch_add(1);
        }
      });
    }
    go.store(true);
    for (std::thread& worker : workers)
      worker.join();

    INFO("round " << round);
    CHECK(wrong.load() == 0);
    CHECK(failed.load() == 0);
    // Each applied outcome's effect committed exactly once, and no effect without one.
    CHECK(check.text("SELECT count(*) FROM effects WHERE scope = '" + scope + "'") ==
          std::to_string(applied.load()));
    for (int e = 0; e < entities; ++e) {
      const std::string entity = "entity-" + std::to_string(e);
      INFO(entity);
      CHECK(gates[0].stored_version(scope, entity) == versions);
      // The versions applied, in commit order, strictly increase: none applied twice, none
      // applied after a newer one.
      std::vector<std::int64_t> order;
      std::string query = "SELECT version FROM effects WHERE scope = '" + scope;
      query += "' AND entity = '" + entity + "' ORDER BY sequence";
      for (const auto& row : check.rows(query)) {
        order.push_back(std::stoll(row.at(0)));
      }
      REQUIRE_FALSE(order.empty());
      CHECK(std::adjacent_find(order.begin(), order.end(), std::greater_equal<>{}) == order.end());
      CHECK(order.back() == versions);
    }
  }
}

}  // namespace sqlite_version_gate_test
