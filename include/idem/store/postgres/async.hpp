// async_postgres_store: postgres_store's records, table and semantics, as an asynchronous store
// (idem/store/async_contract.hpp): each operation starts at once and completes through an Asio
// completion token, so one event loop keeps many of them in flight. Needs libpq and Asio (link
// idem::postgres_asio); include it by name.
//
//   asio::io_context loop;
//   idem::async_postgres_store::options config;
//   config.conninfo = "host=db.internal dbname=payments user=payments";
//   idem::async_postgres_store store{loop.get_executor(), config};  // connects, migrates
//   claim_result claimed = co_await store.async_claim(request, asio::use_awaitable);
//
// What a user must know:
// * The same SQL, schema, migrations and time sources as postgres_store (the two share their
//   parts: statements.hpp, schema.hpp, session.hpp, requests.hpp), so both may serve one table
//   at once, and everything postgres_store.hpp says about claims, fences and time holds here.
// * Connections use libpq's non-blocking API in pipeline mode, each socket watched by the
//   store's executor: an operation's statements are sent without waiting for the replies
//   before them (up to options::pipeline_depth operations in flight per connection), each ends
//   with its own sync, so each is its own transaction, and replies are matched to operations in
//   the order they were sent. Operations go to the connection with the fewest in flight; when
//   all pool_size connections are full they wait, in order. One slow operation (a lock wait)
//   delays those pipelined behind it on its connection: keep pipeline_depth small when
//   statements may wait on locks.
// * Blocking work runs on two threads the store owns, never on the event loop: opening a
//   connection (libpq's blocking connect, the session's settings, the statements prepared, and
//   the table created or migrated the first time), and cancel requests (PQcancel blocks for a
//   round trip; libpq 15 has no non-blocking cancel). With connect_at_start, the constructor
//   opens the first connection, and migrates the table, on the calling thread.
// * Timeouts and cancellation: options::operation_timeout bounds each operation, from its
//   start; the server-side statement_timeout applies as in postgres_store. A timed-out
//   operation, and one cancelled through its handler's cancellation slot (terminal
//   cancellation; partial or total only before it was sent), completes at once with
//   store_error(unavailable). That is ambiguous: a statement already sent may still commit.
//   Its replies are still read and dropped, so the operations behind it get their own; when
//   the server is working on it, a cancel request stops it there, and the connection takes no
//   new operation until that request has arrived (an operation pipelined behind it may then be
//   cancelled too, and fails as unavailable: never with another's answer).
// * A connection that breaks (a server restart, pg_terminate_backend) fails the operations in
//   flight on it with store_error(unavailable), and is replaced for later ones; after a failed
//   attempt to open one, the next waits a backoff (reconnect_delay, doubling up to
//   max_reconnect_delay), and operations that have no connection to go to fail meanwhile.
// * The arguments' views must stay valid until the operation completes (the AsyncStore
//   contract). Copies share one pool; operations may start from any thread.
// * async_complete_within runs a handler's own SQL, awaited on the transaction's connection, in
//   the transaction that completes the record (postgres_store::complete_within's semantics,
//   serialization-failure retries included); the handler is a coroutine run on the store's
//   strand. async_idempotent runs a handler that takes the transaction this way, and its
//   transaction::publish adds outbox messages that commit with it.
// * POSIX only (the socket is watched as a posix::stream_descriptor). Every option:
//   docs/stores/postgres_async.md.
#ifndef IDEM_STORE_POSTGRES_ASYNC_HPP
#define IDEM_STORE_POSTGRES_ASYNC_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/outbox/message.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/detail/async/job.hpp>
#include <idem/store/postgres/detail/async/link.hpp>
#include <idem/store/postgres/detail/async/operations.hpp>
#include <idem/store/postgres/detail/async/pool.hpp>
#include <idem/store/postgres/detail/async/session.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/requests.hpp>
#include <idem/store/postgres/detail/session.hpp>
#include <idem/store/postgres/error.hpp>
#include <idem/store/postgres/outbox.hpp>

namespace idem {

class async_postgres_store {
 public:
  /// Records keep no completion time, as postgres_store's (idem::reads_completion_time).
  static constexpr bool reads_completion_time = false;

