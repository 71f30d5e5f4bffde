// idempotent and inbox with a TransactionalStore: the handler's writes and the record commit
// together. The store here is a small in-process one whose "database" is a map, with a
// transaction that buffers writes and applies them only when the record's fenced completion
// applied; the real backends (SQLite, PostgreSQL) have their own tests against real databases.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/store/locked.hpp>

#include "support/forwarding_store.hpp"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace transactional_guard_test {

using namespace std::chrono_literals;

namespace {

// A locked_store plus a key-value "database" the handler writes through the transaction.
// The records live in the forwarded locked_store (inner_); claim, complete and the rest are
// its own.
class ledger_store : public idem_test::forwarding_store<idem::locked_store> {
 public:
  struct database {
    std::mutex mutex;
    std::map<std::string, int> rows;
    int transactions = 0;          // complete_within calls that reached produce
    int conflicts_to_inject = 0;   // roll back after produce this many times, then call again
    bool fail_commit = false;      // the commit fails: store_error(unavailable)
    bool take_over_first = false;  // another attempt takes the claim over before we begin
    int checkpoints = 0;           // recovery points recorded through a transaction
  };

  class transaction {
   public:
    void put(const std::string& row, int value) { pending_[row] = value; }
    bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                    idem::store_time lease_until) {
      ++store_->db_->checkpoints;
      return store_->inner_.checkpoint(held, recovery, lease_until);
    }

   private:
    friend class ledger_store;
    explicit transaction(ledger_store* store) : store_(store) {}
    ledger_store* store_;
    std::map<std::string, int> pending_;
  };

  ledger_store() = default;

  template <class Produce>
  bool complete_within(const idem::fenced_key& held, idem::store_time now, Produce&& produce) {
    const std::lock_guard lock(db_->mutex);  // one transaction at a time
    if (db_->take_over_first) {
      db_->take_over_first = false;
      idem::claim_request steal{held.scope, held.key, {}, now + 1h, 30s, 24h};
      auto current = inner_.find(held.scope, held.key, now);
      if (current) steal.fingerprint = current->fingerprint;
      (void)inner_.claim(steal);
    }
    for (;;) {
      const auto current = inner_.find(held.scope, held.key, now);
      if (!current || current->state != idem::record_state::in_progress ||
          current->fence != held.fence) {
        return false;
      }
      transaction open{this};
      ++db_->transactions;
      std::string bytes = produce(open);  // a throw discards `open`: rolled back
      if (db_->conflicts_to_inject > 0) {
        --db_->conflicts_to_inject;
        continue;  // a serialization failure: rolled back, produce runs again
      }
      if (db_->fail_commit) throw idem::store_error(idem::store_failure::unavailable, "disk gone");
      if (!inner_.complete(held, bytes, now)) return false;
      for (auto& [row, value] : open.pending_)
        db_->rows[row] = value;
      return true;
    }
  }

  database& db() { return *db_; }

 private:
  std::shared_ptr<database> db_ = std::make_shared<database>();
};

static_assert(idem::TransactionalStore<ledger_store>);
static_assert(!idem::TransactionalStore<idem::locked_store>);
static_assert(!idem::TransactionalStore<idem::memory_store>);

struct ledger_policies : idem::default_policies {
  using store = ledger_store;
  using clock = idem::manual_clock;
};

idem::http_request post(std::string body) {
  return idem::http_request{"POST", "/transfers", {}, std::move(body)};
}

}  // namespace

TEST_CASE("transactional handler: its writes commit with the record, once") {
  int runs = 0;
  idem::idempotent<
      std::function<idem::http_response(idem::handler_context&, const idem::http_request&,
                                        ledger_store::transaction&)>,
      ledger_policies>
      transfers{[&](idem::handler_context& ctx, const idem::http_request& request,
                    ledger_store::transaction& tx) {
        ++runs;
        tx.put(std::string(ctx.key()), static_cast<int>(request.body.size()));
        return idem::http_response{201, {}, "moved " + request.body};
      }};
  auto first = transfers("acct", "k1", post("100"));
  REQUIRE(first.verdict() == idem::verdict::executed);
  CHECK(first.recorded());
  CHECK(first->body == "moved 100");
  CHECK(transfers.store().db().rows.at("k1") == 3);

  auto again = transfers("acct", "k1", post("100"));
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again->body == "moved 100");
  CHECK(runs == 1);
  CHECK(transfers.store().db().transactions == 1);
}

TEST_CASE("transactional handler: a throw rolls its writes back and releases the key") {
  int runs = 0;
  auto handler = [&](idem::handler_context&, const idem::http_request&,
                     ledger_store::transaction& tx) -> idem::http_response {
    ++runs;
    tx.put("row", 1);
    if (runs == 1) throw std::runtime_error("declined");
    return idem::http_response{201, {}, "ok"};
  };
  idem::idempotent<decltype(handler), ledger_policies> transfers{handler};
  CHECK_THROWS_WITH(transfers("acct", "k", post("x")), "declined");
  CHECK(transfers.store().db().rows.empty());
  // Released: the corrected retry runs.
  auto retry = transfers("acct", "k", post("x"));
  CHECK(retry.verdict() == idem::verdict::executed);
  CHECK(transfers.store().db().rows.at("row") == 1);
  CHECK(runs == 2);
}

