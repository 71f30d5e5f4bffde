// payments_server's settings, read from its command line, and the entry of its event-loop mode
// (payments_server --async, async_server.cpp), which lives in a translation unit of its own:
// Boost.Beast and the coroutines are compiled there only.
#pragma once

#include "common.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace payments {

struct server_settings {
  int port = 0;
  endpoint processor;
  std::chrono::milliseconds lease{5000};
  double crash_after_charge = 0;
  double crash_when_asked = 0;
  /// How long a connection may take to send one whole request, or stay idle between two; past
  /// it the connection is closed (the blocking server: its read and keep-alive timeouts).
  std::chrono::milliseconds read_timeout{10000};
  /// --async: the event loops (one io_context and one thread each).
  std::size_t threads = 1;
  /// --async: the most connections held at once. One more is made room for by closing the
  /// connection idle the longest (then the one slowest to send its request); when every one is
  /// busy being answered, the new one is answered 503 and closed.
  std::size_t max_connections = 10000;
  /// The file holding the secret the API keys are checked under (auth.hpp); empty: the built-in
  /// development secret.
  std::string auth_secret_file;
  /// The processor's webhooks (webhook_receiver.hpp): the SQLite file their inbox and the
  /// charges' provider status live in (empty: not received), the file of the secret they are
  /// signed with, and the probability of a crash while one is handled.
  std::string webhook_db;
  std::string webhook_secret_file;
  double crash_in_webhook = 0;
};

/// The largest request body either server reads; a larger one is answered 413 unread. A
/// payment's body is a few dozen bytes, and a record keeps at most max_kept_request_bytes (16
/// KiB): a body between the two is read, and refused 413 by idem before it is claimed.
inline constexpr std::size_t max_request_body_bytes = 64 * 1024;
/// The largest request head (request line and headers) the event-loop server reads; a larger
/// one is answered 431. The blocking server reads lines of up to 8 KiB, and any number of them:
/// it answers 431 past max_request_fields.
inline constexpr std::size_t max_request_header_bytes = 8 * 1024;
/// The most header fields either server takes; more are answered 431.
inline constexpr std::size_t max_request_fields = 100;

/// Serves the payments API on the event loops, the store `spec` names; std::nullopt when
/// `spec` names no store. Returns only when it cannot serve (1).
std::optional<int> serve_async(const server_settings& config, const std::string& spec);

}  // namespace payments
