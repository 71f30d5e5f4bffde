// postgres_store::claim_within: claim, the handler's writes and the completion in one
// transaction, one commit (idem/store/one_commit.hpp has the contract; docs/one_commit.md when
// to use it).
//
// The claim is the store's own statement (INSERT ... ON CONFLICT (scope, key) DO UPDATE ...),
// run inside the transaction. A duplicate's claim of the same key blocks on the key's primary
// key index (an uncommitted insert) or on the row's lock (a takeover) until this transaction
// ends; then, in READ COMMITTED, its next statement sees what committed: the completed record
// (a replay), or, after a rollback, a free key it claims itself. The transaction's lock_timeout
// (set_config(..., true): SET LOCAL, prepared) bounds that wait (options::one_commit_lock_timeout):
// past it the server cancels the statement with SQLSTATE 55P03, and the answer is busy.
#ifndef IDEM_STORE_POSTGRES_DETAIL_ONE_COMMIT_HPP
#define IDEM_STORE_POSTGRES_DETAIL_ONE_COMMIT_HPP

#include <libpq-fe.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/one_commit.hpp>
#include <idem/store/postgres/detail/store.hpp>

namespace idem {

namespace detail::postgres {

// SQLSTATE 55P03 lock_not_available: lock_timeout passed.
inline bool lock_timed_out(const PGresult* result) noexcept {
  const char* state = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_SQLSTATE);
  return state != nullptr && std::string_view(state) == "55P03";
}

// BEGIN, the transaction's lock_timeout and the claim in one round trip. Answers the claim's
// result; null when it passed the lock timeout (the transaction is then aborted); throws as
// borrowed_connection::run does for anything else.
inline result_ptr begin_and_claim(borrowed_connection& connection, const char* begin,
                                  const parameters& timeout, const parameters& values) {
  std::vector<result_ptr> got = pipelined(connection, 3, "claim_within: begin", [&](PGconn* c) {
    return PQsendQueryParams(c, begin, 0, nullptr, nullptr, nullptr, nullptr, 1) == 1 &&
           PQsendQueryPrepared(c, statement_names[lock_timeout], timeout.count(), timeout.values(),
                               timeout.lengths(), parameters::formats(), 1) == 1 &&
           PQsendQueryPrepared(c, statement_names[claim], values.count(), values.values(),
                               values.lengths(), parameters::formats(), 1) == 1;
  });
  const char* steps[] = {"claim_within: begin", "claim_within: set the lock timeout",
                         "claim_within: claim"};
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (succeeded(got[i])) continue;
    if (i == 2 && lock_timed_out(got[i].get())) return nullptr;
    connection.fail(got[i].get(), steps[i], true);
  }
  return std::move(got[2]);
}

}  // namespace detail::postgres

