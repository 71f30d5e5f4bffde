// What a guarded handler is given: the key it runs under, the fence it holds, keys for the
// downstream calls that hold the real side effects, and recovery points.
//
//   auto charge = [&](idem::handler_context& ctx, const idem::http_request& request) {
//     auto id = ctx.step("charge", [&] {              // runs once, even across a takeover
//       return provider.charge(amount, ctx.downstream_key("charge"));
//     });
//     ctx.step("email", [&] { mailer.send(receipt(id)); });
//     return idem::http_response{201, {}, id};
//   };
//
// A recovery point is a named step whose result is recorded (fenced, in the record) before the
// handler goes on. When a claim is taken over after its holder died, the handler runs again from
// the top, and every step already recorded returns its recorded result instead of running again:
// the handler resumes from its last recovery point. A step name must be unique within a handler.
//
// A step whose effect happened but whose recording did not (the process died in between) runs
// again after a takeover; that is why the step should pass ctx.downstream_key(name) to the
// system it calls, which then deduplicates the repeat. For a downstream without idempotency of
// its own, give the step a lookup by that reference (idem/server/lookup.hpp):
//
//     auto id = ctx.step("charge", [&] { return bank.transfer(amount,
//     ctx.downstream_key("charge")); },
//                        [&](std::string_view reference) { return bank.find_transfer(reference);
//                        });
//
// Before a step calls its function it records that it started, with its reference, in the same
// fenced write that renews the lease. After a takeover, a lookup step not yet recorded asks its
// lookup first: landed records the found result and goes on without calling; not_landed calls;
// unknown (or a lookup that throws) throws effect_unknown without calling, and the claim is kept
// for the reconciler. A lookup step whose function throws keeps the claim too (the effect may
// have landed before the answer was lost): its exception passes through, a retry after the lease
// asks the lookup. Return definite refusals (a declined card) as values, not exceptions.
//
// A step costs two fenced writes: its start, and its result. For a downstream that deduplicates
// by ctx.downstream_key(name), the second may ride on the claim's next write instead:
//
//     auto id = ctx.step("charge", [&] { return provider.charge(amount,
//     ctx.downstream_key("charge")); }, idem::with_next_write);
//
// The start is written as for any step (the fence checked, the step's start recorded for the
// reconciler); the result is kept with the recovery points in memory and written by the next
// write of them (the next step's start, renew_lease), or made moot by the completion, which
// stores the response. A takeover after a crash in between runs the step again under the same
// downstream key, and the downstream answers as it did.
#ifndef IDEM_SERVER_HANDLER_CONTEXT_HPP
#define IDEM_SERVER_HANDLER_CONTEXT_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/core/codec.hpp>
#include <idem/core/fingerprint/sha256.hpp>
#include <idem/core/key.hpp>
#include <idem/server/detail/recovery_bytes.hpp>
#include <idem/server/lookup.hpp>

namespace idem {

/// handler_context::step's last argument for a step whose result is written with the claim's
/// next write rather than on its own (see the top of this header).
struct with_next_write_t {
  explicit with_next_write_t() = default;
};
inline constexpr with_next_write_t with_next_write{};

/// Thrown by handler_context::step when the claim was taken over while the handler ran (its
/// lease expired and another attempt took the key): this attempt must stop, its work is no
/// longer its own. idempotent catches it and answers for the attempt that holds the key.
class lease_lost : public std::runtime_error {
 public:
  lease_lost() : std::runtime_error("idem: the claim was taken over after its lease expired") {}
};

namespace detail {

// Where a context records its recovery points: the engine of the idempotent or inbox that holds
// the claim. An interface, so that the handler's signature is the same whatever the policies
// are. write checks the fence and renews the lease with the recovery bytes; false: the claim
// was taken over.
class recovery_writer {
 public:
  virtual bool write(std::string_view recovery) = 0;

 protected:
  recovery_writer() = default;
  recovery_writer(const recovery_writer&) = default;
  recovery_writer& operator=(const recovery_writer&) = default;
  ~recovery_writer() = default;  // never owned through this interface
};

}  // namespace detail

/// The downstream key of step `name` of (scope, key): handler_context::downstream_key, for code
/// that has no context (a lookup, a report).
inline key_buffer downstream_key(std::string_view scope, std::string_view key,
                                 std::string_view name) {
  sha256::state hash;
  hash.update(std::string_view{"idem downstream key v1"});
  for (const std::string_view part : {scope, key, name}) {
    std::string length;
    detail::put_varint(length, part.size());
    hash.update(std::string_view{length});
    hash.update(part);
  }
  const std::string hex = hash.finish().hex();
  key_buffer out;
  std::memcpy(out.data(), hex.data(), hex.size());
  out.set_length(hex.size());
  return out;
}

class handler_context {
 public:
  /// For tests of a handler on its own: no store behind it, steps are recorded in memory only.
  handler_context(std::string_view scope, std::string_view key, std::uint64_t fence = 1)
      : scope_(scope), key_(key), fence_(fence) {}