TEST_CASE("transactional handler: a failed commit answers 503, writes nothing, keeps the claim") {
  int runs = 0;
  auto handler = [&](idem::handler_context&, const idem::http_request&,
                     ledger_store::transaction& tx) {
    ++runs;
    tx.put("row", runs);
    return std::string("done");
  };
  idem::idempotent<decltype(handler), ledger_policies> transfers{handler};
  transfers.store().db().fail_commit = true;
  auto failed = transfers("acct", "k", post("x"));
  CHECK(failed.verdict() == idem::verdict::store_unavailable);
  CHECK(failed.http_status() == 503);
  CHECK_THAT(std::string(failed.message()),
             Catch::Contains("did not commit") && Catch::Contains("disk gone"));
  CHECK_FALSE(failed.has_value());
  CHECK(transfers.store().db().rows.empty());

  // The claim stays until its lease ends (the commit's answer might have been lost).
  transfers.store().db().fail_commit = false;
  CHECK(transfers("acct", "k", post("x")).verdict() == idem::verdict::in_progress);
  transfers.clock().advance(31s);
  auto recovered = transfers("acct", "k", post("x"));
  CHECK(recovered.verdict() == idem::verdict::executed);
  CHECK(recovered.resumed());
  CHECK(transfers.store().db().rows.at("row") == 2);
}

TEST_CASE("transactional handler: a fence lost before the transaction runs nothing") {
  int runs = 0;
  auto handler = [&](idem::handler_context&, const idem::http_request&,
                     ledger_store::transaction&) {
    ++runs;
    return std::string("done");
  };
  idem::idempotent<decltype(handler), ledger_policies> transfers{handler};
  transfers.store().db().take_over_first = true;
  auto lost = transfers("acct", "k", post("x"));
  CHECK(lost.verdict() == idem::verdict::in_progress);
  CHECK(runs == 0);
  CHECK(transfers.store().db().transactions == 0);
}

TEST_CASE("transactional handler: a retried transaction does not repeat a step's effect") {
  int runs = 0;
  int charges = 0;
  auto handler = [&](idem::handler_context& ctx, const idem::http_request&,
                     ledger_store::transaction& tx) {
    ++runs;
    // An external effect, recorded inside the transaction: a rolled-back call's step is kept
    // in memory, so the calls after it do not charge again.
    const int charge = ctx.step("charge", [&] { return ++charges; });
    tx.put("charge", charge);
    return std::to_string(charge);
  };
  idem::idempotent<decltype(handler), ledger_policies> transfers{handler};
  transfers.store().db().conflicts_to_inject = 2;
  auto outcome = transfers("acct", "k", post("x"));
  REQUIRE(outcome.verdict() == idem::verdict::executed);
  CHECK(runs == 3);
  CHECK(charges == 1);
  CHECK(transfers.store().db().transactions == 3);
  CHECK(transfers.store().db().checkpoints == 2);  // the step: a fence check and its record
  CHECK(outcome.value() == "1");
  CHECK(transfers.store().db().rows.at("charge") == 1);
}

struct optional_key_policies : ledger_policies {
  static constexpr bool require_key = false;
};

TEST_CASE("transactional handler: a keyless call is refused, not run outside a transaction") {
  int runs = 0;
  auto handler = [&](idem::handler_context&, const idem::http_request&,
                     ledger_store::transaction&) {
    ++runs;
    return std::string("done");
  };
  idem::idempotent<decltype(handler), optional_key_policies> transfers{handler};
  auto outcome = transfers("acct", std::nullopt, post("x"));
  CHECK(outcome.verdict() == idem::verdict::missing_key);
  CHECK(runs == 0);
}

TEST_CASE("transactional inbox: the consumer's writes commit with the event's record") {
  idem::inbox<ledger_policies> consumed;
  int runs = 0;
  auto consume = [&](ledger_store::transaction& tx) {
    ++runs;
    tx.put("shipped", runs);
  };
  CHECK(consumed.deduplicate("orders", "e1", consume).verdict() == idem::verdict::executed);
  CHECK(consumed.deduplicate("orders", "e1", consume).verdict() == idem::verdict::replayed);
  CHECK(runs == 1);
  CHECK(consumed.store().db().rows.at("shipped") == 1);

  auto counted = consumed.deduplicate(
      "orders", "e2", [&](idem::handler_context& ctx, ledger_store::transaction& tx) {
        tx.put(std::string(ctx.key()), 7);
        return 7;
      });
  CHECK(counted.verdict() == idem::verdict::executed);
  CHECK(counted.value() == 7);
  CHECK(consumed.store().db().rows.at("e2") == 7);

  // A throwing consumer rolls back and releases: the redelivery runs it again.
  int attempts = 0;
  auto flaky = [&](ledger_store::transaction& tx) {
    tx.put("flaky", ++attempts);
    if (attempts == 1) throw std::runtime_error("broker hiccup");
  };
  CHECK_THROWS(consumed.deduplicate("orders", "e3", flaky));
  CHECK(consumed.store().db().rows.count("flaky") == 0);
  CHECK(consumed.deduplicate("orders", "e3", flaky).verdict() == idem::verdict::executed);
  CHECK(consumed.store().db().rows.at("flaky") == 2);
}

}  // namespace transactional_guard_test
