// A plain libpq connection for the crash workers' own SQL beside the store they drive (the
// consumer's effects table, the relay's lock holder and trigger): connected at construction,
// notices silenced ("already exists, skipping"), each statement's failure thrown with the
// server's message. Workers are not Catch2 programs, so they cannot use the tests' helper
// (stores/postgres/postgres_test_support.hpp).
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace idem_crash {

class worker_postgres {
 public:
  explicit worker_postgres(const std::string& conninfo)
      : connection_(PQconnectdb(conninfo.c_str())) {
    if (PQstatus(connection_.get()) != CONNECTION_OK) {
      throw std::runtime_error(std::string("cannot connect to PostgreSQL: ") +
                               PQerrorMessage(connection_.get()));
    }
    PQsetNoticeProcessor(
        connection_.get(), [](void*, const char*) {}, nullptr);
  }

  /// Runs `sql`; answers the first row's first value, or nothing when it has no rows.
  std::string exec(const std::string& sql) {
    const std::unique_ptr<PGresult, decltype(&PQclear)> result(
        PQexec(connection_.get(), sql.c_str()), &PQclear);
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      throw std::runtime_error("PostgreSQL refused " + sql + ": " +
                               PQerrorMessage(connection_.get()));
    }
    if (status == PGRES_TUPLES_OK && PQntuples(result.get()) > 0) {
      return PQgetvalue(result.get(), 0, 0);
    }
    return {};
  }

 private:
  struct closer {
    void operator()(PGconn* connection) const noexcept { PQfinish(connection); }
  };
  std::unique_ptr<PGconn, closer> connection_;
};

}  // namespace idem_crash
