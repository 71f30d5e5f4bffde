// idem::async_idempotent<Handler, Policies>: idem::idempotent for handlers that are coroutines on
// an Asio event loop. The same verdicts, under the same rules (one engine,
// idem/server/detail/engine.hpp), with the waits on the executor instead of a thread.
//
//   idem::async_idempotent payments{io.get_executor(),
//       [&](idem::async_handler_context& ctx,
//           const idem::http_request& request) -> asio::awaitable<idem::http_response> {
//         auto id = co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
//           co_return co_await provider.async_charge(parse(request.body),
//                                                    ctx.downstream_key("charge"));
//         });
//         co_return idem::http_response{201, {}, id};
//       }};
//   auto outcome = co_await payments.async_call(account_id, request, asio::use_awaitable);
//
// async_call(scope, [key,] request, token) takes any completion token (use_awaitable, a
// callback, use_future, deferred) and completes with
//
//   void(std::exception_ptr, idem::idempotent_outcome<Response>)
//
// as co_spawn does: the exception is null and the outcome carries the verdict for every
// expected ending; a handler's own exception passes through as the exception_ptr (with
// use_awaitable or use_future, it is thrown), after the failure policy settled the key. The
// call runs on the completion handler's associated executor (with use_awaitable, the calling
// coroutine's), or on the wrapper's executor when the handler names none (a plain callback,
// use_future), and completes through the handler's. That executor must not run two of the
// call's parts at once: a strand, or an io_context run by one thread. scope, key and request are
// read until the call completes, as Asio reads a buffer: keep them alive until then.
//
// What differs from the blocking wrapper (docs/async_server.md has the whole story):
//   * a duplicate that coalesces waits on a timer (clock_timer), never a sleeping thread;
//   * while the handler runs, a heartbeat renews the lease every third of it, so a downstream
//     call may take longer than the lease; a renewal that finds the claim taken over cancels
//     the handler, whose later steps throw lease_lost, and the call answers as the blocking
//     wrapper answers a lost fence (options.heartbeat turns it off);
//   * an AsyncStore (idem/store/async_contract.hpp: the asynchronous Redis and PostgreSQL stores)
//     is awaited: its operations are in flight while the loop runs other calls, and a handler
//     records its steps with async_step (a blocking step() waits for the store from the loop's
//     thread, so it works only when the store's executor is run by other threads);
//   * any other store that blocks (anything but memory_store and locked_store, see
//     idem::never_blocks) has its calls run on options.store_executor, never on the event loop;
//   * cancellation through the token's slot ends the call with verdict::cancelled (503).
// A handler that takes the store's transaction, asio::awaitable<R>(async_handler_context&,
// const Request&, Store::transaction&), runs inside the transaction that completes its record
// (an AsyncTransactionalStore: the asynchronous PostgreSQL store), awaiting its own statements
// on the transaction's connection: its writes and the record commit together or not at all.
// A handler that also waits on the network (a processor's charge) answers
// idem::commit_with<R, Store::transaction> instead (idem/store/async_contract.hpp): it runs as any
// other, with the heartbeat, and its writes commit with the record once it has returned, so no
// connection is held while it waits.
#ifndef IDEM_SERVER_ASYNC_IDEMPOTENT_HPP
#define IDEM_SERVER_ASYNC_IDEMPOTENT_HPP

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/async/blocking_store.hpp>
#include <idem/core/codec.hpp>
#include <idem/core/fingerprint/fingerprint.hpp>
#include <idem/core/request.hpp>
#include <idem/policies.hpp>
#include <idem/server/async_handler_context.hpp>
#include <idem/server/deadline.hpp>
#include <idem/server/detail/admission.hpp>
#include <idem/server/detail/async_checks.hpp>
#include <idem/server/detail/async_engine.hpp>
#include <idem/server/detail/async_observed_handler.hpp>
#include <idem/server/detail/async_resume.hpp>
#include <idem/server/detail/checks.hpp>
#include <idem/server/observer.hpp>
#include <idem/server/options.hpp>
#include <idem/server/outcome.hpp>
#include <idem/server/resumption.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/memory.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem {

