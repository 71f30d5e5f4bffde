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
// With `commit = idem::commit_mode::one_commit` in the policies (a OneCommitStore), the claim
// joins that transaction too: one commit per new key, a duplicate waits instead of 409, and a
// throw or crash leaves nothing. Only for effects local to the database (docs/one_commit.md).
//
// A handler that throws releases the key by default (idem/server/failure.hpp says why, and how to
// store chosen failures instead); its exception passes through unchanged.
//
// Concurrency: one idempotent object may be called from many threads at once; the store decides
// every race, and the handler runs at most once at a time per (scope, key) while leases hold.
#ifndef IDEM_SERVER_IDEMPOTENT_HPP
#define IDEM_SERVER_IDEMPOTENT_HPP

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/core/codec.hpp>
#include <idem/core/fingerprint/fingerprint.hpp>
#include <idem/core/fingerprint/xxh3.hpp>
#include <idem/core/key.hpp>
#include <idem/core/request.hpp>
#include <idem/policies.hpp>
#include <idem/server/deadline.hpp>
#include <idem/server/detail/admission.hpp>
#include <idem/server/detail/checks.hpp>
#include <idem/server/detail/engine.hpp>
#include <idem/server/detail/one_commit.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/observer.hpp>
#include <idem/server/options.hpp>
#include <idem/server/outcome.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/server/resumption.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/memory.hpp>

namespace idem {

template <class Handler, class Policies = default_policies>
class idempotent {
  static_assert(detail::check_server_policies<Policies>());
  static_assert(detail::check_fingerprint<fingerprint_for<typename Policies::fingerprint>>());
  static_assert(detail::check_server_observer<typename Policies::server_observer>());
  static_assert(detail::check_commit_mode<Policies>());

 public:
  using store_type = typename Policies::store;
  using clock_type = typename Policies::clock;
  using fingerprint_type = fingerprint_for<typename Policies::fingerprint>;
  using failure_type = typename Policies::failure;
  using response_codec_type = typename Policies::response_codec;
  using server_observer_type = typename Policies::server_observer;

  /// The parts a wrapper is built from (idem/server/options.hpp): each defaults to its policy,
  /// and is checked once, when the wrapper is built.
  using options = idempotent_options<Policies>;

  explicit idempotent(Handler handler) : idempotent(std::move(handler), options{}) {}

  idempotent(Handler handler, options parts)
      : handler_(std::move(handler)),
        engine_(std::move(parts), "idem::idempotent"),
        observer_(engine_.options().server_observer) {}

  idempotent(const idempotent&) = delete;
  idempotent& operator=(const idempotent&) = delete;

  /// Handles one request under (scope, key); `key` is std::nullopt when the request has none.
  /// The handler is called as R(const Request&), R(handler_context&, const Request&), or with a
  /// TransactionalStore R(handler_context&, const Request&, Store::transaction&); the answer is
  /// an idempotent_outcome<R>.
  template <Fingerprintable Request>
  auto operator()(std::string_view scope, std::optional<std::string_view> key,
                  const Request& request) {
    return (*this)(scope, key, request, std::optional<caller_deadline>{});
  }

