// idem::inbox<Policies>: message consumers that act once per event, however often it arrives.
//
//   idem::inbox<> consumed;
//   for (auto& message : queue.poll()) {
//     auto outcome = consumed.deduplicate("orders", message.id, [&] { ship(message); });
//     if (outcome.verdict() != idem::verdict::in_progress) queue.ack(message);
//   }
//
// A broker delivers at least once, so a consumer sees the same event again after a redelivery,
// a rebalance or its own crash. deduplicate runs `fn` under the claim of (scope, event_id) on the
// same machinery as idempotent: the first delivery runs it (executed), later ones get what it
// returned (replayed), a delivery racing one still running gets in_progress. The event id is
// the whole identity: there is no fingerprint, because every delivery of one id is one event.
// A throwing `fn` releases the event, so the redelivery runs it again; its exception passes
// through. With a TransactionalStore (SQLite, PostgreSQL), an `fn` taking the store's
// transaction as its last parameter runs inside the transaction that records the event: the
// consumer's writes and the record commit together (the transactional inbox).
#ifndef IDEM_SERVER_INBOX_HPP
#define IDEM_SERVER_INBOX_HPP

#include <chrono>
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <idem/server/detail/engine.hpp>
#include <idem/detail/invoke.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/fingerprint/xxh3.hpp>
#include <idem/server/outcome.hpp>
#include <idem/key.hpp>
#include <idem/policies.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/memory.hpp>

namespace idem {

namespace detail {

// A consumer function that runs inside the store's transaction: it takes the transaction last.
template <class F, class Store>
concept takes_store_transaction = TransactionalStore<Store> &&
    (std::invocable<F&, handler_context&, typename Store::transaction&> ||
     std::invocable<F&, typename Store::transaction&>);

// What a consumer function returns, given the parameters after the optional context.
template <class F, class... Extra>
using consumer_result_t =
    typename std::conditional_t<std::invocable<F&, handler_context&, Extra&...>,
                                std::invoke_result<F&, handler_context&, Extra&...>,
                                std::invoke_result<F&, Extra&...>>::type;

// Calls a consumer function with the context when it takes one.
template <class F, class... Extra>
consumer_result_t<F, Extra...> invoke_consumer(F& fn, handler_context& context, Extra&... extra) {
  if constexpr (std::invocable<F&, handler_context&, Extra&...>) {
    return detail::invoke(fn, context, extra...);
  } else {
    return detail::invoke(fn, extra...);
  }
}

template <class F, class Store>
struct consumer_result {
  using type = consumer_result_t<F>;
};
template <class F, class Store>
requires takes_store_transaction<F, Store>
struct consumer_result<F, Store> {
  using type = consumer_result_t<F, typename Store::transaction>;
};

}  // namespace detail

template <class Policies = default_policies>
class inbox {
 public:
  using store_type = typename Policies::store;
  using clock_type = typename Policies::clock;

  static_assert(Store<store_type>,
                "Policies::store must satisfy idem::Store (see idem/store/contract.hpp).");
  static_assert(Clock<clock_type>,
                "Policies::clock must provide now(), wall_now() and sleep_for(nanoseconds).");

  struct options {
    store_type store{};
    clock_type clock{};
    std::chrono::nanoseconds lease = Policies::lease;
    std::chrono::nanoseconds retention = Policies::retention;
    std::chrono::nanoseconds coalesce = Policies::coalesce;
    /// The longest event id accepted, in bytes.
    std::size_t max_key_length = Policies::max_key_length;
    /// The largest stored result, in bytes (after the response codec); see idempotent.
    std::size_t max_response_bytes = Policies::max_response_bytes;
    /// Seals results and recovery points before the store keeps them (response_codec.hpp).
    typename Policies::response_codec response_codec{};
  };

  inbox() : inbox(options{}) {}
  explicit inbox(options parts)
      : guard_(std::move(parts.store), std::move(parts.clock),
               {parts.lease, parts.retention, parts.coalesce}),
        max_key_length_(parts.max_key_length),
        response_codec_(std::move(parts.response_codec)) {
    detail::check_timing(guard_.timing(), "idem::inbox");
    guard_.set_storage(detail::storage_for(response_codec_, parts.max_response_bytes));
  }

  /// Runs `fn` (taking a handler_context&, or nothing; and last the store's transaction, with
  /// a TransactionalStore) once per (scope, event_id). Its result, if any, is stored and
  /// replayed; a void `fn` gives an outcome of std::monostate.
  template <class F>
  auto deduplicate(std::string_view scope, std::string_view event_id, F&& fn) {
    constexpr bool transactional = detail::takes_store_transaction<F, store_type>;
    using fn_result = typename detail::consumer_result<F, store_type>::type;
    using response_type = std::conditional_t<std::is_void_v<fn_result>, std::monostate, fn_result>;
    static_assert(Encodable<response_type>,
                  "deduplicate's function must return void or a storable type (one with an "
                  "idem::codec specialisation).");

    if (!is_valid_key(event_id, max_key_length_)) {
      return guard_type::template invalid_key<response_type>("the event id", max_key_length_);
    }
    // A transactional `fn` is also given the transaction (run_within passes it).
    auto run = [&](handler_context& context, auto&... transaction) -> response_type {
      if constexpr (std::is_void_v<fn_result>) {
        detail::invoke_consumer(fn, context, transaction...);
        return {};
      } else {
        return detail::invoke_consumer(fn, context, transaction...);
      }
    };
    if constexpr (transactional) {
      return guard_.template run_within<response_type>(scope, event_id, digest{}, run,
                                                       release_on_failure{});
    } else {
      return guard_.template run<response_type>(scope, event_id, digest{}, run,
                                                release_on_failure{});
    }
  }

  std::size_t sweep() { return guard_.sweep(); }
  std::vector<record> stuck(std::size_t limit = 1000) { return guard_.stuck(limit); }
  store_type& store() noexcept { return guard_.store(); }
  clock_type& clock() noexcept { return guard_.clock(); }

 private:
  using guard_type = detail::guard<store_type, clock_type>;

  guard_type guard_;
  std::size_t max_key_length_;
  [[no_unique_address]] typename Policies::response_codec response_codec_;
};

}  // namespace idem

#endif  // IDEM_SERVER_INBOX_HPP