  /// postgres_store's options (conninfo, schema, table, pool_size, max_records_per_scope,
  /// statement_timeout, idle_in_transaction_timeout, connect_timeout, clock, connect_at_start,
  /// and for async_complete_within transaction_isolation, max_serialization_retries,
  /// serialization_backoff; the outbox ones are unused), and these.
  struct options : postgres_store::options {
    /// Operations in flight at once on one connection (pipelined); at least 1.
    std::size_t pipeline_depth = 4;
    /// How long an operation may take, from its start until its answer (waiting for a
    /// connection included); zero: no limit but statement_timeout. Past it the operation
    /// completes with store_error(unavailable) and the server is asked to cancel it.
    std::chrono::milliseconds operation_timeout{0};
    /// After a failed attempt to open a connection, the wait before the next; doubling up to
    /// max_reconnect_delay.
    std::chrono::milliseconds reconnect_delay{50};
    std::chrono::milliseconds max_reconnect_delay{5000};
  };

  class transaction;
  /// The text parameters of the handler's own SQL (transaction::exec); std::nullopt is NULL.
  using parameters = std::vector<std::optional<std::string>>;

  /// A handle with no database: every operation throws store_error(unavailable) at its start.
  async_postgres_store() = default;

  /// Checks the options (std::invalid_argument); with connect_at_start, opens the first
  /// connection and creates or migrates the table on this thread, blocking (store_error when
  /// the server cannot be reached). Completions go to `executor` when a handler has none.
  async_postgres_store(asio::any_io_executor executor, options config) {
    namespace pga = detail::postgres::async;
    const char* who = pga::store_name;
    if (config.pool_size == 0) {
      throw std::invalid_argument(std::string(who) + ": pool_size must be at least 1");
    }
    if (config.pipeline_depth == 0) {
      throw std::invalid_argument(std::string(who) + ": pipeline_depth must be at least 1");
    }
    if (config.operation_timeout.count() < 0 || config.reconnect_delay.count() <= 0 ||
        config.max_reconnect_delay < config.reconnect_delay) {
      throw std::invalid_argument(
          std::string(who) +
          ": operation_timeout cannot be negative, and reconnect_delay must be positive and no "
          "more than max_reconnect_delay");
    }
    if (!executor) throw std::invalid_argument(std::string(who) + ": the executor is empty");
    auto opener = std::make_shared<detail::postgres::session_opener>(
        postgres_store::session_options_of(config, who));
    pga::pool_settings settings;
    settings.size = config.pool_size;
    settings.pipeline_depth = config.pipeline_depth;
    settings.operation_timeout = config.operation_timeout;
    settings.reconnect_delay = config.reconnect_delay;
    settings.max_reconnect_delay = config.max_reconnect_delay;
    std::optional<detail::postgres::connection_ptr> first;
    if (config.connect_at_start) first = opener->open();
    state_ = std::make_shared<state>(
        std::move(config), std::make_shared<pga::pool>(std::move(executor), opener, settings));
    if (first) state_->shared->adopt(std::move(*first));
  }

  asio::any_io_executor get_executor() const { return checked().shared->executor(); }
  /// The options the store was made with.
  const options& configuration() const { return checked().config; }

  template <class Token>
  auto async_claim(const claim_request& request, Token&& token) {
    namespace pga = detail::postgres::async;
    const state& shared = checked();
    const bool caller = caller_time();
    const std::size_t cap = shared.config.max_records_per_scope;
    return start<claim_result>(
        std::forward<Token>(token),
        [request, caller, cap](auto handler, std::shared_ptr<pga::pool> owner) {
          if (cap != std::numeric_limits<std::size_t>::max()) {
            return pga::make_handled<pga::capped_claim_job>(std::move(handler), std::move(owner),
                                                            request, caller, cap);
          }
          return pga::make_handled<pga::claim_job>(std::move(handler), std::move(owner), request,
                                                   caller);
        });
  }

  template <class Token>
  auto async_complete(const fenced_key& held, std::string_view bytes, store_time /*now*/,
                      Token&& token) {
    namespace pga = detail::postgres::async;
    return start<bool>(
        std::forward<Token>(token), [held, bytes](auto handler, std::shared_ptr<pga::pool> owner) {
          return pga::make_handled<pga::fenced_job>(std::move(handler), std::move(owner),
                                                    detail::postgres::complete, "complete", held,
                                                    std::optional<std::string_view>(bytes));
        });
  }

