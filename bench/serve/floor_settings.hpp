// payments_floor_server's settings, and the entry of its event-loop mode (--async,
// floor_server_async.cpp), a translation unit of its own as the demo's: Boost.Beast and the
// coroutines are compiled there only.
#pragma once

#include "common.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace floor_server {

struct settings {
  int port = 0;
  payments::endpoint processor;
  /// How long a connection may take to send one request, or stay idle between two (the demo's).
  std::chrono::milliseconds read_timeout{10000};
  /// --async: the event loops (one io_context and one thread each).
  std::size_t threads = 1;
  /// The file of the secret the callers' API keys are checked under (the demo's auth.hpp);
  /// empty: the built-in development secret.
  std::string auth_secret_file;
};

/// How long the blocking server keeps trying one charge: the demo's blocking server stops at half
/// its lease (5 s by default). The event-loop server uses the demo's processor_deadline (10 s).
inline constexpr std::chrono::milliseconds blocking_processor_deadline{2500};

/// The program's name, leading what it prints ("payments_floor_server: listening on PORT").
inline constexpr const char* program = "payments_floor_server";

/// Serves on the event loops, the store `spec` names; std::nullopt when `spec` names none.
/// Returns only when it cannot serve (1).
std::optional<int> serve_async(const settings& config, const std::string& spec);

}  // namespace floor_server
