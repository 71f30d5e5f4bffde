// The reconciler's crash matrix (reconcile_crash_test.cpp) runs one handler in two processes: in
// idem_crash_reconcile_worker (reconcile_worker.cpp), which kills itself at one of its recovery
// points, and in the test, which finishes the work with idem::reconciler and replays it to a
// client. This header is that handler and what both sides must agree on: the wrapper's policies
// and options, the scope, the request, the crash points, and the downstream.
//
// The handler is a payment of three steps, "charge", "record" and "notify". Each step calls the
// downstream, a ledger file: it appends the line "<step> <downstream key>" (O_APPEND, fsync'd
// before the step returns, so a line the process wrote survives its SIGKILL). The downstream
// deduplicates by reference, as a payment provider deduplicates a repeated Idempotency-Key: a
// distinct line is one effect, every line is one call. A step answers "<step> <downstream key>
// fence <fence>", so the response (the three answers, one a line) tells which attempt ran each
// step: fence 1 is the killed worker's, fence 2 the reconciler's or the retrying client's.
//
// Standard library, POSIX and idem only (the worker is not a Catch2 program).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <idem/idem.hpp>

#include "support/worker_io.hpp"

namespace idem_crash {

/// The scope every payment of the matrix runs under.
inline constexpr std::string_view payments_scope = "acct";

/// The handler's steps, in the order it runs them.
inline constexpr std::array<std::string_view, 3> payment_steps{"charge", "record", "notify"};

/// Where the worker kills itself: before the first step; inside a step, after its effect (the
/// ledger line is fsync'd) and before its result is recorded; after a step's result is recorded
/// (the store acknowledged the fenced write), before the next step starts.
struct payment_point {
  std::string_view name;
  int recorded;  // steps whose result is recorded when the worker dies there
  bool inside;   // the kill comes inside step `recorded`, after its effect
};

inline constexpr std::array<payment_point, 7> payment_points{{
    {"before_charge", 0, false},
    {"in_charge", 0, true},
    {"after_charge", 1, false},
    {"in_record", 1, true},
    {"after_record", 2, false},
    {"in_notify", 2, true},
    {"after_notify", 3, false},
}};

/// The point named `name`; std::invalid_argument when there is none.
inline payment_point payment_point_named(std::string_view name) {
  for (const payment_point& point : payment_points) {
    if (point.name == name) return point;
  }
  throw std::invalid_argument("no crash point is named '" + std::string(name) + "'");
}

/// Appends `line` and a newline to the ledger in one write(2) and fsyncs it: the effect is
/// durable before the step may go on (or the process die).
inline void append_to_ledger(const std::string& ledger, const std::string& line) {
  const int file = ::open(ledger.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (file < 0) throw std::runtime_error("cannot open the ledger " + ledger);
  const std::string text = line + "\n";
  ssize_t written = -1;
  do {
    written = ::write(file, text.data(), text.size());
  } while (written < 0 && errno == EINTR);
  const bool synced = ::fsync(file) == 0;
  ::close(file);
  if (written != static_cast<ssize_t>(text.size()) || !synced) {
    throw std::runtime_error("cannot append to the ledger " + ledger);
  }
}

/// What the ledger holds: each distinct line (an effect) with how many times it was written (the
/// calls that made it).
inline std::map<std::string, int> read_ledger(const std::string& ledger) {
  std::map<std::string, int> lines;
  std::ifstream in(ledger);
  std::string line;
  while (std::getline(in, line))
    ++lines[line];
  return lines;
}

/// The ledger line of step `step` for (scope, key): its one effect.
inline std::string ledger_line(std::string_view key, std::string_view step) {
  return std::string(step) + " " +
         std::string(idem::downstream_key(payments_scope, key, step).view());
}

/// The worker's last words: "at POINT", then SIGKILL. No unwinding, no flush, no release sent:
/// what it leaves is what a crash leaves.
[[noreturn]] inline void die_at(std::string_view point) {
  idem::testing::say("at " + std::string(point));
  ::kill(::getpid(), SIGKILL);
  for (;;)
    ::pause();  // SIGKILL cannot be caught: this is never passed
}

/// The three-step payment. `die` names the point the worker kills itself at; empty in the test,
/// whose handler runs to its end.
struct payments_handler {
  std::string ledger;
  std::string die;

  idem::http_response operator()(idem::handler_context& ctx, const idem::http_request&) const {
    const auto die_here = [&](std::string_view where, std::string_view step) {
      if (die == std::string(where) + std::string(step)) die_at(die);
    };
    die_here("before_", payment_steps[0]);
    std::string body;
    for (const std::string_view step : payment_steps) {
      body += ctx.step(step, [&] {
        const std::string line = ledger_line(ctx.key(), step);
        append_to_ledger(ledger, line);
        die_here("in_", step);
        return line + " fence " + std::to_string(ctx.fence());
      });
      body += "\n";
      die_here("after_", step);
    }
    return idem::http_response{201, {{"Content-Type", "text/plain"}}, body};
  }
};

template <class Store>
struct payments_policies : idem::default_policies {
  using store = Store;
};

template <class Store>
using payments = idem::idempotent<payments_handler, payments_policies<Store>>;

/// A resumable wrapper's options, as both processes use them: the request kept in the record
/// from the claim on, under the name the reconciler finds the wrapper by.
template <class Store>
typename payments<Store>::options payments_options(Store store, std::chrono::nanoseconds lease) {
  typename payments<Store>::options options;
  options.store = std::move(store);
  options.lease = lease;
  options.max_kept_request_bytes = 4096;
  options.name = "payments";
  return options;
}

/// The payment request sent under `key`.
inline idem::http_request payment_request(std::string_view key) {
  return idem::http_request{
      "POST", "/payments", {{"Content-Type", "text/plain"}}, "amount=1250 for " + std::string(key)};
}

/// The lease the worker claims with: short, so that the test need not wait long for a dead
/// worker's claim to become stuck. A worker slower than that (a sanitizer build) is not harmed:
/// its fenced writes check the fence, not the lease, and nothing takes its claim over while it
/// lives.
inline constexpr std::chrono::milliseconds worker_lease{500};

}  // namespace idem_crash
