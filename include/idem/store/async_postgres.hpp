// async_postgres_store: postgres_store's records, table and semantics, as an asynchronous store
// (idem/asio/async_store.hpp): each operation starts at once and completes through an Asio
// completion token, so one event loop keeps many of them in flight. Needs libpq and Asio (link
// idem::postgres_asio); include it by name.
//
//   asio::io_context loop;
//   idem::async_postgres_store::options config;
//   config.conninfo = "host=db.internal dbname=payments user=payments";
//   idem::async_postgres_store store{config, loop.get_executor()};  // connects, migrates
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
// * POSIX only (the socket is watched as a posix::stream_descriptor). No complete_within: a
//   transactional handler needs postgres_store. Every option: docs/stores/postgres_async.md.
#ifndef IDEM_STORE_ASYNC_POSTGRES_HPP
#define IDEM_STORE_ASYNC_POSTGRES_HPP

#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/asio/async_store.hpp>
#include <idem/asio/config.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/postgres/async/job.hpp>
#include <idem/store/postgres/async/link.hpp>
#include <idem/store/postgres/async/operations.hpp>
#include <idem/store/postgres/async/pool.hpp>
#include <idem/store/postgres/session.hpp>

namespace idem {

class async_postgres_store {
 public:
  /// Records keep no completion time, as postgres_store's (idem::reads_completion_time).
  static constexpr bool reads_completion_time = false;

  using time_source = postgres_store::time_source;

  /// postgres_store's options (conninfo, schema, table, pool_size, max_records_per_scope,
  /// statement_timeout, idle_in_transaction_timeout, connect_timeout, clock, connect_at_start;
  /// the transaction and outbox ones are unused), and these.
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

  /// A handle with no database: every operation throws store_error(unavailable) at its start.
  async_postgres_store() = default;

  /// Checks the options (std::invalid_argument); with connect_at_start, opens the first
  /// connection and creates or migrates the table on this thread, blocking (store_error when
  /// the server cannot be reached). Completions go to `executor` when a handler has none.
  async_postgres_store(options config, asio::any_io_executor executor) {
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

  std::shared_ptr<state> state_;
};

static_assert(AsyncStore<async_postgres_store>);

}  // namespace idem

#endif  // IDEM_STORE_ASYNC_POSTGRES_HPP
