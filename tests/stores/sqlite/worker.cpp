// idem_sqlite_worker: one store user in a process of its own, for the tests that need real
// processes (sqlite_process_test.cpp). It talks to the test through stdout, a line per event,
// each written with one write(2) so the test sees it the moment it happens:
//
//   storm DB WORKER KEYS        waits for a byte on stdin, then sends KEYS shared keys through
//                               the transactional service in its own shuffled order; prints
//                               "result EXECUTED REPLAYED IN_PROGRESS WRONG".
//   requests DB DIR HANDLER POINT CRASH_KEY BLOCK KEY...
//                               sends each KEY through the service HANDLER (external or
//                               transactional); at POINT while handling CRASH_KEY prints
//                               "at KEY" and, when BLOCK is 1, stops there until it is killed.
//                               Prints "ack KEY HEX(RESPONSE)" for each response it would reply.
//   sweep DB NOW_NS BATCH       prints "at", sweeps what expired by NOW_NS, prints "done N".
//   group DB ROUND THREADS      THREADS threads claim and complete new keys ROUND-T-N through
//                               one store with group commit on and synchronous = full, until
//                               killed; each prints "claimed KEY FENCE" once its claim returned
//                               and "completed KEY" once its completion returned
//                               (sqlite_group_commit_test.cpp).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "stores/sqlite/scenario.hpp"
#include "support/worker_io.hpp"

namespace scenario = idem::testing::scenario;
using idem::testing::say;
using idem::testing::worker_arguments;

namespace {

std::string hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    out += digits[byte >> 4];
    out += digits[byte & 0xf];
  }
  return out;
}

idem::sqlite_store open_store(const std::string& path, bool durable) {
  idem::sqlite_store::options options;
  options.path = path;
  options.synchronous = durable ? idem::sqlite_store::synchronous_mode::full
                                : idem::sqlite_store::synchronous_mode::normal;
  options.busy_timeout = std::chrono::seconds{30};
  return idem::sqlite_store{options};
}

int storm(const std::string& path, int worker, int keys) {
  idem::sqlite_store store = open_store(path, false);
  scenario::create_effects_table(path);
  auto service =
      scenario::make_service(store, scenario::transactional_handler{}, scenario::epoch());
  std::vector<int> order(static_cast<std::size_t>(keys));
  for (int i = 0; i < keys; ++i)
    order[static_cast<std::size_t>(i)] = i;
  // Workers 0 and 2 go in one order, 1 and 3 in another: pairs meet head-on at every key.
  std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(worker % 2) + 1));
  say("ready");
  char go = 0;
  if (::read(STDIN_FILENO, &go, 1) != 1) return 4;

  int executed = 0, replayed = 0, in_progress = 0, wrong = 0;
  for (const int index : order) {
    const std::string key = "key-" + std::to_string(index);
    const auto outcome = (*service)("storm", key, scenario::body_for(key));
    switch (outcome.verdict()) {
      case idem::verdict::executed:
        ++executed;
        if (!outcome.recorded() || outcome.value() != "effect for " + scenario::body_for(key))
          ++wrong;
        break;
      case idem::verdict::replayed:
        ++replayed;
        if (outcome.value() != "effect for " + scenario::body_for(key)) ++wrong;
        break;
      case idem::verdict::in_progress:
        ++in_progress;
        break;
      default:
        ++wrong;
        say("wrong " + key + " " + std::string(outcome.message()));
    }
  }
  say("result " + std::to_string(executed) + " " + std::to_string(replayed) + " " +
      std::to_string(in_progress) + " " + std::to_string(wrong));
  return 0;
}

struct crash_plan {
  scenario::point where = scenario::point::none;
  std::string key;
  bool block = false;
};
crash_plan plan;

void at_point(scenario::point where, std::string_view key) {
  if (where != plan.where || key != plan.key) return;
  say("at " + std::string(key));
  if (plan.block) {
    for (;;)
      ::pause();
  }
}

template <class Handler>
int serve(const std::string& path, Handler handler, const std::vector<std::string>& keys) {
  auto service =
      scenario::make_service(open_store(path, true), std::move(handler), scenario::epoch());
  for (const std::string& key : keys) {
    const auto outcome = (*service)("crash", key, scenario::body_for(key));
    scenario::reach(scenario::point::after_complete, key);
    if (outcome.has_value()) say("ack " + key + " " + hex(outcome.value()));
  }
  say("done");
  return 0;
}

int requests(const worker_arguments& arguments) {
  const std::string& path = arguments.word(1);
  const std::string& directory = arguments.word(2);
  const std::string& handler = arguments.word(3);
  plan.where = static_cast<scenario::point>(arguments.word_number(4));
  plan.key = arguments.word(5);
  plan.block = arguments.word(6) == "1";
  const std::vector<std::string> keys = arguments.words_from(7);
  scenario::on_point = &at_point;
  if (handler == "external") {
    static scenario::provider downstream(directory);
    return serve(path, scenario::external_handler{&downstream}, keys);
  }
  return serve(path, scenario::transactional_handler{}, keys);
}

int sweep(const std::string& path, std::int64_t now, std::size_t batch) {
  idem::sqlite_store::options options;
  options.path = path;
  options.sweep_batch = batch;
  idem::sqlite_store store{options};
  say("at");
  const std::size_t removed = store.sweep(idem::detail::sqlite_time(now));
  say("done " + std::to_string(removed));
  return 0;
}

int group(const std::string& path, const std::string& round, int threads) {
  idem::sqlite_store::options options;
  options.path = path;
  options.synchronous = idem::sqlite_store::synchronous_mode::full;
  options.busy_timeout = std::chrono::seconds{30};
  options.pool_size = 4;
  options.group_commit.enabled = true;
  idem::sqlite_store store{options};
  say("ready");
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&store, &round, t] {
      for (int n = 0;; ++n) {
        const std::string key = round + "-" + std::to_string(t) + "-" + std::to_string(n);
        const idem::claim_result claimed = store.claim(
            {"group", key, scenario::group_fingerprint(), scenario::epoch(),
             std::chrono::seconds{30}, std::chrono::hours{24}, scenario::group_recovery(key)});
        if (claimed.status != idem::claim_status::claimed) std::_Exit(5);
        say("claimed " + key + " " + std::to_string(claimed.fence));
        if (!store.complete({"group", key, claimed.fence}, scenario::group_response(key),
                            scenario::epoch())) {
          std::_Exit(6);
        }
        say("completed " + key);
      }
    });
  }
  for (std::thread& thread : running)
    thread.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return idem::testing::worker_main(
      "idem_sqlite_worker",
      "idem_sqlite_worker storm DB WORKER KEYS | requests DB DIR HANDLER POINT CRASH_KEY BLOCK "
      "KEY... | sweep DB NOW_NS BATCH | group DB ROUND THREADS (see worker.cpp)",
      [&] {
        const worker_arguments arguments(argc, argv);
        const std::string& command = arguments.word(0);
        if (command == "storm" && arguments.words() == 4) {
          return storm(arguments.word(1), static_cast<int>(arguments.word_number(2)),
                       static_cast<int>(arguments.word_number(3)));
        }
        if (command == "requests" && arguments.words() >= 8) return requests(arguments);
        if (command == "sweep" && arguments.words() == 4) {
          return sweep(arguments.word(1), arguments.word_number(2),
                       static_cast<std::size_t>(arguments.word_number(3)));
        }
        if (command == "group" && arguments.words() == 4) {
          return group(arguments.word(1), arguments.word(2),
                       static_cast<int>(arguments.word_number(3)));
        }
        throw idem::testing::worker_usage_error("no such command, or not its arguments");
      });
}
