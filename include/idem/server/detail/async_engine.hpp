// The asynchronous driver of the engine (idem/server/detail/engine.hpp): the same claim, run
// under the fence, record or release, with every rule taken from the engine's steps, and only
// the waiting done differently.
//
//   claim_at_once      engine::claim, inline and with no coroutine frame, for a store that never
//                      blocks and no coalescing (a replay answers without suspending);
//   claim_after_waits  the claim where the store's calls run, with coalescing's pauses waited
//                      on a clock_timer instead of a sleeping thread; both hand the store a
//                      resumable wrapper's kept request (engine::keep_request) in the claim, as
//                      engine::run does, and a new claim starts from it (engine::hold);
//   run_started        a call in one coroutine frame: its start (the face's checks and
//                      claim_at_once, or run_held's claim held already), then the handler (an
//                      asio::awaitable) under the claim, awaited in the call's coroutine, the
//                      wrapper's one heartbeat (async_heartbeat.hpp) renewing the lease every
//                      third of it and emitting the context's lease_lost_slot() when a renewal
//                      finds the fence lost (options.isolate_handler: the handler on a coroutine
//                      of its own, cancelled then); then engine::record_directly, settle_failure
//                      or answer_lost, their store calls awaited.
//
// Every store call goes through store_calls: inline for a store that never blocks, the store's
// own asynchronous operation for an AsyncStore, else on the store's executor. Cancellation (the
// completion handler's slot, any type) is answered, never thrown: a wait for a duplicate ends with
// verdict::cancelled and nothing claimed; a handler cancelled (or throwing after the caller
// cancelled) is settled by the failure policy as a handler that threw, and the call ends with
// verdict::cancelled; a handler that returned is recorded as usual, since its effect happened.
//
// As every Asio composed operation, one call's parts (the handler, the heartbeat) run on the
// executor it was started on, which must not run them at once: a strand, or an io_context run
// by one thread.
#ifndef IDEM_SERVER_DETAIL_ASYNC_ENGINE_HPP
#define IDEM_SERVER_DETAIL_ASYNC_ENGINE_HPP

#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/async/blocking_store.hpp>
#include <idem/async/detail/recycled.hpp>
#include <idem/async/timer.hpp>
#include <idem/server/async_handler_context.hpp>
#include <idem/server/detail/async_claim_writer.hpp>
#include <idem/server/detail/async_heartbeat.hpp>
#include <idem/server/detail/async_operation.hpp>
#include <idem/server/detail/async_store_calls.hpp>
#include <idem/server/detail/coalescing.hpp>
#include <idem/server/detail/engine.hpp>
#include <idem/server/detail/held_claim.hpp>
#include <idem/server/outcome.hpp>
#include <idem/store/async_contract.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

// Options: async_idempotent::options or async_inbox::options; the engine's fields, and
// store_executor and heartbeat.
template <class Options>
class async_engine {
 public:
  using core_type = engine<Options>;
  using store_type = typename core_type::store_type;
  using clock_type = typename core_type::clock_type;

  async_engine(Options options, const char* who)
      : core_(std::move(options), who),
        calls_(core_.options().store_executor, who),
        heartbeat_(core_.clock(), core_.options().lease / 3) {}

  core_type& core() noexcept { return core_; }
  /// Where the store's calls run (async_resume.hpp awaits them as run does).
  const store_calls<store_type>& calls() const noexcept { return calls_; }
  const Options& options() const noexcept { return core_.options(); }

  /// engine::sweep and engine::stuck, called on this thread; an AsyncStore's operation is
  /// waited for here (blocking_store: never on a thread that runs the store's executor).
  std::size_t sweep() {
    if constexpr (AsyncStore<store_type>) {
      return blocking_store<store_type>{core_.store()}.sweep(core_.clock().wall_now());
    } else {
      return core_.sweep();
    }
  }
  std::vector<record> stuck(std::size_t limit) {
    if constexpr (AsyncStore<store_type>) {
      return blocking_store<store_type>{core_.store()}.stuck(core_.clock().wall_now(), limit);
    } else {
      return core_.stuck(limit);
    }
  }

