// How a connection of a PostgreSQL store comes to be: the connection string checked, the
// connection opened with the store's defaults, its session configured (statement_timeout,
// idle_in_transaction_session_timeout), the table migrated once per process, and the statements
// prepared. postgres_store opens its connections this way on the calling thread;
// async_postgres_store on a thread of its own, so that both stores speak to the same table with
// the same session, whichever opened it.
#ifndef IDEM_STORE_POSTGRES_DETAIL_SESSION_HPP
#define IDEM_STORE_POSTGRES_DETAIL_SESSION_HPP

#include <libpq-fe.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/schema.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres {

// What opening a connection needs, derived once from a store's options.
struct session_options {
  std::string conninfo;
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds statement_timeout{0};
  std::chrono::milliseconds idle_in_transaction_timeout{0};
  std::string schema;
  std::string table;  // unquoted, as configured: the index names derive from it
  // Who opens it, leading every error's message ("idem::postgres_store").
  std::string who;
  // When the migration creates the table: PARTITION BY HASH (scope) into this many; zero, plain.
  std::size_t hash_partitions = 0;
};

// Opens connections for one store: every copy of the store, every connection of its pool.
class session_opener {
 public:
  // Checks the options (std::invalid_argument: a negative timeout, a malformed connection
  // string, a name that is not an identifier); connects to nothing.
  explicit session_opener(session_options given) : options_(std::move(given)) {
    if (options_.statement_timeout.count() < 0 ||
        options_.idle_in_transaction_timeout.count() < 0 || options_.connect_timeout.count() < 0) {
      throw std::invalid_argument(options_.who + ": timeouts cannot be negative");
    }
    char* error = nullptr;
    PQconninfoOption* parsed = PQconninfoParse(options_.conninfo.c_str(), &error);
    if (parsed == nullptr) {
      std::string message = error != nullptr ? error : "out of memory";
      PQfreemem(error);
      while (!message.empty() && message.back() == '\n')
        message.pop_back();
      throw std::invalid_argument(options_.who + ": the connection string is invalid: " + message);
    }
    PQconninfoFree(parsed);
    if (options_.hash_partitions == 1 || options_.hash_partitions > max_hash_partitions) {
      throw std::invalid_argument(options_.who +
                                  ": hash_partitions must be 0 (a plain table) or 2 to " +
                                  std::to_string(max_hash_partitions) + ", not " +
                                  std::to_string(options_.hash_partitions));
    }
    names_ = quote_names(options_.schema, options_.table);
    sql_ = statement_sql(names_);
  }
  session_opener(const session_opener&) = delete;
  session_opener& operator=(const session_opener&) = delete;
  ~session_opener() = default;

  const quoted_names& names() const noexcept { return names_; }
  const session_options& options() const noexcept { return options_; }

  // A connection ready for the store's statements, blocking until it is (a connect, then one
  // round trip per setting and statement, and the migration the first time); or
  // store_error(unavailable). May be called from several threads at once.
  connection_ptr open() {
    // The conninfo is expanded in place of dbname; later keywords would override it, so the
    // defaults come first and the user's own settings win.
    // libpq counts whole seconds (0: wait forever): a part of one rounds up, never down to 0.
    const std::string timeout =
        std::to_string(std::chrono::ceil<std::chrono::seconds>(options_.connect_timeout).count());
    const std::array<const char*, 4> keywords{"connect_timeout", "fallback_application_name",
                                              "dbname", nullptr};
    const std::array<const char*, 4> values{timeout.c_str(), "idem", options_.conninfo.c_str(),
                                            nullptr};
    connection_ptr connection{PQconnectdbParams(keywords.data(), values.data(), 1)};
    if (!connection || PQstatus(connection.get()) != CONNECTION_OK) {
      std::string message =
          connection ? describe(connection.get(), nullptr) : std::string("out of memory");
      throw store_error(store_failure::unavailable,
                        options_.who + ": cannot connect to PostgreSQL: " + message);
    }
    // Notices are dropped, but for the one that says a commit's wait for the synchronous
    // standby was cancelled (receive_notice).
    PQsetNoticeReceiver(connection.get(), receive_notice, nullptr);
    // On a partitioned table, the prepared statements keep one generic plan, pruned to the
    // scope's partition as it starts. Left to choose (plan_cache_mode = auto), PostgreSQL
    // prices the generic plan as if it read every partition, so it plans each call afresh for
    // its values: a claim on 16 partitions then took 2.6 to 3 times as long as on a plain table
    // (bench/stores/postgres/postgres_partition_bench.cpp), and about as long with this.
    const std::string settings =
        "SET default_transaction_isolation = 'read committed'; SET statement_timeout = " +
        std::to_string(options_.statement_timeout.count()) +
        "; SET idle_in_transaction_session_timeout = " +
        std::to_string(options_.idle_in_transaction_timeout.count()) +
        (options_.hash_partitions > 0 ? "; SET plan_cache_mode = force_generic_plan" : "");
    exec_or_throw(connection.get(), settings.c_str(), "configuring the session");
    {
      // One migration per process; the advisory lock orders processes.
      const std::lock_guard lock(migrate_mutex_);
      if (!migrated_) {
        migrate(connection.get(), names_, options_.table, options_.hash_partitions);
        migrated_ = true;
      }
    }
    for (std::size_t i = 0; i < statement::count; ++i) {
      const auto which = static_cast<statement>(i);
      const std::array<Oid, 8> types = parameter_types(which);
      const result_ptr result{PQprepare(connection.get(), statement_names[i], sql_[i].c_str(),
                                        parameter_count(which), types.data())};
      if (!result || PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
        throw store_error(store_failure::unavailable, options_.who + ": preparing " +
                                                          statement_names[i] + ": " +
                                                          describe(connection.get(), result.get()));
      }
    }
    return connection;
  }

 private:
  session_options options_;
  quoted_names names_;
  std::array<std::string, statement::count> sql_;
  std::mutex migrate_mutex_;
  bool migrated_ = false;
};

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_SESSION_HPP