  /// The same, for a caller that waits `deadline.time_left` at most (std::nullopt: no deadline
  /// known). Less than minimum_time_left is refused with deadline_exceeded, nothing claimed;
  /// else the handler's context counts down what is left (handler_context::time_left).
  template <Fingerprintable Request>
  auto operator()(std::string_view scope, std::optional<std::string_view> key,
                  const Request& request, std::optional<caller_deadline> deadline) {
    // The checks come first and the rest only once they pass, so that their sentence is the
    // first error a wrong handler gets (idem/server/detail/checks.hpp).
    static_assert(detail::check_handler<Handler, Request, store_type>());
    if constexpr (detail::guardable_handler<Handler, Request, store_type>) {
      using response_type = typename detail::handler_result<Handler, Request, store_type>::type;
      static_assert(detail::check_response<response_type>());
      if constexpr (detail::storable_response<response_type>) {
        static_assert(detail::check_failure_policy<failure_type, response_type>());
        // The default observer is not called through observed at all: a call through one more
        // frame cost 15 instructions a request (callgrind).
        if constexpr (observes) {
          return observed<response_type>(scope, key, request, deadline);
        } else {
          return handle<response_type>(scope, key, request, deadline);
        }
      }
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
    return (*this)(scope, view_of(request).find_header(engine_.options().key_header), request);
  }

  /// Resumes a stuck record of this wrapper (what idem::reconciler calls): `request` is the
  /// request the record kept, encoded. The request is decoded and fingerprinted, and a request
  /// that does not decode or is not the one the record was claimed for is `unreadable` and never
  /// run; else the record is taken over (fenced, as a retry would take it) and the handler runs
  /// from its recovery points. A handler that throws again keeps the claim (`failed`).
  template <Fingerprintable Request>
  resume_result resume(const record& stuck, std::string_view request) {
    static_assert(Encodable<Request>,
                  "A resumable wrapper keeps its requests: specialise idem::codec<Request> for "
                  "the request type (idem/core/codec.hpp).");
    static_assert(detail::check_handler<Handler, Request, store_type>());
    using response_type = typename detail::handler_result<Handler, Request, store_type>::type;
    std::optional<Request> kept;
    try {
      kept.emplace(codec<Request>::decode(request));
    } catch (const std::exception& error) {
      return {resumption::unreadable,
              std::string("the kept request does not decode: ") + error.what(),
              0,
              {}};
    }
    digest print;
    try {
      print = engine_.options().fingerprint(view_of(*kept));
    } catch (const std::invalid_argument& error) {
      return {resumption::unreadable,
              std::string("the kept request cannot be fingerprinted: ") + error.what(),
              0,
              {}};
    }
    if (print != stuck.fingerprint) {
      return {resumption::unreadable,
              "the kept request is not the request the record was claimed for (its fingerprint "
              "differs)",
              0,
              {}};
    }
    auto run = runner<response_type>(*kept, nullptr);
    return engine_.template resume<response_type, completion_of<Request>()>(stuck.scope, stuck.key,
                                                                            print, run);
  }

  const options& settings() const noexcept { return engine_.options(); }

  /// Removes expired records; answers how many.
  std::size_t sweep() { return engine_.sweep(); }
  /// Claims in progress past their lease: what a reconciliation pass compares with the
  /// downstream system of record. Reports only.
  std::vector<record> stuck(std::size_t limit = 1000) { return engine_.stuck(limit); }

  Handler& handler() noexcept { return handler_; }
  store_type& store() noexcept { return engine_.store(); }
  clock_type& clock() noexcept { return engine_.clock(); }
  const fingerprint_type& fingerprint() const noexcept { return engine_.options().fingerprint; }

 private:
  using engine_type = detail::engine<options>;
  static constexpr bool observes = detail::observes_server<server_observer_type>;

  // handle, and the observer told of its verdict; the default observer reads no clock.
  template <class Response, class Request>
  idempotent_outcome<Response> observed(std::string_view scope, std::optional<std::string_view> key,
                                        const Request& request,
                                        std::optional<caller_deadline> deadline) {
    const auto start = engine_.clock().now();
    bool waited = false;
    idempotent_outcome<Response> outcome = handle<Response>(scope, key, request, deadline, &waited);
    observer_.on_call(server_call_event{
        outcome.verdict(), waited && outcome.verdict() == verdict::replayed,
        std::chrono::duration_cast<std::chrono::nanoseconds>(engine_.clock().now() - start)});
    return outcome;
  }

  // `waited`: where an observed call learns that its claim waited for a duplicate (coalescing);
  // none for the default observer, so that its calls pass nothing more than before.
  template <class Response, class Request, class... Waited>
  idempotent_outcome<Response> handle(std::string_view scope, std::optional<std::string_view> key,
                                      const Request& request,
                                      std::optional<caller_deadline> deadline, Waited... waited) {
    constexpr bool transactional = detail::takes_transaction<Handler, Request, store_type>;
    using outcome_type = idempotent_outcome<Response>;
    const options& settings = engine_.options();

    // The deadline on this wrapper's clock, from the time the caller had left on arrival.
    const std::optional<typename clock_type::time_point> until =
        detail::deadline_on(engine_.clock(), deadline);
    auto run = runner<Response>(request, until ? &*until : nullptr);
    if (!key) {
      if (settings.require_key) return detail::missing_key<Response>();
      if constexpr (transactional) {
        // The transaction is the one that completes a record: without a key there is none.
        return outcome_type{verdict::missing_key,
                            "an idempotency key is required: this handler runs inside the "
                            "transaction that records its key"};
      } else if constexpr (detail::answers_commit_with<Handler, Request>) {
        return outcome_type{verdict::missing_key,
                            "an idempotency key is required: this handler's writes commit in "
                            "the transaction that records its key"};
      } else {
        if (deadline && detail::too_late(*deadline, settings.minimum_time_left)) {
          return detail::deadline_refusal<Response>(*deadline, settings.minimum_time_left);
        }
        return engine_type::template run_unguarded<Response>(scope, run);
      }
    }
    digest print;
    if (auto refused = detail::admit<Response>(settings, *key, view_of(request), print)) {
      return std::move(*refused);
    }
    if (deadline && detail::too_late(*deadline, settings.minimum_time_left)) {
      return detail::deadline_refusal<Response>(*deadline, settings.minimum_time_left);
    }
    if constexpr (detail::commit_mode_of<Policies> == commit_mode::one_commit) {
      // Claim, handler and record in one transaction (idem/server/detail/one_commit.hpp).
      static_assert(detail::check_one_commit_handler<transactional>());
      return detail::run_one_commit<Response>(engine_, scope, *key, print, run);
    }
    constexpr detail::completion how = completion_of<Request>();
    if (settings.max_kept_request_bytes == 0) {
      return engine_.template run<Response, how>(scope, *key, print, run, settings.failure,
                                                 engine_.first_start(), waited...);
    }
    detail::kept_bytes kept;
    if (auto refused = engine_.template keep_request<Response>(
            request, settings.name, settings.max_kept_request_bytes, kept, "idem::idempotent")) {
      return std::move(*refused);
    }
    return engine_.template run<Response, how>(scope, *key, print, run, settings.failure, &kept,
                                               waited...);
  }

  // How the engine records a run of the handler for Request: directly, in the transaction the
  // handler writes in, or with the writes its commit_with carries.
  template <class Request>
  static constexpr detail::completion completion_of() {
    if constexpr (detail::takes_transaction<Handler, Request, store_type>) {
      return detail::completion::in_transaction;
    } else if constexpr (detail::answers_commit_with<Handler, Request>) {
      return detail::completion::with_writes;
    } else {
      return detail::completion::direct;
    }
  }

  // What the engine runs for `request`: the handler, given the context, and for a transactional
  // handler the transaction too (completion::in_transaction passes it). It answers the
  // handler's Response, or the commit_with carrying it.
  template <class Response, class Request>
  auto runner(const Request& request, const typename clock_type::time_point* until) {
    using answer_type =
        typename std::conditional_t<completion_of<Request>() == detail::completion::with_writes,
                                    std::invoke_result<Handler&, handler_context&, const Request&>,
                                    std::type_identity<Response>>::type;
    return [this, &request, until](handler_context& context, auto&... transaction) -> answer_type {
      if (until != nullptr) context.set_deadline(engine_.clock(), *until);
      if constexpr (observes) {
        // Timed here, around the handler alone: the claim and the record are the call's.
        const auto start = engine_.clock().now();
        const auto took = [&] {
          return std::chrono::duration_cast<std::chrono::nanoseconds>(engine_.clock().now() -
                                                                      start);
        };
        try {
          answer_type answer = invoke_handler(context, request, transaction...);
          observer_.on_handler(handler_event{took(), false});
          return answer;
        } catch (...) {
          observer_.on_handler(handler_event{took(), true});
          throw;
        }
      } else {
        return invoke_handler(context, request, transaction...);
      }
    };
  }

  // The handler, called as it takes its arguments: with the context, and for a transactional
  // handler the transaction too.
  template <class Request, class... Transaction>
  decltype(auto) invoke_handler(handler_context& context, const Request& request,
                                Transaction&... transaction) {
    if constexpr (detail::takes_transaction<Handler, Request, store_type>) {
      return std::invoke(handler_, context, request, transaction...);
    } else if constexpr (detail::takes_handler_context<Handler, Request>) {
      return std::invoke(handler_, context, request);
    } else {
      return std::invoke(handler_, request);
    }
  }

  Handler handler_;
  engine_type engine_;
  [[no_unique_address]] server_observer_type observer_;
};

template <class Handler>
idempotent(Handler) -> idempotent<Handler, default_policies>;

}  // namespace idem

#endif  // IDEM_SERVER_IDEMPOTENT_HPP
