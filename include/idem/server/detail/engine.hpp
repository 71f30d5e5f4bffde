// The machinery idempotent and inbox share: claim, run under the fence, record or release.
//
// One run path, in steps a driver can call apart (the blocking wrappers call run; the
// asynchronous driver, idem/server/detail/async_engine.hpp, calls the steps, each store call
// where its store's calls must run):
//
//   claim_waiting    claims (scope, key) in the store, waiting for a duplicate to settle where
//                    coalescing is on (claim: one try; coalescing_wait: the pauses between
//                    tries); hold turns a claim this caller won into a held_claim;
//   answer_existing  answers for a record this caller may not run: replayed (replays,
//                    stored_response), mismatch, in_progress, response_too_large;
//   run_claimed      runs the handler under the claim, with recovery points going through the
//                    fence (checkpointer), and records its response, directly (complete:
//                    record_directly) or in the store's transaction together with the
//                    handler's own writes (complete_within);
//   settle_failure   the handler threw: the failure policy releases the key or stores a response;
//   answer_lost      the fence was lost to a takeover: answers for the attempt that holds it.
#ifndef IDEM_SERVER_DETAIL_ENGINE_HPP
#define IDEM_SERVER_DETAIL_ENGINE_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/core/codec.hpp>
#include <idem/core/fingerprint/digest.hpp>
#include <idem/server/detail/checks.hpp>
#include <idem/server/detail/claimed_start.hpp>
#include <idem/server/detail/coalescing.hpp>
#include <idem/server/detail/held_claim.hpp>
#include <idem/server/detail/recovery_bytes.hpp>
#include <idem/server/detail/with_writes.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/outcome.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/server/resumption.hpp>
#include <idem/store/contract.hpp>

namespace idem::detail {

// The failure "policy" of a resumption by the reconciler: a handler that fails again leaves its
// claim as it is (the record stays stuck, and is reported), never released, which would drop the
// recovery points and the kept request.
struct keep_claim_on_failure {};

// Options: idempotent::options or inbox::options, kept as given: a setting has no copy beside
// its field, and the owner reads its own settings there. The engine uses store, clock, lease,
// retention, coalesce, max_key_length, max_response_bytes, response_codec and first_step.
template <class Options>
class engine {
 public:
  using store_type = decltype(Options::store);
  using clock_type = decltype(Options::clock);
  using codec_type = decltype(Options::response_codec);

  /// Throws std::invalid_argument, naming `who`, for options that can never work.
  engine(Options options, const char* who) : options_(std::move(options)) {
    check_options(options_, who);
    first_start_ = claimed_start_bytes(first_step_of(options_), [this](kept_bytes& k) { seal(k); });
  }

  const Options& options() const noexcept { return options_; }
  store_type& store() noexcept { return options_.store; }
  clock_type& clock() noexcept { return options_.clock; }

  std::size_t sweep() { return store().sweep(clock().wall_now()); }
  std::vector<record> stuck(std::size_t limit) { return store().stuck(clock().wall_now(), limit); }

  /// The answer to a key (or event id, `what`) that is_valid_key refuses.
  template <class Response>
  static idempotent_outcome<Response> invalid_key(const char* what, std::size_t max_length) {
    return idempotent_outcome<Response>{
        verdict::invalid_key, std::string(what) + " must be 1 to " + std::to_string(max_length) +
                                  " bytes of visible ASCII (0x21-0x7E)"};
  }

  /// A store that could not answer: store_full or store_unavailable, and why.
  template <class Response>
  static idempotent_outcome<Response> refused(const store_error& error,
                                              std::string_view context = {}) {
    return idempotent_outcome<Response>{
        error.failure() == store_failure::full ? verdict::store_full : verdict::store_unavailable,
        std::string(context) + error.what()};
  }

  /// A claim the store answered `full`.
  template <class Response>
  static idempotent_outcome<Response> no_room() {
    return {verdict::store_full, "the store has no room for another record"};
  }

  /// Runs `run` with no key and no claim (the key optional): nothing is stored, a repeat runs.
  template <class Response, class Run>
  static idempotent_outcome<Response> run_unguarded(std::string_view scope, Run& run) {
    handler_context context{scope, {}, 0};
    return idempotent_outcome<Response>::unrecorded(verdict::executed, run(context),
                                                    "no idempotency key: not guarded");
  }

