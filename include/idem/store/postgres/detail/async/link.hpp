// One connection of async_postgres_store's pool: libpq in non-blocking pipeline mode, its socket
// watched through Asio. Jobs (job.hpp) are sent one after another without waiting for the
// replies before them; each ends with its own sync, so each is its own implicit transaction and
// an error aborts only the job it belongs to. The replies come back in the order the jobs were
// sent and go to the job at the front of the line.
//
// Everything here runs on the store's strand. The link watches its socket only while jobs are
// in flight, so that an idle pool keeps no io_context running; before an idle connection takes a
// job it reads whatever the server sent meanwhile, and one the server closed (a restart,
// pg_terminate_backend) is found broken there, as postgres_store's pool does.
#ifndef IDEM_STORE_POSTGRES_DETAIL_ASYNC_LINK_HPP
#define IDEM_STORE_POSTGRES_DETAIL_ASYNC_LINK_HPP

#include <libpq-fe.h>
#include <unistd.h>

#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/async/job.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/detail/wire.hpp>

#if defined(IDEM_ASIO_STANDALONE)
#include <asio/posix/stream_descriptor.hpp>
#else
#include <boost/asio/posix/stream_descriptor.hpp>
#endif

namespace idem::detail::postgres::async {

inline constexpr const char* store_name = "idem::async_postgres_store";

class link : public std::enable_shared_from_this<link> {
 public:
  using executor_type = asio::strand<asio::any_io_executor>;
  // Told (by a post to the strand, never from inside the link's own calls) when the link can
  // take another job, and when it broke.
  using notify_function = std::function<void(bool lost)>;

  // Takes a connection that is open, configured and idle (session.hpp), and puts it in
  // non-blocking pipeline mode; throws store_error(unavailable) when libpq refuses.
  link(const executor_type& strand, connection_ptr connection, notify_function notify)
      : strand_(strand),
        connection_(std::move(connection)),
        notify_(std::move(notify)),
        socket_(strand) {
    if (PQsetnonblocking(get(), 1) != 0 || PQenterPipelineMode(get()) != 1) {
      throw store_error(
          store_failure::unavailable,
          std::string(store_name) + ": cannot enter pipeline mode: " + describe(get(), nullptr));
    }
    // A descriptor of its own: Asio closes what it is given, libpq closes its socket itself.
    const int duplicate = ::dup(PQsocket(get()));
    if (duplicate < 0) {
      throw store_error(store_failure::unavailable,
                        std::string(store_name) + ": cannot watch the connection's socket");
    }
    socket_.assign(duplicate);
  }
  link(const link&) = delete;
  link& operator=(const link&) = delete;
  ~link() { close(); }

  PGconn* get() const noexcept { return connection_.get(); }
  std::size_t in_flight() const noexcept { return jobs_.size(); }
  bool broken() const noexcept { return broken_; }

  // Whether it can take a job now: not broken, not waiting out a cancel, not running a
  // transaction; a transaction only on a link with nothing in flight; and fewer than `depth`
  // jobs in flight.
  bool accepts(bool exclusive, std::size_t depth) const noexcept {
    if (broken_ || draining_) return false;
    if (jobs_.empty()) return true;
    return !exclusive && !jobs_.front()->exclusive() && jobs_.size() < depth;
  }

  // Whether `which` is the job whose statements the server is working on (or has just
  // answered): the first in line.
  bool working_on(const job& which) const noexcept {
    return !jobs_.empty() && jobs_.front().get() == &which;
  }

  // Reads what an idle connection was sent meanwhile; false (and broken) when the server closed
  // it.
  bool check_alive() {
    if (broken_) return false;
    if (jobs_.empty() && (PQconsumeInput(get()) != 1 || PQstatus(get()) != CONNECTION_OK)) {
      lose("the connection was closed while idle");
      return false;
    }
    return true;
  }

