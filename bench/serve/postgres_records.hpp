// The floor server's records in PostgreSQL, by hand, through libpq: the recipe (recipe.hpp) in
// prepared statements, and the blocking server's pool of connections, as many as the demo gives
// idem::postgres_store (16), opened as threads need them.
//
// The completion is one statement: the payment row and its message as data-modifying CTEs beside
// the record's UPDATE, so the three commit together in one round trip. PostgreSQL runs every
// data-modifying CTE exactly once, whether or not the outer statement reads it.
#pragma once

#include "recipe.hpp"

#include <libpq-fe.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace floor_server {

/// The SQL both PostgreSQL faces run (postgres_records here, async_postgres_records on the loops).
namespace postgres_sql {

inline constexpr const char* schema =
    "CREATE TABLE IF NOT EXISTS floor_records (account text NOT NULL, key text NOT NULL, "
    "request_hash text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), "
    "response_status int4, response_body text, PRIMARY KEY (account, key)); "
    // For the cleanup a user runs (records past a day): DELETE ... WHERE created_at < ...
    "CREATE INDEX IF NOT EXISTS floor_records_by_age ON floor_records (created_at); "
    // The demo's payments table (service.hpp's postgres_book), the same columns.
    "CREATE TABLE IF NOT EXISTS idem_demo_payments (id text PRIMARY KEY, account text NOT NULL, "
    "body text NOT NULL); "
    "CREATE TABLE IF NOT EXISTS floor_outbox (sequence int8 GENERATED ALWAYS AS IDENTITY "
    "PRIMARY KEY, id text NOT NULL UNIQUE, topic text NOT NULL, partition_key text NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now(), published_at timestamptz, "
    "headers text NOT NULL, payload text NOT NULL); "
    "CREATE INDEX IF NOT EXISTS floor_outbox_unpublished ON floor_outbox (sequence) "
    "WHERE published_at IS NULL";

/// A prepared statement: its name, its SQL and how many parameters it takes.
struct statement {
  const char* name;
  const char* sql;
  int parameters;
};

inline constexpr statement claim{
    "floor_claim",
    "INSERT INTO floor_records (account, key, request_hash) VALUES ($1, $2, $3) "
    "ON CONFLICT DO NOTHING",
    3};
inline constexpr statement select{"floor_select",
                                  "SELECT request_hash, response_status, response_body FROM "
                                  "floor_records WHERE account = $1 AND key = $2",
                                  2};
// $1 account, $2 key, $3 payment id (and the message's), $4 the response body, $5 the topic,
// $6 the message's headers, $7 its payload.
inline constexpr statement complete{
    "floor_complete",
    "WITH payment AS (INSERT INTO idem_demo_payments (id, account, body) VALUES ($3, $1, $4) "
    "ON CONFLICT (id) DO NOTHING), "
    "message AS (INSERT INTO floor_outbox (id, topic, partition_key, headers, payload) "
    "VALUES ($3, $5, $1, $6, $7) ON CONFLICT (id) DO NOTHING) "
    "UPDATE floor_records SET response_status = 201, response_body = $4 "
    "WHERE account = $1 AND key = $2",
    7};
inline constexpr statement release{"floor_release",
                                   "DELETE FROM floor_records WHERE account = $1 AND key = $2 "
                                   "AND response_status IS NULL",
                                   2};
inline constexpr statement find{
    "floor_find", "SELECT body FROM idem_demo_payments WHERE id = $1 AND account = $2", 2};

inline constexpr statement all[] = {claim, select, complete, release, find};

/// The parameters of `complete` for `done`.
inline std::vector<std::string> complete_parameters(const std::string& account,
                                                    const std::string& key,
                                                    const completion& done) {
  return {account,
          key,
          done.payment_id,
          done.body,
          std::string(outbox_topic),
          done.message_headers,
          done.message_payload};
}

}  // namespace postgres_sql

struct result_deleter {
  void operator()(PGresult* result) const noexcept { PQclear(result); }
};
using result_ptr = std::unique_ptr<PGresult, result_deleter>;

struct connection_deleter {
  void operator()(PGconn* connection) const noexcept { PQfinish(connection); }
};
using connection_ptr = std::unique_ptr<PGconn, connection_deleter>;

/// A connection to `conninfo`, its notices silenced and the statements prepared (the tables made
/// first when `make_schema`); throws records_error when it cannot.
inline connection_ptr open_postgres(const std::string& conninfo, bool make_schema) {
  connection_ptr c(PQconnectdb(conninfo.c_str()));
  if (!c || PQstatus(c.get()) != CONNECTION_OK) {
    throw records_error("floor postgres: cannot connect: " +
                        std::string(c ? PQerrorMessage(c.get()) : "out of memory"));
  }
  PQsetNoticeProcessor(
      c.get(), [](void*, const char*) {}, nullptr);
  const auto check = [&](PGresult* raw, const char* what) {
    const result_ptr result(raw);
    const ExecStatusType status = PQresultStatus(result.get());
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      throw records_error(std::string("floor postgres: ") + what + ": " +
                          PQresultErrorMessage(result.get()));
    }
  };
  if (make_schema) {
    // Servers starting together make the tables once.
    check(PQexec(c.get(), "SELECT pg_advisory_lock(7260316)"), "lock");
    check(PQexec(c.get(), postgres_sql::schema), "schema");
    check(PQexec(c.get(), "SELECT pg_advisory_unlock(7260316)"), "unlock");
  }
  for (const postgres_sql::statement& s : postgres_sql::all) {
    check(PQprepare(c.get(), s.name, s.sql, s.parameters, nullptr), s.name);
  }
  return c;
}