  template <class Token>
  auto async_release(const fenced_key& held, Token&& token) {
    namespace pga = detail::postgres::async;
    return start<bool>(
        std::forward<Token>(token), [held](auto handler, std::shared_ptr<pga::pool> owner) {
          return pga::make_handled<pga::fenced_job>(std::move(handler), std::move(owner),
                                                    detail::postgres::release, "release", held,
                                                    std::optional<std::string_view>());
        });
  }

  template <class Token>
  auto async_checkpoint(const fenced_key& held, std::string_view bytes, store_time lease_until,
                        Token&& token) {
    namespace pga = detail::postgres::async;
    const bool caller = caller_time();
    return start<bool>(
        std::forward<Token>(token),
        [held, bytes, lease_until, caller](auto handler, std::shared_ptr<pga::pool> owner) {
          return pga::make_handled<pga::checkpoint_job>(std::move(handler), std::move(owner), held,
                                                        bytes, lease_until, caller);
        });
  }

  /// The heartbeat's renewals in one statement (idem/store/batch.hpp's checkpoint_batch).
  template <class Token>
  auto async_checkpoint_batch(std::span<const batch_checkpoint> entries, store_time lease_until,
                              Token&& token) {
    namespace pga = detail::postgres::async;
    const bool caller = caller_time();
    return start<std::vector<bool>>(
        std::forward<Token>(token),
        [entries, lease_until, caller](auto handler, std::shared_ptr<pga::pool> owner) {
          return pga::make_handled<pga::checkpoint_batch_job>(std::move(handler), std::move(owner),
                                                              entries, lease_until, caller);
        });
  }

  template <class Token>
  auto async_find(std::string_view scope, std::string_view key, store_time now, Token&& token) {
    namespace pga = detail::postgres::async;
    const bool caller = caller_time();
    return start<std::optional<record>>(
        std::forward<Token>(token),
        [scope, key, now, caller](auto handler, std::shared_ptr<pga::pool> owner) {
          return pga::make_handled<pga::find_job>(std::move(handler), std::move(owner), scope, key,
                                                  now, caller);
        });
  }

  template <class Token>
  auto async_sweep(store_time now, Token&& token) {
    namespace pga = detail::postgres::async;
    const bool caller = caller_time();
    return start<std::size_t>(std::forward<Token>(token),
                              [now, caller](auto handler, std::shared_ptr<pga::pool> owner) {
                                return pga::make_handled<pga::sweep_job>(
                                    std::move(handler), std::move(owner), now, caller);
                              });
  }

  template <class Token>
  auto async_stuck(store_time now, std::size_t limit, Token&& token) {
    namespace pga = detail::postgres::async;
    const bool caller = caller_time();
    return start<std::vector<record>>(
        std::forward<Token>(token),
        [now, limit, caller](auto handler, std::shared_ptr<pga::pool> owner) {
          return pga::make_handled<pga::stuck_job>(std::move(handler), std::move(owner), now, limit,
                                                   caller);
        });
  }

  /// Runs `produce(transaction&)`, a coroutine (asio::awaitable<std::string>) that awaits its
  /// own SQL on the transaction (transaction::exec) and answers the encoded response, inside
  /// one transaction that also completes the record under `held`: both commit or neither does.
  /// postgres_store::complete_within's semantics: completes with false, without calling
  /// produce, when the record is no longer held under that fence (or false after produce, if
  /// the fenced update finds it gone); produce's own exception rolls back and passes through;
  /// a serialization failure or deadlock rolls back and runs produce again, at most
  /// 1 + max_serialization_retries times (waiting serialization_backoff between), then
  /// store_error(unavailable). The transaction holds a connection of its own, and produce runs
  /// on the store's strand: it must not block. operation_timeout does not apply to it
  /// (statement_timeout does, to each statement); its cancellation slot is not watched.
  template <class Produce, class Token>
  auto async_complete_within(const fenced_key& held, store_time now, Produce produce,
                             Token&& token) {
    const state& shared = checked();
    return asio::co_spawn(
        shared.shared->strand(),
        run_within(shared.shared, shared.config, caller_time(), held, now, std::move(produce)),
        std::forward<Token>(token));
  }

