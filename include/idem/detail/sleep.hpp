// A real sleep for the clocks, without <thread>.
//
// std::this_thread::sleep_for is nanosleep(2) in a loop on POSIX systems, but <thread> brings
// std::jthread and <stop_token> into every file that includes idem, for this one call. Where the
// platform is POSIX (<unistd.h>), the loop is written here; elsewhere it is std::this_thread's.
#ifndef IDEM_DETAIL_SLEEP_HPP
#define IDEM_DETAIL_SLEEP_HPP

#include <chrono>

#if __has_include(<unistd.h>)
#include <time.h>  // nanosleep, timespec: POSIX

#include <cerrno>
#include <ctime>
#else
#include <thread>
#endif

namespace idem::detail {

/// Blocks the calling thread for at least `delay` (nothing for zero or less). A signal that
/// interrupts the sleep does not shorten it: the rest is slept again.
inline void sleep_for(std::chrono::nanoseconds delay) {
  if (delay <= std::chrono::nanoseconds::zero()) return;
#if __has_include(<unistd.h>)
  const auto whole = std::chrono::duration_cast<std::chrono::seconds>(delay);
  timespec left{};
  left.tv_sec = static_cast<std::time_t>(whole.count());
  left.tv_nsec = static_cast<long>((delay - whole).count());
  while (::nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
#else
  std::this_thread::sleep_for(delay);
#endif
}

}  // namespace idem::detail

#endif  // IDEM_DETAIL_SLEEP_HPP
