// How postgres_store tells failures apart (a lost connection, a retryable serialization
// failure, a full disk) and words them without quoting the row, and the wait before
// complete_within runs a handler again.
#ifndef IDEM_STORE_POSTGRES_DETAIL_FAILURE_HPP
#define IDEM_STORE_POSTGRES_DETAIL_FAILURE_HPP

#include <libpq-fe.h>

#include <string>
#include <string_view>
#include <thread>

#include <idem/core/policy/backoff.hpp>
#include <idem/core/policy/random.hpp>

namespace idem::detail::postgres {

// How a failed call failed: decides whether the connection is kept and what is thrown.
enum class failure_kind : std::uint8_t {
  connection,  // no SQLSTATE, class 08, or the server shutting down (57P01-57P03): reconnect
  retry,       // 40001, 40P01: the transaction may succeed if run again
  full,        // 53100 disk full, 54000 program limit (a value too large)
  other,       // statement timeout (57014) and everything else the server answered
};

inline failure_kind classify(PGconn* connection, const PGresult* result) noexcept {
  const char* state = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_SQLSTATE);
  if (state == nullptr || PQstatus(connection) != CONNECTION_OK) return failure_kind::connection;
  const std::string_view code{state};
  if (code.starts_with("08") || code == "57P01" || code == "57P02" || code == "57P03") {
    return failure_kind::connection;
  }
  if (code == "40001" || code == "40P01") return failure_kind::retry;
  if (code == "53100" || code.starts_with("54")) return failure_kind::full;
  return failure_kind::other;
}

// Set on this thread when a notice PostgreSQL sent while a statement ran says that the wait of a
// COMMIT for the synchronous standby was cancelled (an operator's pg_cancel_backend, or the
// session ending). The server then answers the COMMIT as done, with that WARNING, although the
// commit stands on the primary alone and a failover may lose it: the store reports such a call
// as ambiguous instead (borrowed_connection). Told apart by the function that raised it, which
// the server names in every notice, whatever language its messages are in. Notices are
// delivered on the thread that reads the result, inside PQexec*, so a flag of the thread is
// enough: cleared before each statement, read after it.
inline thread_local bool synchronous_wait_cancelled = false;

// The notice receiver of every connection the stores open: the notices themselves are the
// server talking to a person (a harmless WARNING, a NOTICE from IF NOT EXISTS), and a library
// has no business printing them on the application's stderr; only the cancelled wait is noted.
inline void receive_notice(void* /*unused*/, const PGresult* notice) {
  const char* function = PQresultErrorField(notice, PG_DIAG_SOURCE_FUNCTION);
  if (function != nullptr && std::string_view(function) == "SyncRepWaitForLSN") {
    synchronous_wait_cancelled = true;
  }
}

// Before complete_within runs the handler again: a random wait, its bound doubling with each
// retry, from a generator of this thread's own.
inline void wait_before_retry(const full_jitter& backoff, unsigned attempt) {
  thread_local xoshiro256ss rng{nondeterministic_seed()};
  std::this_thread::sleep_for(backoff.delay(static_cast<int>(attempt), {}, rng));
}

// A server error's severity and primary message only: its DETAIL, HINT and CONTEXT may quote
// the row ("Failing row contains (...)", "Key (scope, key)=(...)"), that is an idempotency key,
// which has no place in an exception's text or the log it ends up in.
inline std::string describe(PGconn* connection, const PGresult* result) {
  std::string message;
  const char* primary =
      result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  if (primary != nullptr) {
    const char* severity = PQresultErrorField(result, PG_DIAG_SEVERITY);
    message = std::string(severity != nullptr ? severity : "ERROR") + ":  " + primary;
  } else {
    message = result != nullptr ? PQresultErrorMessage(result) : PQerrorMessage(connection);
  }
  if (message.empty()) message = PQerrorMessage(connection);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
    message.pop_back();
  const char* state = result == nullptr ? nullptr : PQresultErrorField(result, PG_DIAG_SQLSTATE);
  if (state != nullptr) message += std::string(" (SQLSTATE ") + state + ")";
  return message.empty() ? std::string("no message from libpq") : message;
}

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_FAILURE_HPP
