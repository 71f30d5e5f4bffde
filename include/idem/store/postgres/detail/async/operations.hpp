// The jobs (job.hpp) of async_postgres_store's operations: what each sends and how it reads
// its answer, with the parameters and decoding postgres_store uses (requests.hpp), and
// `handled`, which holds the caller's completion handler and delivers to it.
//
// Every operation but a capped claim is one prepared statement and its sync, pipelined; its
// answer is read at the sync, when the implicit transaction has committed. A claim under
// max_records_per_scope is a transaction (BEGIN, the scope's turn, its room, the claim),
// pipelined up to a flush request, then ended by COMMIT, or ROLLBACK when the scope is full:
// two round trips where postgres_store takes five. It runs alone on its connection.
#ifndef IDEM_STORE_POSTGRES_DETAIL_ASYNC_OPERATIONS_HPP
#define IDEM_STORE_POSTGRES_DETAIL_ASYNC_OPERATIONS_HPP

#include <libpq-fe.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/async/job.hpp>
#include <idem/store/postgres/detail/async/link.hpp>
#include <idem/store/postgres/detail/async/pool.hpp>
#include <idem/store/postgres/detail/requests.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres::async {

// A claim asked this many times without a decided answer gives up, as postgres_store's does.
inline constexpr int max_claim_attempts = 1000;

inline std::exception_ptr unavailable(const std::string& what) {
  return std::make_exception_ptr(
      store_error(store_failure::unavailable, std::string(store_name) + ": " + what));
}

// Puts `work` in the pool's line again, after the current reply has been read.
inline void ask_again(const std::shared_ptr<job>& work) {
  asio::post(work->owner().strand(), [work] { work->owner().enqueue(work); });
}

// One prepared statement and its sync; the answer is decoded at the sync.
template <class T>
class statement_job : public answering<T> {
 public:
  using value_type = T;

  statement_job(std::shared_ptr<pool> owner, statement which, const char* what)
      : answering<T>(std::move(owner)), which_(which), what_(what) {}

  void send(link& wire) final {
    result_.reset();
    error_.reset();
    parameters values;
    fill(values);
    wire.send_prepared(which_, values);
    wire.sync();
  }

  bool take(result_ptr result, link& wire) final {
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_PIPELINE_SYNC) {
      settle_at_sync(wire);
      return true;
    }
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      if (!result_) result_ = std::move(result);
    } else if (!error_) {
      error_ = std::move(result);
    }
    return false;
  }

 protected:
  virtual void fill(parameters& values) = 0;
  // The answer, or nothing when the statement must be asked again (a claim).
  virtual std::optional<T> decode(const PGresult* result) = 0;

 private:
  void settle_at_sync(link& wire) {
    if (this->finished()) return;
    if (error_) {
      this->fail(wire.error_of(error_.get(), what_));
      return;
    }
    if (!result_) {
      this->fail(unavailable(std::string(what_) + ": the server sent no result"));
      return;
    }
    std::optional<T> value;
    try {
      value = decode(result_.get());
    } catch (...) {
      this->fail(std::current_exception());
      return;
    }
    result_.reset();
    if (value) {
      this->answer(std::move(*value));
    } else if (++attempts_ >= max_claim_attempts) {
      this->fail(
          unavailable(std::string(what_) + ": the record kept changing under 1000 attempts"));
    } else {
      ask_again(this->shared_from_this());
    }
  }

  statement which_;
  const char* what_;
  result_ptr result_;
  result_ptr error_;
  int attempts_ = 0;
};

class claim_job : public statement_job<claim_result> {
 public:
  claim_job(std::shared_ptr<pool> owner, const claim_request& request, bool caller_time)
      : statement_job(std::move(owner), claim, "claim"),
        request_(request),
        caller_time_(caller_time) {}

 protected:
  void fill(parameters& values) override { claim_parameters(values, request_, caller_time_); }
  std::optional<claim_result> decode(const PGresult* result) override {
    return claim_answer(result, request_);
  }

 private:
  claim_request request_;
  bool caller_time_;
};

// complete and release: whether the fenced UPDATE found the record.
class fenced_job : public statement_job<bool> {
 public:
  fenced_job(std::shared_ptr<pool> owner, statement which, const char* what, const fenced_key& held,
             std::optional<std::string_view> response)
      : statement_job(std::move(owner), which, what), held_(held), response_(response) {}

 protected:
  void fill(parameters& values) override {
    held_parameters(values, held_);
    if (response_) values.bytes(*response_);
  }
  std::optional<bool> decode(const PGresult* result) override { return affected(result) == 1; }

 private:
  fenced_key held_;
  std::optional<std::string_view> response_;
};

class checkpoint_job : public statement_job<bool> {
 public:
  checkpoint_job(std::shared_ptr<pool> owner, const fenced_key& held, std::string_view recovery,
                 store_time lease_until, bool caller_time)
      : statement_job(std::move(owner), checkpoint, "checkpoint"),
        held_(held),
        recovery_(recovery),
        lease_until_(lease_until),
        caller_time_(caller_time) {}

