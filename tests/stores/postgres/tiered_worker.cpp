// A second process sharing one PostgreSQL table through a tiered_store of its own (caller time),
// for tiered_postgres_test.cpp: it reads one command a line on stdin and answers one line on
// stdout, so that the test can interleave its own tier's calls with this process's.
//
//   claim KEY PRINT SECONDS            claimed FENCE | taken_over FENCE | full
//                                      | existing STATE FENCE RESPONSE
//   complete KEY FENCE RESPONSE SECONDS   applied | refused
//   find KEY SECONDS                   none | STATE FENCE RESPONSE
//   hits                               the tier's hits so far
// SECONDS count from 2026-01-01T00:00:00Z; scope "tenant", lease 30 s, retention 1 h;
// RESPONSE a word without spaces. End of input ends the process.
#include <idem/store/postgres.hpp>
#include <idem/store/tiered.hpp>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>

#include "support/worker_io.hpp"

namespace {

using namespace std::chrono_literals;

idem::store_time at(std::int64_t seconds) {
  return idem::store_time{std::chrono::seconds{1767225600 + seconds}};
}

idem::digest print(int seed) {
  const std::uint8_t bytes[16] = {static_cast<std::uint8_t>(seed), 1, 2, 3};
  return idem::digest{bytes};
}

std::string state_of(const idem::record& r) {
  return std::string(idem::to_string(r.state)) + " " + std::to_string(r.fence) + " " +
         (r.response.empty() ? "-" : r.response);
}

}  // namespace

int main(int argc, char** argv) {
  return idem::testing::worker_main(
      "idem_tiered_worker", "idem_tiered_worker --conninfo=INFO --table=NAME", [&] {
        const idem::testing::worker_arguments arguments(argc, argv);
        arguments.expect_no_words();
        idem::postgres_store::options config;
        config.conninfo = arguments.option("conninfo");
        config.table = arguments.option("table");
        config.clock = idem::time_source::caller;
        config.pool_size = 1;
        idem::tiered_store<idem::postgres_store> store{idem::postgres_store{config}};
        idem::testing::say("ready");
        std::string line;
        while (std::getline(std::cin, line)) {
          std::istringstream in(line);
          std::string command, key;
          in >> command >> key;
          if (command == "claim") {
            int seed = 0;
            std::int64_t seconds = 0;
            in >> seed >> seconds;
            const idem::claim_result got =
                store.claim({"tenant", key, print(seed), at(seconds), 30s, 1h});
            switch (got.status) {
              case idem::claim_status::claimed:
                idem::testing::say("claimed " + std::to_string(got.fence));
                break;
              case idem::claim_status::taken_over:
                idem::testing::say("taken_over " + std::to_string(got.fence));
                break;
              case idem::claim_status::full:
                idem::testing::say("full");
                break;
              case idem::claim_status::existing:
                idem::testing::say("existing " + state_of(got.existing));
                break;
            }
          } else if (command == "complete") {
            std::uint64_t fence = 0;
            std::string response;
            std::int64_t seconds = 0;
            in >> fence >> response >> seconds;
            idem::testing::say(store.complete({"tenant", key, fence}, response, at(seconds))
                                   ? "applied"
                                   : "refused");
          } else if (command == "find") {
            std::int64_t seconds = 0;
            in >> seconds;
            const auto found = store.find("tenant", key, at(seconds));
            idem::testing::say(found ? state_of(*found) : "none");
          } else if (command == "hits") {
            idem::testing::say(std::to_string(store.tier_statistics().hits));
          } else {
            throw idem::testing::worker_usage_error("unknown command '" + command + "'");
          }
        }
        return 0;
      });
}
