// The floor server's records in PostgreSQL on an event loop: the statements of
// postgres_records.hpp, sent through libpq in non-blocking mode, each connection's socket watched
// by the loop. One instance per loop, used only from that loop's thread (no lock), with as many
// connections as the demo gives each loop's idem::async_postgres_store (16 shared out over the
// loops, at least 2). A connection runs one statement at a time; a call that finds none free
// waits for one.
#pragma once

#include "postgres_records.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace floor_server {

class async_postgres_records {
 public:
  /// Opens `connections` connections now (the tables made by the first of all loops: call once
  /// with make_schema before the others).
  async_postgres_records(boost::asio::any_io_executor loop, const std::string& conninfo,
                         std::size_t connections, bool make_schema)
      : loop_(std::move(loop)), conninfo_(conninfo), capacity_(connections) {
    for (std::size_t i = 0; i < connections; ++i) {
      links_.push_back(
          std::make_unique<link>(loop_, open_postgres(conninfo_, make_schema && i == 0)));
      idle_.push_back(links_.back().get());
    }
  }

  boost::asio::awaitable<std::optional<std::optional<record>>> claim(std::string account,
                                                                     std::string key,
                                                                     std::string hash) {
    lease c = co_await acquire();
    // The values named first: GCC 12 rejects braced lists in the arguments of a co_awaited call.
    std::vector<std::string> values{account, key, hash};
    const result_ptr claimed = co_await c.run(postgres_sql::claim, std::move(values));
    if (std::string_view(PQcmdTuples(claimed.get())) == "1") co_return std::nullopt;
    values = {account, key};
    const result_ptr found = co_await c.run(postgres_sql::select, std::move(values));
    co_return record_of(found.get());
  }

  boost::asio::awaitable<void> complete(std::string account, std::string key, completion done) {
    lease c = co_await acquire();
    std::vector<std::string> values = postgres_sql::complete_parameters(account, key, done);
    (void)co_await c.run(postgres_sql::complete, std::move(values));
  }

  boost::asio::awaitable<void> release(std::string account, std::string key) {
    lease c = co_await acquire();
    std::vector<std::string> values{account, key};
    (void)co_await c.run(postgres_sql::release, std::move(values));
  }

  boost::asio::awaitable<std::optional<std::string>> find(std::string id, std::string account) {
    lease c = co_await acquire();
    std::vector<std::string> values{id, account};
    const result_ptr found = co_await c.run(postgres_sql::find, std::move(values));
    if (PQntuples(found.get()) == 0) co_return std::nullopt;
    co_return std::string(PQgetvalue(found.get(), 0, 0));
  }

 private:
  // One connection and its socket, watched by the loop.
  struct link {
    connection_ptr connection;
    boost::asio::posix::stream_descriptor socket;

    link(const boost::asio::any_io_executor& loop, connection_ptr c)
        : connection(std::move(c)), socket(loop) {
      if (PQsetnonblocking(connection.get(), 1) != 0) {
        throw records_error("floor postgres: cannot make the connection non-blocking");
      }
      // A descriptor of its own: Asio closes what it is given, libpq closes its socket itself.
      const int duplicate = ::dup(PQsocket(connection.get()));
      if (duplicate < 0) throw records_error("floor postgres: cannot watch the socket");
      socket.assign(duplicate);
    }
  };

  class lease {
   public:
    lease(async_postgres_records& owner, link* l) : owner_(&owner), link_(l) {}
    lease(lease&& other) noexcept
        : owner_(other.owner_), link_(std::exchange(other.link_, nullptr)) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    lease& operator=(lease&&) = delete;
    ~lease() {
      if (link_ != nullptr) owner_->give_back(link_, broken_);
    }

    // Sends the statement, waits for its answer on the loop.
    boost::asio::awaitable<result_ptr> run(const postgres_sql::statement& s,
                                           std::vector<std::string> values) {
      namespace asio = boost::asio;
      using descriptor = asio::posix::stream_descriptor;
      std::vector<const char*> pointers;
      pointers.reserve(values.size());
      for (const std::string& v : values)
        pointers.push_back(v.c_str());
      PGconn* c = link_->connection.get();
      if (PQsendQueryPrepared(c, s.name, static_cast<int>(pointers.size()), pointers.data(),
                              nullptr, nullptr, 0) != 1) {
        fail(s, PQerrorMessage(c), true);
      }
      for (;;) {
        const int left = PQflush(c);
        if (left == 0) break;
        if (left < 0) fail(s, PQerrorMessage(c), true);
        const auto [error] = co_await link_->socket.async_wait(descriptor::wait_write,
                                                               asio::as_tuple(asio::use_awaitable));
        if (error) fail(s, error.message(), true);
      }
      result_ptr first;
      for (;;) {
        if (PQconsumeInput(c) != 1) fail(s, PQerrorMessage(c), true);
        bool finished = false;
        while (PQisBusy(c) == 0) {
          result_ptr result(PQgetResult(c));
          if (!result) {
            finished = true;
            break;
          }
          if (!first) first = std::move(result);
        }
        if (finished) break;
        const auto [error] = co_await link_->socket.async_wait(descriptor::wait_read,
                                                               asio::as_tuple(asio::use_awaitable));
        if (error) fail(s, error.message(), true);
      }
      const ExecStatusType status = first ? PQresultStatus(first.get()) : PGRES_FATAL_ERROR;
      if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        // The statement failed and its results are read: the connection is idle again, unless
        // the failure was the connection's.
        fail(s, first ? PQresultErrorMessage(first.get()) : "no result",
             PQstatus(c) != CONNECTION_OK);
      }
      co_return first;
    }

   private:
    // Mid-statement, the connection's state is unknown: `broken` drops it.
    [[noreturn]] void fail(const postgres_sql::statement& s, const std::string& error,
                           bool broken) {
      broken_ = broken;
      throw records_error(std::string("floor postgres: ") + s.name + ": " + error);
    }

    async_postgres_records* owner_;
    link* link_;
    bool broken_ = false;
  };

  boost::asio::awaitable<lease> acquire() {
    while (idle_.empty()) {
      if (links_.size() < capacity_ && reopen()) break;
      boost::asio::steady_timer wake(loop_, boost::asio::steady_timer::time_point::max());
      waiters_.push_back(&wake);
      (void)co_await wake.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    link* l = idle_.back();
    idle_.pop_back();
    co_return lease(*this, l);
  }

  // A connection the server dropped is replaced by a new one (opened blocking, on the loop:
  // rare, and only after a failure).
  bool reopen() {
    try {
      links_.push_back(std::make_unique<link>(loop_, open_postgres(conninfo_, false)));
    } catch (const records_error&) {
      return false;
    }
    idle_.push_back(links_.back().get());
    return true;
  }

  void give_back(link* l, bool broken) {
    if (broken) {
      std::erase_if(links_, [l](const std::unique_ptr<link>& held) { return held.get() == l; });
    } else {
      idle_.push_back(l);
    }
    if (!waiters_.empty()) {
      waiters_.front()->cancel();
      waiters_.pop_front();
    }
  }

  boost::asio::any_io_executor loop_;
  std::string conninfo_;
  std::vector<std::unique_ptr<link>> links_;
  std::vector<link*> idle_;
  std::deque<boost::asio::steady_timer*> waiters_;
  std::size_t capacity_;  // the connections kept open
};

}  // namespace floor_server