template <class Handler, class Policies = default_policies>
class async_idempotent {
  static_assert(detail::check_server_policies<Policies, false>());
  static_assert(Store<typename Policies::store> || AsyncStore<typename Policies::store>,
                "Policies::store must be a Store (idem/store/contract.hpp) or an AsyncStore "
                "(idem/store/async_contract.hpp).");
  static_assert(detail::check_fingerprint<fingerprint_for<typename Policies::fingerprint>>());
  static_assert(detail::check_server_observer<typename Policies::server_observer>());

 public:
  using executor_type = asio::any_io_executor;
  using store_type = typename Policies::store;
  using clock_type = typename Policies::clock;
  using fingerprint_type = fingerprint_for<typename Policies::fingerprint>;
  using failure_type = typename Policies::failure;
  using response_codec_type = typename Policies::response_codec;
  using server_observer_type = typename Policies::server_observer;

  /// idempotent_options (idem/server/options.hpp), the blocking idempotent's, each field meaning
  /// what it means there, and three of the asynchronous driver's own. Its server_observer hears
  /// of calls only: no handler_event, and coalesced is always false.
  ///
  /// max_kept_request_bytes and name keep each request in its record exactly as idempotent
  /// keeps it (the same bytes): idem::reconciler, which is blocking, resumes such a record
  /// through an idempotent registered under the same name, whose handler does what this one
  /// does with step() where this one has async_step() (docs/async_server.md).
  struct options : idempotent_options<Policies> {
    /// Where the store's calls run when the store blocks (it does not declare never_blocks): an
    /// asio::thread_pool's executor, or a strand of one. Required then; unused for a store
    /// that never blocks, whose calls run inline, and for an AsyncStore, which is awaited.
    executor_type store_executor{};
    /// Renew the lease every third of it while the handler runs, and signal the handler (its
    /// context's lease_lost_slot()) when a renewal finds the claim taken over. Off, a handler
    /// that outlives its lease is taken over.
    bool heartbeat = true;
    /// Run each handler on a coroutine of its own (one co_spawn a call), so that the heartbeat
    /// cancels it whatever it awaits when a renewal finds the claim taken over. Off, the
    /// handler runs in the call's coroutine: a handler that never suspends costs the heartbeat
    /// nothing, and a lost claim reaches only what the handler bound to lease_lost_slot().
    bool isolate_handler = false;
  };

  /// `executor` runs a call whose completion handler has no associated executor of its own.
  /// Throws std::invalid_argument for options that can never work, and for a store that blocks
  /// with no store_executor.
  async_idempotent(executor_type executor, Handler handler)
      : async_idempotent(std::move(executor), std::move(handler), options{}) {}
  async_idempotent(executor_type executor, Handler handler, options parts)
      : executor_(std::move(executor)),
        handler_(std::move(handler)),
        observer_(parts.server_observer),
        engine_(std::move(parts), "idem::async_idempotent") {}

  async_idempotent(const async_idempotent&) = delete;
  async_idempotent& operator=(const async_idempotent&) = delete;

  executor_type get_executor() const noexcept { return executor_; }

  /// Handles one request under (scope, key); `key` is std::nullopt when the request has none.
  /// The handler is called as awaitable<R>(async_handler_context&, const Request&) or
  /// awaitable<R>(const Request&); completes with (std::exception_ptr, idempotent_outcome<R>).
  template <Fingerprintable Request, class Token>
  auto async_call(std::string_view scope, std::optional<std::string_view> key,
                  const Request& request, Token&& token) {
    return async_call(scope, key, request, std::optional<caller_deadline>{},
                      std::forward<Token>(token));
  }

  /// The same, for a caller that waits `deadline.time_left` at most (idempotent's overload).
  template <Fingerprintable Request, class Token>
  auto async_call(std::string_view scope, std::optional<std::string_view> key,
                  const Request& request, std::optional<caller_deadline> deadline, Token&& token) {
    static_assert(detail::check_async_handler<Handler, Request, store_type>());
    if constexpr (detail::async_guardable<Handler, Request, store_type>) {
      using response_type =
          typename detail::async_handler_result<Handler, Request, store_type>::type;
      static_assert(detail::check_response<response_type>());
      if constexpr (detail::storable_response<response_type>) {
        static_assert(detail::check_failure_policy<failure_type, response_type>());
        using outcome_type = idempotent_outcome<response_type>;
        if constexpr (detail::awaits_in_caller<Token>) {
          // The caller's own coroutine runs the call: no coroutine of its own to spawn.
          return observed<response_type>(scope, key, request, deadline);
        } else {
          return asio::async_initiate<Token, void(std::exception_ptr, outcome_type)>(
              [this](auto handler, std::string_view scope, std::optional<std::string_view> key,
                     const Request* request, std::optional<caller_deadline> deadline) {
                const auto executor = detail::operation_executor(handler, executor_);
                asio::co_spawn(executor,
                               detail::hearing_every_cancellation(
                                   observed<response_type>(scope, key, *request, deadline)),
                               std::move(handler));
              },
              token, scope, key, &request, deadline);
        }
      }
    }
  }

