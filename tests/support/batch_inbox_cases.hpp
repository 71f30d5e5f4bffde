// The behaviour of inbox::deduplicate_batch that every store must show, as functions each store's
// test file calls with its own inbox type and a fresh inbox (over a real server where the store
// has one). Each asserts through Catch2.
#ifndef IDEM_TESTS_SUPPORT_BATCH_INBOX_CASES_HPP
#define IDEM_TESTS_SUPPORT_BATCH_INBOX_CASES_HPP

#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace idem_test::batch {

// Effects counted per event id: what "ran once" is checked against.
struct effects {
  std::mutex mutex;
  std::map<std::string, int> runs;
  void add(std::string_view id) {
    const std::lock_guard lock(mutex);
    ++runs[std::string(id)];
  }
  int of(std::string_view id) {
    const std::lock_guard lock(mutex);
    const auto found = runs.find(std::string(id));
    return found == runs.end() ? 0 : found->second;
  }
};

inline std::vector<std::string> ids_of(std::string_view prefix, std::size_t from, std::size_t to) {
  std::vector<std::string> ids;
  for (std::size_t i = from; i < to; ++i)
    ids.push_back(std::string(prefix) + std::to_string(i));
  return ids;
}

// A batch with an id repeated inside it, then a second batch that repeats some of the first's:
// each id runs once, in-batch duplicates and redeliveries replay the first run's result.
template <class Inbox>
void duplicates_inside_and_across(Inbox& inbox, std::string_view scope) {
  effects done;
  const std::vector<std::string> first{"e1", "e2", "e1", "e3", "e2", "e1"};
  auto fn = [&](const std::vector<std::string>& ids) {
    return [&done, &ids](std::size_t index) {
      done.add(ids[index]);
      return "result of " + ids[index] + " at " + std::to_string(index);
    };
  };
  const auto one = inbox.deduplicate_batch(scope, first, fn(first));
  REQUIRE(one.size() == first.size());
  const std::array<idem::verdict, 6> expected{idem::verdict::executed, idem::verdict::executed,
                                              idem::verdict::replayed, idem::verdict::executed,
                                              idem::verdict::replayed, idem::verdict::replayed};
  for (std::size_t i = 0; i < first.size(); ++i) {
    INFO("position " << i);
    CHECK(one[i].verdict() == expected[i]);
    REQUIRE(one[i].has_value());
  }
  CHECK(one[0].value() == "result of e1 at 0");
  CHECK(one[2].value() == "result of e1 at 0");
  CHECK(one[5].value() == "result of e1 at 0");
  CHECK(one[4].value() == "result of e2 at 1");
  CHECK(one[0].recorded());
  CHECK(done.of("e1") == 1);
  CHECK(done.of("e2") == 1);
  CHECK(done.of("e3") == 1);

  const std::vector<std::string> second{"e4", "e3", "e1", "e4"};
  const auto two = inbox.deduplicate_batch(scope, second, fn(second));
  REQUIRE(two.size() == second.size());
  CHECK(two[0].verdict() == idem::verdict::executed);
  CHECK(two[1].verdict() == idem::verdict::replayed);
  CHECK(two[2].verdict() == idem::verdict::replayed);
  CHECK(two[3].verdict() == idem::verdict::replayed);
  CHECK(two[1].value() == "result of e3 at 3");
  CHECK(two[2].value() == "result of e1 at 0");
  CHECK(two[3].value() == "result of e4 at 0");
  CHECK(done.of("e3") == 1);
  CHECK(done.of("e4") == 1);
  // The single-event path sees what the batch recorded, and the batch what it records.
  const auto single = inbox.deduplicate(scope, "e2", [] { return std::string("again"); });
  CHECK(single.verdict() == idem::verdict::replayed);
  CHECK(single.value() == "result of e2 at 1");
  (void)inbox.deduplicate(scope, "e5", [] { return std::string("single"); });
  const std::vector<std::string> third{"e5"};
  const auto three = inbox.deduplicate_batch(scope, third, fn(third));
  CHECK(three[0].verdict() == idem::verdict::replayed);
  CHECK(three[0].value() == "single");
  CHECK(done.of("e5") == 0);
}

