// postgres_version_gate: an entity's event applies only when its version is newer than the one
// stored, its consumer's writes commit with the bump or not at all, deliveries racing on many
// connections end at the highest version with each entity's versions applied in increasing
// order (READ COMMITTED, and SERIALIZABLE with its retries), and a server that is down is a
// store_error that loses nothing. Each test case has tables of its own: the store's, the
// gate's, and an effects table its consumers write to in the gate's transaction.
#include <catch2/catch.hpp>

#include <idem/store/postgres.hpp>
#include <idem/store/postgres/version_gate.hpp>

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

#include "postgres_test_support.hpp"
#include "support/version_gate_cases.hpp"

namespace postgres_version_gate_test {

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using idem::postgres_store;
using idem::postgres_version_gate;
using idem::store_error;
using idem::store_failure;
using idem::version_gate_outcome;
using idem::version_gate_verdict;

namespace {

postgres_version_gate::options gate_options(const std::string& table) {
  postgres_version_gate::options options;
  options.table = table;
  return options;
}

// A store and a gate on tables of their own, and the effects table the consumers write to (the
// fixture of tests/support/version_gate_cases.hpp).
struct fixture {
  using store_type = postgres_store;
  using transaction = postgres_store::transaction;
  pgtest::table_guard records{pgtest::unique_table("gate")};
  pgtest::table_guard versions{records.name + "_v"};
  std::string effects_table = "\"" + versions.name + "_effects\"";
  std::string versions_table = "\"" + versions.name + "\"";
  postgres_store store;
  postgres_version_gate gate;
  pgtest::connection check;

  explicit fixture(postgres_store::isolation isolation = postgres_store::isolation::read_committed)
      : store(options_for(records.name, isolation)), gate(store, gate_options(versions.name)) {
    check.exec("CREATE TABLE " + effects_table +
               " (sequence bigserial PRIMARY KEY, scope text NOT NULL, entity text NOT NULL, "
               "version int8 NOT NULL)");
  }

  static postgres_store::options options_for(const std::string& table,
                                             postgres_store::isolation isolation) {
    postgres_store::options config = pgtest::caller_time_options(table);
    config.pool_size = 16;
    config.transaction_isolation = isolation;
    // The concurrency case's SERIALIZABLE run collides on 4 rows from 12 connections.
    config.max_serialization_retries = 1000;
    return config;
  }

  // Applies (entity, version) in `scope` with a consumer that records it in effects.
  version_gate_outcome deliver(const std::string& entity, std::int64_t version,
                               const std::string& scope = "orders") {
    return gate.apply(scope, entity, version,
                      [&](transaction& t) { write_effect(t, entity, version, scope); });
  }

  void write_effect(transaction& t, const std::string& entity, std::int64_t version,
                    const std::string& scope = "orders") {
    t.exec("INSERT INTO " + effects_table + " (scope, entity, version) VALUES ($1, $2, $3)",
           {scope, entity, std::to_string(version)});
  }

  // The versions recorded for `entity`, in the order they were written, one a line.
  std::string effects(const std::string& entity, const std::string& scope = "orders") {
    const idem::postgres_result result =
        check.exec("SELECT version FROM " + effects_table + " WHERE scope = '" + scope +
                   "' AND entity = '" + entity + "' ORDER BY sequence");
    std::string out;
    for (int row = 0; row < result.rows(); ++row) {
      if (row > 0) out += "\n";
      out += result.value(row, 0);
    }
    return out;
  }