template <class Produce>
one_commit_result postgres_store::claim_within(const claim_request& request, Produce&& produce) {
  static_assert(std::is_invocable_r_v<std::string, Produce&, transaction&, claim_result&>,
                "claim_within's argument must be callable as std::string(idem::postgres_store::"
                "transaction&, idem::claim_result&): it returns the encoded response.");
  namespace pg = detail::postgres;
  pool& shared = state_checked();
  const char* begin = "BEGIN ISOLATION LEVEL READ COMMITTED";
  if (shared.config.transaction_isolation == isolation::repeatable_read) {
    begin = "BEGIN ISOLATION LEVEL REPEATABLE READ";
  } else if (shared.config.transaction_isolation == isolation::serializable) {
    begin = "BEGIN ISOLATION LEVEL SERIALIZABLE";
  }
  // The bound on lock waits, in milliseconds, for this transaction only. 0 would wait forever:
  // 1 ms.
  pg::parameters timeout;
  timeout.int8(std::max<std::int64_t>(1, shared.config.one_commit_lock_timeout.count()));
  const bool capped =
      shared.config.max_records_per_scope != std::numeric_limits<std::size_t>::max();
  for (unsigned attempt = 0;; ++attempt) {
    if (attempt > 0) pg::wait_before_retry(shared.config.serialization_backoff, attempt - 1);
    borrowed connection = shared.acquire();
    // A statement that waits on another transaction's lock: its result, or nothing when the
    // lock timeout passed (the transaction is then aborted: rolled back here).
    const auto waiting = [&](pg::statement which, const pg::parameters& values,
                             const char* what) -> pg::result_ptr {
      pg::result_ptr result{PQexecPrepared(connection.get(), pg::statement_names[which],
                                           values.count(), values.values(), values.lengths(),
                                           pg::parameters::formats(), 1)};
      const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
      if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return result;
      if (pg::lock_timed_out(result.get())) return nullptr;
      connection.fail(result.get(), what, true);
    };
    std::optional<transaction> txn;
    try {
      pg::parameters values;
      pg::claim_parameters(values, request, caller_time());
      std::optional<claim_result> claimed;
      if (!capped) {
        // The common case: the transaction, its lock timeout and the claim in one round trip.
        const pg::result_ptr result = pg::begin_and_claim(connection, begin, timeout, values);
        if (!result) {
          connection.roll_back();
          return {one_commit_status::busy, 0, {}};
        }
        claimed = pg::claim_answer(result.get(), request);
      } else {
        connection.run_text(begin, "claim_within: begin", true);
        connection.run(pg::lock_timeout, timeout, "claim_within: set the lock timeout", true);
        // As claim does with a cap: the scope's turn, then its room; held to the commit.
        pg::parameters scope;
        pg::scope_parameters(scope, request);
        if (!waiting(pg::scope_turn, scope, "claim_within: wait for the scope's turn")) {
          connection.roll_back();
          return {one_commit_status::busy, 0, {}};
        }
        pg::parameters room;
        pg::room_parameters(room, request, caller_time());
        const pg::result_ptr counted =
            connection.run(pg::scope_room, room, "claim_within: count the scope's records", true);
        if (pg::room_is_full(counted.get(), shared.config.max_records_per_scope)) {
          connection.roll_back();
          return {one_commit_status::full, 0, {}};
        }
      }
      // READ COMMITTED: a claim that waited for a duplicate's transaction and found its row
      // committed reports it only from the next statement's snapshot (claim_answer says ask
      // again).
      for (int ask = 0; ask < 1000 && !claimed; ++ask) {
        const pg::result_ptr result = waiting(pg::claim, values, "claim_within: claim");
        if (!result) {
          connection.roll_back();
          return {one_commit_status::busy, 0, {}};
        }
        claimed = pg::claim_answer(result.get(), request);
      }
      if (!claimed) {
        throw store_error(store_failure::unavailable,
                          "idem::postgres_store: claim_within: the record kept changing under "
                          "1000 attempts");
      }
      if (claimed->status == claim_status::existing) {
        connection.roll_back();
        return {one_commit_status::existing, 0, std::move(claimed->existing)};
      }
      const fenced_key held{request.scope, request.key, claimed->fence};
      txn.emplace(transaction(this, &connection, held,
                              caller_time()
                                  ? std::optional<std::int64_t>{pg::to_nanoseconds(request.now)}
                                  : std::nullopt));
      const std::string bytes = produce(*txn, *claimed);
      if (txn->retry_) {
        throw postgres_error("40001",
                             "idem::postgres_store: claim_within: the handler's transaction hit a "
                             "serialization failure");
      }
      pg::parameters completion;
      pg::held_parameters(completion, held);
      completion.bytes(bytes);
      if (!pg::complete_and_commit(connection, completion, "claim_within: complete",
                                   "claim_within: commit")) {
        throw store_error(store_failure::unavailable,
                          "idem::postgres_store: claim_within: the record was changed inside the "
                          "transaction (by the handler's own SQL); nothing was committed");
      }
      return {one_commit_status::committed, claimed->fence, {}};
    } catch (const postgres_error& error) {
      connection.roll_back();
      if (!error.retryable()) throw;
      if (attempt >= shared.config.max_serialization_retries) {
        throw store_error(store_failure::unavailable,
                          "idem::postgres_store: claim_within gave up after " +
                              std::to_string(attempt + 1) +
                              " serialization failures or deadlocks; the last: " + error.what());
      }
    } catch (...) {
      connection.roll_back();
      if (!txn || !txn->retry_) throw;
      if (attempt >= shared.config.max_serialization_retries) {
        throw store_error(store_failure::unavailable,
                          "idem::postgres_store: claim_within gave up after " +
                              std::to_string(attempt + 1) + " serialization failures or deadlocks");
      }
    }
  }
}

}  // namespace idem

#endif  // IDEM_STORE_POSTGRES_DETAIL_ONE_COMMIT_HPP
