// What postgres_store::transaction gives the handler's own SQL: postgres_error (a refusal with
// its SQLSTATE, which complete_within may retry) and postgres_result (a PGresult it owns).
#ifndef IDEM_STORE_POSTGRES_ERROR_HPP
#define IDEM_STORE_POSTGRES_ERROR_HPP

#include <libpq-fe.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace idem {

/// An error PostgreSQL reported for the handler's own SQL inside complete_within, with its
/// SQLSTATE. A serialization failure or deadlock (40001, 40P01) is retryable: complete_within
/// rolls back and runs the handler again. A handler that runs SQL through the raw PGconn* can
/// throw one itself to ask for the same.
class postgres_error : public std::runtime_error {
 public:
  postgres_error(std::string sqlstate, const std::string& message)
      : std::runtime_error(message), sqlstate_(std::move(sqlstate)) {}
  /// The five-character SQLSTATE; empty when the connection failed without one.
  const std::string& sqlstate() const noexcept { return sqlstate_; }
  bool retryable() const noexcept { return sqlstate_ == "40001" || sqlstate_ == "40P01"; }

 private:
  std::string sqlstate_;
};

/// A result of the handler's SQL (postgres_store::transaction::exec): owns the PGresult.
class postgres_result {
 public:
  explicit postgres_result(PGresult* result) noexcept : result_(result) {}
  postgres_result(postgres_result&& other) noexcept
      : result_(std::exchange(other.result_, nullptr)) {}
  postgres_result& operator=(postgres_result&& other) noexcept {
    std::swap(result_, other.result_);
    return *this;
  }
  postgres_result(const postgres_result&) = delete;
  postgres_result& operator=(const postgres_result&) = delete;
  ~postgres_result() { PQclear(result_); }

  int rows() const noexcept { return PQntuples(result_); }
  int columns() const noexcept { return PQnfields(result_); }
  bool is_null(int row, int column) const noexcept {
    return PQgetisnull(result_, row, column) != 0;
  }
  /// The value as text (the result format exec asks for).
  std::string_view value(int row, int column) const noexcept {
    return {PQgetvalue(result_, row, column),
            static_cast<std::size_t>(PQgetlength(result_, row, column))};
  }
  /// Rows an INSERT, UPDATE or DELETE touched.
  std::size_t affected() const {
    const char* count = PQcmdTuples(result_);
    return *count == '\0' ? 0 : static_cast<std::size_t>(std::stoull(count));
  }
  PGresult* get() const noexcept { return result_; }

 private:
  PGresult* result_;
};

}  // namespace idem

#endif  // IDEM_STORE_POSTGRES_ERROR_HPP