  /// Claims (scope, key) for a request with fingerprint `print` and, when the claim is this
  /// caller's, runs `run(handler_context&)` under it, or with completion::in_transaction
  /// `run(handler_context&, transaction&)` inside the transaction that completes the record.
  /// `failure` decides what a throw of the handler leaves.
  /// `kept`: the recovery bytes a new record starts with (kept_request, first_start), or null
  /// for none: a wrapper that keeps nothing builds and copies nothing into a new claim.
  /// `waited`: set when a coalescing wait paused at least once (what an observer calls a
  /// coalesced replay when the answer is a replay), or null when nobody asks.
  template <class Response, completion How, class Run, class Failure>
  idempotent_outcome<Response> run(std::string_view scope, std::string_view key,
                                   const digest& print, Run& run, const Failure& failure,
                                   const kept_bytes* kept = nullptr, bool* waited = nullptr) {
    store_time claimed_at{};
    // Made in place: a replay's record (its response) is moved nowhere before it is answered.
    made_later<claim_result> result;
    try {
      result.make(
          [&] { return claim_waiting(scope, key, print, claimed_at, kept_stored(kept), waited); });
    } catch (const store_error& error) {
      return refused<Response>(error);
    }
    claim_result& claimed = result.get();
    switch (claimed.status) {
      case claim_status::full:
        return no_room<Response>();
      case claim_status::existing:
        return answer_existing<Response>(claimed.existing, print, claimed_at);
      case claim_status::claimed:
      case claim_status::taken_over:
        break;
    }
    return run_claimed<Response, How>(hold(scope, key, claimed, claimed_at, kept), print, run,
                                      failure);
  }

  /// One claim, or with coalescing, claims repeated with growing pauses while another attempt
  /// holds a live claim, until it settles (completed, released, abandoned) or the wait is over.
  /// `claimed_at` is set to the time the last claim was made with; `waited`, when not null, to
  /// true once the wait has paused.
  claim_result claim_waiting(std::string_view scope, std::string_view key, const digest& print,
                             store_time& claimed_at, std::string_view kept = {},
                             bool* waited = nullptr) {
    claim_result claimed = claim(scope, key, print, claimed_at, kept);
    if (options_.coalesce <= std::chrono::nanoseconds::zero()) return claimed;
    coalescing_wait wait{options_.coalesce};
    const auto start = clock().now();
    while (coalescing_wait::waits_on(claimed, print)) {
      const std::optional<std::chrono::nanoseconds> pause = wait.next_pause(clock().now() - start);
      if (!pause) break;
      clock().sleep_for(*pause);
      if (waited != nullptr) *waited = true;
      claimed = claim(scope, key, print, claimed_at, kept);
    }
    return claimed;
  }

  /// One claim of (scope, key), at the clock's time, which `claimed_at` is set to.
  claim_result claim(std::string_view scope, std::string_view key, const digest& print,
                     store_time& claimed_at, std::string_view kept = {}) {
    return store().claim(claim_request_for(scope, key, print, claimed_at, kept));
  }

  /// What one claim of (scope, key) asks the store, at the clock's time (set in `claimed_at`).
  claim_request claim_request_for(std::string_view scope, std::string_view key, const digest& print,
                                  store_time& claimed_at, std::string_view kept = {}) {
    claimed_at = clock().wall_now();
    return claim_request{scope, key, print, claimed_at, options_.lease, options_.retention, kept};
  }

