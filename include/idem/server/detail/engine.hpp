// The machinery idempotent and inbox share: claim, run under the fence, record or release.
#ifndef IDEM_SERVER_DETAIL_ENGINE_HPP
#define IDEM_SERVER_DETAIL_ENGINE_HPP

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/server/codec.hpp>
#include <idem/detail/algorithm.hpp>
#include <idem/detail/lazy.hpp>
#include <idem/server/fingerprint/digest.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/outcome.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/response_codec.hpp>
#include <idem/store/contract.hpp>

namespace idem::detail {

/// How long claims are honoured and records kept, and how long a duplicate waits.
struct guard_timing {
  std::chrono::nanoseconds lease;
  std::chrono::nanoseconds retention;
  std::chrono::nanoseconds coalesce;
};

// How responses and recovery points are kept: the size a stored response may reach, and the
// response codec's seal and open (idem/server/response_codec.hpp), type-erased so that the guard's type
// does not depend on the codec. Null functions: the bytes are stored as they are.
struct guard_storage {
  std::size_t max_response_bytes = static_cast<std::size_t>(-1);
  const void* codec = nullptr;
  void (*seal)(const void* codec, std::string_view plain, std::string& out) = nullptr;
  void (*open)(const void* codec, std::string_view sealed, std::string& out) = nullptr;
};

// What a record holds in place of a response too large to store: the size it had. A handler's
// own response equal to this text would replay as too large; nothing else can be mistaken for
// it, and it is written unsealed so that a codec never has to open it.
inline constexpr char too_large_text[] = "\0idem: response too large to store\0";
inline constexpr std::string_view too_large_marker{too_large_text, sizeof too_large_text - 1};

// The storage of an owner (idempotent, inbox) that keeps `codec` for as long as its guard: the
// default codec costs no call.
template <ResponseCodec Codec>
guard_storage storage_for(const Codec& codec, std::size_t max_response_bytes) {
  guard_storage storage;
  storage.max_response_bytes = max_response_bytes;
  if constexpr (!std::is_same_v<Codec, plain_response_codec>) {
    storage.codec = &codec;
    storage.seal = &seal_with<Codec>;
    storage.open = &open_with<Codec>;
  }
  return storage;
}

inline void check_timing(const guard_timing& timing, const char* who) {
  using std::chrono::nanoseconds;
  if (timing.lease <= nanoseconds::zero()) {
    throw std::invalid_argument(std::string(who) + ": the lease must be positive");
  }
  if (timing.retention <= timing.lease) {
    throw std::invalid_argument(std::string(who) +
                                ": the retention must be longer than the lease, or a claim could "
                                "expire while its holder still runs");
  }
  if (timing.coalesce < nanoseconds::zero()) {
    throw std::invalid_argument(std::string(who) + ": the coalescing wait cannot be negative");
  }
}

// A T made later in place, from the prvalue a function returns: no default construction and
// assignment where the making must sit in a try block but the value must outlive it.
template <class T>
class made_later {
 public:
  made_later() noexcept {}  // not = default, which the union would delete: value_ stays unmade
  made_later(const made_later&) = delete;
  made_later& operator=(const made_later&) = delete;
  ~made_later() {
    if (made_) value_.~T();
  }

  template <class Make>
  T& make(Make&& make) {
    ::new (static_cast<void*>(&value_)) T(std::forward<Make>(make)());
    made_ = true;
    return value_;
  }
  T& get() noexcept { return value_; }  // once made

 private:
  union {
    T value_;
  };
  bool made_ = false;
};

template <class Store, class Clock>
class guard {
 public:
  guard(Store store, Clock clock, guard_timing timing)
      : store_(std::move(store)), clock_(std::move(clock)), timing_(timing) {}

  Store& store() noexcept { return store_; }
  void set_storage(const guard_storage& storage) noexcept { storage_ = storage; }

  std::size_t sweep() { return store_.sweep(clock_.wall_now()); }
  std::vector<record> stuck(std::size_t limit) { return store_.stuck(clock_.wall_now(), limit); }