  /// Completes the record under `held` with `bytes`, the response known before the
  /// transaction opens, in one transaction with `writes(transaction&)` (a coroutine,
  /// transaction::writes_type; commit_with's writes): both commit or neither does. BEGIN, the
  /// completion (which locks the record), the writes and COMMIT go out together, so that writes
  /// which await nothing (send, publish) cost one round trip in all. Completes with false when
  /// the record is no longer in progress under the fence (the writes then commit nothing, and
  /// what they threw meanwhile is dropped); writes that throw, or a statement they sent that the
  /// server refuses, roll back, and that exception is stored in `writes_failed` and passed on;
  /// serialization failures and deadlocks as async_complete_within's. `writes` and
  /// `writes_failed` must outlive the operation.
  template <class Writes, class Token>
  auto async_complete_with(const fenced_key& held, store_time now, std::string_view bytes,
                           const Writes& writes, std::exception_ptr& writes_failed, Token&& token) {
    const state& shared = checked();
    return asio::co_spawn(shared.shared->strand(),
                          run_with(shared.shared, shared.config, caller_time(), held, now,
                                   std::string(bytes), &writes, &writes_failed),
                          std::forward<Token>(token));
  }

 private:
  struct state {
    state(options given, std::shared_ptr<detail::postgres::async::pool> made)
        : config(std::move(given)), shared(std::move(made)) {}
    options config;
    std::shared_ptr<detail::postgres::async::pool> shared;
  };

  const state& checked() const {
    if (!state_) {
      throw store_error(store_failure::unavailable,
                        "idem::async_postgres_store: default-constructed, it has no database; "
                        "construct it with options and an executor");
    }
    return *state_;
  }

  bool caller_time() const { return checked().config.clock == time_source::caller; }

  // Starts an operation answering T: `make(handler, pool)` makes its job, which goes to the
  // pool's line on the strand.
  template <class T, class Token, class Make>
  auto start(Token&& token, Make make) {
    return asio::async_initiate<Token, async_store_signature<T>>(
        [](auto handler, std::shared_ptr<detail::postgres::async::pool> owner, Make made) {
          std::shared_ptr<detail::postgres::async::job> work = made(std::move(handler), owner);
          owner->submit(std::move(work));
        },
        token, checked().shared, std::move(make));
  }

  using result_ptr = detail::postgres::result_ptr;
  using session_job = detail::postgres::async::session_job;

  // What a transaction's attempts take from the options.
  struct run_settings {
    run_settings(const options& config, bool caller, store_time now)
        : written_at(caller ? std::optional<std::int64_t>{detail::postgres::to_nanoseconds(now)}
                            : std::nullopt),
          begin(detail::postgres::begin_sql(config.transaction_isolation)),
          retries(config.max_serialization_retries),
          backoff(config.serialization_backoff) {}
    // When outbox rows are written: the caller's time, or nothing for the server's clock.
    std::optional<std::int64_t> written_at;
    const char* begin;
    unsigned retries;
    full_jitter backoff;
    xoshiro256ss random{nondeterministic_seed()};
  };

  template <class Produce>
  static asio::awaitable<bool> run_within(std::shared_ptr<detail::postgres::async::pool> shared,
                                          options config, bool caller, fenced_key held,
                                          store_time now, Produce produce);
  template <class Writes>
  static asio::awaitable<bool> run_with(std::shared_ptr<detail::postgres::async::pool> shared,
                                        options config, bool caller, fenced_key held,
                                        store_time now, std::string bytes, const Writes* writes,
                                        std::exception_ptr* writes_failed);
  std::shared_ptr<state> state_;
};

/// What async_complete_within's `produce` is given: the connection inside the open
/// transaction, for the handler's own SQL.
class async_postgres_store::transaction {
 public:
  /// What commit_with<R, transaction> carries (idem/store/contract.hpp): writes awaited inside
  /// the transaction that completes the record.
  using writes_type = std::function<asio::awaitable<void>(transaction&)>;

  /// Runs one SQL statement with text parameters (std::nullopt is NULL) and text results.
  /// Throws postgres_error when the server refuses it (a 40001/40P01 also marks the
  /// transaction for a retry, even if the handler catches the exception), and
  /// store_error(unavailable) when the connection is lost. After a refusal the transaction is
  /// aborted: later statements are refused too, until complete_within rolls it back.
  asio::awaitable<postgres_result> exec(std::string sql, parameters params = {}) {
    const std::vector<const char*> values = text_values(params);
    result_ptr result = co_await detail::postgres::async::await_statement(
        *session_, [&](detail::postgres::async::link& wire) {
          wire.send_text(sql.c_str(), static_cast<int>(values.size()), values.data());
        });
    if (std::exception_ptr failed = sent_failure()) std::rethrow_exception(failed);
    if (succeeded(result.get())) co_return postgres_result{result.release()};
    throw handler_error(result.get(), "the handler's SQL");
  }