  /// Resumes the stuck record (scope, key), claimed for a request with fingerprint `print`: takes
  /// it over, as a retry would, and runs `run` under the claim from its recovery points. Never
  /// starts work anew: a record released or expired since it was listed is claimed back and
  /// released at once. A handler that fails again keeps the claim (keep_claim_on_failure).
  template <class Response, completion How, class Run>
  resume_result resume(std::string_view scope, std::string_view key, const digest& print,
                       Run& run) {
    store_time claimed_at{};
    claim_result claimed;
    try {
      claimed = claim(scope, key, print, claimed_at);
    } catch (const store_error& error) {
      return {resumption::store_failed, error.what(), 0, {}};
    }
    switch (claimed.status) {
      case claim_status::full:
        return {resumption::settled, "the record is gone (its key has no record now)", 0, {}};
      case claim_status::existing:
        if (claimed.existing.state == record_state::completed) {
          return {resumption::settled, "completed by another attempt", 0, {}};
        }
        if (claimed.existing.fingerprint != print) {
          return {resumption::settled, "the key now holds another request", 0, {}};
        }
        return {resumption::lost, "another attempt holds the claim", 0, {}};
      case claim_status::claimed: {
        // The record was released or expired after it was listed: there is nothing to finish,
        // and a new run is the client's to ask for, not the reconciler's.
        try {
          (void)store().release(fenced_key{scope, key, claimed.fence});
        } catch (const store_error&) {
          // The claim ends with its lease; a client's retry then claims the key as usual.
        }
        return {resumption::settled, "released or expired since it was listed", 0, {}};
      }
      case claim_status::taken_over:
        break;
    }
    const std::uint64_t fence = claimed.fence;
    idempotent_outcome<Response> outcome;
    try {
      outcome = run_claimed<Response, How>(hold(scope, key, claimed, claimed_at), print, run,
                                           keep_claim_on_failure{});
    } catch (const std::exception& error) {
      return {resumption::failed, error.what(), fence, recovery_left(scope, key, fence)};
    } catch (...) {
      return {resumption::failed, "the handler threw", fence, recovery_left(scope, key, fence)};
    }
    switch (outcome.verdict()) {
      case verdict::executed:
      case verdict::response_too_large:
        return {resumption::resumed, std::string(outcome.message()), fence, {}};
      case verdict::store_unavailable:
      case verdict::store_full:
        return {resumption::store_failed, std::string(outcome.message()), fence, {}};
      default:  // answer_lost: a takeover took the fence from this run
        return {resumption::lost, std::string(outcome.message()), fence, {}};
    }
  }

  /// The claim this caller holds after claim_waiting answered claimed or taken_over. `kept`:
  /// what the claim was made with (or null). A new claim made with it starts from those bytes
  /// in plain (never opened: never sealed), so that the handler's recovery points follow them
  /// and a checkpoint, which writes the bytes whole, keeps them in the record.
  held_claim hold(std::string_view scope, std::string_view key, claim_result& claimed,
                  store_time claimed_at, const kept_bytes* kept = nullptr) const {
    const bool taken_over = claimed.status == claim_status::taken_over;
    if (kept != nullptr && !taken_over) {
      return held_claim{fenced_key{scope, key, claimed.fence}, false, kept->plain, claimed_at};
    }
    return held_claim{fenced_key{scope, key, claimed.fence}, taken_over,
                      opened_recovery(std::move(claimed.existing.recovery)), claimed_at};
  }

  /// A record's recovery bytes as a handler reads them (sealed by the response codec in the
  /// store), and so for the asynchronous driver's resume. Taken by reference: a parameter by
  /// value would cost a claim a second move of the bytes.
  std::string opened_recovery(std::string&& recovery) const {
    if constexpr (seals) {
      if (recovery.empty()) return std::move(recovery);
      std::string plain;
      options_.response_codec.open(recovery, plain);
      return plain;
    } else {
      return std::move(recovery);
    }
  }

  /// The answer for a record this caller may not run, as the store found it at `now`.
  template <class Response>
  idempotent_outcome<Response> answer_existing(record& existing, const digest& print,
                                               store_time now) const {
    using outcome_type = idempotent_outcome<Response>;
    if (existing.fingerprint != print) {
      return outcome_type{verdict::mismatch, "the key was already used with a different request"};
    }
    if (existing.state == record_state::in_progress) {
      return outcome_type{verdict::in_progress, "a request with this key is still being processed",
                          lease_left(existing, now)};
    }
    if (existing.response.starts_with(too_large_marker)) {
      return outcome_type{verdict::response_too_large,
                          "the response to this key was " +
                              existing.response.substr(too_large_marker.size()) +
                              " bytes, more than the store keeps; it was not stored, and the "
                              "request is not run again"};
    }
    return outcome_type::replayed(stored_response<Response>(existing));
  }
  /// Whether answer_existing replays `existing`: the request's own, settled, and kept.
  static bool replays(const record& existing, const digest& print) noexcept {
    return existing.fingerprint == print && existing.state != record_state::in_progress &&
           !existing.response.starts_with(too_large_marker);
  }
  /// The stored response, decoded (a codec that adopts bytes takes over the snapshot's own).
  template <class Response>
  Response stored_response(record& existing) const {
    if constexpr (seals) {
      std::string plain;
      options_.response_codec.open(existing.response, plain);
      return codec<Response>::decode(plain);
    } else if constexpr (codec_adopts_bytes<Response>) {
      return codec<Response>::adopt(std::move(existing.response));
    } else {
      return codec<Response>::decode(existing.response);
    }
  }

