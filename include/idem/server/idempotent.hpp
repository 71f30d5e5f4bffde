// idem::idempotent<Handler, Policies>: a handler whose effect happens once per idempotency key,
// however often the request is repeated.
//
//   auto payments = idem::idempotent{[&](idem::handler_context& ctx,
//                                        const idem::http_request& request) {
//     auto charge = ctx.step("charge", [&] {
//       return provider.charge(parse(request.body), ctx.downstream_key("charge"));
//     });
//     return idem::http_response{201, {}, charge};
//   }};
//   auto outcome = payments(account_id, request);   // the key from its Idempotency-Key header
//   reply(outcome.http_status(), outcome ? outcome->body : std::string(outcome.message()));
//
// One call: the key is validated (missing_key, invalid_key: 400), the request fingerprinted,
// and (scope, key) claimed in the store in one atomic step. A new key runs the handler and stores
// its response (executed); a completed key with the same fingerprint answers the stored response
// byte for byte (replayed); another fingerprint is key misuse (mismatch: 422); a live claim of
// another attempt answers in_progress (409), or with a coalescing wait, the response once it is
// there; a claim whose lease expired is taken over under fence + 1 and the handler resumes from
// its recovery points. A store that cannot take the claim answers store_unavailable or
// store_full (503) and nothing runs.
//
// With a store that keeps records in a database (TransactionalStore: SQLite, PostgreSQL), a
// handler taking the store's transaction as a third parameter runs inside the transaction that
// completes its record: its own writes and the record commit together, or neither does.
//
// A handler that throws releases the key by default (policy/failure.hpp says why, and how to
// store chosen failures instead); its exception passes through unchanged.
//
// Concurrency: one idempotent object may be called from many threads at once; the store decides
// every race, and the handler runs at most once at a time per (scope, key) while leases hold.
#ifndef IDEM_SERVER_IDEMPOTENT_HPP
#define IDEM_SERVER_IDEMPOTENT_HPP

#include <chrono>
#include <concepts>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/server/codec.hpp>
#include <idem/server/detail/engine.hpp>
#include <idem/detail/invoke.hpp>
#include <idem/server/fingerprint/fingerprint.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/fingerprint/xxh3.hpp>
#include <idem/server/outcome.hpp>
#include <idem/key.hpp>
#include <idem/policies.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/request.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/memory.hpp>

namespace idem {

namespace detail {

template <class Handler, class Request>
concept takes_handler_context = std::invocable<Handler&, handler_context&, const Request&>;

// A handler that runs inside the store's transaction: its last parameter is the transaction.
template <class Handler, class Request, class Store>
concept takes_transaction = TransactionalStore<Store> &&
    std::invocable<Handler&, handler_context&, const Request&, typename Store::transaction&>;

template <class Handler, class Request, class Store>
concept guardable_handler = takes_transaction<Handler, Request, Store> ||
    std::invocable<Handler&, handler_context&, const Request&> ||
    std::invocable<Handler&, const Request&>;

template <class Handler, class Request, class Store>
struct handler_result {
  using type = std::invoke_result_t<Handler&, const Request&>;
};
template <class Handler, class Request, class Store>
requires takes_handler_context<Handler, Request>
struct handler_result<Handler, Request, Store> {
  using type = std::invoke_result_t<Handler&, handler_context&, const Request&>;
};
template <class Handler, class Request, class Store>
requires takes_transaction<Handler, Request, Store>
struct handler_result<Handler, Request, Store> {
  using type = std::invoke_result_t<Handler&, handler_context&, const Request&,
                                    typename Store::transaction&>;
};

template <class Policies>
constexpr guard_timing policy_timing() noexcept {
  return {Policies::lease, Policies::retention, Policies::coalesce};
}

}  // namespace detail

template <class Handler, class Policies = default_policies>
class idempotent {
 public:
  using store_type = typename Policies::store;
  using clock_type = typename Policies::clock;
  using fingerprint_type = fingerprint_for<typename Policies::fingerprint>;
  using failure_type = typename Policies::failure;
  using response_codec_type = typename Policies::response_codec;

