// Which Asio the asynchronous drivers use: Boost.Asio (>= 1.81) by default, standalone Asio
// (>= 1.22) when IDEM_ASIO_STANDALONE is defined (the CMake target idem::asio_standalone
// defines it; idem::asio links Boost). Either way the library is reached as idem::asio, and its
// error code type as idem::asio_error_code (and the exception that carries one as
// idem::asio_system_error; detail::portable_error turns a code into the std::error_code the
// classifiers compare with std::errc). The experimental parts used (deferred, parallel groups)
// are under asio::experimental in both.
#ifndef IDEM_ASYNC_ASIO_HPP
#define IDEM_ASYNC_ASIO_HPP

#if defined(IDEM_ASIO_STANDALONE)
#include <asio/version.hpp>
#if ASIO_VERSION < 102200
#error "idem/asio.hpp needs standalone Asio 1.22 or later (Debian: libasio-dev)"
#endif
#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/experimental/parallel_group.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/recycling_allocator.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <system_error>
namespace idem {
namespace asio = ::asio;
using asio_error_code = std::error_code;
using asio_system_error = std::system_error;
}  // namespace idem
#else
#include <boost/version.hpp>
#if BOOST_VERSION < 108100
#error \
    "idem/asio.hpp needs Boost.Asio from Boost 1.81 or later (Debian: libboost1.81-dev), or standalone Asio with IDEM_ASIO_STANDALONE defined"
#endif
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
namespace idem {
namespace asio = ::boost::asio;
using asio_error_code = ::boost::system::error_code;
using asio_system_error = ::boost::system::system_error;
}  // namespace idem
#endif

#include <system_error>
#include <type_traits>

// Two false positives of GCC 12 on the coroutines of idem's Asio headers, silenced between
// IDEM_ASIO_CODE_BEGIN and IDEM_ASIO_CODE_END (each header's own code, never a user's):
//  * it inlines the destruction of a coroutine frame that Asio allocates with its own operator
//    new, and then reports the frame's operator delete as mismatched with it
//    (-Wmismatched-new-delete);
//  * it takes the frame of a coroutine template for a class defined in a header, and warns when
//    an argument's type has no linkage (a handler in an anonymous namespace), though the frame
//    is private to its instantiation (-Wsubobject-linkage).
#if defined(__GNUC__) && !defined(__clang__)
#define IDEM_ASIO_CODE_BEGIN                                                                   \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmismatched-new-delete\"") \
      _Pragma("GCC diagnostic ignored \"-Wsubobject-linkage\"")
#define IDEM_ASIO_CODE_END _Pragma("GCC diagnostic pop")
#else
#define IDEM_ASIO_CODE_BEGIN
#define IDEM_ASIO_CODE_END
#endif

namespace idem::detail {

/// What an asio::awaitable<T, Executor> gives when awaited: `type` is T, and `awaitable` says
/// whether A is one. Anything else has no `type` (void's is void: what a call that is neither
/// returns), so a signature naming it drops out of overload resolution.
template <class A>
struct awaited {
  static constexpr bool awaitable = false;
};
template <class T, class Executor>
struct awaited<asio::awaitable<T, Executor>> {
  static constexpr bool awaitable = true;
  using type = T;
};
template <>
struct awaited<void> {
  static constexpr bool awaitable = false;
  using type = void;
};
template <class A>
inline constexpr bool is_awaitable = awaited<A>::awaitable;
template <class T>
concept an_awaitable = awaited<std::remove_cvref_t<T>>::awaitable;

/// An Asio error code as the std::error_code the classifiers know: an error of the operating
/// system in std::system_category, so that it compares equal to its std::errc. (Standalone Asio
/// keeps them in a category of its own; Boost's codes convert.)
inline std::error_code portable_error(const asio_error_code& code) noexcept {
#if defined(IDEM_ASIO_STANDALONE)
  if (code.category() == asio::system_category()) {
    return std::error_code{code.value(), std::system_category()};
  }
  return code;
#else
  return static_cast<std::error_code>(code);
#endif
}

}  // namespace idem::detail

#endif  // IDEM_ASYNC_ASIO_HPP
