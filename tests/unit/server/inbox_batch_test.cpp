// inbox::deduplicate_batch over the memory store (no batch capability: one claim per id, the
// generic fallback) and the locked reference store. The durable stores run the same cases in
// their own folders (tests/stores/*), over real servers.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/locked.hpp>

#include "support/batch_inbox_cases.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct locked_policies : idem::default_policies {
  using store = idem::locked_store;
};

// Counts what it hears; copies share the counts.
class counting_observer {
 public:
  void on_call(const idem::server_call_event& e) {
    const std::lock_guard lock(counts_->mutex);
    ++counts_->verdicts[e.verdict];
  }
  void on_handler(const idem::handler_event& e) {
    const std::lock_guard lock(counts_->mutex);
    ++(e.threw ? counts_->threw : counts_->ran);
  }
  std::map<idem::verdict, int> verdicts() const {
    const std::lock_guard lock(counts_->mutex);
    return counts_->verdicts;
  }
  int ran() const { return counts_->ran; }
  int threw() const { return counts_->threw; }

 private:
  struct counts {
    std::mutex mutex;
    std::map<idem::verdict, int> verdicts;
    int ran = 0;
    int threw = 0;
  };
  std::shared_ptr<counts> counts_ = std::make_shared<counts>();
};

struct observed_policies : idem::default_policies {
  using server_observer = counting_observer;
};

idem::inbox<>::options memory_options(const idem::memory_store& store) {
  idem::inbox<>::options parts;
  parts.store = store;
  return parts;
}

}  // namespace

static_assert(!idem::BatchStore<idem::memory_store>,
              "the memory store is served by the generic fallback");

TEST_CASE("a batch runs each event once, duplicates inside it and across batches replaying") {
  idem::inbox<> inbox;
  idem_test::batch::duplicates_inside_and_across(inbox, "orders");
  idem::inbox<locked_policies> locked;
  idem_test::batch::duplicates_inside_and_across(locked, "orders");
}

TEST_CASE("a batch answers an empty batch, invalid ids and a batch past the limit plainly") {
  idem::inbox<> inbox;
  idem_test::batch::bad_input(inbox, "orders");
}

TEST_CASE("a batch whose function throws records what ran and releases the rest") {
  idem::inbox<> inbox;
  idem_test::batch::throwing_function(inbox, "orders");
}

TEST_CASE("a batch answers in_progress for an id another delivery holds") {
  idem::inbox<> inbox;
  idem_test::batch::held_elsewhere(inbox, "orders");
}

TEST_CASE("a batch keeps scopes apart") {
  idem::inbox<> inbox;
  int runs = 0;
  const std::vector<std::string> ids{"same"};
  CHECK(inbox.deduplicate_batch("a", ids, [&](std::size_t) { ++runs; })[0].verdict() ==
        idem::verdict::executed);
  CHECK(inbox.deduplicate_batch("b", ids, [&](std::size_t) { ++runs; })[0].verdict() ==
        idem::verdict::executed);
  CHECK(runs == 2);
}

TEST_CASE("overlapping batches from many threads run each event once on the memory store",
          "[concurrency]") {
  idem::memory_store store;
  idem_test::batch::overlapping_batches([&] { return idem::inbox<>(memory_options(store)); },
                                        "orders", 20, 8, 64);
}

TEST_CASE("the server observer hears each id of a batch and each run of its function") {
  counting_observer heard;
  idem::inbox<observed_policies>::options parts;
  parts.server_observer = heard;
  idem::inbox<observed_policies> inbox(std::move(parts));
  const std::vector<std::string> ids{"a", "b", "a", ""};
  (void)inbox.deduplicate_batch("orders", ids, [](std::size_t) {});
  CHECK(heard.verdicts() == std::map<idem::verdict, int>{{idem::verdict::executed, 2},
                                                         {idem::verdict::replayed, 1},
                                                         {idem::verdict::invalid_key, 1}});
  CHECK(heard.ran() == 2);
  const std::vector<std::string> failing{"c"};
  CHECK_THROWS_AS(inbox.deduplicate_batch("orders", failing,
                                          [](std::size_t) { throw std::runtime_error("no"); }),
                  std::runtime_error);
  CHECK(heard.threw() == 1);
}