  static_assert(Store<store_type>,
                "Policies::store must be a copyable handle providing claim(claim_request) "
                "returning claim_result, complete(fenced_key, string_view, store_time), "
                "release(fenced_key) and checkpoint(fenced_key, string_view, store_time) "
                "returning bool, find(scope, key, store_time) returning optional<record>, "
                "sweep(store_time) returning size_t and stuck(store_time, size_t) returning "
                "vector<record> (see idem/store/contract.hpp).");
  static_assert(Clock<clock_type>,
                "Policies::clock must provide now() returning its time_point, wall_now() "
                "returning std::chrono::system_clock::time_point, and sleep_for(nanoseconds).");
  static_assert(Fingerprint<fingerprint_type>,
                "Policies::fingerprint must be a hash function (idem::HashFunction, like "
                "idem::xxh3_128) or provide a const operator()(const request_view&) returning "
                "idem::digest.");
  static_assert(ResponseCodec<response_codec_type>,
                "Policies::response_codec must provide seal(string_view, std::string&) and "
                "open(string_view, std::string&) const members (see idem/server/response_codec.hpp).");
  static_assert(Policies::lease > decltype(Policies::lease)::zero(),
                "Policies::lease must be positive.");
  static_assert(Policies::retention > Policies::lease,
                "Policies::retention must be longer than Policies::lease.");

  /// The parts a wrapper is built from; each defaults to its policy. A store is a handle: give
  /// several wrappers copies of one store and they share its records.
  struct options {
    store_type store{};
    clock_type clock{};
    fingerprint_type fingerprint{};
    failure_type failure{};
    /// How long a claim is honoured before another attempt may take it over. Longer than the
    /// handler's usual run time; each recovery point renews it.
    std::chrono::nanoseconds lease = Policies::lease;
    /// How long records are kept. A repeat after this runs again: choose it longer than your
    /// clients retry for.
    std::chrono::nanoseconds retention = Policies::retention;
    /// How long a duplicate of a request in progress waits for its response before answering
    /// in_progress; zero answers at once.
    std::chrono::nanoseconds coalesce = Policies::coalesce;
    /// The longest key accepted, in bytes.
    std::size_t max_key_length = Policies::max_key_length;
    /// Whether a call without a key is refused (missing_key) or run unguarded.
    bool require_key = Policies::require_key;
    /// The longest request body accepted, in bytes; a longer one answers body_too_large (413)
    /// before anything is hashed or claimed.
    std::size_t max_body_bytes = Policies::max_body_bytes;
    /// The largest stored response, in bytes (after the response codec): a larger one is not
    /// stored, its caller gets it with verdict response_too_large, and repeats answer
    /// response_too_large (500) without running again.
    std::size_t max_response_bytes = Policies::max_response_bytes;
    /// Seals responses and recovery points before the store keeps them, opens them on replay.
    response_codec_type response_codec{};
    /// Where operator()(scope, request) finds the key: the header of the IETF
    /// draft-ietf-httpapi-idempotency-key-header, which Stripe and others use too.
    std::string key_header = "Idempotency-Key";
  };

  explicit idempotent(Handler handler) : idempotent(std::move(handler), options{}) {}

  idempotent(Handler handler, options parts)
      : handler_(std::move(handler)),
        guard_(std::move(parts.store), std::move(parts.clock),
               {parts.lease, parts.retention, parts.coalesce}),
        fingerprint_(std::move(parts.fingerprint)),
        failure_(std::move(parts.failure)),
        response_codec_(std::move(parts.response_codec)),
        max_key_length_(parts.max_key_length),
        require_key_(parts.require_key),
        max_body_bytes_(parts.max_body_bytes),
        key_header_(std::move(parts.key_header)) {
    detail::check_timing(guard_.timing(), "idem::idempotent");
    if (max_key_length_ == 0) {
      throw std::invalid_argument("idem::idempotent: max_key_length must be at least 1");
    }
    guard_.set_storage(detail::storage_for(response_codec_, parts.max_response_bytes));
  }

  idempotent(const idempotent&) = delete;
  idempotent& operator=(const idempotent&) = delete;

