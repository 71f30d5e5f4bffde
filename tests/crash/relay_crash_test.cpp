// The relay's crash matrix (issue #29), with real processes, real databases and real Redis: a
// relay worker (idem_crash_relay_worker, relay_worker.cpp) relaying an SQLite or a PostgreSQL
// outbox into the Redis Streams sink kills itself with SIGKILL
//   * after fetching a batch, before the sink has it;
//   * after the sink published it (Redis acknowledged every XADD), before the relay marks it;
//   * during the marking, inside the settle's open transaction (the worker's comment says how
//     it gets there without a hook in the library, and it prints "marking ... in the open
//     settle transaction" when it did);
// then a successor relay drains the outbox. What reached the consumer side is read back from
// the stream itself (XRANGE), and for every run:
//   * the kill landed where claimed: the worker printed its point, died of SIGKILL, and the
//     database shows the killed batch (and everything after it) still unpublished, so the
//     settle, where it had begun, committed nothing;
//   * none lost: every message written is in the stream, the outbox has nothing unpublished
//     and no dead letter;
//   * at least once, exactly as expected: the killed batch is in the stream twice when the kill
//     came after the publish (the successor sends it again: redeliveries, counted, must be
//     more than zero), once when it came before; every other message once;
//   * per partition key in order (docs/outbox_relay.md, "Ordering, exactly"): the stream's first
//     copy of each message of a key comes in the order the key's messages were committed.
// Runs per point per store: IDEM_CRASH_RUNS (crash_support.hpp), 50 by default; runs_at_once of
// them at a time, each with its own database and stream.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "crash/crash_support.hpp"
#include "stores/redis/stream_test_support.hpp"

