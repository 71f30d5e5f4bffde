// One connection of postgres_store's pool, borrowed for one call: running its prepared
// statements and transaction control, turning a failure into the exception the store throws,
// and rolling back. A connection that failed is dropped from the pool, never lent again.
#ifndef IDEM_STORE_POSTGRES_DETAIL_CONNECTION_HPP
#define IDEM_STORE_POSTGRES_DETAIL_CONNECTION_HPP

#include <libpq-fe.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/detail/connection_pool.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/detail/wire.hpp>
#include <idem/store/postgres/error.hpp>

namespace idem::detail::postgres {

using connection_lease = idem::detail::connection_pool<connection_ptr>::lease;

// One pooled connection, held for one call. Handed back on destruction; a connection that
// failed is closed instead, and the next call opens a fresh one.
class borrowed_connection {
 public:
  explicit borrowed_connection(connection_lease lease) noexcept : lease_(std::move(lease)) {}
  borrowed_connection(borrowed_connection&& other) noexcept = default;
  borrowed_connection(const borrowed_connection&) = delete;
  borrowed_connection& operator=(const borrowed_connection&) = delete;
  borrowed_connection& operator=(borrowed_connection&&) = delete;
  ~borrowed_connection() = default;

  PGconn* get() const noexcept { return lease_.get().get(); }
  void give_back() noexcept { lease_.give_back(); }

  // Runs a prepared statement; returns its result, or throws: store_error, or
  // postgres_error when `retryable_as_postgres_error` and the failure is 40001/40P01.
  result_ptr run(statement which, const parameters& values, const char* what,
                 bool retryable_as_postgres_error = false) {
    synchronous_wait_cancelled = false;
    result_ptr result{PQexecPrepared(get(), statement_names[which], values.count(), values.values(),
                                     values.lengths(), parameters::formats(), 1)};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK)
      return answered(std::move(result), what);
    fail(result.get(), what, retryable_as_postgres_error);
  }

  // Runs SQL that is not one of the prepared statements (a sweep of one partition), without
  // parameters; returns its result, or throws store_error.
  result_ptr run_sql(const std::string& sql, const char* what) {
    synchronous_wait_cancelled = false;
    result_ptr result{PQexec(get(), sql.c_str())};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK)
      return answered(std::move(result), what);
    fail(result.get(), what, false);
  }

  // Runs SQL whose text depends on the call (list_records' filters), with parameters in binary
  // format, their types inferred by the server from the text; returns its result, or throws
  // store_error.
  result_ptr run_params(const std::string& sql, const parameters& values, const char* what) {
    synchronous_wait_cancelled = false;
    result_ptr result{PQexecParams(get(), sql.c_str(), values.count(), nullptr, values.values(),
                                   values.lengths(), parameters::formats(), 1)};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK)
      return answered(std::move(result), what);
    fail(result.get(), what, false);
  }

  // Runs SQL text (no parameters), for transaction control.
  void run_text(const char* sql, const char* what, bool retryable_as_postgres_error = false) {
    synchronous_wait_cancelled = false;
    const result_ptr result{PQexec(get(), sql)};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      (void)answered(nullptr, what);
      return;
    }
    fail(result.get(), what, retryable_as_postgres_error);
  }

  // A statement the server answered: its result, unless it committed on the primary alone
  // because its wait for the synchronous standby was cancelled. The server calls that done;
  // a failover to the standby may lose it, so the call is ambiguous: store_error(unavailable),
  // as a commit whose answer was lost (docs/stores/postgres.md, "Replication and failover").
  // The connection itself is sound and goes back to the pool.
  static result_ptr answered(result_ptr result, const char* what) {
    if (synchronous_wait_cancelled) {
      synchronous_wait_cancelled = false;
      throw store_error(store_failure::unavailable,
                        std::string("idem::postgres_store: ") + what +
                            ": the commit's wait for the synchronous standby was cancelled; it "
                            "stands on the primary alone, and a failover may lose it");
    }
    return result;
  }

  [[noreturn]] void fail(const PGresult* result, const char* what,
                         bool retryable_as_postgres_error) {
    const failure_kind kind = classify(get(), result);
    std::string message =
        std::string("idem::postgres_store: ") + what + ": " + describe(get(), result);
    if (kind == failure_kind::connection) {
      // Dropped rather than pooled: a broken connection never serves another call.
      lease_.discard();
    }
    if (kind == failure_kind::retry && retryable_as_postgres_error) {
      const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
      throw postgres_error(state, message);
    }
    throw store_error(kind == failure_kind::full ? store_failure::full : store_failure::unavailable,
                      message);
  }

  // Rolls back whatever is open; a connection that cannot even do that is dropped.
  void roll_back() noexcept {
    if (!lease_.held()) return;
    // A failed COMMIT has already ended the transaction.
    if (PQtransactionStatus(get()) == PQTRANS_IDLE) return;
    const result_ptr result{PQexec(get(), "ROLLBACK")};
    if (!result || PQresultStatus(result.get()) != PGRES_COMMAND_OK) lease_.discard();
  }

 private:
  connection_lease lease_;
};

// Sends the `count` queries `send` queues as one pipeline (one round trip) and answers their
// results in order; a result is null where the connection failed before it.
template <class Send>
std::vector<result_ptr> pipelined(borrowed_connection& connection, std::size_t count,
                                  const char* what, Send send) {
  PGconn* c = connection.get();
  synchronous_wait_cancelled = false;
  if (PQenterPipelineMode(c) != 1) connection.fail(nullptr, what, false);
  const bool sent = send(c) && PQpipelineSync(c) == 1;
  std::vector<result_ptr> got(count);
  if (sent) {
    for (result_ptr& each : got) {
      each.reset(PQgetResult(c));
      if (!each) break;                      // the connection failed
      const result_ptr end{PQgetResult(c)};  // the null that ends each query's results
    }
    const result_ptr sync{PQgetResult(c)};  // PGRES_PIPELINE_SYNC
  }
  if (PQexitPipelineMode(c) != 1 || !sent) connection.fail(nullptr, what, false);
  return got;
}

inline bool succeeded(const result_ptr& result) noexcept {
  const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  return status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
}

// The completion, checked, and COMMIT in one round trip. The check makes a completion that
// finds no record in progress under the fence (the handler's own SQL changed it) an error
// (division by zero, SQLSTATE 22012), so that the COMMIT queued behind it never runs: answers
// false then, with the transaction still open (aborted). Throws as borrowed_connection::run
// does for anything else; a COMMIT whose wait for a synchronous standby was cancelled is
// ambiguous: store_error(unavailable).
inline bool complete_and_commit(borrowed_connection& connection, const parameters& values,
                                const char* complete_what, const char* commit_what) {
  std::vector<result_ptr> got = pipelined(connection, 2, complete_what, [&](PGconn* c) {
    return PQsendQueryPrepared(c, statement_names[complete_checked], values.count(),
                               values.values(), values.lengths(), parameters::formats(), 1) == 1 &&
           PQsendQueryParams(c, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 1) == 1;
  });
  if (!succeeded(got[0])) {
    if (found_no_record_in_progress(got[0].get())) return false;
    connection.fail(got[0].get(), complete_what, true);
  }
  if (!succeeded(got[1])) connection.fail(got[1].get(), commit_what, true);
  (void)borrowed_connection::answered(nullptr, commit_what);
  return true;
}

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_CONNECTION_HPP