  /// Runs `run(async_handler_context&)` with no key and no claim: nothing is stored.
  template <class Response, class Run>
  static asio::awaitable<idempotent_outcome<Response>> run_unguarded(std::string_view scope,
                                                                     Run run) {
    async_handler_context context{scope, {}, 0};
    co_return idempotent_outcome<Response>::unrecorded(verdict::executed, co_await run(context),
                                                       "no idempotency key: not guarded");
  }

  /// Whether a claim is made at once, inline, with no coroutine frame: a store that never
  /// blocks, and no coalescing to wait through. claim_at_once compiles to nothing otherwise.
  bool claims_at_once() const noexcept {
    return inline_store && options().coalesce <= std::chrono::nanoseconds::zero();
  }

  /// The claim of (scope, key) for a request with fingerprint `started.print`, made at once
  /// (claims_at_once()), answered into `started` (first_answer). `kept`: the recovery bytes a
  /// new record starts with, or null (engine::run).
  template <class Response>
  void claim_at_once(call_start<Response>& started, std::string_view scope, std::string_view key,
                     const kept_bytes* kept = nullptr) {
    if constexpr (inline_store) {
      store_time claimed_at{};
      // Made in place: a replay's record (its response) is moved nowhere before it is answered.
      made_later<claim_result> claimed;
      try {
        claimed.make([&] {
          return core_.claim(scope, key, started.print, claimed_at, core_type::kept_stored(kept));
        });
      } catch (const store_error& error) {
        started.answer.emplace(core_type::template refused<Response>(error));
        return;
      }
      first_answer(started, scope, key, claimed.get(), claimed_at, kept);
    }
  }

  /// engine::run, awaited: claims (scope, key) for a request with fingerprint `print` and, when
  /// the claim is this caller's, runs `run(async_handler_context&)` (an awaitable<Response>)
  /// under it. A handler's own exception passes through after `failure` settled the key.
  /// `kept` (engine::run's), when not null, must stay valid until the call completes.
  /// With completion::in_transaction, `run(async_handler_context&, transaction&)` runs inside
  /// the transaction that completes the record (an AsyncTransactionalStore's
  /// async_complete_within), as engine::run's does. `waited`, when not null, is set when a
  /// coalescing wait paused at least once (engine::run's). `may_wait` false answers a live
  /// claim of another caller at once (in_progress), as a batch does, whatever `coalesce` says.
  template <class Response, completion How = completion::direct, class Run, class Failure>
  asio::awaitable<idempotent_outcome<Response>> run(std::string_view scope, std::string_view key,
                                                    digest print, Run run, const Failure& failure,
                                                    const kept_bytes* kept = nullptr,
                                                    bool* waited = nullptr, bool may_wait = true) {
    if (claims_at_once()) {
      return run_started<Response, How>(
          claimed_at_once<Response, Run>{this, scope, key, print, kept, std::move(run)}, failure);
    }
    return run_after_waits<Response, How>(scope, key, print, std::move(run), failure, kept, waited,
                                          may_wait);
  }

  /// run_started's call for engine::run with a claim made at once (claim_at_once).
  template <class Response, class Run>
  struct claimed_at_once {
    async_engine* engine;
    std::string_view scope;
    std::string_view key;
    digest print;
    const kept_bytes* kept;
    Run run;

    void start(call_start<Response>& started) {
      started.print = print;
      engine->claim_at_once(started, scope, key, kept);
    }
    auto operator()(async_handler_context& context, auto&... transaction) {
      return run(context, transaction...);
    }
  };

  /// The rest of run, once this caller holds the claim: the handler under it, then its response
  /// recorded or the failure settled (run_started, with the claim as its start).
  template <class Response, completion How = completion::direct, class Run, class Failure>
  asio::awaitable<idempotent_outcome<Response>> run_held(held_claim claim, const digest& print,
                                                         Run& run, const Failure& failure) {
    return run_started<Response, How>(held_call<Response, Run>{std::move(claim), print, &run},
                                      failure);
  }

  /// run_started's call for a claim held already (run_held): `run` must outlive the call.
  template <class Response, class Run>
  struct held_call {
    held_claim claim;
    digest print;
    Run* run;

    void start(call_start<Response>& started) {
      started.print = print;
      started.found.template emplace<1>(std::move(claim));
    }
    auto operator()(async_handler_context& context, auto&... transaction) {
      return (*run)(context, transaction...);
    }
  };