  handler_context(std::string_view scope, std::string_view key, std::uint64_t fence, bool resumed,
                  std::string recovery, detail::recovery_writer* writer)
      : scope_(scope),
        key_(key),
        fence_(fence),
        resumed_(resumed),
        recovery_(std::move(recovery)),
        recorded_steps_(detail::count_steps(recovery_)),
        writer_(writer) {}

  handler_context(const handler_context&) = delete;
  handler_context& operator=(const handler_context&) = delete;

  std::string_view scope() const noexcept { return scope_; }
  std::string_view key() const noexcept { return key_; }
  /// The fence this attempt holds: 1 for a first claim, higher after each takeover.
  std::uint64_t fence() const noexcept { return fence_; }
  /// This attempt took over a claim whose holder stopped (its lease expired).
  bool resumed() const noexcept { return resumed_; }
  /// Recovery points recorded so far, by this attempt and the ones before it.
  std::size_t steps_recorded() const noexcept { return recorded_steps_; }

  /// How long the caller still waits, now, when the request came with a deadline
  /// (idem::caller_deadline: an HTTP deadline field, gRPC's call deadline); std::nullopt when it
  /// came with none. Give it to the handler's own downstream calls (a retrying deadline, a
  /// timeout, the deadline field of the next hop) so that they stop when the caller stopped
  /// waiting. Zero or less: the caller has given up.
  std::optional<std::chrono::nanoseconds> time_left() const {
    if (deadline_left_ == nullptr) return std::nullopt;
    return deadline_left_(deadline_clock_, deadline_);
  }

  /// Sets the deadline time_left() counts down to: `deadline`, on `clock` (the wrapper's own,
  /// which must outlive this context). The wrappers call this; a test of a handler may too.
  template <class Clock>
  void set_deadline(Clock& clock, typename Clock::time_point deadline) noexcept {
    deadline_clock_ = &clock;
    deadline_ = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch());
    deadline_left_ = [](void* on, std::chrono::nanoseconds at) -> std::chrono::nanoseconds {
      const auto now = static_cast<Clock*>(on)->now().time_since_epoch();
      return at - std::chrono::duration_cast<std::chrono::nanoseconds>(now);
    };
  }