/// The record a `select` result holds in its row, if it has one.
inline std::optional<record> record_of(const PGresult* result) {
  if (PQntuples(result) == 0) return std::nullopt;
  record found;
  found.request_hash = PQgetvalue(result, 0, 0);
  if (PQgetisnull(result, 0, 1) == 0) {
    found.response_status = std::stoi(PQgetvalue(result, 0, 1));
    found.response_body.assign(PQgetvalue(result, 0, 2),
                               static_cast<std::size_t>(PQgetlength(result, 0, 2)));
  }
  return found;
}

class postgres_records {
 public:
  /// The blocking idem::postgres_store's pool in the demo (service.hpp, postgres_options).
  static constexpr std::size_t pool_size = 16;

  /// Connects once to make the tables (the connection stays in the pool).
  explicit postgres_records(std::string conninfo) : conninfo_(std::move(conninfo)) {
    (void)acquire();
  }

  /// The claim; std::nullopt when this request now holds the key, else the record there
  /// (std::nullopt inside: released meanwhile).
  std::optional<std::optional<record>> claim(const std::string& account, const std::string& key,
                                             const std::string& hash) {
    lease c = acquire();
    const result_ptr claimed = c.run(postgres_sql::claim, {account, key, hash});
    if (std::string_view(PQcmdTuples(claimed.get())) == "1") return std::nullopt;
    const result_ptr found = c.run(postgres_sql::select, {account, key});
    return record_of(found.get());
  }

  void complete(const std::string& account, const std::string& key, const completion& done) {
    lease c = acquire();
    (void)c.run(postgres_sql::complete, postgres_sql::complete_parameters(account, key, done));
  }

  void release(const std::string& account, const std::string& key) {
    lease c = acquire();
    (void)c.run(postgres_sql::release, {account, key});
  }

  std::optional<std::string> find(const std::string& id, const std::string& account) {
    lease c = acquire();
    const result_ptr found = c.run(postgres_sql::find, {id, account});
    if (PQntuples(found.get()) == 0) return std::nullopt;
    return std::string(PQgetvalue(found.get(), 0, 0));
  }

 private:
  class lease {
   public:
    lease(postgres_records& owner, connection_ptr c) : owner_(owner), connection_(std::move(c)) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { owner_.give_back(std::move(connection_)); }

    result_ptr run(const postgres_sql::statement& s, const std::vector<std::string>& values) {
      std::vector<const char*> pointers;
      pointers.reserve(values.size());
      for (const std::string& v : values)
        pointers.push_back(v.c_str());
      result_ptr result(PQexecPrepared(connection_.get(), s.name, static_cast<int>(pointers.size()),
                                       pointers.data(), nullptr, nullptr, 0));
      const ExecStatusType status = PQresultStatus(result.get());
      if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        const std::string error = PQresultErrorMessage(result.get());
        // A connection the server dropped is not given back: the next call opens another.
        if (PQstatus(connection_.get()) != CONNECTION_OK) connection_.reset();
        throw records_error(std::string("floor postgres: ") + s.name + ": " + error);
      }
      return result;
    }

   private:
    postgres_records& owner_;
    connection_ptr connection_;
  };

  lease acquire() {
    std::unique_lock lock(mutex_);
    const bool got = freed_.wait_for(lock, std::chrono::seconds{5},
                                     [&] { return !idle_.empty() || opened_ < pool_size; });
    if (!got) throw records_error("floor postgres: every connection busy for 5 s");
    if (!idle_.empty()) {
      connection_ptr c = std::move(idle_.back());
      idle_.pop_back();
      return lease(*this, std::move(c));
    }
    ++opened_;
    const bool first = !schema_made_;
    schema_made_ = true;
    lock.unlock();
    try {
      return lease(*this, open_postgres(conninfo_, first));
    } catch (...) {
      const std::lock_guard relock(mutex_);
      --opened_;
      if (first) schema_made_ = false;
      freed_.notify_one();
      throw;
    }
  }

  void give_back(connection_ptr c) {
    {
      const std::lock_guard lock(mutex_);
      if (c) {
        idle_.push_back(std::move(c));
      } else {
        --opened_;
      }
    }
    freed_.notify_one();
  }

  std::string conninfo_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<connection_ptr> idle_;
  std::size_t opened_ = 0;
  bool schema_made_ = false;
};

}  // namespace floor_server