  /// The answer to a key (or event id, `what`) that is_valid_key refuses.
  template <class Response>
  static idempotent_outcome<Response> invalid_key(const char* what, std::size_t max_length) {
    return idempotent_outcome<Response>{
        verdict::invalid_key, std::string(what) + " must be 1 to " + std::to_string(max_length) +
                                  " bytes of visible ASCII (0x21-0x7E)"};
  }
  Clock& clock() noexcept { return clock_; }
  const guard_timing& timing() const noexcept { return timing_; }

  /// Claims (scope, key) for a request with fingerprint `print` and, when the claim is this
  /// caller's, runs `run(handler_context&)` under it. `failure` decides what a throw leaves.
  template <class Response, class Run, class Failure>
  idempotent_outcome<Response> run(std::string_view scope, std::string_view key,
                                   const digest& print, Run& run, const Failure& failure) {
    return claim_then<Response>(
        scope, key, print,
        [&](std::uint64_t fence, bool resumed, std::string recovery, store_time claimed_at) {
          return run_claimed<Response>(scope, key, print, fence, resumed, std::move(recovery),
                                       claimed_at, run, failure);
        });
  }

  /// The same for a store that completes records inside a transaction (TransactionalStore):
  /// `run(handler_context&, transaction&)` runs inside the transaction that completes the
  /// record, so its writes and the record commit together. A store failure there rolls both
  /// back and answers store_unavailable or store_full; the claim stays until its lease ends
  /// (a commit whose answer was lost may have gone through, and a release would undo it).
  template <class Response, class Run, class Failure>
  idempotent_outcome<Response> run_within(std::string_view scope, std::string_view key,
                                          const digest& print, Run& run, const Failure& failure) {
    static_assert(TransactionalStore<Store>);
    return claim_then<Response>(
        scope, key, print,
        [&](std::uint64_t fence, bool resumed, std::string recovery, store_time claimed_at) {
          return run_claimed_within<Response>(scope, key, print, fence, resumed,
                                              std::move(recovery), claimed_at, run, failure);
        });
  }

  /// Runs `run` with no key and no claim, for services where the key is optional: nothing is
  /// stored, and a repeat runs again.
  template <class Response, class Run>
  static idempotent_outcome<Response> run_unguarded(std::string_view scope, Run& run) {
    handler_context context{scope, {}, 0};
    idempotent_outcome<Response> outcome{verdict::executed, "no idempotency key: not guarded"};
    outcome.response_.emplace(run(context));
    return outcome;
  }

  template <class Response>
  static idempotent_outcome<Response> refused(const store_error& error) {
    return idempotent_outcome<Response>{
        error.failure() == store_failure::full ? verdict::store_full : verdict::store_unavailable,
        error.what()};
  }

 private:
  // Claims (scope, key) and, when the claim is this caller's, answers
  // then(fence, resumed, recovery, claimed_at); otherwise answers for the record that is there.
  // claimed_at is the time the winning claim was made with.
  template <class Response, class Then>
  idempotent_outcome<Response> claim_then(std::string_view scope, std::string_view key,
                                          const digest& print, Then&& then) {
    using outcome_type = idempotent_outcome<Response>;
    store_time claimed_at{};
    // Made in place: a replay's record (its response) is moved nowhere before it is answered.
    made_later<claim_result> result;
    try {
      result.make([&] { return claim_waiting(scope, key, print, claimed_at); });
    } catch (const store_error& error) {
      return refused<Response>(error);
    }
    claim_result& claimed = result.get();
    switch (claimed.status) {
      case claim_status::full:
        return outcome_type{verdict::store_full, "the store has no room for another record"};
      case claim_status::existing:
        return answer_existing<Response>(claimed.existing, print);
      case claim_status::claimed:
      case claim_status::taken_over:
        break;
    }
    return then(claimed.fence, claimed.status == claim_status::taken_over,
                opened_recovery(std::move(claimed.existing.recovery)), claimed_at);
  }

