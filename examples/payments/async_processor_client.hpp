// The processor's client on an event loop: payments_server --async charges through it. The
// blocking processor_client's rules (service.hpp) with Boost.Beast and idem::async_retrying:
// one key per charge in the Idempotency-Key header, the same on every attempt; the same backoff
// and attempt cap; transport failures turned into the std::system_error idem's classifier reads
// (never sent: transient; maybe received: ambiguous).
//
// What differs: the deadline. The blocking server stops calling at half the lease, because
// nothing renews the lease while its thread waits; async_idempotent's heartbeat renews it, so a
// charge may take as long as a client waits (processor_deadline).
#pragma once

#include "service.hpp"

#include <idem/asio.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <system_error>

namespace payments {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

/// How long the asynchronous server keeps trying to charge one payment (every attempt and wait
/// together): about as long as a client waits for its answer.
inline constexpr std::chrono::milliseconds processor_deadline{10'000};
/// How long opening a connection to the processor may take (as the blocking client's).
inline constexpr std::chrono::milliseconds processor_connect_timeout{500};

class async_processor_client {
 public:
  async_processor_client(asio::any_io_executor executor, endpoint where,
                         std::chrono::milliseconds deadline = processor_deadline)
      : retrying_(std::move(executor), call{std::move(where)}, options_for(deadline)) {}

  /// The processor's JSON for the charge made under `key`, made now or earlier; throws
  /// processor_failed when it did not charge. The awaiting coroutine's cancellation ends it.
  asio::awaitable<std::string> charge(std::string_view key, const intent& payment) {
    const auto outcome = co_await retrying_.async_with_key(key, payment, asio::use_awaitable);
    co_return charged_body(outcome);
  }
  /// The same, ended instead by a terminal cancellation on `stop` (a handler passes its
  /// context's lease_lost_slot()): verdict cancelled, so processor_failed; the claim's next
  /// holder asks again under the same key.
  asio::awaitable<std::string> charge(std::string_view key, const intent& payment,
                                      asio::cancellation_slot stop) {
    const auto outcome = co_await retrying_.async_with_key(
        key, payment, asio::bind_cancellation_slot(stop, asio::use_awaitable));
    co_return charged_body(outcome);
  }

 private:
  // One attempt: a connection of its own (as the blocking client's), one POST, closed. A pooled
  // connection the processor closed while idle would fail a charge's write ambiguously.
  struct call {
    endpoint where;

    asio::awaitable<processor_answer> operator()(const idem::attempt_context& attempt,
                                                 const intent& payment) const {
      const auto executor = co_await asio::this_coro::executor;
      beast::tcp_stream stream(executor);
      asio::ip::tcp::resolver resolver(executor);
      const std::string port = std::to_string(where.port);
      const auto [resolve_error, found] =
          co_await resolver.async_resolve(where.host, port, asio::as_tuple(asio::use_awaitable));
      if (resolve_error) fail(resolve_error, std::errc::host_unreachable);
      const auto left =
          std::max<std::chrono::nanoseconds>(attempt.time_left(), std::chrono::milliseconds{1});
      stream.expires_after(std::min<std::chrono::nanoseconds>(left, processor_connect_timeout));
      const auto [connect_error, peer] =
          co_await stream.async_connect(found, asio::as_tuple(asio::use_awaitable));
      // Nothing was sent: repeating cannot charge twice.
      if (connect_error) fail(connect_error, std::errc::connection_refused);

      stream.expires_after(
          std::max<std::chrono::nanoseconds>(attempt.time_left(), std::chrono::milliseconds{1}));
      http::request<http::string_body> request{http::verb::post, "/v1/charges", 11};
      request.set(http::field::host, where.host);
      request.set(http::field::content_type, "application/json");
      request.set("Idempotency-Key", std::string(attempt.key()));
      request.body() = payment.json();
      request.prepare_payload();
      const auto [write_error, written] =
          co_await http::async_write(stream, request, asio::as_tuple(asio::use_awaitable));
      if (write_error) fail(write_error, std::errc::broken_pipe);

      beast::flat_buffer buffer;
      http::response<http::string_body> response;
      const auto [read_error, read] =
          co_await http::async_read(stream, buffer, response, asio::as_tuple(asio::use_awaitable));
      if (read_error) fail(read_error, std::errc::connection_reset);
      beast::error_code ignored;
      stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
      co_return processor_answer{static_cast<int>(response.result_int()), response.body(),
                                 std::string(response[http::field::retry_after])};
    }

    // The error as idem's classifier reads it: a timeout is ambiguous (timed_out) once the
    // request may have been sent, and transient (`otherwise`) before; any other failure is
    // `otherwise` (connection_refused before sending, broken_pipe or connection_reset after).
    [[noreturn]] static void fail(const beast::error_code& error, std::errc otherwise) {
      std::errc code = otherwise;
      if (error == beast::error::timeout && otherwise != std::errc::connection_refused) {
        code = std::errc::timed_out;
      } else if (error == asio::error::operation_aborted) {
        code = std::errc::operation_canceled;  // the call was cancelled (its lease lost)
      }
      throw std::system_error(std::make_error_code(code), "processor: " + error.message());
    }
  };

  using retrying_type = idem::async_retrying<call, processor_policies>;

  static retrying_type::options options_for(std::chrono::milliseconds deadline) {
    return processor_retry_options<retrying_type::options>(deadline);
  }

  retrying_type retrying_;
};

}  // namespace payments
