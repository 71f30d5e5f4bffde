// A connection held by one transaction that its caller drives statement by statement
// (async_postgres_store::async_complete_within): a job (job.hpp) that runs alone on its
// connection from the moment the pool hands it one until the transaction has ended.
//
// Each statement awaited goes out with a flush request and its result comes back to the
// awaiting coroutine; one queued goes out with the next (its result comes first). The
// transaction ends with COMMIT and a sync, or a sync alone when it is to be rolled back (after
// an error the pipeline skips everything up to the sync), followed by a ROLLBACK when the sync
// finds the transaction still open. Everything here runs on the store's strand, and so does the
// coroutine that drives it.
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
#include <idem/core/policy/backoff.hpp>
#include <idem/core/policy/random.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/async/job.hpp>
#include <idem/store/postgres/detail/async/link.hpp>
#include <idem/store/postgres/detail/async/pool.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/wire.hpp>
#include <idem/store/postgres/error.hpp>

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

  // Sends one statement (by `send`, on the held connection) with a flush request, and writes
  // out everything queued; `done` gets its result, or the error that ended the connection.
  template <class Send>
  void run(Send send, result_handler done) {
    queue(
        [&send](link& wire) {
          send(wire);
          wire.flush_request();
        },
        std::move(done));
    if (wire_ != nullptr && !closing_) wire_->kick();
  }

  // Sends one statement without a flush request and without writing it out: it leaves with the
  // next statement run (or the end), and its result comes before that one's. `done` as run's.
  template <class Send>
  void queue(Send send, result_handler done) {
    if (wire_ == nullptr || closing_) {
      answer(std::move(done), failure_ ? failure_ : lost_error("the transaction has ended"), {});
      return;
    }
    try {
      send(*wire_);
    } catch (const store_error&) {
      answer(std::move(done), std::current_exception(), {});
      return;
    }
    pending_.push_back(std::move(done));
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

// Awaits one statement (sent by `send`) of a held connection.
template <class Send>
asio::awaitable<result_ptr> await_statement(session_job& session, Send send) {
  return asio::async_initiate<decltype(asio::use_awaitable), void(std::exception_ptr, result_ptr)>(
      [&session, send](auto handler) {
        auto held = std::make_shared<decltype(handler)>(std::move(handler));
        session.run(send, [held](std::exception_ptr error, result_ptr result) {
          std::move (*held)(std::move(error), std::move(result));
        });
      },
      asio::use_awaitable);
}
// A statement's answer, for one sent ahead of the statement awaited next (send_ahead).
struct answer_slot {
  bool answered = false;
  std::exception_ptr error;
  result_ptr result;
  // Its result, or the error that ended the connection, thrown.
  result_ptr take() {
    if (error) std::rethrow_exception(error);
    return std::move(result);
  }
};
// Sends one statement of a held connection without awaiting it: it goes out with the next
// statement awaited (or the transaction's end), in one round trip, and its answer is in the
// slot once that one's has been awaited (they come in order).
template <class Send>
std::shared_ptr<answer_slot> send_ahead(session_job& session, Send send) {
  auto slot = std::make_shared<answer_slot>();
  session.queue(send, [slot](std::exception_ptr error, result_ptr result) {
    slot->answered = true;
    slot->error = std::move(error);
    slot->result = std::move(result);
  });
  return slot;
}
// Awaits a connection of the session's own.
inline asio::awaitable<void> await_connection(session_job& session) {
  (void)co_await asio::async_initiate<decltype(asio::use_awaitable),
                                      void(std::exception_ptr, result_ptr)>(
      [&session](auto handler) {
        auto held = std::make_shared<decltype(handler)>(std::move(handler));
        session.acquire([held](std::exception_ptr error, result_ptr result) {
          std::move (*held)(std::move(error), std::move(result));
        });
      },
      asio::use_awaitable);
}
// Awaits the end of the session's transaction: COMMIT's result, or null for a rollback.
inline asio::awaitable<result_ptr> end_transaction(session_job& session, bool commit) {
  return asio::async_initiate<decltype(asio::use_awaitable), void(std::exception_ptr, result_ptr)>(
      [&session, commit](auto handler) {
        auto held = std::make_shared<decltype(handler)>(std::move(handler));
        session.end(commit, [held](std::exception_ptr error, result_ptr result) {
          std::move (*held)(std::move(error), std::move(result));
        });
      },
      asio::use_awaitable);
}

// The store's own statement inside complete_within: its result, or what postgres_store
// throws: postgres_error for 40001/40P01 (retried), store_error otherwise.
inline result_ptr checked_result(result_ptr result, const char* what) {
  const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return result;
  const char* code = result ? PQresultErrorField(result.get(), PG_DIAG_SQLSTATE) : nullptr;
  const std::string sqlstate = code != nullptr ? code : "";
  std::string message = std::string(store_name) + ": " + what + ": ";
  if (status == PGRES_PIPELINE_ABORTED) {
    message += "aborted: an earlier statement of the transaction failed";
  } else if (result) {
    message += describe(nullptr, result.get());
  } else {
    message += "no result";
  }
  if (sqlstate == "40001" || sqlstate == "40P01") throw postgres_error(sqlstate, message);
  const bool full = sqlstate == "53100" || sqlstate.starts_with("54");
  throw store_error(full ? store_failure::full : store_failure::unavailable, message);
}

// Waits before attempt `attempt` (from 1) of a transaction: serialization_backoff's delay.
inline asio::awaitable<void> wait_before(unsigned attempt, const full_jitter& backoff,
                                         xoshiro256ss& random) {
  asio::steady_timer wait(co_await asio::this_coro::executor);
  wait.expires_after(backoff.delay(static_cast<int>(attempt - 1), {}, random));
  co_await wait.async_wait(asio::use_awaitable);
}

// Whether another attempt follows `error`, a serialization failure or deadlock (40001,
// 40P01) of attempt `attempt` (from 0): false for any other error; store_error(unavailable)
// once `retries` more have been made.
inline bool retry_after(const postgres_error& error, unsigned attempt, unsigned retries,
                        const char* what) {
  if (!error.retryable()) return false;
  if (attempt >= retries) {
    throw store_error(store_failure::unavailable,
                      std::string(store_name) + ": " + what + " gave up after " +
                          std::to_string(attempt + 1) +
                          " serialization failures or deadlocks; the last: " + error.what());
  }
  return true;
}

}  // namespace idem::detail::postgres::async

#endif  // IDEM_STORE_POSTGRES_DETAIL_ASYNC_SESSION_HPP