  /// Sends one SQL statement with text parameters without waiting for its answer: it goes to
  /// the server with the next statement awaited or with the transaction's end, in the same
  /// round trip. For writes whose result the handler does not read (an INSERT). Its refusal
  /// (the postgres_error exec would throw) is thrown by the next exec, or ends the transaction
  /// as produce's or the writes' own exception does, rolled back.
  void send(const std::string& sql, const parameters& params = {}) {
    const std::vector<const char*> values = text_values(params);
    sent_.push_back(
        detail::postgres::async::send_ahead(*session_, [&](detail::postgres::async::link& wire) {
          wire.send_text(sql.c_str(), static_cast<int>(values.size()), values.data());
        }));
  }

  /// Adds `message` to the outbox in this transaction, so that it commits with the handler's
  /// writes and the completed record, or not at all; answers its id, outbox_message_id(scope,
  /// key, name) of the record this transaction completes. postgres_store::transaction::publish's
  /// semantics: one name per message of a handler, and a name already published for this
  /// record adds nothing. Throws std::invalid_argument for an empty name, a message without a
  /// topic, or a payload past options::max_outbox_payload_bytes. The row is sent as send sends
  /// (no round trip of its own): when the server refuses it, the next exec or the transaction's
  /// end throws the postgres_error (40001/40P01 mark the transaction for a retry, as exec's do).
  asio::awaitable<std::string> publish(std::string_view name, const outbox_message& message) {
    constexpr const char* who = "idem::async_postgres_store::transaction::publish";
    if (name.empty()) throw std::invalid_argument(std::string(who) + ": the message name is empty");
    std::string id = outbox_message_id(held_.scope, held_.key, name);
    detail::check_outbox_message(id, message, max_payload_bytes_, who);
    const detail::postgres::outbox_row row(id, message, now_);
    sent_.push_back(
        detail::postgres::async::send_ahead(*session_, [&](detail::postgres::async::link& wire) {
          wire.send_prepared(detail::postgres::outbox_insert, row.values);
        }));
    co_return id;
  }

  /// A recovery point recorded in this transaction (checkpoint's semantics, on this
  /// connection); it commits or rolls back with the transaction.
  asio::awaitable<bool> checkpoint(const fenced_key& held, std::string_view recovery,
                                   store_time lease_until) {
    detail::postgres::parameters values;
    detail::postgres::checkpoint_parameters(values, held, recovery, lease_until, caller_time_);
    result_ptr result = detail::postgres::async::checked_result(
        co_await detail::postgres::async::await_statement(
            *session_,
            [&](detail::postgres::async::link& wire) {
              wire.send_prepared(detail::postgres::checkpoint, values);
            }),
        "checkpoint");
    co_return detail::postgres::affected(result.get()) == 1;
  }

 private:
  friend class async_postgres_store;
  transaction(std::shared_ptr<session_job> session, bool caller_time, const fenced_key& held,
              std::optional<std::int64_t> now, std::size_t max_payload_bytes) noexcept
      : session_(std::move(session)),
        caller_time_(caller_time),
        held_(held),
        now_(now),
        max_payload_bytes_(max_payload_bytes) {}

  // The text parameters' pointers as libpq takes them (null: SQL NULL).
  static std::vector<const char*> text_values(const parameters& params) {
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const std::optional<std::string>& param : params)
      values.push_back(param ? param->c_str() : nullptr);
    return values;
  }

  static bool succeeded(const PGresult* result) noexcept {
    const ExecStatusType status = PQresultStatus(result);
    return status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK;
  }

  // The handler's statement refused, as exec throws it; 40001/40P01 mark the transaction.
  postgres_error handler_error(const PGresult* result, const char* what) {
    const char* code = PQresultErrorField(result, PG_DIAG_SQLSTATE);
    std::string message = std::string(detail::postgres::async::store_name) + ": " + what + ": ";
    message += PQresultStatus(result) == PGRES_PIPELINE_ABORTED
                   ? std::string("aborted: an earlier statement of the transaction failed")
                   : detail::postgres::describe(nullptr, result);
    postgres_error error(code != nullptr ? code : "", message);
    if (error.retryable()) retry_ = true;
    return error;
  }

