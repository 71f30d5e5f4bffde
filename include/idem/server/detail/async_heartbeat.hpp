// One heartbeat per asynchronous wrapper (async_engine): the held claims whose handler is still
// running, kept in the order their next renewal falls due, and one timer, set for the earliest.
// When a claim falls due, the timer asks its call (and those due within a quarter period more,
// so that renewals fall due together and go to the store together) for a renewal on the call's
// own executor (where its writer lives), by the function the call entered with; a renewal that
// finds the fence lost stops that call's handler alone.
//
// Two ways in. A handler awaited in the call's own coroutine (the default) is entered before it
// starts, with a lock and a list insertion and no timer: the timer is set by a watch posted to
// the event loop, which runs only once the handler has suspended (one that never suspends has
// left by then), and at most one watch is on its way at a time. A handler on a coroutine of its
// own (options.isolate_handler) is entered once it has suspended, and sets the timer at once.
// The timer is stopped when the list empties, so that an event loop with no call left runs out
// of work at once.
//
// Calls of one wrapper may run on several executors and threads: the list, and the timer's
// every operation, are under one mutex. A call's own fields written by a beat request are
// written on the call's executor, where the call reads them.
#ifndef IDEM_SERVER_DETAIL_ASYNC_HEARTBEAT_HPP
#define IDEM_SERVER_DETAIL_ASYNC_HEARTBEAT_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/async/timer.hpp>
#include <idem/server/async_handler_context.hpp>
#include <idem/store/contract.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

template <class Clock>
class heartbeat {
  struct state;

 public:
  using time_point = typename Clock::time_point;

  /// One call's place in the heartbeat: lives in the call's frame from enter() until leave()
  /// answers true. `beat` asks the call for a renewal, on its executor.
  struct member {
    // Under the heartbeat's lock:
    member* previous = nullptr;
    member* next = nullptr;
    time_point due{};
    std::size_t requests_posted = 0;  // beat requests on their way to the call's executor
    bool listed = false;
    // On the call's executor:
    asio::any_io_executor executor;
    void (*beat)(member&) = nullptr;
  };

  heartbeat(Clock& clock, std::chrono::nanoseconds period)
      : state_(std::make_shared<state>(clock, period)) {}
  ~heartbeat() {
    const std::lock_guard lock(state_->mutex);
    state_->closed = true;
    state_->stop();
  }
  heartbeat(const heartbeat&) = delete;
  heartbeat& operator=(const heartbeat&) = delete;

  /// Enters a call whose handler runs: its first renewal falls due a period from now, asked
  /// for by `beat(call)` on `executor`, the call's. `suspended`: the handler is known to be
  /// suspended, and the timer, when none is set, is set now; else a watch sets it once the
  /// event loop runs (see the top of this file).
  void enter(member& call, const asio::any_io_executor& executor, void (*beat)(member&),
             bool suspended) {
    call.executor = executor;
    call.beat = beat;
    state& shared = *state_;
    const std::lock_guard lock(shared.mutex);
    call.due = shared.clock->now() + shared.period;
    shared.append(call);
    if (shared.timer) return;
    if (suspended) {
      shared.start(state_, call.executor);
    } else if (!shared.watching) {
      shared.watching = true;
      asio::post(executor, [self = state_] { self->watch(self); });
    }
  }

  /// Takes `call` out (again, if it is out already): true once no beat request for it is on
  /// its way, when its frame may go; else the caller lets its executor run them first.
  bool leave(member& call) {
    state& shared = *state_;
    const std::lock_guard lock(shared.mutex);
    if (call.listed) {
      shared.unlink(call);
      if (shared.first == nullptr) shared.stop();
    }
    return call.requests_posted == 0;
  }

  /// How many calls are entered (a test's view).
  std::size_t members() const {
    const std::lock_guard lock(state_->mutex);
    return state_->count;
  }

 private:
  // Shared with the timer's completion, which may run after the wrapper is gone: it then finds
  // its generation stale and touches nothing else.
  struct state {
    state(Clock& c, std::chrono::nanoseconds p) : clock(&c), period(p) {}