  /// A call in one coroutine frame. `run.start(call_start&)`, a plain function run when the
  /// caller first awaits, answers the call or holds its claim (async_idempotent's checks,
  /// fingerprint and claim_at_once; run_held's claim held already); then `run(context)` runs the
  /// handler under the claim, and its response is recorded or the failure settled. With
  /// use_awaitable it runs in the caller's coroutine, so the caller's cancellation setting is
  /// put back as it was, however the call ends. The claim's writer, its handler's context and
  /// its heartbeat entry live in one block of Asio's recycling allocator (held_parts), not in
  /// the frame: Asio recycles frames of up to 1020 bytes, two per thread, so that this frame and
  /// the handler's come from the thread's cache and a first call allocates nothing for them.
  template <class Response, completion How = completion::direct, class Call, class Failure>
  asio::awaitable<idempotent_outcome<Response>> run_started(Call run, const Failure& failure) {
    call_start<Response> started;
    run.start(started);
    // The answer made before the claim (a replay, a refusal); else the claim's answer, below.
    std::optional<idempotent_outcome<Response>>& answer = started.answer;
    if (answer) co_return std::move(*answer);
    if (started.replays()) co_return started.replay();
    held_claim& claim = started.claim();
    const digest& print = started.print;
    // A cancellation throws nowhere in here: each ending is a verdict.
    const bool throwing = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    // GCC gives each co_await's result a slot of its own in the frame: few co_awaits of an
    // outcome here, and none on the common path.
    std::exception_ptr thrown;
    const recycled<held_parts> parts =
        recycled<held_parts>::made_by([&] { return held_parts(*this, claim); });
    writer_type& writer = parts->writer;
    async_handler_context& context = parts->context;
    if constexpr (How == completion::in_transaction) {
      try {
        co_await run_in_transaction<Response>(answer, claim, print, context, writer, run, failure);
      } catch (...) {
        thrown = std::current_exception();
      }
      co_await asio::this_coro::throw_if_cancelled(throwing);
      if (thrown) std::rethrow_exception(thrown);
      co_return std::move(*answer);
    } else {
      // The handler's answer: Response, or commit_with<Response, transaction> (after_run).
      using result_type =
          typename awaited<std::invoke_result_t<Call&, async_handler_context&>>::type;
      handler_run<result_type> ran;
      if (cancelled(co_await asio::this_coro::cancellation_state)) {
        ran.thrown = aborted();  // settled below as a handler that threw before any step
        ran.never_ran = true;
      } else if (options().heartbeat && options().isolate_handler) {
        co_await run_isolated(context, run, writer, ran);
      } else {
        // The handler awaits in this coroutine: its operations see the caller's cancellation,
        // and after one, throw as any coroutine's do. With the heartbeat, the call is entered in
        // it first (no timer yet): a handler that never suspends costs the heartbeat a list
        // insertion and a removal.
        beside_handler<clock_type, writer_type>& member = parts->member;
        const bool beats = options().heartbeat;
        if (beats)
          heartbeat_.enter(member, co_await asio::this_coro::executor, &member.beat, false);
        co_await asio::this_coro::throw_if_cancelled(true);
        try {
          ran.response.emplace(co_await run(context));
        } catch (...) {
          ran.thrown = std::current_exception();
        }
        co_await asio::this_coro::throw_if_cancelled(false);
        if (beats && (!heartbeat_.leave(member) || member.renewing))
          co_await leave_after_beats(heartbeat_, member);
      }
      // The common ending (a store whose calls run inline) records the response below.
      constexpr bool may_record_inline = inline_store && !is_commit_with<result_type>;
      if (!may_record_inline || ran.thrown) {
        try {
          co_await after_run<Response>(answer, claim, print, failure, writer,
                                       context.steps_recorded(), context.in_doubt(), ran);
        } catch (...) {
          thrown = std::current_exception();
        }
      }
      co_await asio::this_coro::throw_if_cancelled(throwing);
      if (thrown) std::rethrow_exception(thrown);
      if constexpr (may_record_inline) {
        if (!ran.thrown) {
          // Made where the caller's co_await reads it, not moved there (a store's error is
          // answered in it; anything else thrown reaches the caller, as after_run's does). One
          // co_await of throw_if_cancelled(throwing) on this path: each has a slot of its own
          // in the frame (984 bytes with g++ -O2, 36 under what Asio recycles).
          co_return recorded_inline<Response, result_type>{this, &claim, &print, &ran};
        }
      }
      co_return std::move(*answer);
    }
  }

