// What the outbox benchmarks (outbox_relay_bench.cpp, outbox_lag_bench.cpp) share: where the
// servers scripts/bench.sh started listen, a PostgreSQL connection that throws on a refused
// statement, and an outbox table of their own (the store's migration, dropped at the end).
#ifndef IDEM_BENCH_OUTBOX_BENCH_SERVERS_HPP
#define IDEM_BENCH_OUTBOX_BENCH_SERVERS_HPP

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/redis_streams/server.hpp>
#include <idem/store/postgres/outbox_reader.hpp>

namespace idem_bench {

/// The servers' addresses, from scripts/bench.sh's IDEM_TEST_* variables; empty (with `missing`
/// saying which) when it was not run through it.
struct outbox_servers {
  std::string conninfo;
  idem::redis_streams::server redis;
  std::string missing;

  static outbox_servers from_environment() {
    outbox_servers found;
    // NOLINTBEGIN(concurrency-mt-unsafe): nothing sets the environment while benchmarks run
    const char* conninfo = std::getenv("IDEM_TEST_PG_CONNINFO");
    const char* host = std::getenv("IDEM_TEST_REDIS_HOST");
    const char* port = std::getenv("IDEM_TEST_REDIS_PORT");
    // NOLINTEND(concurrency-mt-unsafe)
    if (conninfo == nullptr || host == nullptr || port == nullptr) {
      found.missing =
          "IDEM_TEST_PG_CONNINFO, IDEM_TEST_REDIS_HOST and IDEM_TEST_REDIS_PORT must be set "
          "(scripts/bench.sh sets them)";
      return found;
    }
    found.conninfo = conninfo;
    found.redis.host = host;
    found.redis.port = std::atoi(port);
    return found;
  }
};

/// `conninfo` for a relay's session: without waiting for the WAL flush at each commit. A
/// relay's commit only marks rows published; one lost in a crash sends them again, which the
/// consumers' deduplication absorbs, so a relay need not wait for the disk (the application's
/// commits, which write the messages, still do). On this machine's disk a flush takes several
/// milliseconds, which would otherwise be most of a batch's time.
inline std::string relay_conninfo(const std::string& conninfo) {
  return conninfo + " options='-c synchronous_commit=off'";
}

/// One libpq connection; exec throws std::runtime_error with the server's message.
class pg_connection {
 public:
  explicit pg_connection(const std::string& conninfo)
      : connection_(PQconnectdb(conninfo.c_str()), &PQfinish) {
    if (PQstatus(connection_.get()) != CONNECTION_OK) {
      throw std::runtime_error("cannot connect to PostgreSQL: " +
                               std::string(PQerrorMessage(connection_.get())));
    }
    PQsetNoticeProcessor(
        connection_.get(), [](void*, const char*) {}, nullptr);
  }

  PGconn* get() const noexcept { return connection_.get(); }

  void exec(const std::string& sql) const {
    const std::unique_ptr<PGresult, decltype(&PQclear)> result(PQexec(get(), sql.c_str()),
                                                               &PQclear);
    const ExecStatusType status = PQresultStatus(result.get());
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      throw std::runtime_error(sql.substr(0, 60) + "...: " + PQerrorMessage(get()));
    }
  }

 private:
  std::unique_ptr<PGconn, decltype(&PQfinish)> connection_;
};

/// A records table `<prefix>_<pid>` with its outbox, made by the store's migration (through a
/// relay's reader, which runs it), and dropped again with the object.
class outbox_table {
 public:
  outbox_table(const std::string& conninfo, const std::string& prefix)
      : admin_(conninfo), name_(prefix + "_" + std::to_string(::getpid())) {
    drop();
    idem::postgres_outbox::reader migrate{{.conninfo = conninfo, .table = name_, .listen = false}};
  }
  outbox_table(const outbox_table&) = delete;
  outbox_table& operator=(const outbox_table&) = delete;
  ~outbox_table() {
    try {
      drop();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a table left over is dropped by the next run
    }
  }

  /// The records table's name (what a store's or reader's `table` option takes).
  const std::string& name() const noexcept { return name_; }
  /// The outbox, quoted for SQL.
  std::string outbox() const { return "\"" + name_ + "_outbox\""; }
  const pg_connection& admin() const noexcept { return admin_; }

 private:
  void drop() {
    admin_.exec("DROP TABLE IF EXISTS \"" + name_ + "\", \"" + name_ + "_meta\", \"" + name_ +
                "_outbox\", \"" + name_ + "_outbox_dead\"; DROP FUNCTION IF EXISTS \"" + name_ +
                "_notify\"()");
  }

  pg_connection admin_;
  std::string name_;
};

/// A hiredis connection to `where`; throws std::runtime_error when it cannot connect.
inline std::unique_ptr<redisContext, decltype(&redisFree)> redis_connect(
    const idem::redis_streams::server& where) {
  std::unique_ptr<redisContext, decltype(&redisFree)> context(
      redisConnect(where.host.c_str(), where.port), &redisFree);
  if (!context || context->err != 0) {
    throw std::runtime_error("cannot connect to Redis at " + where.host + ":" +
                             std::to_string(where.port));
  }
  return context;
}

/// Runs one command (its words) on `context` and throws unless Redis answered without an error.
inline void redis_do(redisContext* context, std::initializer_list<std::string> words) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const std::string& word : words) {
    argv.push_back(word.data());
    lengths.push_back(word.size());
  }
  const std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(
      static_cast<redisReply*>(
          redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data())),
      &freeReplyObject);
  if (!reply || reply->type == REDIS_REPLY_ERROR) {
    throw std::runtime_error(*words.begin() + ": " + (reply ? reply->str : "no reply"));
  }
}

}  // namespace idem_bench

#endif  // IDEM_BENCH_OUTBOX_BENCH_SERVERS_HPP
