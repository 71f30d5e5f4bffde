// idem::async_inbox<Policies>: idem::inbox for consumers that are coroutines on an Asio event
// loop. One event id, one effect, however often the broker delivers it.
//
//   idem::async_inbox<> consumed{io.get_executor()};
//   auto outcome = co_await consumed.async_deduplicate(
//       "orders", message.id, [&]() -> asio::awaitable<void> { co_await ship(message); },
//       asio::use_awaitable);
//   if (outcome.verdict() != idem::verdict::in_progress) co_await queue.async_ack(message);
//
// The rules are inbox's (idem/server/inbox.hpp), through the same engine; the waiting is
// async_idempotent's (idem/server/async_idempotent.hpp): coalescing on a timer, the lease
// heartbeat, a blocking store's calls on options.store_executor (an AsyncStore awaited),
// cancellation answered with verdict::cancelled. async_deduplicate completes with
//
//   void(std::exception_ptr, idem::idempotent_outcome<R>)
//
// where R is what `fn`'s awaitable gives (std::monostate for void); `fn`'s own exception passes
// through as the exception_ptr after the event was released. scope and event_id are read until
// the call completes; `fn` is moved into the operation. Policies::server_observer hears each
// delivery and each run of `fn`, as inbox's does.
#ifndef IDEM_SERVER_ASYNC_INBOX_HPP
#define IDEM_SERVER_ASYNC_INBOX_HPP

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/async/blocking_store.hpp>
#include <idem/core/key.hpp>
#include <idem/policies.hpp>
#include <idem/server/async_handler_context.hpp>
#include <idem/server/detail/async_checks.hpp>
#include <idem/server/detail/async_engine.hpp>
#include <idem/server/detail/async_observed_handler.hpp>
#include <idem/server/detail/batch.hpp>
#include <idem/server/detail/checks.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/options.hpp>
#include <idem/server/outcome.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/memory.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem {

template <class Policies = default_policies>
class async_inbox {
  static_assert(detail::check_server_policies<Policies, false>());
  static_assert(detail::check_server_observer<typename Policies::server_observer>());
  static_assert(Store<typename Policies::store> || AsyncStore<typename Policies::store>,
                "Policies::store must be a Store (idem/store/contract.hpp) or an AsyncStore "
                "(idem/store/async_contract.hpp).");

 public:
  using executor_type = asio::any_io_executor;
  using store_type = typename Policies::store;
  using clock_type = typename Policies::clock;
  using server_observer_type = typename Policies::server_observer;

  /// inbox_options (idem/server/options.hpp), the blocking inbox's, and async_idempotent's
  /// three of the asynchronous driver's own.
  struct options : inbox_options<Policies> {
    /// Where the store's calls run when the store blocks: as async_idempotent::options says.
    executor_type store_executor{};
    /// Renew the lease while `fn` runs: as async_idempotent::options says.
    bool heartbeat = true;
    /// Run `fn` on a coroutine of its own: as async_idempotent::options says.
    bool isolate_handler = false;
  };

  explicit async_inbox(executor_type executor) : async_inbox(std::move(executor), options{}) {}
  async_inbox(executor_type executor, options parts)
      : executor_(std::move(executor)),
        observer_(parts.server_observer),
        engine_(std::move(parts), "idem::async_inbox") {}

  async_inbox(const async_inbox&) = delete;
  async_inbox& operator=(const async_inbox&) = delete;

  executor_type get_executor() const noexcept { return executor_; }

  /// Runs `fn` (asio::awaitable<R>() or asio::awaitable<R>(async_handler_context&)) once per
  /// (scope, event_id); completes with (std::exception_ptr, idempotent_outcome<R>), R being
  /// std::monostate for a void `fn`.
  template <class F, class Token>
  auto async_deduplicate(std::string_view scope, std::string_view event_id, F fn, Token&& token) {
    static_assert(detail::check_async_consumer<F>());
    if constexpr (detail::async_consumer<F>) {
      using response_type =
          detail::consumer_response_t<typename detail::async_consumer_result<F>::type>;
      static_assert(detail::check_consumer_response<response_type>());
      if constexpr (Encodable<response_type>) {
        using outcome_type = idempotent_outcome<response_type>;
        if constexpr (detail::awaits_in_caller<Token>) {
          return consume<response_type>(scope, event_id, std::move(fn));
        } else {
          return asio::async_initiate<Token, void(std::exception_ptr, outcome_type)>(
              [this](auto handler, std::string_view scope, std::string_view event_id, F fn) {
                const auto executor = detail::operation_executor(handler, executor_);
                asio::co_spawn(executor,
                               detail::hearing_every_cancellation(
                                   consume<response_type>(scope, event_id, std::move(fn))),
                               std::move(handler));
              },
              token, scope, event_id, std::move(fn));
        }
      }
    }
  }

