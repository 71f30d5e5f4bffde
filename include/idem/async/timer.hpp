// idem::clock_timer<Clock>: the asynchronous drivers' waits, on the executor, by the clock the
// policies chose.
//
//   idem::clock_timer timer{executor, clock};
//   auto [error] = co_await timer.async_wait_for(100ms, asio::as_tuple(asio::use_awaitable));
//
// For a real clock (coarse_clock, steady_clock, system_clock, or one of the user's) it is an
// asio::steady_timer: a wait is a timer in the event loop, never a sleeping thread. For a clock
// with wakes (manual_clock: wake_at, wake_after, cancel_wake) a wait registers a wake, and the
// test that moves the clock completes the waits that fell due; waiting for a delay counts as
// one of the clock's sleeps, as the blocking driver's sleep_for does, so one test can assert
// the same delays through either driver.
//
// async_wait_for and async_wait_until take any completion token and complete with
// (asio_error_code): none when the time came, asio::error::operation_aborted when cancel() or
// the handler's cancellation slot (any cancellation type) ended the wait first. The completion
// runs on the handler's associated executor (else the timer's), never inside the call that
// started the wait. One wait at a time per timer, as with asio::steady_timer.
#ifndef IDEM_ASYNC_TIMER_HPP
#define IDEM_ASYNC_TIMER_HPP

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/core/clock.hpp>

namespace idem {

/// A clock whose waits are wakes the clock runs when its time moves (idem::manual_clock).
template <class C>
concept WakingClock = Clock<C> &&
    requires(C& clock, typename C::time_point when, std::chrono::nanoseconds delay,
             std::function<void()> wake) {
  { clock.wake_at(when, wake) } -> std::same_as<typename C::wake_id>;
  { clock.wake_after(delay, wake) } -> std::same_as<typename C::wake_id>;
  { clock.cancel_wake(clock.wake_at(when, wake)) } -> std::same_as<bool>;
};

/// Waits for a real clock: an asio::steady_timer over the delay the clock's time points give.
template <class Clock>
class clock_timer {
 public:
  using executor_type = asio::any_io_executor;
  using time_point = typename Clock::time_point;

  clock_timer(const executor_type& executor, Clock& clock) : clock_(&clock), timer_(executor) {}

  executor_type get_executor() noexcept { return timer_.get_executor(); }

  /// Completes after `delay` (at once, through the executor, for a delay of zero or less).
  template <class Token>
  auto async_wait_for(std::chrono::nanoseconds delay, Token&& token) {
    timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(delay));
    return timer_.async_wait(std::forward<Token>(token));
  }
  /// Completes once the clock reads `when`.
  template <class Token>
  auto async_wait_until(time_point when, Token&& token) {
    return async_wait_for(
        std::chrono::duration_cast<std::chrono::nanoseconds>(when - clock_->now()),
        std::forward<Token>(token));
  }
  /// Ends the wait in progress, if any, with operation_aborted.
  void cancel() { timer_.cancel(); }

 private:
  Clock* clock_;
  asio::steady_timer timer_;
};

/// Waits for a clock with wakes: each wait is a wake, run when the test moves the clock.
template <WakingClock Clock>
class clock_timer<Clock> {
 public:
  using executor_type = asio::any_io_executor;
  using time_point = typename Clock::time_point;

  clock_timer(executor_type executor, Clock& clock)
      : clock_(&clock), executor_(std::move(executor)) {}
  ~clock_timer() { cancel(); }
  clock_timer(const clock_timer&) = delete;
  clock_timer& operator=(const clock_timer&) = delete;

  executor_type get_executor() noexcept { return executor_; }

  template <class Token>
  auto async_wait_for(std::chrono::nanoseconds delay, Token&& token) {
    return start(
        [delay](Clock& clock, std::function<void()> wake) {
          return clock.wake_after(delay, std::move(wake));
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto async_wait_until(time_point when, Token&& token) {
    return start(
        [when](Clock& clock, std::function<void()> wake) {
          return clock.wake_at(when, std::move(wake));
        },
        std::forward<Token>(token));
  }
  void cancel() {
    if (auto pending = std::move(pending_)) pending->cancel();
  }

 private:
  // One wait. Exactly one of the wake and a cancellation takes the handler: whichever removes
  // the wake first (the clock's cancel_wake answers which), so a wait completes once.
  class waiting {
   public:
    virtual ~waiting() = default;
    virtual void cancel() = 0;
  };

  template <class Handler>
  class wait final : public waiting, public std::enable_shared_from_this<wait<Handler>> {
   public:
    wait(Clock& clock, Handler handler, executor_type fallback)
        : clock_(clock),
          handler_(std::move(handler)),
          work_(asio::get_associated_executor(*handler_, fallback)) {}

    template <class Register>
    void begin(Register& register_wake) {
      auto slot = asio::get_associated_cancellation_slot(*handler_);
      if (slot.is_connected()) {
        slot.assign([self = this->weak_from_this()](asio::cancellation_type type) {
          if (type == asio::cancellation_type::none) return;
          if (auto alive = self.lock()) alive->cancel();
        });
      }
      // The wake holds the wait alive until it runs or is cancelled.
      id_ = register_wake(clock_, [self = this->shared_from_this()] { self->complete({}); });
      registered_ = true;
    }

    // Runs where cancellation is emitted: on the handler's executor, as Asio asks.
    void cancel() override {
      if (registered_ && clock_.cancel_wake(id_)) complete(asio::error::operation_aborted);
    }

   private:
    // Called once: by the wake, on the thread that moved the clock, or by cancel.
    void complete(asio_error_code error) {
      std::optional<Handler> handler;
      handler.emplace(std::move(*handler_));
      handler_.reset();
      auto executor = work_.get_executor();
      asio::post(executor,
                 [handler = std::move(*handler), error, work = std::move(work_)]() mutable {
                   auto slot = asio::get_associated_cancellation_slot(handler);
                   if (slot.is_connected()) slot.clear();
                   std::move(handler)(error);
                 });
    }

    Clock& clock_;
    std::optional<Handler> handler_;
    asio::executor_work_guard<asio::associated_executor_t<Handler, executor_type>> work_;
    typename Clock::wake_id id_{};
    bool registered_ = false;
  };

  template <class Register, class Token>
  auto start(Register register_wake, Token&& token) {
    return asio::async_initiate<Token, void(asio_error_code)>(
        [this, register_wake](auto handler) mutable {
          using handler_type = decltype(handler);
          auto pending =
              std::make_shared<wait<handler_type>>(*clock_, std::move(handler), executor_);
          pending_ = pending;
          pending->begin(register_wake);
        },
        token);
  }

  Clock* clock_;
  executor_type executor_;
  std::shared_ptr<waiting> pending_;
};

}  // namespace idem

#endif  // IDEM_ASYNC_TIMER_HPP