  /// Handles one request under (scope, key); `key` is std::nullopt when the request has none.
  template <Fingerprintable Request>
  requires detail::guardable_handler<Handler, Request, store_type>
      idempotent_outcome<typename detail::handler_result<Handler, Request, store_type>::type>
  operator()(std::string_view scope, std::optional<std::string_view> key, const Request& request) {
    constexpr bool transactional = detail::takes_transaction<Handler, Request, store_type>;
    using response_type = typename detail::handler_result<Handler, Request, store_type>::type;
    static_assert(!std::is_void_v<response_type> && Encodable<response_type>,
                  "The handler must return a storable response: std::string, a byte vector, "
                  "idem::http_response, or a type with an idem::codec specialisation.");
    static_assert(FailurePolicy<failure_type, response_type>,
                  "Policies::failure must provide stored_response<Response>(const "
                  "failure_info&) returning std::optional<Response>.");
    using outcome_type = idempotent_outcome<response_type>;

    // A transactional handler is also given the transaction (run_within passes it).
    auto run = [&](handler_context& context, auto&... transaction) -> response_type {
      if constexpr (transactional) {
        return detail::invoke(handler_, context, request, transaction...);
      } else if constexpr (detail::takes_handler_context<Handler, Request>) {
        return detail::invoke(handler_, context, request);
      } else {
        return detail::invoke(handler_, request);
      }
    };
    if (!key) {
      if (require_key_) {
        return outcome_type{verdict::missing_key, "an idempotency key is required"};
      }
      if constexpr (transactional) {
        // The transaction is the one that completes a record: without a key there is none.
        return outcome_type{verdict::missing_key,
                            "an idempotency key is required: this handler runs inside the "
                            "transaction that records its key"};
      } else {
        return guard_type::template run_unguarded<response_type>(scope, run);
      }
    }
    if (!is_valid_key(*key, max_key_length_)) {
      return guard_type::template invalid_key<response_type>("the idempotency key",
                                                             max_key_length_);
    }
    const request_view view = view_of(request);
    if (view.body.size() > max_body_bytes_) {
      return outcome_type{verdict::body_too_large,
                          "the request body is " + std::to_string(view.body.size()) +
                              " bytes; at most " + std::to_string(max_body_bytes_) +
                              " are accepted"};
    }
    digest print;
    try {
      print = fingerprint_(view);
    } catch (const std::invalid_argument& error) {
      return outcome_type{verdict::invalid_request, error.what()};
    }
    if constexpr (transactional) {
      return guard_.template run_within<response_type>(scope, *key, print, run, failure_);
    } else {
      return guard_.template run<response_type>(scope, *key, print, run, failure_);
    }
  }

  /// The same, for a request that carries no key.
  template <Fingerprintable Request>
  auto operator()(std::string_view scope, std::nullopt_t, const Request& request) {
    return (*this)(scope, std::optional<std::string_view>{}, request);
  }

  /// The same, with the key read from the request's `key_header` (Idempotency-Key); an absent
  /// header is a missing key, an empty one an invalid key.
  template <Fingerprintable Request>
  auto operator()(std::string_view scope, const Request& request) {
    return (*this)(scope, view_of(request).find_header(key_header_), request);
  }

  /// Removes expired records; answers how many.
  std::size_t sweep() { return guard_.sweep(); }
  /// Claims in progress past their lease: what a reconciliation pass compares with the
  /// downstream system of record. Reports only.
  std::vector<record> stuck(std::size_t limit = 1000) { return guard_.stuck(limit); }

  Handler& handler() noexcept { return handler_; }
  store_type& store() noexcept { return guard_.store(); }
  clock_type& clock() noexcept { return guard_.clock(); }
  const fingerprint_type& fingerprint() const noexcept { return fingerprint_; }

 private:
  using guard_type = detail::guard<store_type, clock_type>;

  Handler handler_;
  guard_type guard_;
  fingerprint_type fingerprint_;
  [[no_unique_address]] failure_type failure_;
  [[no_unique_address]] response_codec_type response_codec_;
  std::size_t max_key_length_;
  bool require_key_;
  std::size_t max_body_bytes_;
  std::string key_header_;
};

template <class Handler>
idempotent(Handler) -> idempotent<Handler, default_policies>;

}  // namespace idem

#endif  // IDEM_SERVER_IDEMPOTENT_HPP
