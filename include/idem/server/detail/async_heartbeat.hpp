// One heartbeat per asynchronous wrapper (async_engine): the held claims whose handler is still
// running after its first suspension, kept in the order their next renewal falls due, and one
// timer, set for the earliest. When a claim falls due, the timer asks its call for a renewal on
// the call's own executor (where its writer lives); the call renews, and a renewal that finds
// the fence lost cancels that call's handler alone.
//
// A handler that never suspends is never entered. One that suspends is entered once, with a
// lock and a list insertion; the timer is set only when the list was empty, and stopped when
// it empties again, so that an event loop with no call left runs out of work at once.
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

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

template <class Clock>
class heartbeat {
  struct state;

 public:
  using time_point = typename Clock::time_point;

  /// One call's place in the heartbeat: lives in the call's frame from enter() until leave()
  /// answers true. `wake` is the call's own timer, cancelled when a renewal is asked for.
  struct member {
    // Under the heartbeat's lock:
    member* previous = nullptr;
    member* next = nullptr;
    time_point due{};
    std::size_t requests_posted = 0;  // beat requests on their way to the call's executor
    bool listed = false;
    // On the call's executor:
    asio::any_io_executor executor;
    asio::steady_timer* wake = nullptr;
    bool renew = false;  // a renewal is asked for
  };

  heartbeat(Clock& clock, std::chrono::nanoseconds period)
      : state_(std::make_shared<state>(clock, period)) {}
  ~heartbeat() {
    const std::lock_guard lock(state_->mutex);
    state_->stop();
  }
  heartbeat(const heartbeat&) = delete;
  heartbeat& operator=(const heartbeat&) = delete;

  /// Enters a call whose handler is suspended: its first renewal falls due a period from now.
  /// The timer, when none is set, is made on `executor`, the call's.
  void enter(member& call, const asio::any_io_executor& executor, asio::steady_timer& wake) {
    call.executor = executor;
    call.wake = &wake;
    state& shared = *state_;
    const std::lock_guard lock(shared.mutex);
    call.due = shared.clock->now() + shared.period;
    shared.append(call);
    if (!shared.timer) {
      shared.timer.emplace(executor, *shared.clock);
      shared.set(state_, call.due);
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
    // next one. A call asked is moved to the end: the period counts from the request.
    void fire(const std::shared_ptr<state>& self, std::uint64_t fired, asio_error_code error) {
      const std::lock_guard lock(mutex);
      if (fired != generation || error || !timer) return;
      const time_point now = clock->now();
      while (first != nullptr && first->due <= now) {
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
    // On the call's executor: the call, still running, is woken to renew.
    void deliver(member& call) {
      bool wake = false;
      {
        const std::lock_guard lock(mutex);
        --call.requests_posted;
        wake = call.listed;
      }
      if (wake) {
        call.renew = true;
        call.wake->cancel();
      }
    }

    mutable std::mutex mutex;
    Clock* clock;
    std::chrono::nanoseconds period;
    member* first = nullptr;
    member* last = nullptr;
    std::size_t count = 0;
    std::optional<clock_timer<Clock>> timer;
    std::uint64_t generation = 0;
  };

  std::shared_ptr<state> state_;
};

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_HEARTBEAT_HPP