  /// inbox::deduplicate_batch, awaited: `fn(std::size_t index)` (an asio::awaitable<R>, R void or
  /// storable) runs once per new event id of `event_ids`, `index` being its position there;
  /// completes with (std::exception_ptr, std::vector<idempotent_outcome<R>>), one outcome per id
  /// in input order, by the blocking batch's rules (idem/server/detail/batch.hpp): an id that
  /// is_valid_key refuses answers invalid_key and the rest go on; a later occurrence of an id in
  /// the batch is the same event, run at most once, and answers as its first (replayed with its
  /// response when it has one); a live claim of another delivery answers in_progress at once,
  /// never waiting (whatever `coalesce` says). The ids are claimed one after another, each by a
  /// call of the store of its own (no AsyncStore has batch operations): a `fn` that throws ends
  /// the batch with its exception, the ids before it recorded, its own released, the later ones
  /// never claimed, so a redelivery runs them. More ids than the blocking batch takes (4,096)
  /// throw std::invalid_argument here, before anything starts.
  template <class Ids, class F, class Token>
  auto async_deduplicate_batch(std::string_view scope, const Ids& event_ids, F fn, Token&& token) {
    static_assert(detail::awaitable_call<F, std::size_t>,
                  "idem::async_inbox::async_deduplicate_batch: the function must be callable as "
                  "asio::awaitable<R>(std::size_t index), where index is the event's position in "
                  "the batch and R is void or a storable type.");
    if constexpr (detail::awaitable_call<F, std::size_t>) {
      using result_type = typename detail::awaited<std::invoke_result_t<F&, std::size_t>>::type;
      using response_type = detail::consumer_response_t<result_type>;
      static_assert(detail::check_consumer_response<response_type>());
      if constexpr (Encodable<response_type>) {
        static_assert(std::copy_constructible<response_type>,
                      "idem::async_inbox::async_deduplicate_batch: the function's result must be "
                      "copyable: a duplicate of an event in the same batch replays a copy of it.");
        std::vector<std::string> ids;
        for (const auto& id : event_ids)
          ids.emplace_back(std::string_view(id));
        if (ids.size() > detail::max_inbox_batch) {
          throw std::invalid_argument(
              "idem::async_inbox::async_deduplicate_batch: " + std::to_string(ids.size()) +
              " event ids in one batch, more than the " + std::to_string(detail::max_inbox_batch) +
              " allowed; split it");
        }
        using answer_type = std::vector<idempotent_outcome<response_type>>;
        return asio::async_initiate<Token, void(std::exception_ptr, answer_type)>(
            [this](auto handler, std::string scope, std::vector<std::string> ids, F fn) {
              const auto executor = detail::operation_executor(handler, executor_);
              asio::co_spawn(executor,
                             detail::hearing_every_cancellation(consume_batch<response_type>(
                                 std::move(scope), std::move(ids), std::move(fn))),
                             std::move(handler));
            },
            token, std::string(scope), std::move(ids), std::move(fn));
      }
    }
  }

  /// The options this inbox was built with.
  const options& settings() const noexcept { return engine_.options(); }

  /// Removes expired records; answers how many. Calls the store on this thread; an AsyncStore's
  /// operation is waited for here (blocking_store: never on a thread that runs its executor).
  std::size_t sweep() { return engine_.sweep(); }
  /// Claims in progress past their lease (see idempotent::stuck), called as sweep is.
  std::vector<record> stuck(std::size_t limit = 1000) { return engine_.stuck(limit); }
  store_type& store() noexcept { return engine_.core().store(); }
  clock_type& clock() noexcept { return engine_.core().clock(); }

