// A replica of a service that shares one PostgreSQL store with others: the process the replica
// tests kill -9, SIGSTOP and let go. Its effect is a row written in the transaction that
// completes the record (complete_within).
//
//   idem_postgres_replica work   CONNINFO TABLE SCOPE KEYS LEASE_MS ACK_FILE
//       claims every key of SCOPE (0..KEYS-1) until each is completed, by it or by another
//       replica; appends "key fence" to ACK_FILE once a completion of its own has committed.
//   idem_postgres_replica pause-before-completing CONNINFO TABLE SCOPE KEY LEASE_MS
//   idem_postgres_replica pause-inside-transaction CONNINFO TABLE SCOPE KEY LEASE_MS
//       claims KEY, stops itself with SIGSTOP (before complete_within, or inside it after
//       writing its effect), and once continued tries to complete. Exit status: 0 refused (the
//       fence was gone), 1 completed, 2 the store threw, 3 could not claim.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <idem/store/postgres.hpp>

namespace {

using namespace std::chrono_literals;

idem::digest print() {
  const std::uint8_t bytes[16] = {7, 7, 7};
  return idem::digest{bytes};
}

std::string effect_sql(const std::string& table, const std::string& scope, const std::string& key,
                       std::uint64_t fence) {
  return "INSERT INTO \"" + table + "_effects\" VALUES ('" + scope + "', '" + key + "', " +
         std::to_string(fence) + ", " + std::to_string(::getpid()) + ")";
}

int work(idem::postgres_store& store, const std::string& table, const std::string& scope, int keys,
         std::chrono::milliseconds lease, const std::string& ack_file) {
  const int acks = ::open(ack_file.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (acks < 0) return 10;
  std::mt19937 random(static_cast<unsigned>(::getpid()));
  std::vector<int> pending(static_cast<std::size_t>(keys));
  for (int i = 0; i < keys; ++i)
    pending[static_cast<std::size_t>(i)] = i;
  while (!pending.empty()) {
    std::shuffle(pending.begin(), pending.end(), random);
    std::vector<int> later;
    for (const int index : pending) {
      const std::string key = "key-" + std::to_string(index);
      try {
        const auto claimed = store.claim(
            {scope, key, print(), std::chrono::system_clock::now(), lease, std::chrono::hours{1}});
        if (claimed.status == idem::claim_status::existing) {
          if (claimed.existing.state != idem::record_state::completed) later.push_back(index);
          continue;
        }
        const idem::fenced_key held{scope, key, claimed.fence};
        const bool applied = store.complete_within(
            held, std::chrono::system_clock::now(), [&](idem::postgres_store::transaction& txn) {
              txn.exec(effect_sql(table, scope, key, claimed.fence));
              // Some work inside the transaction, so that kills land in it too.
              std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
              return "response " + key + " fence " + std::to_string(claimed.fence);
            });
        if (!applied) {
          later.push_back(index);
          continue;
        }
        // Acknowledged only after the commit returned: what the client was told.
        const std::string line = key + " " + std::to_string(claimed.fence) + "\n";
        if (::write(acks, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 11;
      } catch (const idem::store_error&) {
        later.push_back(index);
        std::this_thread::sleep_for(10ms);
      }
    }
    pending = std::move(later);
    if (!pending.empty()) std::this_thread::sleep_for(20ms);
  }
  ::close(acks);
  return 0;
}

int pause_holder(idem::postgres_store& store, const std::string& table, const std::string& scope,
                 const std::string& key, std::chrono::milliseconds lease, bool inside) {
  const auto claimed =
      store.claim({scope, key, print(), std::chrono::system_clock::now(), lease, 1h});
  if (claimed.status != idem::claim_status::claimed) return 3;
  const idem::fenced_key held{scope, key, claimed.fence};
  if (!inside) std::raise(SIGSTOP);
  try {
    const bool applied = store.complete_within(
        held, std::chrono::system_clock::now(), [&](idem::postgres_store::transaction& txn) {
          txn.exec(effect_sql(table, scope, key, claimed.fence));
          if (inside) std::raise(SIGSTOP);
          return std::string("response of the paused holder");
        });
    if (applied) return 1;
    // The plain store calls are fenced too.
    if (store.complete(held, "stale", std::chrono::system_clock::now())) return 1;
    if (store.checkpoint(held, "stale", std::chrono::system_clock::now() + 1h)) return 1;
    return store.release(held) ? 1 : 0;
  } catch (const idem::store_error& error) {
    std::fprintf(stderr, "paused holder: %s\n", error.what());
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: see the top of tests/stores/postgres/replica.cpp\n");
    return 64;
  }
  const std::string mode = argv[1];
  idem::postgres_store::options config;
  config.conninfo = argv[2];
  config.table = argv[3];
  config.pool_size = 2;
  config.idle_in_transaction_timeout = 500ms;
  const std::string scope = argv[4];
  const std::chrono::milliseconds lease{std::atoi(argv[6])};
  try {
    idem::postgres_store store{config};
    if (mode == "work" && argc >= 8) {
      return work(store, config.table, scope, std::atoi(argv[5]), lease, argv[7]);
    }
    if (mode == "pause-before-completing" || mode == "pause-inside-transaction") {
      return pause_holder(store, config.table, scope, argv[5], lease,
                          mode == "pause-inside-transaction");
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "replica: %s\n", error.what());
    return 20;
  }
  return 64;
}