  /// The same, with the key read from the request's `key_header` (Idempotency-Key); an absent
  /// header is a missing key, an empty one an invalid key.
  template <Fingerprintable Request, class Token>
  auto async_call(std::string_view scope, const Request& request, Token&& token) {
    return async_call(scope, view_of(request).find_header(engine_.options().key_header), request,
                      std::forward<Token>(token));
  }

  /// idempotent::resume, awaited: resumes a stuck record of this wrapper, `request` being the
  /// request the record kept, encoded. A request that does not decode or is not the one the
  /// record was claimed for is `unreadable` and never run; else the record is taken over (fenced,
  /// as a retry would take it) and the handler runs from its recovery points, its steps
  /// answered from what the record holds. A handler that throws again keeps the claim
  /// (`failed`). Completes with (std::exception_ptr, resume_result); every ending is a
  /// resume_result, so the exception_ptr is null. `stuck` and `request` must stay valid until
  /// the call completes.
  template <Fingerprintable Request, class Token>
  auto async_resume(const record& stuck, std::string_view request, Token&& token) {
    static_assert(Encodable<Request>,
                  "A resumable wrapper keeps its requests: specialise idem::codec<Request> for "
                  "the request type (idem/core/codec.hpp).");
    static_assert(detail::check_async_handler<Handler, Request, store_type>());
    if constexpr (detail::async_guardable<Handler, Request, store_type>) {
      using response_type =
          typename detail::async_handler_result<Handler, Request, store_type>::type;
      static_assert(detail::check_response<response_type>());
      if constexpr (detail::storable_response<response_type>) {
        return asio::async_initiate<Token, void(std::exception_ptr, resume_result)>(
            [this](auto handler, const record* stuck, std::string_view request) {
              const auto executor = detail::operation_executor(handler, executor_);
              asio::co_spawn(executor,
                             detail::hearing_every_cancellation(
                                 resume<response_type, Request>(*stuck, request)),
                             std::move(handler));
            },
            token, &stuck, request);
      }
    }
  }

  const options& settings() const noexcept { return engine_.options(); }

  /// Removes expired records; answers how many. Calls the store on this thread; an AsyncStore's
  /// operation is waited for here (blocking_store: never on a thread that runs its executor).
  std::size_t sweep() { return engine_.sweep(); }
  /// Claims in progress past their lease (see idempotent::stuck), called as sweep is.
  std::vector<record> stuck(std::size_t limit = 1000) { return engine_.stuck(limit); }

  Handler& handler() noexcept { return handler_; }
  store_type& store() noexcept { return engine_.core().store(); }
  clock_type& clock() noexcept { return engine_.core().clock(); }
  const fingerprint_type& fingerprint() const noexcept { return engine_.options().fingerprint; }

 private:
  using engine_type = detail::async_engine<options>;

  // handle, and the observer told of its verdict; for the default observer, handle itself.
  template <class Response, class Request>
  asio::awaitable<idempotent_outcome<Response>> observed(std::string_view scope,
                                                         std::optional<std::string_view> key,
                                                         const Request& request,
                                                         std::optional<caller_deadline> deadline) {
    if constexpr (detail::observes_server<server_observer_type>) {
      return observed_call<Response>(scope, key, request, deadline);
    } else {
      return handle<Response>(scope, key, request, deadline);
    }
  }

  template <class Response, class Request>
  asio::awaitable<idempotent_outcome<Response>> observed_call(
      std::string_view scope, std::optional<std::string_view> key, const Request& request,
      std::optional<caller_deadline> deadline) {
    const auto start = clock().now();
    bool waited = false;
    idempotent_outcome<Response> outcome =
        co_await handle<Response>(scope, key, request, deadline, &waited);
    observer_.on_call(server_call_event{
        outcome.verdict(), waited && outcome.verdict() == verdict::replayed, since(start)});
    co_return outcome;
  }