 private:
  using writer_type = claim_writer<core_type>;
  static constexpr bool inline_store = store_calls<store_type>::inline_calls;

  // run_started's common ending: the response recorded inline, as the outcome the caller reads.
  template <class Response, class Result>
  struct recorded_inline {
    async_engine* engine;
    held_claim* claim;
    const digest* print;
    handler_run<Result>* ran;
    operator idempotent_outcome<Response>() const {
      return engine->core_.template record_directly<Response>(*claim, *print,
                                                              std::move(*ran->response));
    }
  };

  // What run_started keeps of a held claim beside its frame: the claim's writer, the handler's
  // context (the claimed start marked), and the call's entry in the heartbeat.
  struct held_parts {
    held_parts(async_engine& engine, held_claim& claim)
        : writer{engine.core_, claim.held, engine.calls_, claim.recovery},
          started{claimed_start(claim, engine.options())},  // before the bytes move
          context{claim.held.scope,          claim.held.key, claim.held.fence, claim.resumed,
                  std::move(claim.recovery), &writer},
          member{writer, context} {
      mark_claimed_start(context, started, engine.options(), engine.core_.clock());
    }
    writer_type writer;
    std::string_view started;  // the step whose start the claim wrote, or none
    async_handler_context context;
    beside_handler<clock_type, writer_type> member;
  };

  // What a claim (made with `kept`, or null) found, into `started`, each made in place: the
  // stored response to replay, else the outcome when this caller may not run (a mismatch, a
  // request in progress, a full store), else the claim it holds.
  template <class Response>
  void first_answer(call_start<Response>& started, std::string_view scope, std::string_view key,
                    claim_result& claimed, store_time claimed_at, const kept_bytes* kept) {
    switch (claimed.status) {
      case claim_status::full:
        emplace_made(started.answer, [] { return core_type::template no_room<Response>(); });
        return;
      case claim_status::existing:
        if (core_type::replays(claimed.existing, started.print)) {
          auto stored = [&] { return core_.template stored_response<Response>(claimed.existing); };
          started.found.template emplace<2>(made_by<Response, decltype(stored)>{stored});
          return;
        }
        emplace_made(started.answer, [&] {
          return core_.template answer_existing<Response>(claimed.existing, started.print,
                                                          claimed_at);
        });
        return;
      case claim_status::claimed:
      case claim_status::taken_over:
        break;
    }
    auto hold = [&] { return core_.hold(scope, key, claimed, claimed_at, kept); };
    started.found.template emplace<1>(made_by<held_claim, decltype(hold)>{hold});
  }

  // engine::run's coroutine where the claim is not made at once: claim_after_waits, then
  // run_held.
  template <class Response, completion How, class Run, class Failure>
  asio::awaitable<idempotent_outcome<Response>> run_after_waits(std::string_view scope,
                                                                std::string_view key, digest print,
                                                                Run run, const Failure& failure,
                                                                const kept_bytes* kept,
                                                                bool* waited, bool may_wait) {
    call_start<Response> started;
    started.print = print;
    co_await claim_after_waits<Response>(started, scope, key, kept, waited, may_wait);
    if (started.answer) co_return std::move(*started.answer);
    if (started.replays()) co_return started.replay();
    co_return co_await run_held<Response, How>(std::move(started.claim()), print, run, failure);
  }