  // The failure of the first statement sent ahead (send, publish; before them the completion
  // run_with sends first) whose answer has come, as exec would throw it; null when none failed.
  // A completion that found the record no longer in progress under the fence sets lost_.
  std::exception_ptr sent_failure() {
    if (completion_ && completion_->answered) {
      if (completion_->error) return completion_->error;
      const PGresult* done = completion_->result.get();
      if (detail::postgres::found_no_record_in_progress(done)) {
        lost_ = true;
        return std::make_exception_ptr(postgres_error(
            "22012", std::string(detail::postgres::async::store_name) +
                         ": the record is no longer in progress under the claim's fence; the "
                         "writes will not commit"));
      }
      if (!succeeded(done)) {
        try {
          (void)detail::postgres::async::checked_result(std::move(completion_->result),
                                                        "complete_with: complete");
        } catch (...) {
          completion_->error = std::current_exception();
        }
        return completion_->error;
      }
    }
    for (const std::shared_ptr<detail::postgres::async::answer_slot>& slot : sent_) {
      if (!slot->answered) break;
      if (slot->error) return slot->error;
      if (!succeeded(slot->result.get())) {
        return std::make_exception_ptr(handler_error(slot->result.get(), "the handler's SQL"));
      }
    }
    return nullptr;
  }

  std::shared_ptr<session_job> session_;
  // Statements sent ahead (send, publish), in order; run_with's completion, sent before them.
  std::vector<std::shared_ptr<detail::postgres::async::answer_slot>> sent_;
  std::shared_ptr<detail::postgres::async::answer_slot> completion_;
  bool lost_ = false;
  bool caller_time_;
  // The claim this transaction completes: its scope and key name the messages published.
  fenced_key held_;
  // When the messages were written: the caller's time, or nothing for the server's clock.
  std::optional<std::int64_t> now_;
  // publish's cap on a payload: options::max_outbox_payload_bytes.
  std::size_t max_payload_bytes_;
  bool retry_ = false;
};

template <class Produce>
asio::awaitable<bool> async_postgres_store::run_within(
    std::shared_ptr<detail::postgres::async::pool> shared, options config, bool caller,
    fenced_key held, store_time now, Produce produce) {
  namespace pg = detail::postgres;
  namespace pga = detail::postgres::async;
  run_settings settings(config, caller, now);
  pg::parameters key;
  key.bytes(held.scope).bytes(held.key);
  for (unsigned attempt = 0;; ++attempt) {
    if (attempt > 0) co_await pga::wait_before(attempt, settings.backoff, settings.random);
    auto session = std::make_shared<session_job>(shared);
    co_await pga::await_connection(*session);
    transaction txn(session, caller, held, settings.written_at, config.max_outbox_payload_bytes);
    std::exception_ptr failure;
    bool answer = false;
    try {
      // BEGIN and the lock in one round trip. The record is locked for the whole transaction: a
      // takeover waits for it to end.
      const std::shared_ptr<pga::answer_slot> begun = pga::send_ahead(
          *session, [&settings](pga::link& wire) { wire.send_text(settings.begin); });
      result_ptr locked = co_await pga::await_statement(
          *session, [&key](pga::link& wire) { wire.send_prepared(pg::lock, key); });
      (void)pga::checked_result(begun->take(), "complete_within: begin");
      locked = pga::checked_result(std::move(locked), "complete_within: lock");
      if (PQntuples(locked.get()) > 0 &&
          static_cast<std::uint64_t>(pg::get_int(locked.get(), 0, 0)) == held.fence &&
          pg::get_int(locked.get(), 0, 1) == 0) {
        const std::string bytes = co_await produce(txn);
        if (txn.retry_) {
          // The handler met a serialization failure and swallowed it: the transaction is aborted.
          throw postgres_error("40001", std::string(pga::store_name) +
                                            ": complete_within: the handler's transaction hit a "
                                            "serialization failure");
        }
        // The completion and COMMIT in one round trip. The completion is checked: one that
        // finds no record in progress under the fence (the handler's own SQL changed it) is an
        // error (division by zero, SQLSTATE 22012), so that the COMMIT behind it never runs.
        pg::parameters values;
        pg::held_parameters(values, held);
        values.bytes(bytes);
        const std::shared_ptr<pga::answer_slot> completed = pga::send_ahead(
            *session,
            [&values](pga::link& wire) { wire.send_prepared(pg::complete_checked, values); });
        result_ptr committed = co_await pga::end_transaction(*session, true);
        // What produce sent without awaiting failed: its exception, as if produce had thrown it.
        if (std::exception_ptr failed = txn.sent_failure()) std::rethrow_exception(failed);
        result_ptr done = completed->take();
        if (!pg::found_no_record_in_progress(done.get())) {
          (void)pga::checked_result(std::move(done), "complete_within: complete");
          (void)pga::checked_result(std::move(committed), "complete_within: commit");
          answer = true;
        }
      }
    } catch (...) {
      failure = std::current_exception();
    }
    // A rollback, unless COMMIT ended it already (then this answers at once).
    (void)co_await pga::end_transaction(*session, false);
    if (!failure) co_return answer;
    try {
      std::rethrow_exception(failure);
    } catch (const postgres_error& error) {
      if (!pga::retry_after(error, attempt, settings.retries, "complete_within")) throw;
    } catch (...) {
      // A handler that turned a serialization failure into an exception of its own still ran
      // in an aborted transaction: run it again, as for postgres_error.
      if (!txn.retry_) throw;
      if (attempt >= settings.retries) {
        throw store_error(store_failure::unavailable,
                          std::string(pga::store_name) + ": complete_within gave up after " +
                              std::to_string(attempt + 1) + " serialization failures or deadlocks");
      }
    }
  }
}

