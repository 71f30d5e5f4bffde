// Faults: a bad connection string, a server that is down at start, a statement timeout, and a
// server restarted under load. Each gives a clear error, loses nothing, and the store recovers
// by itself once the server answers again.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <idem/store/postgres.hpp>

#include "postgres_test_support.hpp"
#include "support/loopback.hpp"
#include "support/store_errors.hpp"

namespace pgtest = idem::testing::postgres;
using namespace std::chrono_literals;

using idem::testing::unavailable_message_of;

namespace {

const idem::store_time start{std::chrono::seconds{1767225600}};

idem::digest print() {
  const std::uint8_t bytes[16] = {9, 9};
  return idem::digest{bytes};
}

// A loopback port nothing listens on (support/loopback.hpp).
int unused_port() {
  const int port = idem_test::unused_loopback_port();
  REQUIRE(port > 0);
  return port;
}

}  // namespace

TEST_CASE("a malformed connection string is refused at construction", "[postgres][fault]") {
  for (const char* bad :
       {"host=127.0.0.1 no_such_option=1", "host='unterminated", "postgresql://[::1"}) {
    INFO(bad);
    idem::postgres_store::options config;
    config.conninfo = bad;
    try {
      idem::postgres_store store{config};
      FAIL("accepted");
    } catch (const std::invalid_argument& error) {
      CHECK_THAT(error.what(), Catch::Matchers::Contains("connection string is invalid"));
    }
  }
  idem::postgres_store::options zero;
  zero.conninfo = pgtest::conninfo();
  zero.pool_size = 0;
  CHECK_THROWS_AS(idem::postgres_store{zero}, std::invalid_argument);
}

TEST_CASE("a server that is down at start gives a clear error", "[postgres][fault]") {
  idem::postgres_store::options config;
  config.conninfo = "host=127.0.0.1 port=" + std::to_string(unused_port()) + " dbname=idem";
  config.table = "never_created";
  const std::string at_construction =
      unavailable_message_of([&] { idem::postgres_store store{config}; });
  CHECK_THAT(at_construction, Catch::Matchers::Contains("cannot connect to PostgreSQL"));
  CHECK_THAT(at_construction, Catch::Matchers::Contains("refused"));

  // Without connect_at_start the first call says the same; nothing was claimed.
  config.connect_at_start = false;
  idem::postgres_store lazy{config};
  const std::string at_claim = unavailable_message_of([&] {
    (void)lazy.claim({"tenant", "key", print(), start, 30s, 24h});
  });
  CHECK_THAT(at_claim, Catch::Matchers::Contains("cannot connect to PostgreSQL"));
  CHECK_THAT(unavailable_message_of([&] { (void)lazy.find("tenant", "key", start); }),
             Catch::Matchers::Contains("cannot connect"));

  // Another database or user that does not exist: the server's own words.
  idem::postgres_store::options wrong_database;
  wrong_database.conninfo = pgtest::conninfo() + " dbname=no_such_database_here";
  CHECK_THAT(unavailable_message_of([&] { idem::postgres_store store{wrong_database}; }),
             Catch::Matchers::Contains("no_such_database_here"));

  idem::postgres_store unconfigured;
  CHECK_THAT(unavailable_message_of([&] { (void)unconfigured.find("tenant", "key", start); }),
             Catch::Matchers::Contains("default-constructed"));
}

TEST_CASE("a statement timeout is a clear error, and loses nothing", "[postgres][fault]") {
  const std::string table = pgtest::unique_table("timeout");
  idem::postgres_store::options config = pgtest::caller_time_options(table);
  config.statement_timeout = 200ms;
  idem::postgres_store store{config};
  const auto claimed = store.claim({"tenant", "key", print(), start, 30s, 24h});
  REQUIRE(claimed.status == idem::claim_status::claimed);

  // Another session holds the record's row lock: the store's statements wait, and time out.
  pgtest::connection other;
  other.exec("BEGIN");
  other.exec("SELECT 1 FROM \"" + table + "\" FOR UPDATE");
  const std::string message = unavailable_message_of([&] {
    (void)store.complete({"tenant", "key", claimed.fence}, "r", start);
  });
  CHECK_THAT(message, Catch::Matchers::Contains("statement timeout"));
  CHECK_THAT(message, Catch::Matchers::Contains("57014"));
  CHECK_THAT(unavailable_message_of([&] {
               (void)store.claim({"tenant", "key", print(), start, 30s, 24h});
             }),
             Catch::Matchers::Contains("statement timeout"));
  other.exec("ROLLBACK");

  // Nothing was written, and the same connections work on.
  const auto found = store.find("tenant", "key", start);
  REQUIRE(found);
  CHECK(found->state == idem::record_state::in_progress);
  CHECK(store.complete({"tenant", "key", claimed.fence}, "r", start));
  CHECK(store.find("tenant", "key", start)->response == "r");
  pgtest::drop_table(pgtest::conninfo(), table);
}