  // One claim, or with coalescing, claims repeated with growing pauses while another attempt
  // holds a live claim, until it settles (completed, released, abandoned) or the wait is over.
  // `claimed_at` is set to the time the last claim was made with.
  claim_result claim_waiting(std::string_view scope, std::string_view key, const digest& print,
                             store_time& claimed_at) {
    claim_result claimed = claim(scope, key, print, claimed_at);
    if (timing_.coalesce <= std::chrono::nanoseconds::zero()) return claimed;
    const auto start = clock_.now();
    std::chrono::nanoseconds pause = std::chrono::milliseconds{1};
    while (claimed.status == claim_status::existing &&
           claimed.existing.state == record_state::in_progress &&
           claimed.existing.fingerprint == print) {
      const std::chrono::nanoseconds waited = clock_.now() - start;
      if (waited >= timing_.coalesce) break;
      clock_.sleep_for(detail::min(pause, timing_.coalesce - waited));
      pause = detail::min<std::chrono::nanoseconds>(2 * pause, std::chrono::milliseconds{50});
      claimed = claim(scope, key, print, claimed_at);
    }
    return claimed;
  }

  claim_result claim(std::string_view scope, std::string_view key, const digest& print,
                     store_time& claimed_at) {
    claimed_at = clock_.wall_now();
    return store_.claim(
        claim_request{scope, key, print, claimed_at, timing_.lease, timing_.retention});
  }

  // The `now` a completion is given: the clock's, unless the store says it does not read it
  // (reads_completion_time, idem/store/contract.hpp); then the claim's time, and no second clock read.
  store_time completion_time(store_time claimed_at) {
    if constexpr (reads_completion_time<Store>) {
      return clock_.wall_now();
    } else {
      return claimed_at;
    }
  }

  template <class Response>
  idempotent_outcome<Response> answer_existing(record& existing, const digest& print) const {
    using outcome_type = idempotent_outcome<Response>;
    if (existing.fingerprint != print) {
      return outcome_type{verdict::mismatch, "the key was already used with a different request"};
    }
    if (existing.state == record_state::in_progress) {
      return outcome_type{verdict::in_progress, "a request with this key is still being processed"};
    }
    if (existing.response.starts_with(too_large_marker)) {
      return outcome_type{verdict::response_too_large,
                          "the response to this key was " +
                              existing.response.substr(too_large_marker.size()) +
                              " bytes, more than the store keeps; it was not stored, and the "
                              "request is not run again"};
    }
    return replayed<Response>(existing);
  }

  // The stored response, decoded: one named outcome, returned on the only path, so that it is
  // made in the caller's place (a replay's response is moved once, into the outcome).
  template <class Response>
  idempotent_outcome<Response> replayed(record& existing) const {
    idempotent_outcome<Response> outcome{verdict::replayed};
    if (storage_.open != nullptr) {
      std::string plain;
      storage_.open(storage_.codec, existing.response, plain);
      outcome.response_.emplace(codec<Response>::decode(plain));
    } else if constexpr (codec_adopts_bytes<Response>) {
      // The snapshot is this call's own copy: the response takes its bytes over.
      outcome.response_.emplace(codec<Response>::adopt(std::move(existing.response)));
    } else {
      outcome.response_.emplace(codec<Response>::decode(existing.response));
    }
    outcome.recorded_ = true;
    return outcome;
  }

  // The bytes a store keeps for `plain` (an encoded response): sealed by the response codec, or
  // the too-large marker when they pass max_response_bytes. Answers whether they fit.
  bool stored_form(std::string& plain) const {
    std::string sealed;
    const std::string* kept = &plain;
    if (storage_.seal != nullptr) {
      storage_.seal(storage_.codec, plain, sealed);
      kept = &sealed;
    }
    if (kept->size() > storage_.max_response_bytes) {
      std::string marker(too_large_marker);
      marker += std::to_string(kept->size());
      plain = std::move(marker);
      return false;
    }
    if (kept == &sealed) plain = std::move(sealed);
    return true;
  }

  // A recovery point as the store keeps it, and back.
  std::string sealed_recovery(std::string_view plain) const {
    if (storage_.seal == nullptr) return std::string(plain);
    std::string sealed;
    storage_.seal(storage_.codec, plain, sealed);
    return sealed;
  }
  std::string opened_recovery(std::string recovery) const {
    if (storage_.open == nullptr || recovery.empty()) return recovery;
    std::string plain;
    storage_.open(storage_.codec, recovery, plain);
    return plain;
  }