  long long rows() { return check.scalar("SELECT count(*) FROM " + versions_table); }
  long long outbox_rows(const std::string& id) {
    return check.scalar("SELECT count(*) FROM \"" + records.name + "_outbox\" WHERE id = '" + id +
                        "'");
  }
};

// The consumer that must never run.
const auto never = [](postgres_store::transaction&) { FAIL("the consumer ran"); };

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

IDEM_VERSION_GATE_CASES(fixture, "[postgres][version_gate]")

TEST_CASE(
    "version gate: the consumer's failing SQL rolls back the bump and passes through as "
    "postgres_error",
    "[postgres][version_gate]") {
  fixture f;
  CHECK_THROWS_AS(f.gate.apply("orders", "order-1", 1,
                               [](postgres_store::transaction& t) {
                                 t.exec("INSERT INTO no_such_table VALUES (1)");
                               }),
                  idem::postgres_error);
  CHECK(f.rows() == 0);
}

TEST_CASE("version gate: an entity id past the length limit is refused",
          "[postgres][version_gate]") {
  fixture f;
  CHECK_THROWS_AS(f.gate.apply("orders", std::string(256, 'x'), 1, never), std::invalid_argument);
  CHECK(f.deliver(std::string(255, 'x'), 1).applied());

  pgtest::table_guard shorter_table{f.records.name + "_s"};
  postgres_version_gate::options shorter = gate_options(shorter_table.name);
  shorter.max_entity_id_length = 8;
  postgres_version_gate gate{f.store, shorter};
  CHECK_THROWS_WITH(gate.apply("orders", "order-1234", 1, never), Contains("1 to 8 bytes"));
  CHECK(f.check.scalar("SELECT count(*) FROM \"" + shorter_table.name + "\"") == 0);
}

TEST_CASE(
    "version gate: a schema or table name that is not a plain identifier is refused at "
    "construction",
    "[postgres][version_gate]") {
  fixture f;
  for (const std::string& bad :
       {std::string(), std::string("versions; DROP TABLE effects"), std::string("9versions"),
        std::string("my-versions"), std::string("\"quoted\""), std::string(51, 'v')}) {
    INFO(bad);
    postgres_version_gate::options options = gate_options(f.versions.name + "_bad");
    options.table = bad;
    CHECK_THROWS_AS(postgres_version_gate(f.store, options), std::invalid_argument);
    options = gate_options(f.versions.name + "_bad");
    if (!bad.empty()) {
      options.schema = bad;
      CHECK_THROWS_AS(postgres_version_gate(f.store, options), std::invalid_argument);
    }
  }
  postgres_version_gate::options zero = gate_options(f.versions.name + "_bad");
  zero.max_entity_id_length = 0;
  CHECK_THROWS_AS(postgres_version_gate(f.store, zero), std::invalid_argument);
  CHECK(f.check.scalar("SELECT count(*) FROM pg_tables WHERE tablename = '" + f.versions.name +
                       "_bad'") == 0);
}

TEST_CASE("version gate: a configured schema and table are made and used",
          "[postgres][version_gate]") {
  fixture f;
  const std::string schema = f.versions.name + "_schema";
  postgres_version_gate::options options = gate_options("order_versions");
  options.schema = schema;
  {
    postgres_version_gate gate{f.store, options};
    CHECK(gate.apply("orders", "order-1", 1, [](postgres_store::transaction&) {}).applied());
    CHECK(f.check.scalar("SELECT version FROM \"" + schema + "\".order_versions") == 1);
    // A second gate on the same table sees what the first applied.
    postgres_version_gate again{f.store, options};
    CHECK(again.stored_version("orders", "order-1") == 1);
  }
  f.check.exec("DROP SCHEMA \"" + schema + "\" CASCADE");
}

TEST_CASE("version gate: a table of that name that is not a gate's is refused with a store_error",
          "[postgres][version_gate]") {
  fixture f;
  const std::string effects = f.versions.name + "_effects";
  const store_error error =
      failure_of([&] { postgres_version_gate gate(f.store, gate_options(effects)); });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THAT(error.what(), Contains(effects) && Contains("not a version gate's"));
}

TEST_CASE("version gate: a gate on a store without a database throws store_error",
          "[postgres][version_gate]") {
  const store_error error = failure_of([] { postgres_version_gate gate{postgres_store{}}; });
  CHECK(error.failure() == store_failure::unavailable);
}

TEST_CASE("version gate: a stopped server fails apply with store_error and applies nothing",
          "[postgres][version_gate]") {
  pgtest::private_server server;
  server.start();
  postgres_store::options config;
  config.conninfo = server.conninfo();
  config.table = "records";
  config.connect_timeout = 5s;
  postgres_store store{config};
  postgres_version_gate gate{store};
  pgtest::connection admin(server.conninfo());
  admin.exec("CREATE TABLE effects (entity text NOT NULL, version int8 NOT NULL)");
  const auto record = [](postgres_store::transaction& t) {
    t.exec("INSERT INTO effects VALUES ('order-1', 2)");
  };
  REQUIRE(gate.apply("orders", "order-1", 1, [](postgres_store::transaction&) {}).applied());

  server.stop();
  const store_error error = failure_of([&] { (void)gate.apply("orders", "order-1", 2, never); });
  CHECK(error.failure() == store_failure::unavailable);
  CHECK_THROWS_AS(gate.stored_version("orders", "order-1"), store_error);

  // Back up, the store reconnects by itself and the same event applies: nothing was lost.
  server.start();
  CHECK(gate.stored_version("orders", "order-1") == 1);
  CHECK(gate.apply("orders", "order-1", 2, record).applied());
  pgtest::connection after(server.conninfo());
  CHECK(after.scalar("SELECT count(*) FROM effects") == 1);
  CHECK(gate.stored_version("orders", "order-1") == 2);
}

TEST_CASE(
    "version gate: deliveries racing on many connections apply each entity's versions in order",
    "[postgres][version_gate][concurrency]") {
  // 12 threads, each on a connection of its own, deliver every version of 4 entities, each
  // (entity, version) three times, dealt at random. The consumer records what it applied in the
  // gate's transaction; the effects' sequence is drawn while the entity's row is locked, so
  // for one entity it is the commit order. Without the guard (an upsert that overwrites
  // whatever is stored), an older version applies after a newer one and the final version is
  // not the highest.
  const auto isolation =
      GENERATE(postgres_store::isolation::read_committed, postgres_store::isolation::serializable);
  INFO("isolation " << static_cast<int>(isolation));
  constexpr int threads = 12;
  constexpr int entities = 4;
  constexpr std::int64_t versions = 80;
  constexpr int copies = 3;
  constexpr int rounds = 2;
  fixture f{isolation};

  for (int round = 0; round < rounds; ++round) {
    const std::string scope = "round-" + std::to_string(round);
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
        while (!go.load())
          std::this_thread::yield();
        for (std::size_t i = static_cast<std::size_t>(t); i < deliveries.size(); i += threads) {
          const auto& [entity, version] = deliveries[i];
          version_gate_outcome outcome;
          try {
            outcome = f.deliver(entity, version, scope);
          } catch (const std::exception&) {
            failed.fetch_add(1);
            continue;
          }
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
    CHECK(f.check.scalar("SELECT count(*) FROM " + f.effects_table + " WHERE scope = '" + scope +
                         "'") == applied.load());
    for (int e = 0; e < entities; ++e) {
      const std::string entity = "entity-" + std::to_string(e);
      INFO(entity);
      CHECK(f.gate.stored_version(scope, entity) == versions);
      std::vector<std::int64_t> order;
      std::string query = "SELECT version FROM " + f.effects_table + " WHERE scope = '" + scope;
      query += "' AND entity = '" + entity + "' ORDER BY sequence";
      const idem::postgres_result result = f.check.exec(query);
      order.reserve(static_cast<std::size_t>(result.rows()));
      for (int row = 0; row < result.rows(); ++row) {
        order.push_back(std::stoll(std::string(result.value(row, 0))));
      }
      REQUIRE_FALSE(order.empty());
      CHECK(std::adjacent_find(order.begin(), order.end(), std::greater_equal<>{}) == order.end());
      CHECK(order.back() == versions);
    }
  }
}

}  // namespace postgres_version_gate_test