  /// Runs the handler under `claim` and records its response as `How` says. The handler's own
  /// exception passes through, after the failure policy settled the key; a recovery point's
  /// store failing keeps the claim instead (its step's effect may not be recorded, so only a
  /// takeover after the lease, resuming from the recovery points, runs it again).
  template <class Response, completion How, class Run, class Failure>
  idempotent_outcome<Response> run_claimed(held_claim claim, const digest& print, Run& run,
                                           const Failure& failure) {
    checkpointer<typename checkpoint_writer<store_type, How>::type> target{*this, claim.held};
    const std::string_view started = claimed_start(claim, options_);
    handler_context context{claim.held.scope,          claim.held.key,
                            claim.held.fence,          claim.resumed,
                            std::move(claim.recovery), &target};
    mark_claimed_start(context, started, options_, clock());
    bool handler_threw = false;
    auto run_handler = [&](auto&... transaction) -> decltype(auto) {
      try {
        return run(context, transaction...);
      } catch (...) {
        // A recovery point the store failed to write, or a step that cannot tell whether its
        // effect landed, keeps the claim: settling it could run the effect twice.
        handler_threw = !target.failed && !context.in_doubt();
        throw;
      }
    };
    try {
      if constexpr (How == completion::direct) {
        target.writer = &store();
        return record_directly<Response>(claim, print, run_handler());
      } else if constexpr (How == completion::with_writes) {
        target.writer = &store();
        auto answered = run_handler();
        return record_with_writes<Response>(*this, claim, print, answered, handler_threw);
      } else {
        return record_within<Response>(claim, print, target, handler_threw, run_handler);
      }
    } catch (const lease_lost&) {
      return answer_lost<Response>(claim.held.scope, claim.held.key, print);
    } catch (...) {
      if (handler_threw) settle_failure<Response>(claim.held, context.steps_recorded(), failure);
      throw;
    }
  }

  /// The handler threw (the exception in flight): the failure policy decides whether the key is
  /// released or a failure response stored.
  template <class Response, class Failure>
  void settle_failure(const fenced_key& held, std::size_t steps, const Failure& failure) {
    settle_failure<Response>(held, steps, failure, std::current_exception());
  }
  /// The same for a failure caught before (`error`): a driver that awaits the store's calls
  /// settles outside the catch block.
  template <class Response, class Failure>
  void settle_failure(const fenced_key& held, std::size_t steps, const Failure& failure,
                      std::exception_ptr error) {
    if constexpr (!std::is_same_v<Failure, keep_claim_on_failure>) {
      try {
        const std::optional<std::string> bytes =
            failure_response<Response>(held, steps, failure, std::move(error));
        if (bytes) {
          (void)store().complete(held, *bytes, clock().wall_now());
        } else {
          (void)store().release(held);
        }
      } catch (const store_error&) {
        // The handler's exception is what the caller must see. The claim stays in progress
        // until its lease ends; stuck() reports it.
      }
    }
  }

  /// What the failure policy makes of a handler that threw `error` under `held`: the bytes to
  /// complete the record with (a stored failure response), or none to release the key. Not for
  /// keep_claim_on_failure, which leaves the claim as it is.
  template <class Response, class Failure>
  std::optional<std::string> failure_response(const fenced_key& held, std::size_t steps,
                                              const Failure& failure,
                                              std::exception_ptr error) const {
    const failure_info info{std::move(error), held.scope, held.key, held.fence, steps};
    std::optional<Response> stored = failure.template stored_response<Response>(info);
    if (!stored) return std::nullopt;
    std::string bytes;
    codec<Response>::encode(*stored, bytes);
    (void)stored_form(bytes);
    return bytes;
  }