  std::string too_large_message(std::string_view marker) const {
    return "the response takes " + std::string(marker.substr(too_large_marker.size())) +
           " bytes to store, more than max_response_bytes (" +
           std::to_string(storage_.max_response_bytes) +
           "): it was not stored; repeats of this key answer response_too_large and do not run "
           "again";
  }

  // Where the context records recovery points: a fenced checkpoint that also renews the lease,
  // through the store, or for a transactional handler through its transaction (committed or
  // rolled back with it). Both have checkpoint(held, recovery, lease_until).
  template <class Writer>
  struct checkpoint_target {
    guard* self;
    fenced_key held;
    Writer* writer = nullptr;
    bool store_failed = false;  // the store threw: the step's effect may not be recorded

    static bool write(void* target, std::string_view recovery) {
      auto& me = *static_cast<checkpoint_target*>(target);
      try {
        if (me.self->storage_.seal != nullptr) {
          return me.writer->checkpoint(me.held, me.self->sealed_recovery(recovery),
                                       me.self->clock_.wall_now() + me.self->timing_.lease);
        }
        return me.writer->checkpoint(me.held, recovery,
                                     me.self->clock_.wall_now() + me.self->timing_.lease);
      } catch (...) {
        me.store_failed = true;
        throw;
      }
    }
  };

  template <class Response, class Run, class Failure>
  idempotent_outcome<Response> run_claimed(std::string_view scope, std::string_view key,
                                           const digest& print, std::uint64_t fence, bool resumed,
                                           std::string recovery, store_time claimed_at, Run& run,
                                           const Failure& failure) {
    using outcome_type = idempotent_outcome<Response>;
    checkpoint_target<Store> target{this, fenced_key{scope, key, fence}, &store_};
    handler_context context{scope,
                            key,
                            fence,
                            resumed,
                            std::move(recovery),
                            recovery_sink{&target, &decltype(target)::write}};
    std::optional<Response> response;
    try {
      response.emplace(run(context));
    } catch (const lease_lost&) {
      return answer_lost<Response>(scope, key, print);
    } catch (...) {
      // A store that failed mid-handler may have left an effect unrecorded: keep the claim, so
      // that only a takeover after the lease (resuming from the recovery points) runs it again.
      if (target.store_failed) throw;
      settle_failure<Response>(target.held, context.steps_recorded(), failure);
      throw;
    }

    outcome_type outcome{verdict::executed};
    outcome.fence_ = fence;
    outcome.resumed_ = resumed;
    // The bytes the store keeps: a std::string response as it is, without a copy, unless a
    // response codec seals it or it passes max_response_bytes; anything else encoded.
    std::string encoded;
    std::string_view bytes;
    bool fits = true;
    bool viewed = false;
    if constexpr (codec_views_bytes<Response>) {
      const std::string_view own = codec<Response>::bytes_of(*response);
      if (storage_.seal == nullptr && own.size() <= storage_.max_response_bytes) {
        bytes = own;
        viewed = true;
      }
    }
    if (!viewed) {
      codec<Response>::encode(*response, encoded);
      fits = stored_form(encoded);
      bytes = encoded;
    }
    bool applied = false;
    try {
      applied = store_.complete(target.held, bytes, completion_time(claimed_at));
    } catch (const store_error& error) {
      // The effect happened; the caller gets its response, and is told it was not stored.
      outcome.response_ = std::move(response);
      outcome.message_ = std::string("the response was not stored: ") + error.what();
      return outcome;
    }
    if (!applied) return answer_lost<Response>(scope, key, print);
    outcome.response_ = std::move(response);
    if (!fits) {
      // The caller still gets the response the handler made; repeats get the refusal.
      outcome.verdict_ = verdict::response_too_large;
      outcome.message_ = too_large_message(bytes);
      return outcome;
    }
    outcome.recorded_ = true;
    return outcome;
  }

