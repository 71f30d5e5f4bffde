// inbox::deduplicate_batch over the memory store (no batch capability: one claim per id, the
// generic fallback) and the locked reference store. The durable stores run the same cases in
// their own folders (tests/stores/*), over real servers.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/locked.hpp>

#include "support/batch_inbox_cases.hpp"

#include <string>
#include <vector>

namespace {

struct locked_policies : idem::default_policies {
  using store = idem::locked_store;
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
