// Server observers: telemetry for every guarded call and every run of its handler.
//
// The default, no_server_observer, has empty inline members, and the wrappers read no clock for
// it (they test for it with if constexpr): a service that watches nothing pays nothing. An
// observer is a copyable handle, like a store: copies given to several wrappers report to one
// place. Its members may be called from many threads at once.
//
// Events carry no key and no scope: what an observer counts by must stay bounded (a metric label
// per key would grow without end), and a key may be a secret.
#ifndef IDEM_SERVER_OBSERVER_HPP
#define IDEM_SERVER_OBSERVER_HPP

#include <chrono>
#include <concepts>
#include <type_traits>

#include <idem/server/outcome.hpp>

namespace idem {

/// A guarded call has ended with `verdict`: one event a call, whatever the verdict, except when
/// the handler threw (its exception passes through; handler_event says it threw).
struct server_call_event {
  idem::verdict verdict;
  /// A replay answered after a coalescing wait: the duplicate arrived while the first request
  /// was in progress and waited for its response (options.coalesce), rather than finding the
  /// record already completed.
  bool coalesced;
  /// From the call's arrival to its answer, on the wrapper's clock.
  std::chrono::nanoseconds duration;
};

/// The handler ran under a claim (or unguarded, with no key): how long it took.
struct handler_event {
  std::chrono::nanoseconds duration;
  /// It ended in an exception rather than a response.
  bool threw;
};

/// What a `server_observer` policy must provide.
template <class O>
concept ServerObserver = std::default_initializable<O> && std::copy_constructible<O> &&
    requires(O& observer, const server_call_event& call, const handler_event& handler) {
  observer.on_call(call);
  observer.on_handler(handler);
};

/// Watches nothing, costs nothing.
struct no_server_observer {
  constexpr void on_call(const server_call_event&) const noexcept {}
  constexpr void on_handler(const handler_event&) const noexcept {}
};

namespace detail {

/// Whether a wrapper reports to `O` at all: no_server_observer reads no clock and builds no
/// event.
template <class O>
inline constexpr bool observes_server = !std::is_same_v<std::remove_cvref_t<O>, no_server_observer>;

template <class O>
constexpr bool check_server_observer() {
  static_assert(ServerObserver<O>,
                "Policies::server_observer must be default-constructible and copyable and "
                "provide on_call(const "
                "idem::server_call_event&) and on_handler(const idem::handler_event&) (see "
                "idem/server/observer.hpp).");
  return true;
}

}  // namespace detail

}  // namespace idem

#endif  // IDEM_SERVER_OBSERVER_HPP