  // The handler threw (the exception in flight): the failure policy decides whether the key is
  // released or a failure response stored.
  template <class Response, class Failure>
  void settle_failure(const fenced_key& held, std::size_t steps, const Failure& failure) {
    const failure_info info{std::current_exception(), held.scope, held.key, held.fence, steps};
    try {
      std::optional<Response> stored = failure.template stored_response<Response>(info);
      if (stored) {
        std::string bytes;
        codec<Response>::encode(*stored, bytes);
        (void)stored_form(bytes);
        (void)store_.complete(held, bytes, clock_.wall_now());
      } else {
        (void)store_.release(held);
      }
    } catch (const store_error&) {
      // The handler's exception is what the caller must see. The claim stays in progress
      // until its lease ends; stuck() reports it.
    }
  }

  template <class Response, class Run, class Failure>
  idempotent_outcome<Response> run_claimed_within(std::string_view scope, std::string_view key,
                                                  const digest& print, std::uint64_t fence,
                                                  bool resumed, std::string recovery,
                                                  store_time claimed_at, Run& run,
                                                  const Failure& failure) {
    using outcome_type = idempotent_outcome<Response>;
    using transaction_type = typename Store::transaction;
    checkpoint_target<transaction_type> target{this, fenced_key{scope, key, fence}};
    // One context for every call of produce: a store that rolled back and calls again (a
    // serialization failure) gets the steps of the rolled-back call from memory, so an external
    // effect a step made is not made again; write the database only outside steps.
    handler_context context{scope,
                            key,
                            fence,
                            resumed,
                            std::move(recovery),
                            recovery_sink{&target, &decltype(target)::write}};
    std::optional<Response> response;
    bool handler_threw = false;
    bool fits = true;
    std::string marker;
    auto produce = [&](transaction_type& transaction) -> std::string {
      target.writer = &transaction;
      target.store_failed = false;
      handler_threw = false;
      response.reset();
      try {
        response.emplace(run(context, transaction));
      } catch (const lease_lost&) {
        throw;
      } catch (...) {
        handler_threw = !target.store_failed;
        throw;
      }
      std::string bytes;
      codec<Response>::encode(*response, bytes);
      fits = stored_form(bytes);
      if (!fits) marker = bytes;
      return bytes;
    };

    bool applied = false;
    try {
      applied = store_.complete_within(target.held, completion_time(claimed_at), produce);
    } catch (const lease_lost&) {
      return answer_lost<Response>(scope, key, print);
    } catch (const store_error& error) {
      if (!handler_threw) {
        outcome_type refusal = refused<Response>(error);
        refusal.message_ = std::string("the handler's transaction did not commit: ") + error.what();
        return refusal;
      }
      settle_failure<Response>(target.held, context.steps_recorded(), failure);
      throw;
    } catch (...) {
      if (handler_threw) settle_failure<Response>(target.held, context.steps_recorded(), failure);
      throw;
    }
    if (!applied) return answer_lost<Response>(scope, key, print);
    outcome_type outcome{verdict::executed};
    outcome.fence_ = fence;
    outcome.resumed_ = resumed;
    outcome.response_ = std::move(response);
    if (!fits) {
      outcome.verdict_ = verdict::response_too_large;
      outcome.message_ = too_large_message(marker);
      return outcome;
    }
    outcome.recorded_ = true;
    return outcome;
  }

  // This attempt lost its fence to a takeover: answer for the attempt that holds the key now.
  template <class Response>
  idempotent_outcome<Response> answer_lost(std::string_view scope, std::string_view key,
                                           const digest& print) {
    using outcome_type = idempotent_outcome<Response>;
    lazy_t<Response, std::optional<record>> current;  // see idem/detail/lazy.hpp
    try {
      current = store_.find(scope, key, clock_.wall_now());
    } catch (const store_error& error) {
      return refused<Response>(error);
    }
    if (current && current->state == record_state::completed) {
      return answer_existing<Response>(*current, print);
    }
    return outcome_type{verdict::in_progress,
                        "the claim was taken over after its lease expired; the request is "
                        "being processed by the attempt that took it"};
  }

  Store store_;
  Clock clock_;
  guard_timing timing_;
  guard_storage storage_{};
};

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_ENGINE_HPP
