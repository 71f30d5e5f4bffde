// The checks idempotent and inbox make of their policies, options and handlers, each written
// once, with the sentence a user reads when it fails.
//
// Each check is a constexpr function holding one static_assert, called from a static_assert at
// the public entry: the sentence is then the first error, before anything is instantiated with
// the wrong type. A handler's result type is named only after its check passed (see
// idempotent::operator() and inbox::deduplicate), so that a handler returning void, or taking
// its parameters in another order, gets the sentence, not pages about std::optional<void> or an
// unsatisfied disjunction.
#ifndef IDEM_SERVER_DETAIL_CHECKS_HPP
#define IDEM_SERVER_DETAIL_CHECKS_HPP

#include <chrono>
#include <concepts>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>

#include <idem/core/clock.hpp>
#include <idem/core/codec.hpp>
#include <idem/core/fingerprint/fingerprint.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/store/contract.hpp>

namespace idem::detail {

// --- policies ------------------------------------------------------------------------------

/// What idempotent and inbox both need of their Policies. The asynchronous wrappers check the
/// store themselves (`check_store` false): they take an AsyncStore too.
template <class Policies, bool check_store = true>
constexpr bool check_server_policies() {
  static_assert(!check_store || Store<typename Policies::store>,
                "Policies::store must be a copyable handle providing claim(claim_request) "
                "returning claim_result, complete(fenced_key, string_view, store_time), "
                "release(fenced_key) and checkpoint(fenced_key, string_view, store_time) "
                "returning bool, find(scope, key, store_time) returning optional<record>, "
                "sweep(store_time) returning size_t and stuck(store_time, size_t) returning "
                "vector<record> (see idem/store/contract.hpp).");
  static_assert(Clock<typename Policies::clock>,
                "Policies::clock must provide now() returning its time_point, wall_now() "
                "returning std::chrono::system_clock::time_point, and sleep_for(nanoseconds).");
  static_assert(ResponseCodec<typename Policies::response_codec>,
                "Policies::response_codec must be copyable and provide seal(string_view, "
                "std::string&) and open(string_view, std::string&) const members (see "
                "idem/server/response_codec.hpp).");
  static_assert(Policies::lease > decltype(Policies::lease)::zero(),
                "Policies::lease must be positive.");
  static_assert(Policies::retention > Policies::lease,
                "Policies::retention must be longer than Policies::lease.");
  return true;
}

template <class F>
constexpr bool check_fingerprint() {
  static_assert(Fingerprint<F>,
                "Policies::fingerprint must be a hash function (idem::HashFunction, like "
                "idem::xxh3_128) or provide a const operator()(const request_view&) returning "
                "idem::digest.");
  return true;
}

template <class Failure, class Response>
constexpr bool check_failure_policy() {
  static_assert(FailurePolicy<Failure, Response>,
                "Policies::failure must provide stored_response<Response>(const "
                "failure_info&) returning std::optional<Response>.");
  return true;
}

/// The options a wrapper is built with (idempotent::options, inbox::options): throws
/// std::invalid_argument, naming `who`, for settings that can never work.
template <class Options>
void check_options(const Options& options, const char* who) {
  using std::chrono::nanoseconds;
  if (options.lease <= nanoseconds::zero()) {
    throw std::invalid_argument(std::string(who) + ": the lease must be positive");
  }
  if (options.retention <= options.lease) {
    throw std::invalid_argument(std::string(who) +
                                ": the retention must be longer than the lease, or a claim could "
                                "expire while its holder still runs");
  }
  if (options.coalesce < nanoseconds::zero()) {
    throw std::invalid_argument(std::string(who) + ": the coalescing wait cannot be negative");
  }
  if (options.max_key_length == 0) {
    throw std::invalid_argument(std::string(who) + ": max_key_length must be at least 1");
  }
  if constexpr (requires { options.first_step; }) {
    if (reserved_entry(options.first_step)) {  // as handler_context's step names
      throw std::invalid_argument(std::string(who) +
                                  ": options.first_step must not begin with a zero byte (those "
                                  "name idem's own entries in the recovery bytes)");
    }
  }
}

// --- idempotent's handler ----------------------------------------------------------------

template <class Handler, class Request>
concept takes_handler_context = std::invocable<Handler&, handler_context&, const Request&>;

// A handler that runs inside the store's transaction: its last parameter is the transaction.
template <class Handler, class Request, class Store>
concept takes_transaction = TransactionalStore<Store> &&
    std::invocable<Handler&, handler_context&, const Request&, typename Store::transaction&>;

template <class Handler, class Request, class Store>
concept guardable_handler = takes_transaction<Handler, Request, Store> ||
    takes_handler_context<Handler, Request> || std::invocable<Handler&, const Request&>;

// What the handler returns; named only for a guardable handler.
template <class Handler, class Request, class Store>
struct handler_result {
  using type = std::invoke_result_t<Handler&, const Request&>;
};
// What a context handler's call answers: its response, or a commit_with carrying it.
template <class Handler, class Request>
using context_answer = std::invoke_result_t<Handler&, handler_context&, const Request&>;

// A handler that answers commit_with (idem/store/contract.hpp): its response, and the writes that
// commit with its record.
template <class Handler, class Request>
concept answers_commit_with =
    takes_handler_context<Handler, Request> && is_commit_with<context_answer<Handler, Request>>;

// ... whose writes take the store's own transaction.
template <class Handler, class Request, class Store>
concept commits_with_record =
    answers_commit_with<Handler, Request> && TransactionalStore<Store> &&
    std::same_as < typename commit_with_parts<context_answer<Handler, Request>>::transaction,
typename Store::transaction > ;

template <class Handler, class Request, class Store>
requires takes_handler_context<Handler, Request>
struct handler_result<Handler, Request, Store> {
  using type = typename commit_with_parts<context_answer<Handler, Request>>::response;
};
template <class Handler, class Request, class Store>
requires takes_transaction<Handler, Request, Store>
struct handler_result<Handler, Request, Store> {
  using type = std::invoke_result_t<Handler&, handler_context&, const Request&,
                                    typename Store::transaction&>;
};

template <class Response>
concept storable_response = !std::is_void_v<Response> && Encodable<Response>;

template <class Handler, class Request, class Store>
constexpr bool check_handler() {
  static_assert(guardable_handler<Handler, Request, Store>,
                "idem::idempotent: the handler must be callable as R(const Request&), "
                "R(idem::handler_context&, const Request&) or, with a TransactionalStore, "
                "R(idem::handler_context&, const Request&, Store::transaction&), where Request is "
                "the request it is called with (an idem::http_request, or the body as a "
                "std::string) and R a storable response.");
  if constexpr (answers_commit_with<Handler, Request>) {
    static_assert(commits_with_record<Handler, Request, Store>,
                  "idem::idempotent: a handler that answers idem::commit_with<R, Transaction> "
                  "needs a TransactionalStore whose transaction type is Transaction: its writes "
                  "commit in the transaction that completes the record.");
  }
  return true;
}

template <class Response>
constexpr bool check_response() {
  static_assert(storable_response<Response>,
                "The handler must return a storable response: it is called as "
                "R(const Request&), R(idem::handler_context&, const Request&) or, with a "
                "TransactionalStore, R(idem::handler_context&, const Request&, "
                "Store::transaction&), and R must be std::string, a byte vector, "
                "idem::http_response, or a type with an idem::codec specialisation; not void, "
                "since a repeat replays what the first call returned.");
  return true;
}

// --- inbox's consumer function -------------------------------------------------------------

// A consumer function that runs inside the store's transaction: it takes the transaction last.
template <class F, class Store>
concept takes_store_transaction = TransactionalStore<Store> &&
    (std::invocable<F&, handler_context&, typename Store::transaction&> ||
     std::invocable<F&, typename Store::transaction&>);

template <class F, class Store>
concept consumer_function =
    takes_store_transaction<F, Store> || std::invocable<F&, handler_context&> || std::invocable<F&>;

// What a consumer function returns, given the parameters after the optional context.
template <class F, class... Extra>
using consumer_result_t =
    typename std::conditional_t<std::invocable<F&, handler_context&, Extra&...>,
                                std::invoke_result<F&, handler_context&, Extra&...>,
                                std::invoke_result<F&, Extra&...>>::type;

template <class F, class Store>
struct consumer_result {
  using type = consumer_result_t<F>;
};
template <class F, class Store>
requires takes_store_transaction<F, Store>
struct consumer_result<F, Store> {
  using type = consumer_result_t<F, typename Store::transaction>;
};

// What an inbox stores for a consumer function's result: nothing (std::monostate) for void.
template <class Result>
using consumer_response_t = std::conditional_t<std::is_void_v<Result>, std::monostate, Result>;

template <class F, class Store>
constexpr bool check_consumer() {
  static_assert(consumer_function<F, Store>,
                "idem::inbox::deduplicate: the function must be callable as R(), "
                "R(idem::handler_context&) or, with a TransactionalStore, "
                "R(Store::transaction&) or R(idem::handler_context&, Store::transaction&), where "
                "R is void or a storable type.");
  return true;
}

template <class Response>
constexpr bool check_consumer_response() {
  static_assert(Encodable<Response>,
                "deduplicate's function must return void or a storable type (one with an "
                "idem::codec specialisation).");
  return true;
}

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_CHECKS_HPP
