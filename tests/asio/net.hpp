// The whole of the Asio the tests are built on: Boost.Asio, or standalone Asio for the
// idem_asio_standalone_tests build (IDEM_ASIO_STANDALONE), with the names that moved between
// the two versions we support brought to one place.
#ifndef IDEM_TESTS_ASIO_NET_HPP
#define IDEM_TESTS_ASIO_NET_HPP

#if defined(IDEM_ASIO_STANDALONE)
#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#else
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#endif

#include <idem/async/asio.hpp>

namespace test_net {
namespace asio = idem::asio;
inline constexpr auto& deferred = asio::experimental::deferred;
#if defined(IDEM_ASIO_STANDALONE)
using system_error = asio::system_error;
#else
using system_error = boost::system::system_error;
#endif
}  // namespace test_net

#endif  // IDEM_TESTS_ASIO_NET_HPP