  // The claim made where the store's calls run, and with coalescing engine's coalescing_wait
  // pauses waited on a timer instead of a sleeping thread. A caller that cancels the wait gets
  // verdict::cancelled, with nothing claimed. `waited`, when not null, is set at the first pause.
  // Answers into `started` as first_answer does.
  template <class Response>
  asio::awaitable<void> claim_after_waits(call_start<Response>& started, std::string_view scope,
                                          std::string_view key, const kept_bytes* kept,
                                          bool* waited, bool may_wait) {
    const digest& print = started.print;
    store_time claimed_at{};
    std::optional<claim_result> claimed;
    try {
      claim_request request =
          core_.claim_request_for(scope, key, print, claimed_at, core_type::kept_stored(kept));
      claimed.emplace(co_await calls_.claim(core_.store(), request));
      coalescing_wait wait{options().coalesce};
      std::optional<clock_timer<clock_type>> timer;
      const auto start = core_.clock().now();
      while (may_wait && options().coalesce > std::chrono::nanoseconds::zero() &&
             coalescing_wait::waits_on(*claimed, print)) {
        const std::optional<std::chrono::nanoseconds> pause =
            wait.next_pause(core_.clock().now() - start);
        if (!pause) break;
        if (cancelled(co_await asio::this_coro::cancellation_state)) {
          claimed.reset();
          break;
        }
        if (!timer) timer.emplace(co_await asio::this_coro::executor, core_.clock());
        if (waited != nullptr) *waited = true;
        asio_error_code error;
        co_await timer->async_wait_for(*pause, asio::redirect_error(asio::use_awaitable, error));
        if (error) {
          claimed.reset();
          break;
        }
        request =
            core_.claim_request_for(scope, key, print, claimed_at, core_type::kept_stored(kept));
        claimed.emplace(co_await calls_.claim(core_.store(), request));
      }
    } catch (const store_error& error) {
      started.answer.emplace(core_type::template refused<Response>(error));
      co_return;
    }
    if (!claimed) {
      started.answer.emplace(cancelled_outcome<Response>(
          "while it waited for a duplicate in progress to settle; nothing was claimed"));
      co_return;
    }
    first_answer(started, scope, key, *claimed, claimed_at, kept);
  }

  // What a run leaves, into `answer`, but for a response recorded inline: the response
  // recorded where the store's calls run; or for a throw, a lost fence answered as the blocking
  // driver answers it, else the failure policy's settling, and the throw passed on (or, after
  // the caller cancelled, verdict::cancelled).
  // A handler that answered commit_with has its writes made in the transaction that completes
  // the record (commit_writes); writes that throw end the call as a handler that threw.
  template <class Response, class Failure, class Result>
  asio::awaitable<void> after_run(std::optional<idempotent_outcome<Response>>& answer,
                                  held_claim& claim, const digest& print, const Failure& failure,
                                  const writer_type& writer, std::size_t steps, bool in_doubt,
                                  handler_run<Result>& ran) {
    const fenced_key& held = claim.held;
    if constexpr (is_commit_with<Result>) {
      if (!ran.thrown) {
        ran.thrown = co_await commit_writes<Response>(answer, claim, print, *ran.response);
        if (answer) co_return;
      }
    } else if (!ran.thrown) {
      // engine::record_directly, its completion awaited.
      typename core_type::completion_bytes done;
      core_.completion_for(*ran.response, done);
      bool applied = false;
      try {
        applied = co_await calls_.complete(core_.store(), held, done.bytes,
                                           core_.completion_time(claim.claimed_at));
      } catch (const store_error& error) {
        answer.emplace(core_type::not_stored(claim, std::move(*ran.response), error));
        co_return;
      }
      if (applied) {
        answer.emplace(core_.recorded(claim, std::move(*ran.response), done));
      } else {
        co_await answer_lost<Response>(answer, held, print);
      }
      co_return;
    }
    if (ran.never_ran) {
      // The claim is settled as the failure policy settles a handler that threw before any
      // recovery point (released, by every policy idem provides).
      co_await settle<Response>(held, 0, failure, ran.thrown);
      answer.emplace(cancelled_outcome<Response>("before its handler ran; the key was settled"));
      co_return;
    }
    if (writer.lost() || is_lease_lost(ran.thrown)) {
      co_await answer_lost<Response>(answer, held, print);
      co_return;
    }
    const bool cancelled_now = cancelled(co_await asio::this_coro::cancellation_state);
    // A recovery point's store failed (its effect may not be recorded), or a step with a lookup
    // cannot tell whether its effect landed: the claim stays for a takeover after the lease, as
    // the blocking driver keeps it.
    const bool keep = writer.failed() || in_doubt;
    if (keep && !cancelled_now) std::rethrow_exception(ran.thrown);
    if (!keep) co_await settle<Response>(held, steps, failure, ran.thrown);
    if (!cancelled_now) std::rethrow_exception(ran.thrown);
    answer.emplace(cancelled_outcome<Response>(
        "while its handler ran; nothing was recorded, and the key was settled as for a handler "
        "that threw"));
  }