 private:
  static constexpr bool observes = detail::observes_server<server_observer_type>;

  std::chrono::nanoseconds since(typename clock_type::time_point start) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock().now() - start);
  }

  template <class Response, class F>
  asio::awaitable<idempotent_outcome<Response>> consume(std::string_view scope,
                                                        std::string_view event_id, F fn) {
    if constexpr (observes) {
      const auto start = clock().now();
      bool waited = false;
      idempotent_outcome<Response> outcome =
          co_await deliver<Response>(scope, event_id, fn, &waited);
      observer_.on_call(server_call_event{
          outcome.verdict(), waited && outcome.verdict() == verdict::replayed, since(start)});
      co_return outcome;
    } else {
      co_return co_await deliver<Response>(scope, event_id, fn, nullptr);
    }
  }

  // async_deduplicate_batch's run: each distinct id delivered in turn, never waiting for a
  // live claim; a later occurrence answered as its first. The observer hears each id's call.
  template <class Response, class F>
  asio::awaitable<std::vector<idempotent_outcome<Response>>> consume_batch(
      std::string scope, std::vector<std::string> ids, F fn) {
    using outcome_type = idempotent_outcome<Response>;
    std::vector<outcome_type> answers;
    answers.reserve(ids.size());
    std::unordered_map<std::string_view, std::size_t> first;
    for (std::size_t index = 0; index < ids.size(); ++index) {
      if (const auto seen = first.find(ids[index]); seen != first.end()) {
        const outcome_type& earlier = answers[seen->second];
        answers.push_back(earlier.has_value() ? outcome_type::replayed(*earlier) : earlier);
        if constexpr (observes) {
          observer_.on_call(server_call_event{answers.back().verdict(), false, {}});
        }
        continue;
      }
      first.emplace(ids[index], index);
      auto one = [&fn, index]() -> asio::awaitable<Response> {
        if constexpr (std::is_same_v<std::invoke_result_t<F&, std::size_t>,
                                     asio::awaitable<void>>) {
          co_await std::invoke(fn, index);
          co_return Response{};
        } else {
          co_return co_await std::invoke(fn, index);
        }
      };
      const auto start = clock().now();
      answers.push_back(co_await deliver<Response>(scope, ids[index], one, nullptr, false));
      if constexpr (observes) {
        observer_.on_call(server_call_event{answers.back().verdict(), false, since(start)});
      } else {
        (void)start;
      }
    }
    co_return answers;
  }

  // `waited`: where an observed delivery learns that its claim waited (coalescing), or null.
  // `may_wait` false: a live claim of another delivery answers in_progress at once (a batch).
  template <class Response, class F>
  asio::awaitable<idempotent_outcome<Response>> deliver(std::string_view scope,
                                                        std::string_view event_id, F& fn,
                                                        bool* waited, bool may_wait = true) {
    if (!is_valid_key(event_id, engine_.options().max_key_length)) {
      co_return detail::engine<options>::template invalid_key<Response>(
          "the event id", engine_.options().max_key_length);
    }
    // A void `fn` stores nothing (std::monostate); an observer is told how long it ran.
    auto run = [this, &fn](async_handler_context& context) -> asio::awaitable<Response> {
      auto call = [&] {
        if constexpr (detail::takes_async_consumer_context<F>) {
          return std::invoke(fn, context);
        } else {
          return std::invoke(fn);
        }
      };
      if constexpr (std::is_same_v<decltype(call()), asio::awaitable<void>>) {
        co_await detail::observed_handler(observer_, clock(), call());
        co_return Response{};
      } else {
        co_return co_await detail::observed_handler(observer_, clock(), call());
      }
    };
    co_return co_await engine_.template run<Response>(
        scope, event_id, digest{}, run, release_on_failure{}, nullptr, waited, may_wait);
  }

  executor_type executor_;
  [[no_unique_address]] server_observer_type observer_;
  detail::async_engine<options> engine_;
};

}  // namespace idem

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_ASYNC_INBOX_HPP