  // Sends `next`'s statements after those in flight.
  void start(std::shared_ptr<job> next) {
    job& started = *next;
    jobs_.push_back(std::move(next));
    started.on(this);
    try {
      started.send(*this);
    } catch (const store_error& error) {
      lose(error.what());
      return;
    }
    watch();
    flush();
    drain();
  }

  // What jobs send with: a prepared statement, SQL text without parameters, the sync that
  // ends a job (and commits its implicit transaction), and a flush request (the results so far
  // without a sync, for a transaction that decides how to end).
  void send_prepared(statement which, const parameters& values) {
    check(PQsendQueryPrepared(get(), statement_names[which], values.count(), values.values(),
                              values.lengths(), parameters::formats(), 1),
          "sending a statement");
  }
  void send_text(const char* sql) {
    check(PQsendQueryParams(get(), sql, 0, nullptr, nullptr, nullptr, nullptr, 1),
          "sending a statement");
  }
  // SQL text with text parameters (null: SQL NULL) and text results: a handler's own SQL.
  void send_text(const char* sql, int count, const char* const* values) {
    check(PQsendQueryParams(get(), sql, count, nullptr, values, nullptr, nullptr, 0),
          "sending a statement");
  }
  void sync() { check(PQpipelineSync(get()), "sending a sync"); }
  // After a job sent statements outside send() and take() (a transaction driven by its
  // caller): sends them and reads what has come.
  void kick() {
    if (broken_) return;
    watch();
    flush();
    drain();
  }
  void flush_request() { check(PQsendFlushRequest(get()), "sending a flush request"); }

  // The store_error a failed result stands for: full for 53100 and 54xxx, unavailable
  // otherwise, worded without quoting the row (failure.hpp).
  std::exception_ptr error_of(const PGresult* result, const char* what) const {
    const failure_kind kind = classify(get(), result);
    std::string message = std::string(store_name) + ": " + what + ": ";
    if (PQresultStatus(result) == PGRES_PIPELINE_ABORTED) {
      message += "aborted: an earlier statement of the operation failed";
    } else {
      message += describe(get(), result);
    }
    return std::make_exception_ptr(store_error(
        kind == failure_kind::full ? store_failure::full : store_failure::unavailable, message));
  }

  // A cancel request is on its way to the server for the job in front: take no new job until it
  // has arrived and the line is empty, so that it can only meet the jobs already sent.
  void cancel_sent() noexcept {
    draining_ = true;
    ++cancels_;
  }
  void cancel_arrived() {
    if (cancels_ > 0) --cancels_;
    settle_draining();
  }

  // Stops watching the socket and closes it (the pool going away).
  void shut_down() noexcept { close(); }

  // Fails every job in flight with store_error(unavailable) and closes the connection.
  void lose(const std::string& why) {
    if (broken_) return;
    broken_ = true;
    std::string message = std::string(store_name) + ": the connection was lost (" + why + ")";
    if (connection_) {
      std::string detail = PQerrorMessage(get());
      while (!detail.empty() && (detail.back() == '\n' || detail.back() == ' '))
        detail.pop_back();
      if (!detail.empty()) message += ": " + detail;
    }
    message += "; an operation in flight may or may not have taken effect";
    const auto error = std::make_exception_ptr(store_error(store_failure::unavailable, message));
    std::deque<std::shared_ptr<job>> failed;
    failed.swap(jobs_);
    for (const std::shared_ptr<job>& each : failed) {
      each->on(nullptr);
      each->fail(error);
    }
    close();
    tell(true);
  }

 private:
  void check(int accepted, const char* what) {
    if (accepted != 1) {
      throw store_error(store_failure::unavailable,
                        std::string(store_name) + ": " + what + ": " + describe(get(), nullptr));
    }
  }

  void close() noexcept {
    asio_error_code ignored;
    socket_.cancel(ignored);
    socket_.close(ignored);
  }

  void tell(bool lost) {
    if (!notify_) return;
    asio::post(strand_, [notify = notify_, lost] { notify(lost); });
  }