template <class Writes>
asio::awaitable<bool> async_postgres_store::run_with(
    std::shared_ptr<detail::postgres::async::pool> shared, options config, bool caller,
    fenced_key held, store_time now, std::string bytes, const Writes* writes,
    std::exception_ptr* writes_failed) {
  namespace pg = detail::postgres;
  namespace pga = detail::postgres::async;
  run_settings settings(config, caller, now);
  pg::parameters values;
  pg::held_parameters(values, held);
  values.bytes(bytes);
  for (unsigned attempt = 0;; ++attempt) {
    if (attempt > 0) co_await pga::wait_before(attempt, settings.backoff, settings.random);
    auto session = std::make_shared<session_job>(shared);
    co_await pga::await_connection(*session);
    transaction txn(session, caller, held, settings.written_at, config.max_outbox_payload_bytes);
    // BEGIN, the completion (checked: it locks the record, and fails with 22012 when the record
    // is no longer in progress under the fence, so that nothing behind it runs), the writes and
    // COMMIT, in one round trip when the writes await nothing.
    const std::shared_ptr<pga::answer_slot> begun =
        pga::send_ahead(*session, [&settings](pga::link& wire) { wire.send_text(settings.begin); });
    txn.completion_ = pga::send_ahead(
        *session, [&values](pga::link& wire) { wire.send_prepared(pg::complete_checked, values); });
    std::exception_ptr thrown;
    try {
      if (*writes) co_await (*writes)(txn);
    } catch (...) {
      thrown = std::current_exception();
    }
    // COMMIT, or a rollback after writes that threw; either way every answer is in after it.
    result_ptr committed = co_await pga::end_transaction(*session, !thrown);
    std::exception_ptr failed;
    try {
      // The store's own statements first: BEGIN, then the completion (a lost fence is false,
      // whatever the writes met behind it).
      (void)pga::checked_result(begun->take(), "complete_with: begin");
      failed = txn.sent_failure();
      if (txn.lost_) co_return false;
      if (failed != nullptr && failed == txn.completion_->error) std::rethrow_exception(failed);
      if (!failed && !thrown) {
        (void)pga::checked_result(std::move(committed), "complete_with: commit");
        co_return true;
      }
      if (txn.retry_) {
        // A statement of the writes met a serialization failure or a deadlock (perhaps caught
        // by them): they run again.
        throw postgres_error("40001", std::string(pga::store_name) +
                                          ": complete_with: the writes met a serialization "
                                          "failure or a deadlock");
      }
    } catch (const postgres_error& error) {
      if (!pga::retry_after(error, attempt, settings.retries, "complete_with")) throw;
      continue;
    }
    // The writes' failure: what they threw, else the statement they sent that was refused.
    *writes_failed = thrown ? thrown : failed;
    std::rethrow_exception(*writes_failed);
  }
}

static_assert(AsyncStore<async_postgres_store>);

}  // namespace idem

#endif  // IDEM_STORE_POSTGRES_ASYNC_HPP
