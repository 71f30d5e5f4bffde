// A connection held by one transaction that its caller drives statement by statement
// (async_postgres_store::async_complete_within): a job (job.hpp) that runs alone on its
// connection from the moment the pool hands it one until the transaction has ended.
//
// Each statement goes out with a flush request and its result comes back to the awaiting
// coroutine; the transaction ends with COMMIT and a sync, or a sync alone when it is to be
// rolled back (after an error the pipeline skips everything up to the sync), followed by a
// ROLLBACK when the sync finds the transaction still open. Everything here runs on the store's
// strand, and so does the coroutine that drives it.
#ifndef IDEM_STORE_POSTGRES_DETAIL_ASYNC_SESSION_HPP
#define IDEM_STORE_POSTGRES_DETAIL_ASYNC_SESSION_HPP

#include <libpq-fe.h>

#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/async/job.hpp>
#include <idem/store/postgres/detail/async/link.hpp>
#include <idem/store/postgres/detail/async/pool.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres::async {

class session_job : public job {
 public:
  // Called on the strand, by a post (never from inside the link's own calls).
  using result_handler = std::function<void(std::exception_ptr, result_ptr)>;

  explicit session_job(std::shared_ptr<pool> owner) : job(std::move(owner), true) {}

  bool timed() const noexcept override { return false; }

  // Waits for a connection of its own; `done` gets null, or the error that left it without.
  void acquire(result_handler done) {
    acquired_ = std::move(done);
    owner().enqueue(std::static_pointer_cast<session_job>(shared_from_this()));
  }

  // Sends one statement (by `send`, on the held connection); `done` gets its result, or the
  // error that ended the connection.
  template <class Send>
  void run(Send send, result_handler done) {
    if (wire_ == nullptr || closing_) {
      answer(std::move(done), failure_ ? failure_ : lost_error("the transaction has ended"), {});
      return;
    }
    try {
      send(*wire_);
      wire_->flush_request();
    } catch (const store_error&) {
      answer(std::move(done), std::current_exception(), {});
      return;
    }
    pending_.push_back(std::move(done));
    wire_->kick();
  }

  // Ends the transaction: COMMIT when `commit`, else a rollback. `done` gets COMMIT's result
  // (null when rolling back) once the connection is back outside any transaction.
  void end(bool commit, result_handler done) {
    if (wire_ == nullptr || closing_) {
      answer(std::move(done),
             commit ? (failure_ ? failure_ : lost_error("the transaction ended")) : nullptr, {});
      return;
    }
    closing_ = true;
    committing_ = commit;
    ended_ = std::move(done);
    try {
      if (commit) wire_->send_text("COMMIT");
      wire_->sync();
    } catch (const store_error&) {
      // The link is broken; it fails this job (fail below) from its own call.
    }
    wire_->kick();
  }

  void send(link& wire) override {
    wire_ = &wire;
    if (acquired_) answer(std::exchange(acquired_, nullptr), nullptr, {});
  }

  bool take(result_ptr result, link& wire) override {
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_PIPELINE_SYNC) {
      if (!closing_) return false;
      if (PQtransactionStatus(wire.get()) != PQTRANS_IDLE) {
        wire.send_text("ROLLBACK");
        wire.sync();
        return false;
      }
      wire_ = nullptr;
      if (ended_) answer(std::exchange(ended_, nullptr), nullptr, std::move(commit_result_));
      return true;
    }
    if (!pending_.empty()) {
      result_handler done = std::move(pending_.front());
      pending_.pop_front();
      answer(std::move(done), nullptr, std::move(result));
    } else if (closing_ && committing_ && !commit_result_) {
      commit_result_ = std::move(result);
    }
    return false;
  }

  void fail(std::exception_ptr error) override {
    if (!failure_) failure_ = error;
    wire_ = nullptr;
    if (acquired_) answer(std::exchange(acquired_, nullptr), error, {});
    while (!pending_.empty()) {
      answer(std::move(pending_.front()), error, {});
      pending_.pop_front();
    }
    if (ended_) answer(std::exchange(ended_, nullptr), committing_ ? error : nullptr, {});
  }

 private:
  static std::exception_ptr lost_error(const char* what) {
    return std::make_exception_ptr(
        store_error(store_failure::unavailable, std::string(store_name) + ": " + what));
  }

  // Answers on the strand, after the current call.
  void answer(result_handler done, std::exception_ptr error, result_ptr result) {
    asio::post(owner().strand(), [done = std::move(done), error = std::move(error),
                                  result = std::make_shared<result_ptr>(std::move(result))] {
      done(error, std::move(*result));
    });
  }

  link* wire_ = nullptr;
  result_handler acquired_;
  std::deque<result_handler> pending_;
  result_handler ended_;
  result_ptr commit_result_;
  std::exception_ptr failure_;
  bool closing_ = false;
  bool committing_ = false;
};

}  // namespace idem::detail::postgres::async

#endif  // IDEM_STORE_POSTGRES_DETAIL_ASYNC_SESSION_HPP