TEST_CASE("a server restarted under load: clear errors, then recovery, and nothing is lost",
          "[postgres][fault]") {
  pgtest::private_server server;
  idem::postgres_store::options config;
  config.table = "records";
  config.pool_size = 8;
  config.statement_timeout = 5s;
  config.connect_at_start = false;

  // Down at start: the store is made before its server exists, and says so.
  {
    idem::postgres_store::options before = config;
    before.conninfo =
        "host=127.0.0.1 port=" + std::to_string(unused_port()) + " dbname=idem user=idem";
    idem::postgres_store early{before};
    CHECK_THAT(unavailable_message_of([&] { (void)early.find("tenant", "k", start); }),
               Catch::Matchers::Contains("cannot connect"));
  }
  server.start();
  config.conninfo = server.conninfo();
  idem::postgres_store store{config};
  pgtest::connection admin(server.conninfo());
  (void)store.find("tenant", "k", start);  // migrates
  admin.exec("CREATE TABLE effects (key text NOT NULL, fence int8 NOT NULL)");

  constexpr int threads = 8;
  constexpr int keys = 300;
  std::atomic<int> acked{0}, errors{0}, done_threads{0};
  std::mutex mutex;
  std::vector<std::pair<std::string, std::uint64_t>> acknowledged;
  std::string sample_error;
  std::vector<std::thread> load;
  load.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    load.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t));
      std::vector<int> pending(keys);
      for (int i = 0; i < keys; ++i)
        pending[static_cast<std::size_t>(i)] = i;
      while (!pending.empty()) {
        std::shuffle(pending.begin(), pending.end(), random);
        std::vector<int> later;
        for (const int index : pending) {
          const std::string key = "key-" + std::to_string(index);
          try {
            // Server time, a 1 s lease: claims lost with the crash are taken over after it.
            const auto claimed =
                store.claim({"tenant", key, print(), std::chrono::system_clock::now(), 1s, 1h});
            if (claimed.status == idem::claim_status::existing) {
              if (claimed.existing.state != idem::record_state::completed) later.push_back(index);
              continue;
            }
            const bool applied = store.complete_within(
                {"tenant", key, claimed.fence}, std::chrono::system_clock::now(),
                [&](idem::postgres_store::transaction& txn) {
                  txn.exec("INSERT INTO effects VALUES ($1, $2)",
                           {key, std::to_string(claimed.fence)});
                  return std::string("ok");
                });
            if (!applied) {
              later.push_back(index);
              continue;
            }
            ++acked;
            const std::lock_guard lock(mutex);
            acknowledged.emplace_back(key, claimed.fence);
          } catch (const idem::store_error& error) {
            if (errors++ == 0) {
              const std::lock_guard lock(mutex);
              sample_error = error.what();
            }
            later.push_back(index);
            std::this_thread::sleep_for(20ms);
          }
        }
        pending = std::move(later);
        if (!pending.empty()) std::this_thread::sleep_for(50ms);
      }
      ++done_threads;
    });
  }
  // Restart in the middle of the load: -m immediate, what a crash of the server looks like.
  while (acked < keys / 4 && done_threads < threads)
    std::this_thread::sleep_for(5ms);
  server.stop();
  std::this_thread::sleep_for(500ms);
  server.start();
  for (std::thread& thread : load)
    thread.join();

  // Clear errors while it was down...
  CHECK(errors > 0);
  INFO("first error: " << sample_error);
  CHECK_THAT(sample_error, Catch::Matchers::StartsWith("idem::postgres_store: "));
  CHECK(sample_error.size() > 40);
  // ...then every key done, once, and every acknowledged completion still there.
  pgtest::connection after(server.conninfo());
  CHECK(after.scalar("SELECT count(*) FROM records WHERE state = 1") == keys);
  CHECK(after.scalar("SELECT count(*) FROM effects") == keys);
  CHECK(after.scalar("SELECT count(DISTINCT key) FROM effects") == keys);
  long long missing = 0;
  for (const auto& [key, fence] : acknowledged) {
    if (after.scalar("SELECT count(*) FROM effects WHERE key = '" + key +
                     "' AND fence = " + std::to_string(fence)) != 1) {
      ++missing;
    }
  }
  CHECK(missing == 0);
  CHECK(acknowledged.size() <= static_cast<std::size_t>(keys));
  WARN("restart: " << errors.load() << " clear errors while the server was away; " << keys
                   << " keys completed once each; first error: " << sample_error);
}