  /// This attempt lost its fence to a takeover: answers for the attempt that holds the key now.
  template <class Response>
  idempotent_outcome<Response> answer_lost(std::string_view scope, std::string_view key,
                                           const digest& print) {
    std::optional<record> current;
    const store_time now = clock().wall_now();
    try {
      current = store().find(scope, key, now);
    } catch (const store_error& error) {
      return refused<Response>(error);
    }
    return answer_current<Response>(current, print, now);
  }

  /// answer_lost's answer from what the store holds for the key (`current`, found at `now`).
  template <class Response>
  idempotent_outcome<Response> answer_current(std::optional<record>& current, const digest& print,
                                              store_time now) const {
    if (current && current->state == record_state::completed) {
      return answer_existing<Response>(*current, print, now);
    }
    return idempotent_outcome<Response>{
        verdict::in_progress,
        "the claim was taken over after its lease expired; the request is being processed by "
        "the attempt that took it",
        current ? lease_left(*current, now) : std::chrono::nanoseconds::zero()};
  }

  /// How long `held`'s claim has left at `now`: what a duplicate is told to wait (Retry-After).
  static std::chrono::nanoseconds lease_left(const record& held, store_time now) noexcept {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(held.lease_until - now);
    return left > std::chrono::nanoseconds::zero() ? left : std::chrono::nanoseconds::zero();
  }

  // Whether responses and recovery points go through the codec: the default one costs no call.
  static constexpr bool seals = !std::is_same_v<codec_type, plain_response_codec>;

  /// Recovery bytes as the store keeps them: sealed by the response codec.
  std::string sealed_recovery(std::string_view plain) const {
    std::string sealed;
    options_.response_codec.seal(plain, sealed);
    return sealed;
  }

  /// The recovery bytes a resumable wrapper's claim gives the store for `request` (encoded);
  /// false when their stored form passes `max_bytes`.
  bool kept_request(std::string_view handler_name, std::string_view request, std::size_t max_bytes,
                    kept_bytes& kept) const {
    kept.plain = detail::kept_request(handler_name, request);
    append_claimed_start(kept.plain, first_step_of(options_));
    seal(kept);
    return kept.stored.size() <= max_bytes;
  }

  /// What a claim of a wrapper that keeps no request starts with: its first step's start, or null.
  const kept_bytes* first_start() const noexcept { return first_start_.get(); }
  /// kept.stored: kept.plain sealed by the response codec (into kept.sealed), or as it is.
  void seal(kept_bytes& kept) const {
    kept.stored = kept.plain;
    if constexpr (seals) kept.stored = kept.sealed = sealed_recovery(kept.plain);
  }

  /// The stored form of `kept` that a claim hands the store; none for null.
  static std::string_view kept_stored(const kept_bytes* kept) noexcept {
    return kept != nullptr ? kept->stored : std::string_view{};
  }

  /// A resumable wrapper's `request`, kept into `kept` (encoded by codec<Request>, then
  /// kept_request): the body_too_large answer when its stored form passes `max_bytes`, else
  /// none. Throws std::logic_error, naming `who`, for a request type that cannot be encoded.
  template <class Response, class Request>
  std::optional<idempotent_outcome<Response>> keep_request(const Request& request,
                                                           std::string_view handler_name,
                                                           std::size_t max_bytes, kept_bytes& kept,
                                                           const char* who) const {
    if constexpr (Encodable<Request>) {
      std::string encoded;
      codec<Request>::encode(request, encoded);
      if (kept_request(handler_name, encoded, max_bytes, kept)) return std::nullopt;
      return idempotent_outcome<Response>{
          verdict::body_too_large,
          "the request takes " + std::to_string(kept.stored.size()) +
              " bytes to keep for resumption, more than max_kept_request_bytes (" +
              std::to_string(max_bytes) + "); nothing was claimed"};
    } else {
      throw std::logic_error(
          std::string(who) +
          ": max_kept_request_bytes is set, but this request type cannot be kept: specialise "
          "idem::codec<Request> for it (idem/core/codec.hpp)");
    }
  }