  // Watches for replies while jobs are in flight.
  void watch() {
    if (reading_ || broken_ || jobs_.empty()) return;
    reading_ = true;
    socket_.async_wait(asio::posix::stream_descriptor::wait_read,
                       [self = shared_from_this()](const asio_error_code& error) {
                         self->reading_ = false;
                         self->readable(error);
                       });
  }

  void readable(const asio_error_code& error) {
    if (broken_) return;
    if (error == asio::error::operation_aborted) {
      watch();  // stopped while idle; a job may have come since
      return;
    }
    if (error) {
      lose("waiting for the socket: " + error.message());
      return;
    }
    if (PQconsumeInput(get()) != 1) {
      lose("reading");
      return;
    }
    drain();
    if (broken_) return;
    flush();
    watch();
  }

  // Sends what libpq holds; waits for the socket to take more while libpq answers 1.
  void flush() {
    if (broken_ || writing_) return;
    const int left = PQflush(get());
    if (left < 0) {
      lose("writing");
      return;
    }
    if (left == 0) return;
    writing_ = true;
    socket_.async_wait(asio::posix::stream_descriptor::wait_write,
                       [self = shared_from_this()](const asio_error_code& error) {
                         self->writing_ = false;
                         if (self->broken_) return;
                         if (error == asio::error::operation_aborted) {
                           self->flush();
                           return;
                         }
                         if (error) {
                           self->lose("waiting for the socket: " + error.message());
                           return;
                         }
                         // Sending may need what the server sent read first (libpq's advice).
                         if (PQconsumeInput(self->get()) != 1) {
                           self->lose("reading");
                           return;
                         }
                         self->flush();
                         self->drain();
                       });
  }

  // Hands every complete result libpq has to the job in front, in order.
  void drain() {
    bool popped = false;
    int nulls = 0;
    while (!broken_ && PQisBusy(get()) == 0) {
      result_ptr result{PQgetResult(get())};
      if (!result) {
        // One null ends each statement's results; a second in a row: nothing more for now.
        if (++nulls >= 2) break;
        continue;
      }
      nulls = 0;
      if (jobs_.empty()) {
        lose("a reply came that no operation asked for");
        return;
      }
      const bool lost = PQresultStatus(result.get()) == PGRES_FATAL_ERROR &&
                        classify(get(), result.get()) == failure_kind::connection;
      const std::shared_ptr<job> front = jobs_.front();
      bool done = false;
      try {
        done = front->take(std::move(result), *this);
      } catch (const store_error& error) {
        lose(error.what());
        return;
      }
      if (lost || PQstatus(get()) != CONNECTION_OK) {
        lose("the server ended the session");
        return;
      }
      if (done) {
        jobs_.pop_front();
        front->on(nullptr);
        popped = true;
        // A job ends outside any transaction; one that could not is not trusted further.
        const PGTransactionStatusType status = PQtransactionStatus(get());
        if (jobs_.empty() && (status == PQTRANS_INTRANS || status == PQTRANS_INERROR)) {
          lose("a transaction was left open");
          return;
        }
      }
      flush();
    }
    if (broken_) return;
    if (jobs_.empty() && reading_) {
      // Idle: stop watching, so that an idle pool keeps no io_context running.
      asio_error_code ignored;
      socket_.cancel(ignored);
    }
    if (popped) {
      settle_draining();
      tell(false);
    }
  }

  void settle_draining() {
    if (draining_ && cancels_ == 0 && jobs_.empty()) {
      draining_ = false;
      tell(false);
    }
  }

  executor_type strand_;
  connection_ptr connection_;
  notify_function notify_;
  asio::posix::stream_descriptor socket_;
  std::deque<std::shared_ptr<job>> jobs_;
  bool reading_ = false;
  bool writing_ = false;
  bool broken_ = false;
  bool draining_ = false;
  int cancels_ = 0;
};

}  // namespace idem::detail::postgres::async

#endif  // IDEM_STORE_POSTGRES_DETAIL_ASYNC_LINK_HPP