  /// The claim wrote step `step`'s started entry with the record (idempotent_options::
  /// first_step): when that step starts before `until` on `clock` (the wrapper's own, which must
  /// outlive this context) and nothing was written before it, the claim's write counts as its
  /// start. The wrappers call this.
  template <class Clock, class TimePoint>
  void set_claimed_start(std::string_view step, Clock& clock, TimePoint until) noexcept {
    claim_started_ = step;
    claim_start_fresh_ = true;
    claim_clock_ = &clock;
    claim_start_until_ =
        std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch());
    claim_clock_now_ = [](void* on) -> std::chrono::nanoseconds {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
          static_cast<Clock*>(on)->now().time_since_epoch());
    };
  }

  /// A key for the downstream call `name`: the same for every attempt and takeover of this
  /// (scope, key), different for every name, scope and key. 64 hex digits of SHA-256 over the
  /// three, length-prefixed: collision-resistant, so no client can craft a key that lands on
  /// another's downstream key.
  key_buffer downstream_key(std::string_view name) const {
    return idem::downstream_key(scope_, key_, name);
  }

  /// Runs `fn` once for this (scope, key): returns its recorded result if an earlier attempt
  /// recorded one, else runs it and records the result (which needs idem::codec<R>) before
  /// returning it. Throws lease_lost, without running `fn`, if the claim was taken over: the
  /// fence is checked (and the lease renewed) just before `fn` runs, so a holder that paused
  /// past its lease finds out before it repeats an effect, not after. Two fenced writes a step.
  /// An exception from `fn` passes through and records nothing.
  template <class F>
  std::invoke_result_t<F&> step(std::string_view name, F&& fn) {
    return keyed_step<false>(name, fn);
  }

  /// step(name, fn) for a downstream that deduplicates by downstream_key(name): the same, but
  /// the result is not written on its own. It is kept with the recovery points and written by
  /// the claim's next write of them (the next step's start, renew_lease), or made moot by the
  /// completion: one fenced write a step (its start) instead of two. A crash after `fn` and
  /// before that write runs `fn` again after the takeover, under the same downstream key.
  template <class F>
  std::invoke_result_t<F&> step(std::string_view name, F&& fn, with_next_write_t) {
    return keyed_step<true>(name, fn);
  }

  /// step(name, fn) for a downstream without idempotency keys: `lookup(reference)` answers
  /// lookup_answer<R> for the reference downstream_key(name), which `fn` must pass to the
  /// downstream so the lookup can find its effect. After a takeover the lookup is asked before
  /// `fn` may run again (see the top of this header); it is never asked on a first attempt.
  template <class F, class Lookup>
  std::invoke_result_t<F&> step(std::string_view name, F&& fn, Lookup&& lookup) {
    using result_type = std::invoke_result_t<F&>;
    static_assert(std::is_void_v<result_type> || Encodable<result_type>,
                  "A step's result must be storable: specialise idem::codec<R> for it (see "
                  "idem/core/codec.hpp), or return void.");
    static_assert(std::is_invocable_r_v<lookup_answer<result_type>, Lookup&, std::string_view>,
                  "A step's lookup must be callable as lookup(std::string_view reference) and "
                  "return idem::lookup_answer<R>, R being the step's result type.");
    check_step_name(name);
    std::string_view recorded;
    if (find_recorded(name, recorded)) return recorded_result<result_type>(recorded);
    if (asks_lookup(name)) {
      lookup_answer<result_type> answer = ask_lookup<result_type>(name, lookup);
      if (answer.status() == landing::landed) {
        if constexpr (std::is_void_v<result_type>) {
          record_step(name, {});
          return;
        } else {
          std::string bytes;
          codec<result_type>::encode(answer.result(), bytes);
          record_step(name, bytes);
          return std::move(answer.result());
        }
      }
      if (answer.status() == landing::unknown) {
        doubt();
        throw effect_unknown(name, answer.reason());
      }
    }
    start_step(name);
    try {
      return call_and_record<result_type>(name, fn);
    } catch (const lease_lost&) {
      throw;
    } catch (...) {
      // The call may have landed before its answer was lost: only the lookup can tell.
      doubt();
      throw;
    }
  }

  /// A step with a lookup could not tell whether its effect landed (effect_unknown), or its
  /// function threw: the claim must be kept, whatever the failure policy says, so that the
  /// record stays for the lookup or the reconciler.
  bool in_doubt() const noexcept { return in_doubt_; }

  /// Renews the lease (a heartbeat for a long handler) after checking that the claim is still
  /// this attempt's; throws lease_lost if it is not.
  void renew_lease() {
    writing();
    if (writer_ != nullptr && !writer_->write(recovery_)) throw lease_lost{};
  }

 protected:
  // The parts of a step, for a context that records steps its own way (idem/asio's
  // async_handler_context waits for the store instead of blocking on it): the rules stay here.

  /// The recorded value of step `name`, if an attempt recorded one.
  bool find_recorded(std::string_view name, std::string_view& value) const {
    return detail::find_step(recovery_, name, value);
  }
  /// A step name must not begin with a zero byte: those name idem's own entries.
  static void check_step_name(std::string_view name) {
    if (detail::reserved_entry(name)) {
      throw std::invalid_argument(
          "idem::handler_context: a step name must not begin with a zero byte (those name idem's "
          "own entries in the recovery bytes)");
    }
  }
  /// Appends step `name`'s started entry, unless an attempt recorded it already; answers the
  /// size before, for take_back.
  std::size_t append_started(std::string_view name) {
    if (name == claim_started_) claim_started_ = {};  // this attempt writes its start itself
    const std::size_t before = recovery_.size();
    if (!detail::find_started(recovery_, name)) {
      detail::put_started(recovery_, name, {});
    }
    return before;
  }
  /// The recovery bytes as they stand, and where they are written.
  const std::string& recovery() const noexcept { return recovery_; }
  detail::recovery_writer* writer() const noexcept { return writer_; }
  /// Appends step (name, value) in place, so recording a step does not copy all the steps before
  /// it; answers the size before, for take_back when the store refuses or fails.
  std::size_t append_step(std::string_view name, std::string_view value) {
    const std::size_t before = recovery_.size();
    detail::put_varint(recovery_, name.size());
    recovery_.append(name);
    detail::put_varint(recovery_, value.size());
    recovery_.append(value);
    return before;
  }
  void take_back(std::size_t before) noexcept { recovery_.resize(before); }
  /// Step (name, value) kept in place for the claim's next write (with_next_write).
  void keep_step(std::string_view name, std::string_view value) {
    (void)append_step(name, value);
    count_step();
  }
  /// The appended step was written.
  void count_step() noexcept { ++recorded_steps_; }
  /// Whether a lookup step `name` not yet recorded must ask its lookup before its function may
  /// run: after a takeover always (a transactional handler's started entries roll back with its
  /// transaction), and wherever an attempt left the step's started entry.
  bool asks_lookup(std::string_view name) const {
    return resumed_ || (name != claim_started_ && detail::find_started(recovery_, name));
  }
  /// Whether step `name`'s start is the claim's (set_claimed_start): its step, asked first, in
  /// time, nothing written since. Asked once, just before a keyed step writes its start.
  bool start_is_claims(std::string_view name) noexcept {
    const bool fresh = claim_start_fresh_ && !claim_started_.empty() && name == claim_started_ &&
                       claim_clock_now_(claim_clock_) < claim_start_until_;
    claim_start_fresh_ = false;
    return fresh;
  }
  /// A write is about to be made: the claim's is no longer the last.
  void writing() noexcept { claim_start_fresh_ = false; }
  /// A lookup step cannot tell whether its effect landed: the claim must be kept (in_doubt).
  void doubt() noexcept { in_doubt_ = true; }
  /// A lookup's answer for step `name`'s reference, unknown for a lookup that throws.
  template <class R, class Lookup>
  lookup_answer<R> ask_lookup(std::string_view name, Lookup& lookup) const {
    const key_buffer reference = downstream_key(name);
    try {
      return std::invoke(lookup, reference.view());
    } catch (const std::exception& error) {
      return lookup_answer<R>::unknown(std::string("the lookup threw: ") + error.what());
    } catch (...) {
      return lookup_answer<R>::unknown("the lookup threw");
    }
  }

 private:
  template <class R>
  static R recorded_result(std::string_view recorded) {
    if constexpr (!std::is_void_v<R>) return codec<R>::decode(recorded);
  }

  // step(name, fn), its result recorded at once, or with `Keeps` (with_next_write) kept for the
  // claim's next write.
  template <bool Keeps, class F>
  std::invoke_result_t<F&> keyed_step(std::string_view name, F& fn) {
    using result_type = std::invoke_result_t<F&>;
    static_assert(std::is_void_v<result_type> || Encodable<result_type>,
                  "A step's result must be storable: specialise idem::codec<R> for it (see "
                  "idem/core/codec.hpp), or return void.");
    check_step_name(name);
    std::string_view recorded;
    if (find_recorded(name, recorded)) return recorded_result<result_type>(recorded);
    if (!start_is_claims(name)) start_step(name);
    return call_and_record<result_type, Keeps>(name, fn);
  }

  // The fenced write before a step's function runs: the started entry, and a renewed lease.
  void start_step(std::string_view name) { write_appended(append_started(name)); }

  template <class R, bool Keeps = false, class F>
  R call_and_record(std::string_view name, F& fn) {
    if constexpr (std::is_void_v<R>) {
      fn();
      record_step<Keeps>(name, {});
    } else {
      R result = fn();
      std::string bytes;
      codec<R>::encode(result, bytes);
      record_step<Keeps>(name, bytes);
      return result;
    }
  }

  template <bool Keeps = false>
  void record_step(std::string_view name, std::string_view value) {
    if constexpr (Keeps) {
      keep_step(name, value);
    } else {
      write_appended(append_step(name, value));
      count_step();
    }
  }

  // Writes the recovery bytes as they stand (fenced); what was appended since `before` is taken
  // back when the store fails (the exception passes on) or the fence was lost (lease_lost).
  void write_appended(std::size_t before) {
    writing();
    bool applied = true;
    try {
      applied = writer_ == nullptr || writer_->write(recovery_);
    } catch (...) {
      take_back(before);
      throw;
    }
    if (!applied) {
      take_back(before);
      throw lease_lost{};
    }
  }

  std::string_view scope_;
  std::string_view key_;
  std::uint64_t fence_;
  bool resumed_ = false;
  std::string recovery_;
  std::size_t recorded_steps_ = 0;
  detail::recovery_writer* writer_ = nullptr;
  bool in_doubt_ = false;
  // The deadline, on the wrapper's clock, reached through a function that knows its type (the
  // context is the same type whatever the policies): none while deadline_left_ is null.
  void* deadline_clock_ = nullptr;
  std::chrono::nanoseconds deadline_{};
  std::chrono::nanoseconds (*deadline_left_)(void* clock, std::chrono::nanoseconds at) = nullptr;
  // set_claimed_start: the step whose started entry the claim wrote (until this attempt writes
  // one itself), whether the claim's write may still count as its start, and until when.
  std::string_view claim_started_{};
  bool claim_start_fresh_ = false;
  void* claim_clock_ = nullptr;
  std::chrono::nanoseconds claim_start_until_{};
  std::chrono::nanoseconds (*claim_clock_now_)(void* clock) = nullptr;
};

}  // namespace idem

#endif  // IDEM_SERVER_HANDLER_CONTEXT_HPP