  /// Where a handler_context records recovery points: a fenced checkpoint that also renews the
  /// lease, through the store, or for a transactional handler through its transaction
  /// (committed or rolled back with it). Both have checkpoint(held, recovery, lease_until).
  /// Public for the drivers that make a context for a held claim themselves (idem/asio).
  template <class Writer>
  class checkpointer final : public recovery_writer {
   public:
    checkpointer(engine& owner, const fenced_key& held) noexcept : owner_(owner), held_(held) {}

    bool write(std::string_view recovery) override {
      try {
        const store_time lease_until = owner_.lease_from_now();
        if constexpr (seals) {
          return writer->checkpoint(held_, owner_.sealed_recovery(recovery), lease_until);
        } else {
          return writer->checkpoint(held_, recovery, lease_until);
        }
      } catch (...) {
        failed = true;
        throw;
      }
    }

    Writer* writer = nullptr;
    bool failed = false;  // the store threw: the step's effect may not be recorded

   private:
    engine& owner_;
    fenced_key held_;
  };

  /// The lease a recovery point or heartbeat written now renews the claim to.
  store_time lease_from_now() { return clock().wall_now() + options_.lease; }

  /// `plain` recovery bytes as a checkpoint stores them: sealed into `sealed` by the response
  /// codec, or as they are.
  std::string_view recovery_stored(std::string_view plain, std::string& sealed) const {
    if constexpr (seals) {
      sealed = sealed_recovery(plain);
      return sealed;
    } else {
      (void)sealed;
      return plain;
    }
  }

  /// The `now` a completion is given: the clock's, unless the store says it does not read it
  /// (reads_completion_time, idem/store/contract.hpp); then the claim's time, and no second
  /// clock read.
  store_time completion_time(store_time claimed_at) {
    if constexpr (reads_completion_time<store_type>) {
      return clock().wall_now();
    } else {
      return claimed_at;
    }
  }

  /// completion::direct: the handler returned `response`; completes the record with it
  /// (completion_for's bytes).
  template <class Response>
  idempotent_outcome<Response> record_directly(const held_claim& claim, const digest& print,
                                               Response response) {
    completion_bytes done;
    completion_for(response, done);
    bool applied = false;
    try {
      applied = store().complete(claim.held, done.bytes, completion_time(claim.claimed_at));
    } catch (const store_error& error) {
      return not_stored(claim, std::move(response), error);
    }
    if (!applied) return answer_lost<Response>(claim.held.scope, claim.held.key, print);
    return recorded(claim, std::move(response), done);
  }

  /// What a completion gives the store for a response. Kept in place until the store answers:
  /// `bytes` views `encoded`, or the response itself.
  struct completion_bytes {
    std::string encoded;     // the response encoded (and sealed), unless `bytes` views it
    std::string_view bytes;  // what the store is given
    bool fits = true;        // false: `bytes` is the too-large marker
  };

  /// record_directly's first part: the bytes for `response`. A std::string response is viewed
  /// as it is, without a copy, unless a response codec seals it or it passes
  /// max_response_bytes; anything else is encoded.
  template <class Response>
  void completion_for(const Response& response, completion_bytes& done) const {
    if constexpr (codec_views_bytes<Response> && !seals) {
      const std::string_view own = codec<Response>::bytes_of(response);
      if (own.size() <= options_.max_response_bytes) {
        done.bytes = own;
        return;
      }
    }
    codec<Response>::encode(response, done.encoded);
    done.fits = stored_form(done.encoded);
    done.bytes = done.encoded;
  }

  /// record_directly's answer once the store applied the completion `done`.
  template <class Response>
  idempotent_outcome<Response> recorded(const held_claim& claim, Response&& response,
                                        const completion_bytes& done) const {
    using outcome_type = idempotent_outcome<Response>;
    if (!done.fits) {
      // The caller still gets the response the handler made; repeats get the refusal.
      return outcome_type::unrecorded(verdict::response_too_large, std::forward<Response>(response),
                                      too_large_message(done.bytes), claim.held.fence,
                                      claim.resumed);
    }
    return outcome_type::executed(std::forward<Response>(response), claim.held.fence,
                                  claim.resumed);
  }