  // commit_with's writes, in the transaction that completes the record (an
  // AsyncTransactionalStore's async_complete_within, or a blocking TransactionalStore's
  // complete_within where its calls run), the handler's response encoded first. Answers into
  // `answer` when the transaction committed (the response recorded), found the fence lost
  // (answer_lost), or failed for the store's reasons (refused: the claim stays, as
  // run_in_transaction keeps it); returns the exception of writes that threw, with `answer` left
  // empty.
  template <class Response, class Transaction>
  asio::awaitable<std::exception_ptr> commit_writes(
      std::optional<idempotent_outcome<Response>>& answer, held_claim& claim, const digest& print,
      commit_with<Response, Transaction>& result) {
    typename core_type::completion_bytes done;
    core_.completion_for(result.response, done);
    std::exception_ptr writes_threw;
    const fenced_key& held = claim.held;
    bool applied = false;
    bool lost = false;
    try {
      applied = co_await calls_.template complete_with_writes<Transaction>(
          core_.store(), held, core_.completion_time(claim.claimed_at), done.bytes, result.writes,
          writes_threw);
    } catch (const lease_lost&) {
      lost = true;
    } catch (const store_error& error) {
      if (!writes_threw) {
        answer.emplace(
            core_type::template refused<Response>(error, "the handler's writes did not commit: "));
        co_return nullptr;
      }
    } catch (...) {
      if (!writes_threw) throw;
    }
    if (writes_threw) co_return writes_threw;
    if (lost || !applied) {
      co_await answer_lost<Response>(answer, held, print);
      co_return nullptr;
    }
    answer.emplace(core_.recorded(claim, std::move(result.response), done));
    co_return nullptr;
  }

  // options.isolate_handler: the handler on a coroutine of its own, so that it can be cancelled
  // alone, whatever it awaits. One that finishes before it first suspends is one posted step
  // from unwound, and costs the heartbeat nothing. One that suspends is entered in the
  // wrapper's heartbeat, whose one timer asks this call for a fenced renewal every third of the
  // lease; a renewal that finds the fence lost, or the caller's cancellation, cancels the
  // handler (and emits the context's lease_lost_slot()), and this call then waits for it to
  // finish.
  template <class Response, class Run>
  asio::awaitable<void> run_isolated(async_handler_context& context, Run& run, writer_type& writer,
                                     handler_run<Response>& ran) {
    const asio::any_io_executor executor = co_await asio::this_coro::executor;
    // Made when the handler suspends: woken by its end, a renewal asked, or a cancellation.
    std::optional<asio::steady_timer> wake;
    asio::cancellation_signal stop_handler;
    asio::co_spawn(
        executor,
        [&]() -> asio::awaitable<void> {
          try {
            ran.response.emplace(co_await run(context));
          } catch (...) {
            ran.thrown = std::current_exception();
          }
          ran.returned = true;
        },
        // Finished only in the completion, once the handler's coroutine has unwound: its
        // cancellation state lives in stop_handler, which must outlive it.
        asio::bind_cancellation_slot(stop_handler.slot(), [&](const std::exception_ptr&) {
          ran.finished = true;
          if (wake) wake->cancel();
        }));
    if (!ran.returned) {
      wake.emplace(executor, asio::steady_timer::time_point::max());
      isolated_handler<clock_type> member{*wake};
      heartbeat_.enter(member, executor, &member.beat, true);
      bool stopping = false;
      while (!ran.finished) {
        if (!stopping && cancelled(co_await asio::this_coro::cancellation_state)) {
          stopping = true;
          stop_handler.emit(asio::cancellation_type::terminal);
        }
        if (member.renew) {
          member.renew = false;
          if (stopping) continue;
          const bool kept = co_await fenced_renewal(writer);
          // A request that came while this renewal was in flight asks for what it did: the next
          // comes a period on, and a step's write waiting for this one goes first.
          member.renew = false;
          if (!kept) {
            stopping = true;
            signal_lease_lost(context);
            stop_handler.emit(asio::cancellation_type::terminal);
          }
          continue;
        }
        wake->expires_at(asio::steady_timer::time_point::max());
        asio_error_code error;  // operation_aborted: woken, or the caller cancelled
        co_await wake->async_wait(asio::redirect_error(asio::use_awaitable, error));
      }
      // A beat request still on its way here refers to this frame: let it arrive first.
      while (!heartbeat_.leave(member))
        co_await asio::post(asio::use_awaitable);
    }
    // The handler's coroutine is one posted step from unwound.
    while (!ran.finished)
      co_await asio::post(asio::use_awaitable);
  }

