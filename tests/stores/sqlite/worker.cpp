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
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "stores/sqlite/scenario.hpp"

namespace scenario = idem::testing::scenario;

namespace {

void say(const std::string& line) {
  const std::string text = line + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t written = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (written <= 0) std::_Exit(3);
    done += static_cast<std::size_t>(written);
  }
}

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

int requests(int argc, char** argv) {
  const std::string path = argv[2];
  const std::string directory = argv[3];
  const std::string handler = argv[4];
  plan.where = static_cast<scenario::point>(std::stoi(argv[5]));
  plan.key = argv[6];
  plan.block = std::string(argv[7]) == "1";
  const std::vector<std::string> keys(argv + 8, argv + argc);
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

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "storm" && argc == 5) {
      return storm(argv[2], std::stoi(argv[3]), std::stoi(argv[4]));
    }
    if (command == "requests" && argc >= 9) return requests(argc, argv);
    if (command == "sweep" && argc == 5) {
      return sweep(argv[2], std::stoll(argv[3]), std::stoul(argv[4]));
    }
    std::fprintf(stderr, "idem_sqlite_worker: bad arguments (see worker.cpp)\n");
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "idem_sqlite_worker: %s\n", error.what());
    return 1;
  }
}