  std::chrono::nanoseconds since(typename clock_type::time_point start) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock().now() - start);
  }

  // `waited`: where an observed call learns that its claim waited for a duplicate (coalescing).
  // Not a coroutine: a call with a key whose claim is made at once is one coroutine frame, the
  // engine's run_started, which makes the checks and the claim (start) when the caller awaits.
  template <class Response, class Request>
  asio::awaitable<idempotent_outcome<Response>> handle(std::string_view scope,
                                                       std::optional<std::string_view> key,
                                                       const Request& request,
                                                       std::optional<caller_deadline> deadline,
                                                       bool* waited = nullptr) {
    if (key && engine_.claims_at_once()) {
      return engine_.template run_started<Response, completion_for<Request>>(
          one_call<Response, Request>{this, scope, key, &request, deadline},
          engine_.options().failure);
    }
    return handle_waiting<Response>(scope, key, request, deadline, waited);
  }

  // How a handler's response is recorded: in the transaction that completes the record, for a
  // handler that takes the store's transaction; else directly.
  template <class Request>
  static constexpr detail::completion completion_for =
      detail::takes_async_transaction<Handler, Request, store_type>
          ? detail::completion::in_transaction
          : detail::completion::direct;

  // One call's arguments, kept in its coroutine's frame: start(started) makes the checks, the
  // fingerprint and the claim (async_idempotent::start), and (context[, transaction]) runs the
  // handler, an awaitable of its answer, with the caller's deadline on its context. The
  // handler's own awaitable is awaited, with no frame between (but timed_handler's, for an
  // observer that watches). One object, not two lambdas: a call's frame is made by copying it.
  template <class Response, class Request>
  struct one_call {
    one_call(async_idempotent* s, std::string_view sc, std::optional<std::string_view> k,
             const Request* r, std::optional<caller_deadline> d) noexcept
        : self(s), scope(sc), key(k), request(r), deadline(d) {}
    // Member by member, not defaulted: a defaulted copy let GCC 12 copy the object made with
    // 8-byte stores by 16-byte loads, four store-forwarding stalls on every call.
    one_call(const one_call& o) noexcept
        : self(o.self),
          scope(o.scope),
          key(o.key),
          request(o.request),
          deadline(o.deadline),
          until(o.until) {}

    async_idempotent* self;
    std::string_view scope;
    std::optional<std::string_view> key;
    const Request* request;
    std::optional<caller_deadline> deadline;
    // The deadline on the wrapper's clock, from the time the caller had left on arrival.
    std::optional<typename clock_type::time_point> until;

    void start(detail::call_start<Response>& started) {
      until = detail::deadline_on(self->clock(), deadline);
      self->start(started, scope, key, *request, deadline);
    }
    auto operator()(async_handler_context& context, auto&... transaction) {
      if (until) context.set_deadline(self->clock(), *until);
      auto invoke = [&] {
        if constexpr (detail::takes_async_transaction<Handler, Request, store_type>) {
          return std::invoke(self->handler_, context, *request, transaction...);
        } else if constexpr (detail::takes_async_context<Handler, Request>) {
          return std::invoke(self->handler_, context, *request);
        } else {
          return std::invoke(self->handler_, *request);
        }
      };
      return detail::observed_handler(self->observer_, self->clock(), invoke());
    }
  };

  // A call whose claim may wait (coalescing), is made where the store's calls run, or has no
  // key: the checks and the fingerprint (start), then the engine's run.
  template <class Response, class Request>
  asio::awaitable<idempotent_outcome<Response>> handle_waiting(
      std::string_view scope, std::optional<std::string_view> key, const Request& request,
      std::optional<caller_deadline> deadline, bool* waited) {
    constexpr bool transactional = detail::takes_async_transaction<Handler, Request, store_type>;
    constexpr detail::completion how = completion_for<Request>;
    one_call<Response, Request> run{this, scope, key, &request, deadline};
    detail::call_start<Response> started;
    run.start(started);
    if (started.answer) co_return std::move(*started.answer);
    if (started.replays()) co_return started.replay();
    // One co_await of an outcome (see call_start): GCC gives each its own slot in the frame.
    asio::awaitable<idempotent_outcome<Response>> rest;
    if (!key) {
      if constexpr (transactional) {
        // The transaction is the one that completes a record: without a key there is none.
        co_return idempotent_outcome<Response>{
            verdict::missing_key,
            "an idempotency key is required: this handler runs inside the transaction that "
            "records its key"};
      } else if constexpr (detail::async_commits_with_record<Handler, Request, store_type>) {
        co_return idempotent_outcome<Response>{
            verdict::missing_key,
            "an idempotency key is required: this handler's writes commit in the transaction "
            "that records its key"};
      } else {
        rest = engine_type::template run_unguarded<Response>(scope, run);
      }
    } else {
      rest = engine_.template run<Response, how>(
          scope, *key, started.print, run, engine_.options().failure, claim_kept(started), waited);
    }
    co_return co_await std::move(rest);
  }

  // async_resume's coroutine: the kept request decoded and checked against the record, then
  // the engine's resume with the handler run on it.
  template <class Response, class Request>
  asio::awaitable<resume_result> resume(const record& stuck, std::string_view encoded) {
    std::optional<Request> kept;
    try {
      kept.emplace(codec<Request>::decode(encoded));
    } catch (const std::exception& error) {
      co_return resume_result{resumption::unreadable,
                              std::string("the kept request does not decode: ") + error.what(),
                              0,
                              {}};
    }
    digest print;
    try {
      print = engine_.options().fingerprint(view_of(*kept));
    } catch (const std::invalid_argument& error) {
      co_return resume_result{
          resumption::unreadable,
          std::string("the kept request cannot be fingerprinted: ") + error.what(),
          0,
          {}};
    }
    if (print != stuck.fingerprint) {
      co_return resume_result{resumption::unreadable,
                              "the kept request is not the request the record was claimed for "
                              "(its fingerprint differs)",
                              0,
                              {}};
    }
    one_call<Response, Request> run{this, stuck.scope, stuck.key, &*kept, std::nullopt};
    co_return co_await detail::async_resume<Response, completion_for<Request>>(
        engine_, stuck.scope, stuck.key, print, run);
  }

  // What a call does before its first suspension, in a plain function (see call_start): the
  // checks and the fingerprint, the kept request of a resumable wrapper, and with a store that
  // never blocks and no coalescing, the claim, so that a replay answers from the caller's frame.
  template <class Response, class Request>
  void start(detail::call_start<Response>& started, std::string_view scope,
             std::optional<std::string_view> key, const Request& request,
             const std::optional<caller_deadline>& deadline) {
    const options& settings = engine_.options();
    const bool too_late = deadline && detail::too_late(*deadline, settings.minimum_time_left);
    if (!key) {
      if (settings.require_key) {
        started.answer.emplace(detail::missing_key<Response>());
      } else if (too_late) {
        started.answer.emplace(
            detail::deadline_refusal<Response>(*deadline, settings.minimum_time_left));
      }
      return;
    }
    if (auto refused = detail::admit<Response>(settings, *key, view_of(request), started.print)) {
      started.answer.emplace(std::move(*refused));
      return;
    }
    if (too_late) {
      started.answer.emplace(
          detail::deadline_refusal<Response>(*deadline, settings.minimum_time_left));
      return;
    }
    if (settings.max_kept_request_bytes != 0) {
      started.kept = std::make_unique<detail::kept_bytes>();
      if (auto refused = engine_.core().template keep_request<Response>(
              request, settings.name, settings.max_kept_request_bytes, *started.kept,
              "idem::async_idempotent")) {
        started.answer.emplace(std::move(*refused));
        return;
      }
    }
    if (engine_.claims_at_once()) engine_.claim_at_once(started, scope, *key, claim_kept(started));
  }

  // What a new record of this call starts with: its kept request (with the first step's start),
  // else the first step's start alone, or nothing (engine::first_start).
  template <class Response>
  const detail::kept_bytes* claim_kept(const detail::call_start<Response>& started) noexcept {
    return started.kept ? started.kept.get() : engine_.core().first_start();
  }

  executor_type executor_;
  Handler handler_;
  [[no_unique_address]] server_observer_type observer_;
  engine_type engine_;
};

template <class Handler>
async_idempotent(asio::any_io_executor, Handler) -> async_idempotent<Handler, default_policies>;

}  // namespace idem

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_ASYNC_IDEMPOTENT_HPP