 protected:
  void fill(parameters& values) override {
    checkpoint_parameters(values, held_, recovery_, lease_until_, caller_time_);
  }
  std::optional<bool> decode(const PGresult* result) override { return affected(result) == 1; }

 private:
  fenced_key held_;
  std::string_view recovery_;
  store_time lease_until_;
  bool caller_time_;
};

// checkpoint_batch: one statement over arrays; which entries it renewed.
class checkpoint_batch_job : public statement_job<std::vector<bool>> {
 public:
  checkpoint_batch_job(std::shared_ptr<pool> owner, std::span<const batch_checkpoint> entries,
                       store_time lease_until, bool caller_time)
      : statement_job(std::move(owner), checkpoint_batch, "checkpoint_batch"),
        entries_(entries),
        lease_until_(lease_until),
        caller_time_(caller_time) {}

 protected:
  void fill(parameters& values) override {
    checkpoint_batch_parameters(values, arrays_, entries_, lease_until_, caller_time_);
  }
  std::optional<std::vector<bool>> decode(const PGresult* result) override {
    return renewed_entries(result, entries_.size());
  }

 private:
  std::span<const batch_checkpoint> entries_;
  store_time lease_until_;
  bool caller_time_;
  checkpoint_arrays arrays_;
};

class find_job : public statement_job<std::optional<record>> {
 public:
  find_job(std::shared_ptr<pool> owner, std::string_view scope, std::string_view key,
           store_time now, bool caller_time)
      : statement_job(std::move(owner), find, "find"),
        scope_(scope),
        key_(key),
        now_(now),
        caller_time_(caller_time) {}

 protected:
  void fill(parameters& values) override {
    find_parameters(values, scope_, key_, now_, caller_time_);
  }
  std::optional<std::optional<record>> decode(const PGresult* result) override {
    return found_record(result, scope_, key_);
  }

 private:
  std::string_view scope_;
  std::string_view key_;
  store_time now_;
  bool caller_time_;
};

class sweep_job : public statement_job<std::size_t> {
 public:
  sweep_job(std::shared_ptr<pool> owner, store_time now, bool caller_time)
      : statement_job(std::move(owner), sweep, "sweep"), now_(now), caller_time_(caller_time) {}

 protected:
  void fill(parameters& values) override { add_now(values, caller_time_, now_); }
  std::optional<std::size_t> decode(const PGresult* result) override { return affected(result); }

 private:
  store_time now_;
  bool caller_time_;
};

class stuck_job : public statement_job<std::vector<record>> {
 public:
  stuck_job(std::shared_ptr<pool> owner, store_time now, std::size_t limit, bool caller_time)
      : statement_job(std::move(owner), stuck, "stuck"),
        now_(now),
        limit_(limit),
        caller_time_(caller_time) {}

 protected:
  void fill(parameters& values) override { stuck_parameters(values, now_, limit_, caller_time_); }
  std::optional<std::vector<record>> decode(const PGresult* result) override {
    return stuck_records(result);
  }

 private:
  store_time now_;
  std::size_t limit_;
  bool caller_time_;
};

// A claim under max_records_per_scope: one transaction, alone on its connection.
class capped_claim_job : public answering<claim_result> {
 public:
  using value_type = claim_result;

  capped_claim_job(std::shared_ptr<pool> owner, const claim_request& request, bool caller_time,
                   std::size_t cap)
      : answering(std::move(owner), true),
        request_(request),
        caller_time_(caller_time),
        cap_(cap) {}

  void send(link& wire) override {
    stage_ = stage::statements;
    seen_ = 0;
    room_.reset();
    claimed_.reset();
    error_.reset();
    ending_.reset();
    parameters scope;
    scope_parameters(scope, request_);
    parameters room;
    room_parameters(room, request_, caller_time_);
    parameters values;
    claim_parameters(values, request_, caller_time_);
    wire.send_text("BEGIN");
    wire.send_prepared(scope_turn, scope);
    wire.send_prepared(scope_room, room);
    wire.send_prepared(claim, values);
    // The four results without a sync: how the transaction ends depends on the room.
    wire.flush_request();
  }

  bool take(result_ptr result, link& wire) override {
    const ExecStatusType status = PQresultStatus(result.get());
    const bool ok = status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK;
    if (stage_ == stage::statements) {
      if (!ok && !error_) error_ = std::move(result);
      if (ok && seen_ == 2) room_ = std::move(result);
      if (ok && seen_ == 3) claimed_ = std::move(result);
      if (++seen_ < 4) return false;
      end_transaction(wire);
      return false;
    }
    if (status != PGRES_PIPELINE_SYNC) {
      if (!ok && !ending_) ending_ = std::move(result);
      return false;
    }
    // The sync: a transaction the error left aborted still needs its ROLLBACK.
    if (stage_ == stage::ending && PQtransactionStatus(wire.get()) != PQTRANS_IDLE) {
      stage_ = stage::rolling_back;
      wire.send_text("ROLLBACK");
      wire.sync();
      return false;
    }
    settle(wire);
    return true;
  }

