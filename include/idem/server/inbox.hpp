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
// Policies::server_observer hears each delivery (its verdict; coalesced for a redelivery that
// waited for the first to finish) and each run of `fn`, as idempotent's observer does
// (idem/server/observer.hpp); the default hears nothing and costs nothing.
#ifndef IDEM_SERVER_INBOX_HPP
#define IDEM_SERVER_INBOX_HPP

#include <chrono>
#include <cstddef>
#include <functional>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <idem/core/fingerprint/xxh3.hpp>
#include <idem/core/key.hpp>
#include <idem/policies.hpp>
#include <idem/server/detail/batch.hpp>
#include <idem/server/detail/checks.hpp>
#include <idem/server/detail/engine.hpp>
#include <idem/server/detail/one_commit.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/observer.hpp>
#include <idem/server/options.hpp>
#include <idem/server/outcome.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/memory.hpp>

namespace idem {

template <class Policies = default_policies>
class inbox {
  static_assert(detail::check_server_policies<Policies>());
  static_assert(detail::check_server_observer<typename Policies::server_observer>());
  static_assert(detail::check_commit_mode<Policies>());

 public:
  using store_type = typename Policies::store;
  using clock_type = typename Policies::clock;
  using server_observer_type = typename Policies::server_observer;

  /// The parts an inbox is built from (idem/server/options.hpp): each defaults to its policy,
  /// and means what the field of the same name in idempotent_options does.
  using options = inbox_options<Policies>;

  inbox() : inbox(options{}) {}
  explicit inbox(options parts)
      : observer_(parts.server_observer), engine_(std::move(parts), "idem::inbox") {}

  /// Runs `fn` (taking a handler_context&, or nothing; and last the store's transaction, with
  /// a TransactionalStore) once per (scope, event_id). Its result, if any, is stored and
  /// replayed; a void `fn` gives an outcome of std::monostate.
  template <class F>
  auto deduplicate(std::string_view scope, std::string_view event_id, F&& fn) {
    // The checks come first and the rest only once they pass, so that their sentence is the
    // first error a wrong function gets (idem/server/detail/checks.hpp).
    static_assert(detail::check_consumer<F, store_type>());
    if constexpr (detail::consumer_function<F, store_type>) {
      using response_type =
          detail::consumer_response_t<typename detail::consumer_result<F, store_type>::type>;
      static_assert(detail::check_consumer_response<response_type>());
      if constexpr (Encodable<response_type>) {
        if constexpr (observes) {
          return observed<response_type>(scope, event_id, fn);
        } else {
          return consume<response_type>(scope, event_id, fn);
        }
      }
    }
  }

  /// deduplicate for a batch of events, claimed in one call of the store (docs/server.md,
  /// "Batches"): `fn(std::size_t index)`, or with a TransactionalStore
  /// `fn(std::size_t index, Store::transaction&)`, runs once per new event id, `index` being its
  /// position in `event_ids`. Answers one outcome per id, in input order. Rules:
  /// idem/server/detail/batch.hpp.
  template <class Ids, class F>
  auto deduplicate_batch(std::string_view scope, const Ids& event_ids, F&& fn) {
    return detail::deduplicate_batch<observes>(engine_, observer_, scope, event_ids, fn);
  }

  const options& settings() const noexcept { return engine_.options(); }

  std::size_t sweep() { return engine_.sweep(); }
  std::vector<record> stuck(std::size_t limit = 1000) { return engine_.stuck(limit); }
  store_type& store() noexcept { return engine_.store(); }
  clock_type& clock() noexcept { return engine_.clock(); }

 private:
  using engine_type = detail::engine<options>;
  static constexpr bool observes = detail::observes_server<server_observer_type>;

  std::chrono::nanoseconds since(typename clock_type::time_point start) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(engine_.clock().now() - start);
  }

  // What `call` (fn, with its arguments) answers: its result, or for a void `fn`, nothing.
  template <class Response, class Call>
  static Response answer_of(Call& call) {
    if constexpr (std::is_void_v<decltype(call())>) {
      call();
      return {};
    } else {
      return call();
    }
  }

  // consume, and the observer told of its verdict; the default observer reads no clock.
  template <class Response, class F>
  idempotent_outcome<Response> observed(std::string_view scope, std::string_view event_id, F& fn) {
    const auto start = engine_.clock().now();
    bool waited = false;
    idempotent_outcome<Response> outcome = consume<Response>(scope, event_id, fn, &waited);
    observer_.on_call(server_call_event{
        outcome.verdict(), waited && outcome.verdict() == verdict::replayed, since(start)});
    return outcome;
  }

  // `waited`: where an observed delivery learns that its claim waited (coalescing).
  template <class Response, class F, class... Waited>
  idempotent_outcome<Response> consume(std::string_view scope, std::string_view event_id, F& fn,
                                       Waited... waited) {
    constexpr bool transactional = detail::takes_store_transaction<F, store_type>;
    if (!is_valid_key(event_id, engine_.options().max_key_length)) {
      return engine_type::template invalid_key<Response>("the event id",
                                                         engine_.options().max_key_length);
    }
    // A transactional `fn` is also given the transaction (completion::in_transaction passes
    // it); a void one stores nothing.
    auto run = [&](handler_context& context, auto&... transaction) -> Response {
      auto call = [&]() -> decltype(auto) {
        if constexpr (std::invocable<F&, handler_context&, decltype(transaction)...>) {
          return std::invoke(fn, context, transaction...);
        } else {
          return std::invoke(fn, transaction...);
        }
      };
      if constexpr (observes) {
        const auto start = engine_.clock().now();
        try {
          Response response = answer_of<Response>(call);
          observer_.on_handler(handler_event{since(start), false});
          return response;
        } catch (...) {
          observer_.on_handler(handler_event{since(start), true});
          throw;
        }
      } else {
        return answer_of<Response>(call);
      }
    };
    if constexpr (detail::commit_mode_of<Policies> == commit_mode::one_commit) {
      // Claim, fn and record in one transaction (idem/server/detail/one_commit.hpp).
      static_assert(detail::check_one_commit_handler<transactional>());
      return detail::run_one_commit<Response>(engine_, scope, event_id, digest{}, run);
    }
    constexpr detail::completion how =
        transactional ? detail::completion::in_transaction : detail::completion::direct;
    return engine_.template run<Response, how>(scope, event_id, digest{}, run, release_on_failure{},
                                               nullptr, waited...);
  }

  [[no_unique_address]] server_observer_type observer_;
  engine_type engine_;
};

}  // namespace idem

#endif  // IDEM_SERVER_INBOX_HPP