namespace relay_crash_test {

using idem_crash::finished;
using idem_crash::on_postgres;
using idem_crash::on_sqlite;
using idem_stream_test::stream_fixture;

namespace {

constexpr int messages_per_run = 48;
constexpr int batch_size = 8;
constexpr int keys = 4;

// One run's world: its database and its stream.
template <class Store>
struct relay_run {
  Store store;
  stream_fixture stream;
  std::vector<idem_crash::written> messages;
  int doomed_batch = 1;  // the batch the worker dies in, from 1
  int row = 0;           // during_marking: the row of that batch it dies marking
};

std::vector<std::string> relay_arguments(const std::vector<std::string>& store,
                                         const stream_fixture& stream) {
  std::vector<std::string> arguments = store;
  arguments.push_back("--redis-host=" + stream.host());
  arguments.push_back("--redis-port=" + std::to_string(stream.port()));
  arguments.push_back("--prefix=" + stream.prefix());
  arguments.push_back("--batch=" + std::to_string(batch_size));
  return arguments;
}

// The stream's entries as (message id, partition key), in stream order.
std::vector<std::pair<std::string, std::string>> delivered(stream_fixture& stream) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const idem_stream_test::fields& entry : stream.entries(stream.stream())) {
    std::string id, key;
    for (const auto& [name, value] : entry) {
      if (name == "id") id = value;
      if (name == "partition_key") key = value;
    }
    out.emplace_back(id, key);
  }
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "a relay killed after fetching, after publishing or while marking loses nothing, and the "
    "next relay sends what was not marked, in order per key",
    "[crash][relay][concurrency]", on_sqlite, on_postgres) {
  const std::string point =
      GENERATE(as<std::string>{}, "after_fetch", "after_publish", "during_marking");
  const bool published_before_kill = point != "after_fetch";
  const int runs = idem_crash::runs_per_point();
  int confirmed = 0;
  long long redeliveries = 0;

  for (int first = 0; first < runs; first += idem_crash::runs_at_once) {
    const int count = std::min(idem_crash::runs_at_once, runs - first);
    std::vector<std::unique_ptr<relay_run<TestType>>> round;
    std::vector<std::vector<std::string>> doomed;
    for (int i = 0; i < count; ++i) {
      const int run = first + i;
      auto& each = *round.emplace_back(std::make_unique<relay_run<TestType>>());
      for (int m = 0; m < messages_per_run; ++m) {
        idem_crash::written message;
        message.id = "m-" + std::to_string(m);
        message.message.topic = each.stream.topic();
        message.message.partition_key = "acct-" + std::to_string(m % keys);
        message.message.payload = std::to_string(m);
        each.messages.push_back(std::move(message));
      }
      each.store.write(each.messages);
      // The first batch (nothing settled yet) to the fifth; each row of a batch in turn.
      each.doomed_batch = 1 + run % 5;
      each.row = run % batch_size;
      std::vector<std::string> arguments =
          relay_arguments(each.store.worker_arguments("outbox"), each.stream);
      arguments.push_back("--die=" + point);
      arguments.push_back("--die-batch=" + std::to_string(each.doomed_batch));
      arguments.push_back("--die-row=" + std::to_string(each.row));
      doomed.push_back(std::move(arguments));
    }
    const std::vector<finished> killed = idem_crash::run_together(IDEM_CRASH_RELAY_WORKER, doomed);

    // Where each kill landed, from the worker's words and from the database.
    std::vector<std::set<std::string>> killed_batches(round.size());
    std::vector<long long> left(round.size());
    std::vector<std::vector<std::string>> successors;
    for (std::size_t i = 0; i < round.size(); ++i) {
      auto& each = *round[i];
      INFO(TestType::name << ", " << point << ", run " << first + static_cast<int>(i) << ", batch "
                          << each.doomed_batch << ", row " << each.row
                          << "; the doomed worker printed:\n"
                          << killed[i].text());
      REQUIRE(killed[i].killed());
      const auto at = killed[i].line_after("at " + point + " ");
      REQUIRE(at);
      const std::vector<std::string> ids = idem_crash::words_of(*at);
      killed_batches[i] = {ids.begin(), ids.end()};
      REQUIRE(killed_batches[i].size() == static_cast<std::size_t>(batch_size));
      if (point == "during_marking") {
        REQUIRE(killed[i]
                    .line_after("marking ")
                    .value_or("")
                    .ends_with(" in the open settle transaction"));
      }
      left[i] = each.store.unpublished();
      // The batches before the doomed one settled; the doomed one did not, however far its
      // settle had gone.
      REQUIRE(left[i] == messages_per_run - (each.doomed_batch - 1) * batch_size);
      ++confirmed;
      std::vector<std::string> arguments =
          relay_arguments(each.store.worker_arguments("outbox"), each.stream);
      // A minute ahead: the SQLite lease the dead worker held (30 s) has run out.
      arguments.push_back("--clock-ahead-s=60");
      successors.push_back(std::move(arguments));
    }
    const std::vector<finished> drained =
        idem_crash::run_together(IDEM_CRASH_RELAY_WORKER, successors);

    for (std::size_t i = 0; i < round.size(); ++i) {
      auto& each = *round[i];
      INFO(TestType::name << ", " << point << ", run " << first + static_cast<int>(i) << ", batch "
                          << each.doomed_batch << "; the successor printed:\n"
                          << drained[i].text());
      REQUIRE(drained[i].exited_ok());
      CHECK(drained[i].line_after("done ") == std::to_string(left[i]));
      CHECK(each.store.unpublished() == 0);
      CHECK(each.store.dead_letters() == 0);

      const auto stream = delivered(each.stream);
      std::map<std::string, int> copies;
      std::map<std::string, std::vector<std::string>> first_copies_by_key;
      for (const auto& [id, key] : stream) {
        if (++copies[id] == 1) first_copies_by_key[key].push_back(id);
      }
      CHECK(copies.size() == each.messages.size());  // nothing the outbox did not hold
      std::map<std::string, std::vector<std::string>> written_by_key;
      for (const idem_crash::written& message : each.messages) {
        INFO("message " << message.id);
        const bool again = published_before_kill && killed_batches[i].contains(message.id);
        CHECK(copies[message.id] == (again ? 2 : 1));
        written_by_key[message.message.partition_key].push_back(message.id);
      }
      CHECK(first_copies_by_key == written_by_key);
      const long long again = static_cast<long long>(stream.size() - copies.size());
      if (published_before_kill) CHECK(again == batch_size);
      redeliveries += again;
    }
  }
  // Counted, so that a run in which no redelivery happened cannot pass for a proof.
  WARN(TestType::name << ", relay killed " << point << ": " << runs << " runs, " << confirmed
                      << " kills confirmed at the point, " << redeliveries
                      << " redeliveries (the same message in the stream twice)");
  CHECK(confirmed == runs);
  if (published_before_kill) {
    CHECK(redeliveries == static_cast<long long>(runs) * batch_size);
  } else {
    CHECK(redeliveries == 0);
  }
}

}  // namespace relay_crash_test
