// One operation of async_postgres_store as its connection sees it: the statements it sends, the
// results it reads back in order, and the caller it answers once. The connection (link.hpp)
// keeps its jobs in the order their statements went out and hands each result to the job at the
// front, so a reply always reaches the operation that asked for it; a job whose caller already
// had its answer (cancelled, timed out) stays in that line and reads its replies to the end.
#ifndef IDEM_STORE_POSTGRES_DETAIL_ASYNC_JOB_HPP
#define IDEM_STORE_POSTGRES_DETAIL_ASYNC_JOB_HPP

#include <exception>
#include <memory>
#include <optional>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres::async {

class link;
class pool;

class job : public std::enable_shared_from_this<job> {
 public:
  explicit job(std::shared_ptr<pool> owner, bool exclusive = false) noexcept
      : owner_(std::move(owner)), exclusive_(exclusive) {}
  job(const job&) = delete;
  job& operator=(const job&) = delete;
  virtual ~job() = default;

  // Queues its statements (and the sync that ends them) in libpq's buffer on `wire`. Throws
  // store_error when libpq refuses (the connection is broken).
  virtual void send(link& wire) = 0;
  // The next result of the statements it sent, in order (PGRES_PIPELINE_SYNC among them). It may
  // send more statements on `wire` (a transaction deciding how to end). Answers true when it has
  // read its last result.
  virtual bool take(result_ptr result, link& wire) = 0;
  // Completes the caller's operation with `error`, unless it already completed.
  virtual void fail(std::exception_ptr error) = 0;

  // A transaction: it runs alone on its connection, which takes no other job until it is done.
  bool exclusive() const noexcept { return exclusive_; }
  // Whether options::operation_timeout bounds it (a transaction its caller drives is bounded by
  // statement_timeout only).
  virtual bool timed() const noexcept { return true; }
  // Whether its caller has had its answer (or its error).
  bool finished() const noexcept { return finished_; }
  // Whether its statements went out: nothing was sent while this is false.
  bool sent() const noexcept { return on_ != nullptr || sent_before_; }

  pool& owner() const noexcept { return *owner_; }
  const std::shared_ptr<pool>& owner_handle() const noexcept { return owner_; }

  // The connection it is in flight on (null while it waits for one). Set by link.
  link* on() const noexcept { return on_; }
  void on(link* connection) noexcept {
    if (on_ != nullptr) sent_before_ = true;
    on_ = connection;
  }

  // The operation's deadline (options::operation_timeout), on the store's strand.
  std::optional<asio::steady_timer>& deadline() noexcept { return deadline_; }

 protected:
  // Marks the job answered and stops its deadline; false when it had been already.
  bool settle() noexcept {
    if (finished_) return false;
    finished_ = true;
    if (deadline_) {
      try {
        deadline_->cancel();
      } catch (...) {
        // Harmless: the deadline fires later and finds the job answered.
      }
    }
    return true;
  }

 private:
  std::shared_ptr<pool> owner_;
  bool exclusive_;
  bool finished_ = false;
  bool sent_before_ = false;
  link* on_ = nullptr;
  std::optional<asio::steady_timer> deadline_;
};

// A job that answers T: its caller's completion, type-erased by `deliver`.
template <class T>
class answering : public job {
 public:
  using job::job;

  void fail(std::exception_ptr error) final {
    if (settle()) deliver(std::move(error), T{});
  }

 protected:
  void answer(T value) {
    if (settle()) deliver(nullptr, std::move(value));
  }
  // Hands the outcome to the caller's handler, on the handler's executor; called once.
  virtual void deliver(std::exception_ptr error, T value) = 0;
};

}  // namespace idem::detail::postgres::async

#endif  // IDEM_STORE_POSTGRES_DETAIL_ASYNC_JOB_HPP