    void append(member& call) {
      call.previous = last;
      call.next = nullptr;
      if (last != nullptr) {
        last->next = &call;
      } else {
        first = &call;
      }
      last = &call;
      call.listed = true;
      ++count;
    }
    void unlink(member& call) {
      (call.previous != nullptr ? call.previous->next : first) = call.next;
      (call.next != nullptr ? call.next->previous : last) = call.previous;
      call.previous = call.next = nullptr;
      call.listed = false;
      --count;
    }
    // The timer made on `executor` and set for the first call's renewal.
    void start(const std::shared_ptr<state>& self, const asio::any_io_executor& executor) {
      timer.emplace(executor, *clock);
      set(self, first->due);
    }
    // The watch, on the event loop: a call still listed now has suspended (or runs on another
    // thread), so the timer is set for it.
    void watch(const std::shared_ptr<state>& self) {
      const std::lock_guard lock(mutex);
      watching = false;
      if (!closed && first != nullptr && !timer) start(self, first->executor);
    }
    // The timer set for `when`; its completion counts only for this generation.
    void set(const std::shared_ptr<state>& self, time_point when) {
      timer->async_wait_until(when, [self, generation = generation](asio_error_code error) {
        self->fire(self, generation, error);
      });
    }
    void stop() {
      ++generation;
      timer.reset();  // cancels the wait
    }
    // Asks every call that fell due for a renewal, on its executor, and sets the timer for the
    // next one. A call asked is moved to the end: the period counts from the request. Calls due
    // within a quarter period more are asked now too, a little early: calls entered a few
    // milliseconds apart then fall due together from their second renewal on, and a store that
    // batches renewals (async_renewal_batch.hpp) gets them in one call a tick, not one each.
    void fire(const std::shared_ptr<state>& self, std::uint64_t fired, asio_error_code error) {
      const std::lock_guard lock(mutex);
      if (fired != generation || error || !timer) return;
      const time_point now = clock->now();
      const time_point soon = now + period / 4;
      while (first != nullptr && first->due <= soon) {
        member& call = *first;
        unlink(call);
        call.due = now + period;
        append(call);
        ++call.requests_posted;
        asio::post(call.executor, [self, &call] { self->deliver(call); });
      }
      if (first != nullptr) {
        set(self, first->due);
      } else {
        stop();
      }
    }
    // On the call's executor: the call, still running, is asked to renew.
    void deliver(member& call) {
      bool listed = false;
      {
        const std::lock_guard lock(mutex);
        --call.requests_posted;
        listed = call.listed;
      }
      if (listed) call.beat(call);
    }

    mutable std::mutex mutex;
    Clock* clock;
    std::chrono::nanoseconds period;
    member* first = nullptr;
    member* last = nullptr;
    std::size_t count = 0;
    std::optional<clock_timer<Clock>> timer;
    std::uint64_t generation = 0;
    bool watching = false;  // a watch is on its way to the event loop
    bool closed = false;    // the wrapper is gone
  };

  std::shared_ptr<state> state_;
};

/// One fenced renewal of a claim_writer's claim: false when it found the fence lost. A store
/// that could not answer this beat is asked again at the next one, and a step that cannot write
/// stops the handler itself.
template <class Writer>
asio::awaitable<bool> fenced_renewal(Writer& writer) {
  bool kept = true;
  try {
    kept = co_await writer.renew();
  } catch (const store_error&) {
  }
  co_return kept;
}

/// A call whose handler awaits in the call's own coroutine, in the heartbeat: a beat spawns one
/// renewal at a time beside the handler, on the call's executor; one that finds the fence lost
/// emits the context's lease_lost_slot(). `Writer` is the call's claim_writer.
template <class Clock, class Writer>
struct beside_handler : heartbeat<Clock>::member {
  beside_handler(Writer& w, async_handler_context& c) : writer(&w), context(&c) {}

  static void beat(typename heartbeat<Clock>::member& beaten) {
    auto& call = static_cast<beside_handler&>(beaten);
    if (call.renewing) return;  // the renewal in flight renews the lease
    call.renewing = true;
    asio::co_spawn(call.executor, renew(call), asio::detached);
  }

  Writer* writer;
  async_handler_context* context;
  asio::steady_timer* wake = nullptr;  // the call's, once it waits for a renewal to end
  bool renewing = false;

 private:
  static asio::awaitable<void> renew(beside_handler& call) {
    // Not `if (!co_await ...)`: GCC 12 miscompiles a co_await inside a condition.
    const bool kept = co_await fenced_renewal(*call.writer);
    if (!kept) signal_lease_lost(*call.context);
    call.renewing = false;
    if (call.wake != nullptr) call.wake->cancel();
  }
};

/// A beat request on its way to `call`, or a renewal in flight, refers to its frame: both end
/// before leave_after_beats does, and the call is out of the heartbeat.
template <class Clock, class Writer>
asio::awaitable<void> leave_after_beats(heartbeat<Clock>& beats,
                                        beside_handler<Clock, Writer>& call) {
  std::optional<asio::steady_timer> wake;
  while (!beats.leave(call) || call.renewing) {
    if (!call.renewing) {
      co_await asio::post(asio::use_awaitable);
      continue;
    }
    if (!wake) {
      wake.emplace(co_await asio::this_coro::executor, asio::steady_timer::time_point::max());
      call.wake = &*wake;
    }
    wake->expires_at(asio::steady_timer::time_point::max());
    asio_error_code error;  // operation_aborted: the renewal ended
    co_await wake->async_wait(asio::redirect_error(asio::use_awaitable, error));
  }
}

/// A call whose handler runs on a coroutine of its own (options.isolate_handler), once that
/// suspended: a beat wakes the call (its `wake`), which renews.
template <class Clock>
struct isolated_handler : heartbeat<Clock>::member {
  explicit isolated_handler(asio::steady_timer& w) : wake(&w) {}

  static void beat(typename heartbeat<Clock>::member& beaten) {
    auto& call = static_cast<isolated_handler&>(beaten);
    call.renew = true;
    call.wake->cancel();
  }

  asio::steady_timer* wake;
  bool renew = false;  // a renewal is asked for
};

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_HEARTBEAT_HPP
