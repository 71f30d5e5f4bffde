// inbox::deduplicate_batch with a transactional function, on two small in-process stores whose
// "database" is a map: one a TransactionalStore without batches (each id in a transaction of its
// own), one a TransactionalBatchStore (the whole batch in one transaction). The real backends
// (SQLite, PostgreSQL) have their own tests against real databases.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/locked.hpp>

#include "support/forwarding_store.hpp"

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// A locked_store plus rows written through a transaction that buffers them and applies them
// only when the completions applied. Batches: complete_batch_within commits a whole batch.
template <bool Batches>
class rows_store : public idem_test::forwarding_store<idem::locked_store> {
 public:
  struct database {
    std::mutex mutex;
    std::map<std::string, int> rows;
    int commits = 0;
  };

  class transaction {
   public:
    void put(const std::string& row) { ++pending_[row]; }
    bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                    idem::store_time lease_until) {
      return store_->inner_.checkpoint(held, recovery, lease_until);
    }

   private:
    friend class rows_store;
    explicit transaction(rows_store* store) : store_(store) {}
    rows_store* store_;
    std::map<std::string, int> pending_;
  };

  template <class Produce>
  bool complete_within(const idem::fenced_key& held, idem::store_time now, Produce&& produce) {
    const std::lock_guard lock(db_->mutex);
    const auto current = inner_.find(held.scope, held.key, now);
    if (!current || current->state != idem::record_state::in_progress ||
        current->fence != held.fence) {
      return false;
    }
    transaction open{this};
    const std::string bytes = produce(open);  // a throw discards `open`: rolled back
    if (!inner_.complete(held, bytes, now)) return false;
    commit(open);
    return true;
  }

  std::vector<idem::claim_result> claim_batch(
      std::span<const idem::claim_request> requests) requires Batches {
    std::vector<idem::claim_result> out;
    for (const idem::claim_request& request : requests)
      out.push_back(inner_.claim(request));
    return out;
  }
  std::vector<bool> complete_batch(std::span<const idem::batch_completion> done,
                                   idem::store_time now) requires Batches {
    std::vector<bool> out;
    for (const idem::batch_completion& each : done) {
      out.push_back(inner_.complete(each.held, each.response, now));
    }
    return out;
  }
  template <class Produce>
  std::vector<bool> complete_batch_within(std::span<const idem::fenced_key> held,
                                          idem::store_time now,
                                          Produce&& produce) requires Batches {
    const std::lock_guard lock(db_->mutex);
    std::vector<bool> still(held.size(), false);
    transaction open{this};
    std::vector<std::string> bytes(held.size());
    for (std::size_t i = 0; i < held.size(); ++i) {
      const auto current = inner_.find(held[i].scope, held[i].key, now);
      still[i] = current && current->state == idem::record_state::in_progress &&
                 current->fence == held[i].fence;
      if (still[i]) bytes[i] = produce(open, i);  // a throw discards `open`: rolled back
    }
    for (std::size_t i = 0; i < held.size(); ++i) {
      if (still[i]) still[i] = inner_.complete(held[i], bytes[i], now);
    }
    commit(open);
    return still;
  }

  database& db() { return *db_; }

 private:
  void commit(const transaction& open) {
    for (const auto& [row, count] : open.pending_)
      db_->rows[row] += count;
    ++db_->commits;
  }
  std::shared_ptr<database> db_ = std::make_shared<database>();
};

using one_by_one = rows_store<false>;
using batched = rows_store<true>;
static_assert(idem::TransactionalStore<one_by_one> && !idem::BatchStore<one_by_one>);
static_assert(idem::TransactionalBatchStore<batched>);

template <class Store>
struct policies : idem::default_policies {
  using store = Store;
};

template <class Store>
void runs_each_event_once_with_its_rows() {
  idem::inbox<policies<Store>> inbox;
  const std::vector<std::string> ids{"a", "b", "a", "c"};
  auto write = [&](std::size_t index, typename Store::transaction& txn) {
    txn.put(ids[index]);
    return ids[index] + "!";
  };
  const auto first = inbox.deduplicate_batch("events", ids, write);
  CHECK(first[0].verdict() == idem::verdict::executed);
  CHECK(first[1].verdict() == idem::verdict::executed);
  CHECK(first[2].verdict() == idem::verdict::replayed);
  CHECK(first[2].value() == "a!");
  CHECK(first[3].verdict() == idem::verdict::executed);
  const auto again = inbox.deduplicate_batch("events", ids, write);
  for (const auto& answer : again)
    CHECK(answer.verdict() == idem::verdict::replayed);
  auto& rows = inbox.store().db().rows;
  CHECK(rows == std::map<std::string, int>{{"a", 1}, {"b", 1}, {"c", 1}});
  // One commit for the batch where the store has batches, one per event where it has not.
  CHECK(inbox.store().db().commits == (idem::BatchStore<Store> ? 1 : 3));
}

}  // namespace

TEST_CASE("a transactional batch runs each event once, its rows committed with its records") {
  runs_each_event_once_with_its_rows<one_by_one>();
  runs_each_event_once_with_its_rows<batched>();
}

TEST_CASE(
    "a throwing transactional batch rolls the whole batch back where the store has "
    "batches") {
  idem::inbox<policies<batched>> inbox;
  const std::vector<std::string> ids{"a", "b", "c"};
  CHECK_THROWS_WITH(inbox.deduplicate_batch("events", ids,
                                            [&](std::size_t index, batched::transaction& txn) {
                                              txn.put(ids[index]);
                                              if (index == 1) throw std::runtime_error("b failed");
                                            }),
                    "b failed");
  CHECK(inbox.store().db().rows.empty());
  const auto again = inbox.deduplicate_batch(
      "events", ids, [&](std::size_t index, batched::transaction& txn) { txn.put(ids[index]); });
  for (const auto& answer : again)
    CHECK(answer.verdict() == idem::verdict::executed);
  CHECK(inbox.store().db().rows == std::map<std::string, int>{{"a", 1}, {"b", 1}, {"c", 1}});
}

TEST_CASE(
    "a throwing transactional batch keeps the events committed before it where the store "
    "has no batches") {
  idem::inbox<policies<one_by_one>> inbox;
  const std::vector<std::string> ids{"a", "b", "c"};
  CHECK_THROWS_WITH(inbox.deduplicate_batch("events", ids,
                                            [&](std::size_t index, one_by_one::transaction& txn) {
                                              txn.put(ids[index]);
                                              if (index == 1) throw std::runtime_error("b failed");
                                            }),
                    "b failed");
  CHECK(inbox.store().db().rows == std::map<std::string, int>{{"a", 1}});
  const auto again = inbox.deduplicate_batch(
      "events", ids, [&](std::size_t index, one_by_one::transaction& txn) { txn.put(ids[index]); });
  CHECK(again[0].verdict() == idem::verdict::replayed);
  CHECK(again[1].verdict() == idem::verdict::executed);
  CHECK(again[2].verdict() == idem::verdict::executed);
  CHECK(inbox.store().db().rows == std::map<std::string, int>{{"a", 1}, {"b", 1}, {"c", 1}});
}
