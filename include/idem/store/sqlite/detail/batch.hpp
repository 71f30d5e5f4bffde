// sqlite_store's batches (idem/store/batch.hpp): a whole batch of claims, of completions, or of
// a transactional consumer's writes and their completions, in ONE write transaction (BEGIN
// IMMEDIATE ... COMMIT): one commit, and with synchronous = full one fsync, for the batch instead
// of one per record. Each record is decided exactly as claim decides it (sqlite_decide), under
// the database's one write lock. A bounded store (max_records, max_bytes) or one with
// max_records_per_scope claims and completes one record at a time (each counts its bounds);
// complete_batch_within is one transaction there too. Included by idem/store/sqlite.hpp.
#ifndef IDEM_STORE_SQLITE_DETAIL_BATCH_HPP
#define IDEM_STORE_SQLITE_DETAIL_BATCH_HPP

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/sqlite/detail/record.hpp>
#include <idem/store/sqlite/detail/store.hpp>

namespace idem::detail {

// The batch operations, with the store's private parts (sqlite_store befriends this).
struct sqlite_batch_access {
  // Whether the store counts bounds at each claim or completion: then one record at a time.
  static bool counts_bounds(const sqlite_store& store) {
    return store.state_->bounded ||
           store.state_->settings.max_records_per_scope != std::numeric_limits<std::size_t>::max();
  }

  static std::vector<claim_result> claim_batch(sqlite_store& store,
                                               std::span<const claim_request> requests) {
    std::vector<claim_result> answers;
    answers.reserve(requests.size());
    if (requests.empty()) return answers;
    store.require();
    if (counts_bounds(store)) {
      for (const claim_request& request : requests)
        answers.push_back(store.claim(request));
      return answers;
    }
    sqlite_store::lease connection = store.acquire();
    sqlite_connection& c = *connection.get();
    sqlite_write_transaction writing(c);
    for (const claim_request& request : requests) {
      answers.push_back(claim_one(c, request));
    }
    writing.commit();
    return answers;
  }

  // One claim inside the batch's write transaction: claim's decision, unbounded.
  static claim_result claim_one(sqlite_connection& c, const claim_request& request) {
    const std::int64_t now = sqlite_nanoseconds(request.now);
    sqlite_use read(c.statement(sqlite_statement::read_record));
    sqlite_bind_key(c, read.get(), request.scope, request.key);
    if (c.step(read.get(), "read a record") != SQLITE_ROW) {
      sqlite3_reset(read.get());
      sqlite_use insert(c.statement(sqlite_statement::create_if_absent));
      sqlite_bind_new_record(c, insert.get(), request, 1);
      c.step(insert.get(), "claim a record");
      return {claim_status::claimed, 1, {}};
    }
    const sqlite_row found = sqlite_read_row(read.get(), 0);
    switch (sqlite_decide(found, request, now)) {
      case sqlite_decision::existing:
        return {claim_status::existing, 0, sqlite_snapshot(read.get(), 0, found)};
      case sqlite_decision::take_over: {
        record taken = sqlite_snapshot(read.get(), 0, found);
        sqlite3_reset(read.get());
        taken.fence = found.fence + 1;
        taken.lease_until = request.now + request.lease;
        sqlite_use update(c.statement(sqlite_statement::take_over));
        sqlite_bind_key(c, update.get(), request.scope, request.key);
        sqlite_bind_integer(c, update.get(), 3, static_cast<std::int64_t>(taken.fence));
        sqlite_bind_integer(c, update.get(), 4, sqlite_nanoseconds(taken.lease_until));
        c.step(update.get(), "take over a claim");
        const std::uint64_t fence = taken.fence;
        return {claim_status::taken_over, fence, std::move(taken)};
      }
      case sqlite_decision::create:
        break;
    }
    sqlite3_reset(read.get());
    const std::uint64_t fence = found.fence + 1;
    sqlite_use insert(c.statement(sqlite_statement::create_record));
    sqlite_bind_new_record(c, insert.get(), request, fence);
    c.step(insert.get(), "claim a record");
    return {claim_status::claimed, fence, {}};
  }

  static std::vector<bool> complete_batch(sqlite_store& store,
                                          std::span<const batch_completion> done, store_time now) {
    std::vector<bool> applied;
    applied.reserve(done.size());
    if (done.empty()) return applied;
    store.require();
    if (counts_bounds(store)) {
      for (const batch_completion& each : done) {
        applied.push_back(store.complete(each.held, each.response, now));
      }
      return applied;
    }
    sqlite_store::lease connection = store.acquire();
    sqlite_connection& c = *connection.get();
    sqlite_write_transaction writing(c);
    for (const batch_completion& each : done) {
      applied.push_back(
          sqlite_fenced_write(c, sqlite_statement::complete, each.held, each.response));
    }
    writing.commit();
    return applied;
  }

  template <class Produce>
  static std::vector<bool> complete_batch_within(sqlite_store& store,
                                                 std::span<const fenced_key> held, store_time now,
                                                 Produce& produce) {
    static_assert(
        std::is_invocable_r_v<std::string, Produce&, sqlite_store::transaction&, std::size_t>,
        "complete_batch_within's argument must be callable as "
        "std::string(idem::sqlite_store::transaction&, std::size_t): it returns the encoded "
        "response of the record at that position.");
    std::vector<bool> applied(held.size(), false);
    if (held.empty()) return applied;
    sqlite_store::lease connection = store.acquire();
    sqlite_connection& c = *connection.get();
    sqlite_write_transaction writing(c);
    std::vector<bool> still(held.size(), false);
    for (std::size_t i = 0; i < held.size(); ++i) {
      const std::optional<sqlite_held_size> sizes = sqlite_held_sizes(c, held[i]);
      still[i] = sizes && sizes->state == sqlite_in_progress;
    }
    std::size_t completed = 0;
    for (std::size_t i = 0; i < held.size(); ++i) {
      if (!still[i]) continue;
      sqlite_store::transaction open(c, *store.state_, held[i], now);
      const std::string response = produce(open, i);
      if (sqlite3_get_autocommit(c.db()) != 0) {
        throw std::logic_error(
            "idem::sqlite_store::complete_batch_within: the handler ended the transaction "
            "itself (COMMIT or ROLLBACK, or a failed statement it went on after); use "
            "SAVEPOINTs");
      }
      if (store.state_->bounded) {
        const std::optional<sqlite_held_size> sizes = sqlite_held_sizes(c, held[i]);
        if (!sizes) return applied;  // rolled back
        sqlite_reserve_bytes(c, store.state_->limits, response.size(),
                             sizes->response + sizes->recovery);
      }
      if (!sqlite_fenced_write(c, sqlite_statement::complete, held[i], response)) {
        return applied;  // rolled back: nothing of the batch is written
      }
      ++completed;
    }
    if (completed == 0) return applied;
    writing.commit();
    return still;
  }
};

}  // namespace idem::detail

namespace idem {

inline std::vector<claim_result> sqlite_store::claim_batch(
    std::span<const claim_request> requests) {
  return detail::sqlite_batch_access::claim_batch(*this, requests);
}

inline std::vector<bool> sqlite_store::complete_batch(std::span<const batch_completion> done,
                                                      store_time now) {
  return detail::sqlite_batch_access::complete_batch(*this, done, now);
}

template <class Produce>
std::vector<bool> sqlite_store::complete_batch_within(std::span<const fenced_key> held,
                                                      store_time now, Produce&& produce) {
  return detail::sqlite_batch_access::complete_batch_within(*this, held, now, produce);
}

}  // namespace idem

#endif  // IDEM_STORE_SQLITE_DETAIL_BATCH_HPP