// An empty batch answers nothing; an invalid id answers invalid_key in its place and the rest
// runs; a batch past the limit is refused before anything is claimed.
template <class Inbox>
void bad_input(Inbox& inbox, std::string_view scope) {
  effects done;
  const std::vector<std::string> none;
  CHECK(inbox.deduplicate_batch(scope, none, [&](std::size_t) { done.add("?"); }).empty());
  const std::vector<std::string> mixed{"ok-1", "", "bad id", std::string(300, 'k'), "ok-2", ""};
  const auto answers =
      inbox.deduplicate_batch(scope, mixed, [&](std::size_t index) { done.add(mixed[index]); });
  REQUIRE(answers.size() == mixed.size());
  CHECK(answers[0].verdict() == idem::verdict::executed);
  CHECK(answers[1].verdict() == idem::verdict::invalid_key);
  CHECK(answers[2].verdict() == idem::verdict::invalid_key);
  CHECK(answers[3].verdict() == idem::verdict::invalid_key);
  CHECK(answers[4].verdict() == idem::verdict::executed);
  CHECK(answers[5].verdict() == idem::verdict::invalid_key);
  CHECK(answers[1].message().find("event id") != std::string_view::npos);
  CHECK(done.of("ok-1") == 1);
  CHECK(done.of("ok-2") == 1);
  CHECK(done.runs.size() == 2);
  const std::vector<std::string> huge = ids_of("big-", 0, idem::detail::max_inbox_batch + 1);
  CHECK_THROWS_AS(inbox.deduplicate_batch(scope, huge, [&](std::size_t) { done.add("big"); }),
                  std::invalid_argument);
  CHECK(done.of("big") == 0);
  // Nothing of the refused batch was claimed: its first id runs in a batch of its own.
  const std::vector<std::string> after{huge.front()};
  CHECK(inbox.deduplicate_batch(scope, after, [&](std::size_t) { done.add("big"); })[0].verdict() ==
        idem::verdict::executed);
}

// A function that throws at one id: the ids before it are recorded, it and the rest released,
// and the exception passes through; the redelivery runs exactly the ones that were not recorded.
template <class Inbox>
void throwing_function(Inbox& inbox, std::string_view scope) {
  effects done;
  const std::vector<std::string> ids{"t1", "t2", "t3", "t4"};
  CHECK_THROWS_WITH(inbox.deduplicate_batch(scope, ids,
                                            [&](std::size_t index) {
                                              if (ids[index] == "t3") {
                                                throw std::runtime_error("t3 failed");
                                              }
                                              done.add(ids[index]);
                                              return ids[index];
                                            }),
                    "t3 failed");
  const auto again = inbox.deduplicate_batch(scope, ids, [&](std::size_t index) {
    done.add(ids[index]);
    return ids[index];
  });
  CHECK(again[0].verdict() == idem::verdict::replayed);
  CHECK(again[1].verdict() == idem::verdict::replayed);
  CHECK(again[2].verdict() == idem::verdict::executed);
  CHECK(again[3].verdict() == idem::verdict::executed);
  for (const std::string& id : ids)
    CHECK(done.of(id) == 1);
}

// An id held by a live claim (a delivery still running elsewhere) answers in_progress, and the
// batch does not run it.
template <class Inbox>
void held_elsewhere(Inbox& inbox, std::string_view scope) {
  effects done;
  const std::vector<std::string> ids{"h1", "h2"};
  std::vector<idem::idempotent_outcome<std::monostate>> inner;
  const auto outer = inbox.deduplicate(scope, "h2", [&] {
    inner = inbox.deduplicate_batch(scope, ids, [&](std::size_t index) { done.add(ids[index]); });
  });
  CHECK(outer.verdict() == idem::verdict::executed);
  REQUIRE(inner.size() == 2);
  CHECK(inner[0].verdict() == idem::verdict::executed);
  CHECK(inner[1].verdict() == idem::verdict::in_progress);
  CHECK(done.of("h2") == 0);
}

// Threads deliver overlapping batches of the same ids at once: every id's effect happens exactly
// once, and every answer is executed, replayed or in_progress.
template <class MakeInbox>
void overlapping_batches(MakeInbox make_inbox, std::string_view scope, int rounds,
                         std::size_t threads, std::size_t ids_per_round) {
  for (int round = 0; round < rounds; ++round) {
    effects done;
    const std::vector<std::string> all =
        ids_of("r" + std::to_string(round) + "-", 0, ids_per_round);
    std::atomic<int> executed{0};
    std::atomic<int> odd{0};
    std::vector<std::thread> workers;
    for (std::size_t t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        auto inbox = make_inbox();
        // Each thread takes the ids in its own rotation, with one repeated, so batches overlap
        // in every order.
        std::vector<std::string> mine;
        for (std::size_t i = 0; i < all.size(); ++i)
          mine.push_back(all[(i + t * 3) % all.size()]);
        mine.push_back(all[t % all.size()]);
        const auto answers = inbox.deduplicate_batch(scope, mine, [&](std::size_t index) {
          done.add(mine[index]);
          return mine[index];
        });
        for (const auto& answer : answers) {
          if (answer.verdict() == idem::verdict::executed) {
            ++executed;
          } else if (answer.verdict() != idem::verdict::replayed &&
                     answer.verdict() != idem::verdict::in_progress) {
            ++odd;
          }
        }
      });
    }
    for (std::thread& worker : workers)
      worker.join();
    INFO("round " << round);
    CHECK(odd.load() == 0);
    CHECK(executed.load() == static_cast<int>(all.size()));
    for (const std::string& id : all)
      CHECK(done.of(id) == 1);
  }
}

}  // namespace idem_test::batch

#endif  // IDEM_TESTS_SUPPORT_BATCH_INBOX_CASES_HPP