  /// record_directly's answer when the store failed the completion: the effect happened; the
  /// caller gets its response, and is told it was not stored.
  template <class Response>
  static idempotent_outcome<Response> not_stored(const held_claim& claim, Response&& response,
                                                 const store_error& error) {
    return idempotent_outcome<Response>::unrecorded(
        verdict::executed, std::forward<Response>(response),
        std::string("the response was not stored: ") + error.what(), claim.held.fence,
        claim.resumed);
  }

 private:
  // completion::in_transaction: the handler runs inside the transaction that completes the
  // record, so its writes and the record commit together. A store failure there rolls both back
  // and answers store_unavailable or store_full; the claim stays until its lease ends (a commit
  // whose answer was lost may have gone through, and a release would undo it). The response is
  // always encoded: complete_within takes the bytes as the std::string produce returns
  // (idem/store/contract.hpp), and the caller still needs the response itself.
  template <class Response, class Target, class RunHandler>
  idempotent_outcome<Response> record_within(const held_claim& claim, const digest& print,
                                             Target& target, bool& handler_threw,
                                             RunHandler& run_handler) {
    using outcome_type = idempotent_outcome<Response>;
    using transaction_type = typename store_type::transaction;
    // One context for every call of produce: a store that rolled back and calls again (a
    // serialization failure) gets the steps of the rolled-back call from memory, so an external
    // effect a step made is not made again; write the database only outside steps.
    std::optional<Response> response;
    bool fits = true;
    std::string marker;
    auto produce = [&](transaction_type& transaction) -> std::string {
      target.writer = &transaction;
      target.failed = false;
      handler_threw = false;
      response.reset();
      response.emplace(run_handler(transaction));
      std::string bytes;
      codec<Response>::encode(*response, bytes);
      fits = stored_form(bytes);
      if (!fits) marker = bytes;
      return bytes;
    };
    bool applied = false;
    try {
      applied = store().complete_within(claim.held, completion_time(claim.claimed_at), produce);
    } catch (const store_error& error) {
      if (handler_threw) throw;
      return refused<Response>(error, "the handler's transaction did not commit: ");
    }
    if (!applied) return answer_lost<Response>(claim.held.scope, claim.held.key, print);
    if (!fits) {
      return outcome_type::unrecorded(verdict::response_too_large, std::move(*response),
                                      too_large_message(marker), claim.held.fence, claim.resumed);
    }
    return outcome_type::executed(std::move(*response), claim.held.fence, claim.resumed);
  }

  // The bytes a store keeps for `plain` (an encoded response): sealed by the response codec, or
  // the too-large marker when they pass max_response_bytes. Answers whether they fit.
  bool stored_form(std::string& plain) const {
    if constexpr (seals) {
      std::string sealed;
      options_.response_codec.seal(plain, sealed);
      plain = std::move(sealed);
    }
    if (plain.size() > options_.max_response_bytes) {
      std::string marker(too_large_marker);
      marker += std::to_string(plain.size());
      plain = std::move(marker);
      return false;
    }
    return true;
  }

  // The recovery bytes a failed resumption left in the record it still holds under `fence`,
  // opened; empty when the store cannot say.
  std::string recovery_left(std::string_view scope, std::string_view key, std::uint64_t fence) {
    try {
      std::optional<record> found = store().find(scope, key, clock().wall_now());
      if (!found || found->fence != fence || found->state != record_state::in_progress) return {};
      return opened_recovery(std::move(found->recovery));
    } catch (const std::exception&) {
      return {};
    }
  }

  std::string too_large_message(std::string_view marker) const {
    return "the response takes " + std::string(marker.substr(too_large_marker.size())) +
           " bytes to store, more than max_response_bytes (" +
           std::to_string(options_.max_response_bytes) +
           "): it was not stored; repeats of this key answer response_too_large and do not run "
           "again";
  }

  Options options_;
  std::shared_ptr<const kept_bytes> first_start_;  // first_start()
};

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_ENGINE_HPP