  // engine::record_within, awaited: the handler runs inside the transaction that completes
  // the record (async_complete_within runs `produce` where the store runs it), and its steps
  // are written on the transaction's connection (claim_writer::within). No heartbeat: the
  // transaction holds the record's row lock, so a takeover waits for it to end. One context
  // for every call of produce, as engine::record_within's: a store that rolled back and calls
  // again (a serialization failure) gets the steps of the rolled-back call from memory. The
  // call's cancellation does not reach the transaction (the store does not watch it). Answers
  // into `answer`; a handler's own exception is thrown after the failure policy settled the key.
  template <class Response, class Run, class Failure>
  asio::awaitable<void> run_in_transaction(std::optional<idempotent_outcome<Response>>& answer,
                                           held_claim& claim, const digest& print,
                                           async_handler_context& context, writer_type& writer,
                                           Run& run, const Failure& failure) {
    using transaction_type = typename store_type::transaction;
    std::optional<Response> response;
    typename core_type::completion_bytes done;
    bool handler_threw = false;
    auto produce = [&](transaction_type& transaction) -> asio::awaitable<std::string> {
      const typename writer_type::scoped_transaction within{writer, transaction};
      handler_threw = false;
      response.reset();
      try {
        response.emplace(co_await run(context, transaction));
      } catch (...) {
        // As engine::run_claimed: a recovery point the store failed to write, or a step that
        // cannot tell whether its effect landed, keeps the claim.
        handler_threw = !writer.failed() && !context.in_doubt();
        throw;
      }
      core_.completion_for(*response, done);
      co_return std::string(done.bytes);
    };
    const fenced_key& held = claim.held;
    std::exception_ptr thrown;
    bool applied = false;
    try {
      applied = co_await calls_.complete_within(core_.store(), held,
                                                core_.completion_time(claim.claimed_at), produce);
    } catch (const lease_lost&) {
      writer.lose();  // a step found the fence lost: answered as the blocking driver answers it
    } catch (const store_error& error) {
      if (!handler_threw) {
        answer.emplace(core_type::template refused<Response>(
            error, "the handler's transaction did not commit: "));
        co_return;
      }
      thrown = std::current_exception();
    } catch (...) {
      thrown = std::current_exception();
    }
    if (writer.lost()) {
      co_await answer_lost<Response>(answer, held, print);
      co_return;
    }
    if (thrown) {
      if (handler_threw) co_await settle<Response>(held, context.steps_recorded(), failure, thrown);
      std::rethrow_exception(thrown);
    }
    if (!applied) {
      co_await answer_lost<Response>(answer, held, print);
      co_return;
    }
    answer.emplace(core_.recorded(claim, std::move(*response), done));
  }

  // engine::settle_failure, the store's call awaited.
  template <class Response, class Failure>
  asio::awaitable<void> settle(const fenced_key& held, std::size_t steps, const Failure& failure,
                               std::exception_ptr error) {
    if constexpr (!std::is_same_v<Failure, keep_claim_on_failure>) {
      try {
        const std::optional<std::string> bytes =
            core_.template failure_response<Response>(held, steps, failure, error);
        if (bytes) {
          (void)co_await calls_.complete(core_.store(), held, *bytes, core_.clock().wall_now());
        } else {
          (void)co_await calls_.release(core_.store(), held);
        }
      } catch (const store_error&) {
        // As engine::settle_failure: the handler's exception is what the caller must see.
      }
    }
  }

  // engine::answer_lost, the store's find awaited.
  template <class Response>
  asio::awaitable<void> answer_lost(std::optional<idempotent_outcome<Response>>& answer,
                                    const fenced_key& held, const digest& print) {
    std::optional<record> current;
    const store_time now = core_.clock().wall_now();
    try {
      current = co_await calls_.find(core_.store(), held.scope, held.key, now);
    } catch (const store_error& error) {
      answer.emplace(core_type::template refused<Response>(error));
      co_return;
    }
    answer.emplace(core_.template answer_current<Response>(current, print, now));
  }

  core_type core_;
  store_calls<store_type> calls_;
  heartbeat<clock_type> heartbeat_;
};

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_ENGINE_HPP