 private:
  enum class stage : std::uint8_t { statements, ending, rolling_back };

  void end_transaction(link& wire) {
    stage_ = stage::ending;
    if (error_) {
      // The pipeline is aborted until the sync; the sync's answer says what is left open.
      wire.sync();
      return;
    }
    full_ = room_is_full(room_.get(), cap_);
    if (!full_) answer_ = claim_answer(claimed_.get(), request_);
    // A caller that gave up gets nothing committed in its name.
    committing_ = !full_ && !finished();
    wire.send_text(committing_ ? "COMMIT" : "ROLLBACK");
    wire.sync();
  }

  void settle(link& wire) {
    if (finished()) return;
    if (error_) {
      fail(wire.error_of(error_.get(), "claim"));
    } else if (ending_) {
      fail(wire.error_of(ending_.get(), committing_ ? "claim: commit" : "claim: roll back"));
    } else if (full_) {
      answer(claim_result{claim_status::full, 0, {}});
    } else if (answer_) {
      answer(std::move(*answer_));
    } else if (++attempts_ >= max_claim_attempts) {
      fail(unavailable("claim: the record kept changing under 1000 attempts"));
    } else {
      ask_again(shared_from_this());
    }
  }

  claim_request request_;
  bool caller_time_;
  std::size_t cap_;
  stage stage_ = stage::statements;
  int seen_ = 0;
  result_ptr room_;
  result_ptr claimed_;
  result_ptr error_;
  result_ptr ending_;
  bool full_ = false;
  bool committing_ = false;
  std::optional<claim_result> answer_;
  int attempts_ = 0;
};

// A job with its caller's completion handler: delivers on the handler's associated executor
// (the store's when it has none), never inside the initiating call, and lets the handler's
// cancellation slot abandon it.
template <class Job, class Handler>
class handled final : public Job {
 public:
  using value_type = typename Job::value_type;

  template <class... Args>
  explicit handled(Handler handler, Args&&... args)
      : Job(std::forward<Args>(args)...),
        handler_(std::move(handler)),
        home_(asio::prefer(asio::get_associated_executor(*handler_, this->owner().executor()),
                           asio::execution::outstanding_work.tracked)) {}

  // Connects the handler's cancellation slot, if it has one. Terminal cancellation abandons
  // the operation wherever it is (it may still take effect at the server); partial and total
  // only one that was not sent yet, when nothing can have happened.
  void watch_cancellation() {
    auto slot = asio::get_associated_cancellation_slot(*handler_);
    if (!slot.is_connected()) return;
    slot.template emplace<canceller>(std::weak_ptr<job>(this->shared_from_this()),
                                     std::weak_ptr<pool>(this->owner_handle()));
  }

 private:
  struct canceller {
    // A constructor, not an aggregate: Asio builds it with parentheses, which Clang 14 does not
    // take for aggregates.
    canceller(std::weak_ptr<job> cancelled, std::weak_ptr<pool> store)
        : target(std::move(cancelled)), owner(std::move(store)) {}
    std::weak_ptr<job> target;
    std::weak_ptr<pool> owner;
    void operator()(asio::cancellation_type type) const {
      const bool terminal =
          (type & asio::cancellation_type::terminal) != asio::cancellation_type::none;
      const bool nothing_done =
          (type & (asio::cancellation_type::partial | asio::cancellation_type::total)) !=
          asio::cancellation_type::none;
      if (!terminal && !nothing_done) return;
      if (const std::shared_ptr<pool> shared = owner.lock()) shared->cancel(target, !terminal);
    }
  };

  void deliver(std::exception_ptr error, value_type value) override {
    asio::post(*home_, [handler = std::move(*handler_), error = std::move(error),
                        value = std::move(value)]() mutable {
      asio::get_associated_cancellation_slot(handler).clear();
      std::move(handler)(std::move(error), std::move(value));
    });
    handler_.reset();
    home_.reset();
  }

  using home_type = std::decay_t<decltype(asio::prefer(
      std::declval<asio::associated_executor_t<Handler, asio::any_io_executor>>(),
      asio::execution::outstanding_work.tracked))>;
  std::optional<Handler> handler_;
  std::optional<home_type> home_;
};

template <class Job, class Handler, class... Args>
std::shared_ptr<job> make_handled(Handler handler, Args&&... args) {
  auto made =
      std::make_shared<handled<Job, Handler>>(std::move(handler), std::forward<Args>(args)...);
  made->watch_cancellation();
  return made;
}

}  // namespace idem::detail::postgres::async

#endif  // IDEM_STORE_POSTGRES_DETAIL_ASYNC_OPERATIONS_HPP
