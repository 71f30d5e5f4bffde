// Clocks: where the retry loop reads the time and how it waits.
//
// A clock gives two readings: `now()`, monotonic, for deadlines and delays (it never jumps when
// an operator or NTP sets the wall time), and `wall_now()`, for the one thing that needs the
// calendar: an HTTP-date in Retry-After. `sleep_for` is how the loop waits between attempts;
// manual_clock turns that wait into an instant jump of its own time, so tests of minutes of
// backoff run in microseconds and can assert the exact delays. Its wakes (wake_at, wake_after)
// are what the asynchronous drivers' timers wait on under it: advancing the time runs the wakes
// that fell due, so asynchronous tests are as deterministic as blocking ones.
#ifndef IDEM_CORE_CLOCK_HPP
#define IDEM_CORE_CLOCK_HPP

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace idem {

/// What a `clock` policy must provide.
template <class C>
concept Clock = requires(C& clock, std::chrono::nanoseconds delay) {
  typename C::time_point;
  { clock.now() } -> std::same_as<typename C::time_point>;
  { clock.now() - clock.now() } -> std::convertible_to<std::chrono::nanoseconds>;
  { clock.wall_now() } -> std::same_as<std::chrono::system_clock::time_point>;
  clock.sleep_for(delay);
};

/// The default: std::chrono::steady_clock for deadlines, a real sleep, and for the wall time the
/// kernel's coarse real-time clock where it has one (CLOCK_REALTIME_COARSE on Linux): the time
/// of the last timer tick, read from memory the kernel shares, without the time-stamp counter.
/// It lags the exact time by less than one tick (1 to 10 ms; `resolution()` says). The wall time
/// stamps the server side's records (claim, lease end, expiry: a lease is seconds, a retention
/// hours) and, on the client side, HTTP-dates in Retry-After (seconds) and UUIDv7 keys
/// (milliseconds, the rest random). Measured on a virtual machine: 6 ns a reading, against
/// 42 ns for std::chrono::system_clock::now(), which the server side pays on every request.
/// Where there is no coarse clock, the wall time is std::chrono::system_clock's.
struct coarse_clock {
  using time_point = std::chrono::steady_clock::time_point;
  time_point now() const noexcept { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point wall_now() const noexcept {
#if defined(CLOCK_REALTIME_COARSE)
    timespec now{};
    if (::clock_gettime(CLOCK_REALTIME_COARSE, &now) == 0) return from(now);
#endif
    return std::chrono::system_clock::now();
  }
  /// How far wall_now() may lag the exact time: the coarse clock's tick, or zero without one.
  static std::chrono::nanoseconds resolution() noexcept {
#if defined(CLOCK_REALTIME_COARSE)
    timespec tick{};
    if (::clock_getres(CLOCK_REALTIME_COARSE, &tick) == 0) {
      return std::chrono::seconds{tick.tv_sec} + std::chrono::nanoseconds{tick.tv_nsec};
    }
#endif
    return std::chrono::nanoseconds::zero();
  }
  void sleep_for(std::chrono::nanoseconds delay) const {
    std::this_thread::sleep_for(delay);
  }

 private:
  static std::chrono::system_clock::time_point from(const timespec& time) noexcept {
    return std::chrono::system_clock::time_point{
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::seconds{time.tv_sec} + std::chrono::nanoseconds{time.tv_nsec})};
  }
};

/// std::chrono::steady_clock for deadlines, the exact system clock for the wall time, and a real
/// sleep: the default's precision, at the price of a full clock reading per request.
struct steady_clock {
  using time_point = std::chrono::steady_clock::time_point;
  time_point now() const noexcept { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point wall_now() const noexcept {
    return std::chrono::system_clock::now();
  }
  void sleep_for(std::chrono::nanoseconds delay) const { std::this_thread::sleep_for(delay); }
};

/// The system (wall) clock for everything. Deadlines then move when the wall time is set;
/// prefer steady_clock unless the deadline itself comes from a wall-clock timestamp.
struct system_clock {
  using time_point = std::chrono::system_clock::time_point;
  time_point now() const noexcept { return std::chrono::system_clock::now(); }
  std::chrono::system_clock::time_point wall_now() const noexcept { return now(); }
  void sleep_for(std::chrono::nanoseconds delay) const { std::this_thread::sleep_for(delay); }
};

/// A clock that moves only when told to: `advance(d)` or a `sleep_for(d)`, which returns at once.
/// Copies share one timeline, so a test hands one copy to the retrying object and keeps another
/// to read or move the time (a slow attempt is simulated by advancing inside the call).
///
/// A wake is a function to run once the time reaches a point: what an asynchronous timer on this
/// clock registers instead of sleeping. Moving the time runs every wake that fell due, in order
/// of their times, on the thread that moved it (outside the clock's lock, so a wake may read the
/// clock or register another). `advance_to_next_wake()` jumps straight to the earliest: what a
/// test's event loop does when nothing else is ready.
///
/// Thread-safe: the time is one atomic counter, the wakes sit under a mutex.
class manual_clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  /// Names a wake, for cancel_wake. Never 0.
  using wake_id = std::uint64_t;

  /// Starts at steady time zero, and at the given wall time (by default 2026-01-01T00:00:00Z,
  /// fixed so that HTTP-date tests are reproducible).
  explicit manual_clock(std::chrono::system_clock::time_point wall_start =
                            std::chrono::system_clock::time_point{std::chrono::seconds{1767225600}})
      : state_(std::make_shared<state>(wall_start)) {}

  time_point now() const noexcept { return time_point{elapsed()}; }
  std::chrono::system_clock::time_point wall_now() const noexcept {
    return state_->wall_start +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(elapsed());
  }
  void sleep_for(std::chrono::nanoseconds delay) {
    if (delay > std::chrono::nanoseconds::zero()) {
      count_sleep(delay);
      advance(delay);
    }
  }
  /// Moves the time forward without counting it as a sleep, and runs the wakes that fell due.
  void advance(std::chrono::nanoseconds delay) {
    state_->elapsed.fetch_add(delay.count(), std::memory_order_relaxed);
    run_due_wakes();
  }

  /// Runs `wake` once the time reaches `when`: at the next move of the time that passes it (at
  /// once, on this thread, if it is already there).
  wake_id wake_at(time_point when, std::function<void()> wake) {
    wake_id id = 0;
    {
      const std::lock_guard lock(state_->mutex);
      id = state_->next_wake++;
      state_->wakes.emplace(std::pair{when, id}, std::move(wake));
    }
    run_due_wakes();
    return id;
  }
  /// A wake `delay` from now, counted as a sleep (slept(), sleeps()): the wait between attempts
  /// that an asynchronous driver makes where the blocking one calls sleep_for.
  wake_id wake_after(std::chrono::nanoseconds delay, std::function<void()> wake) {
    if (delay > std::chrono::nanoseconds::zero()) count_sleep(delay);
    return wake_at(now() + delay, std::move(wake));
  }
  /// Removes a wake that has not run; answers whether it was still waiting (false: it ran, is
  /// running, or was cancelled before).
  bool cancel_wake(wake_id id) {
    const std::lock_guard lock(state_->mutex);
    for (auto it = state_->wakes.begin(); it != state_->wakes.end(); ++it) {
      if (it->first.second == id) {
        state_->wakes.erase(it);
        return true;
      }
    }
    return false;
  }
  /// Moves the time to the earliest waiting wake, if it is later, and runs what fell due.
  /// Answers false, moving nothing, when no wake is waiting.
  bool advance_to_next_wake() {
    time_point next;
    {
      const std::lock_guard lock(state_->mutex);
      if (state_->wakes.empty()) return false;
      next = state_->wakes.begin()->first.first;
    }
    const std::chrono::nanoseconds ahead = next - now();
    if (ahead > std::chrono::nanoseconds::zero()) {
      state_->elapsed.fetch_add(ahead.count(), std::memory_order_relaxed);
    }
    run_due_wakes();
    return true;
  }
  /// Wakes registered and not yet run or cancelled.
  std::size_t waiting_wakes() const {
    const std::lock_guard lock(state_->mutex);
    return state_->wakes.size();
  }

  /// Time since the clock started.
  std::chrono::nanoseconds elapsed() const noexcept {
    return std::chrono::nanoseconds{state_->elapsed.load(std::memory_order_relaxed)};
  }
  /// Total time spent in sleep_for and wake_after, and how many of them there were.
  std::chrono::nanoseconds slept() const noexcept {
    return std::chrono::nanoseconds{state_->slept.load(std::memory_order_relaxed)};
  }
  long long sleeps() const noexcept { return state_->sleeps.load(std::memory_order_relaxed); }

 private:
  // Wakes by (time, id): the earliest first, and ties in the order they were registered.
  using wake_map = std::map<std::pair<time_point, wake_id>, std::function<void()>>;

  struct state {
    explicit state(std::chrono::system_clock::time_point start) : wall_start(start) {}
    std::chrono::system_clock::time_point wall_start;
    std::atomic<std::chrono::nanoseconds::rep> elapsed{0};
    std::atomic<std::chrono::nanoseconds::rep> slept{0};
    std::atomic<long long> sleeps{0};
    mutable std::mutex mutex;
    wake_map wakes;
    wake_id next_wake = 1;
  };

  void count_sleep(std::chrono::nanoseconds delay) noexcept {
    state_->slept.fetch_add(delay.count(), std::memory_order_relaxed);
    state_->sleeps.fetch_add(1, std::memory_order_relaxed);
  }

  // Takes the due wakes out under the lock and runs them outside it, one at a time: a wake that
  // registers another due at once is run by this same loop.
  void run_due_wakes() {
    for (;;) {
      std::function<void()> wake;
      {
        const std::lock_guard lock(state_->mutex);
        if (state_->wakes.empty() || state_->wakes.begin()->first.first > now()) return;
        wake = std::move(state_->wakes.begin()->second);
        state_->wakes.erase(state_->wakes.begin());
      }
      wake();
    }
  }

  std::shared_ptr<state> state_;
};

}  // namespace idem

#endif  // IDEM_CORE_CLOCK_HPP
