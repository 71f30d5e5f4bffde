// What an asynchronous guarded handler is given: everything a handler_context gives, and
// recovery points whose work and whose recording are awaited instead of blocking the thread.
//
//   auto charge = [&](idem::async_handler_context& ctx,
//                     const idem::http_request& request) -> asio::awaitable<idem::http_response> {
//     auto id = co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
//       co_return co_await provider.async_charge(amount, ctx.downstream_key("charge"));
//     });
//     co_return idem::http_response{201, {}, id};
//   };
//
// Why a class of its own, and why derived from handler_context: handler_context is core, and the
// core depends on the standard library alone (idem/idem.hpp, the single header), so it cannot
// name asio::awaitable. Deriving keeps one set of rules for a recovery point: async_step uses
// the base's parts (find_recorded, append_step, take_back), and a handler may still call the
// blocking step(), scope(), key(), fence() or downstream_key() on the same context. A blocking
// step() writes its recovery point on the thread it runs on: with a store that blocks (SQLite,
// PostgreSQL, Redis) prefer async_step, whose store calls run on the store's executor.
//
// async_step(name, fn) runs `fn` (returning asio::awaitable<R>) once for this (scope, key), with
// step()'s semantics: a step an attempt recorded returns its recorded result without running fn;
// otherwise the fence is checked and the lease renewed, fn is awaited, and its result recorded
// (fenced) before the step returns it. It throws lease_lost, without running fn, once the claim
// was taken over, including when the heartbeat found that out while the handler was suspended.
//
// async_step(name, fn, lookup) is step(name, fn, lookup) (idem/server/handler_context.hpp) for a
// downstream without idempotency keys: never asked on a first attempt; after a takeover, a step
// not yet recorded asks `lookup(reference)` before fn may run: landed records the found result,
// not_landed runs fn, unknown (or a lookup that throws) throws effect_unknown without running fn
// and marks the context in_doubt(), so the driver keeps the claim. The lookup answers
// lookup_answer<R>, or asio::awaitable<lookup_answer<R>> when it waits on the downstream itself.
#ifndef IDEM_SERVER_ASYNC_HANDLER_CONTEXT_HPP
#define IDEM_SERVER_ASYNC_HANDLER_CONTEXT_HPP

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/core/codec.hpp>
#include <idem/core/key.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/lookup.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem {

namespace detail {

// Where an asynchronous context writes its recovery points: the recovery_writer that a blocking
// step() uses, the same write awaited where the store's calls run, and whether a heartbeat found
// the claim taken over.
class async_recovery_writer : public recovery_writer {
 public:
  virtual asio::awaitable<bool> async_write(std::string_view recovery) = 0;
  virtual bool lost() const noexcept = 0;

 protected:
  async_recovery_writer() = default;
  async_recovery_writer(const async_recovery_writer&) = default;
  async_recovery_writer& operator=(const async_recovery_writer&) = default;
  ~async_recovery_writer() = default;  // never owned through this interface
};

// A lookup an async_step can ask for its step of result R: one answering lookup_answer<R> at
// once, or one whose answer is awaited.
template <class Lookup, class R>
concept async_step_lookup = std::is_invocable_r_v<lookup_answer<R>, Lookup&, std::string_view> ||
                            std::is_same_v<std::invoke_result_t<Lookup&, std::string_view>,
                                           asio::awaitable<lookup_answer<R>>>;

}  // namespace detail

class async_handler_context;

namespace detail {
// The wrapper's heartbeat found the claim taken over: the context's lease_lost_slot() is
// emitted (terminal), on the call's executor.
void signal_lease_lost(async_handler_context& context);
}  // namespace detail

class async_handler_context : public handler_context {
 public:
  /// For tests of a handler on its own: no store behind it, steps are recorded in memory only.
  async_handler_context(std::string_view scope, std::string_view key, std::uint64_t fence = 1)
      : handler_context(scope, key, fence) {}

  async_handler_context(std::string_view scope, std::string_view key, std::uint64_t fence,
                        bool resumed, std::string recovery, detail::async_recovery_writer* writer)
      : handler_context(scope, key, fence, resumed, std::move(recovery), writer),
        async_writer_(writer) {}

  /// The recovery point `name` for `fn`, a function returning asio::awaitable<R> (R void, or
  /// storable through idem::codec<R>). `name` must stay valid until the step completes, as it
  /// does in `co_await ctx.async_step("charge", ...)`.
  template <class F>
  auto async_step(std::string_view name, F fn)
      -> asio::awaitable<typename detail::awaited<std::invoke_result_t<F&>>::type> {
    no_lookup none;
    if constexpr (std::is_void_v<typename detail::awaited<std::invoke_result_t<F&>>::type>) {
      co_await async_step_asking(name, fn, none);
    } else {
      co_return co_await async_step_asking(name, fn, none);
    }
  }

  /// async_step(name, fn) for a downstream that deduplicates by downstream_key(name), its result
  /// written with the claim's next write rather than on its own: step(name, fn, with_next_write)
  /// (idem/server/handler_context.hpp). The wrapper's heartbeat renews with the recovery points
  /// last written, so the result is written by the next step's start or async_renew_lease, or
  /// made moot by the completion.
  template <class F>
  auto async_step(std::string_view name, F fn, with_next_write_t kept)
      -> asio::awaitable<typename detail::awaited<std::invoke_result_t<F&>>::type> {
    if constexpr (std::is_void_v<typename detail::awaited<std::invoke_result_t<F&>>::type>) {
      co_await async_step_asking(name, fn, kept);
    } else {
      co_return co_await async_step_asking(name, fn, kept);
    }
  }

  /// async_step(name, fn) for a downstream without idempotency keys (see the top of this header):
  /// `lookup(reference)` answers lookup_answer<R>, or asio::awaitable<lookup_answer<R>>, for the
  /// reference downstream_key(name), which `fn` must pass to the downstream so that the lookup
  /// can find its effect. Asked after a takeover, before `fn` may run again; never on a first
  /// attempt. `name`, and what `fn` and `lookup` refer to, stay valid until the step completes.
  template <class F, class Lookup>
  auto async_step(std::string_view name, F fn, Lookup lookup)
      -> asio::awaitable<typename detail::awaited<std::invoke_result_t<F&>>::type> {
    static_assert(
        detail::async_step_lookup<Lookup, typename detail::awaited<std::invoke_result_t<F&>>::type>,
        "An async_step's lookup must be callable as lookup(std::string_view reference) and "
        "return idem::lookup_answer<R> or asio::awaitable<idem::lookup_answer<R>>, R being the "
        "step's result type.");
    if constexpr (std::is_void_v<typename detail::awaited<std::invoke_result_t<F&>>::type>) {
      co_await async_step_asking(name, fn, lookup);
    } else {
      co_return co_await async_step_asking(name, fn, lookup);
    }
  }

  /// Emitted (asio::cancellation_type::terminal, on the call's executor) when the wrapper's
  /// heartbeat finds the claim taken over while the handler runs. The handler runs in the call's
  /// own coroutine, so its operations hear the caller's cancellation, not this: bind the slot
  /// to a downstream operation that should end when the claim is lost,
  ///   co_await timer.async_wait(asio::bind_cancellation_slot(ctx.lease_lost_slot(),
  ///                                                          asio::use_awaitable));
  /// (one operation at a time, as any slot), or set options.isolate_handler, which runs the
  /// handler on a coroutine of its own that the heartbeat cancels whatever it awaits. Either
  /// way its next async_step throws lease_lost, and nothing it answers is recorded.
  asio::cancellation_slot lease_lost_slot() noexcept { return lease_lost_.slot(); }

  /// Whether the claim was found taken over (by a heartbeat, or a step's fenced write).
  bool lease_is_lost() const noexcept { return async_writer_ != nullptr && async_writer_->lost(); }

  /// Renews the lease after checking that the claim is still this attempt's; throws lease_lost
  /// if it is not. The driver's heartbeat does this by itself while the handler runs.
  asio::awaitable<void> async_renew_lease() {
    writing();
    if (async_writer_ == nullptr) co_return;
    // Not `lost() || !co_await ...`: GCC 12 miscompiles a co_await inside a condition.
    bool kept = !async_writer_->lost();
    if (kept) kept = co_await async_writer_->async_write(recovery());
    if (!kept) throw lease_lost{};
  }

 private:
  struct no_lookup {};  // async_step(name, fn): nothing to ask

  // Both async_steps: the recorded result when there is one; else, with a lookup and after a
  // takeover that left the step started, the lookup's answer first; else fn, awaited and
  // recorded. With a lookup, fn throwing leaves the context in doubt (the call may have landed).
  template <class F, class Lookup>
  auto async_step_asking(std::string_view name, F& fn, Lookup& lookup)
      -> asio::awaitable<typename detail::awaited<std::invoke_result_t<F&>>::type> {
    static_assert(detail::is_awaitable<std::invoke_result_t<F&>>,
                  "async_step's function must return asio::awaitable<R>; for a function that "
                  "returns R itself, use step().");
    using result_type = typename detail::awaited<std::invoke_result_t<F&>>::type;
    static_assert(std::is_void_v<result_type> || Encodable<result_type>,
                  "A step's result must be storable: specialise idem::codec<R> for it (see "
                  "idem/core/codec.hpp), or return void.");
    // with_next_write: no lookup, and the result kept for the claim's next write.
    constexpr bool keeps = std::is_same_v<Lookup, with_next_write_t>;
    constexpr bool asking = !std::is_same_v<Lookup, no_lookup> && !keeps;
    check_step_name(name);
    std::string_view recorded;
    if (find_recorded(name, recorded)) {
      if constexpr (std::is_void_v<result_type>) {
        co_return;
      } else {
        co_return codec<result_type>::decode(recorded);
      }
    }
    if constexpr (asking) {
      if (asks_lookup(name)) {
        lookup_answer<result_type> answer = co_await async_ask_lookup<result_type>(name, lookup);
        if (answer.status() == landing::landed) {
          if constexpr (std::is_void_v<result_type>) {
            co_await async_record(name, {});
            co_return;
          } else {
            std::string bytes;
            codec<result_type>::encode(answer.result(), bytes);
            co_await async_record(name, bytes);
            co_return std::move(answer.result());
          }
        }
        if (answer.status() == landing::unknown) {
          doubt();
          throw effect_unknown(name, answer.reason());
        }
      }
    }
    // A keyed step's start may be the claim's (set_claimed_start); a lookup step writes its own.
    bool claims = false;
    if constexpr (!asking) claims = start_is_claims(name);
    if (!claims) co_await async_start(name);
    try {
      if constexpr (std::is_void_v<result_type>) {
        co_await async_call_and_record<result_type, keeps>(name, fn);
      } else {
        co_return co_await async_call_and_record<result_type, keeps>(name, fn);
      }
    } catch (const lease_lost&) {
      throw;  // the fence was lost before fn ran, or after it ran and before its recording
    } catch (...) {
      // The call may have landed before its answer was lost: only a lookup can tell.
      if constexpr (asking) doubt();
      throw;
    }
  }

  // fn awaited and its result recorded (fenced), or with `Keeps` kept for the claim's next write.
  template <class R, bool Keeps, class F>
  asio::awaitable<R> async_call_and_record(std::string_view name, F& fn) {
    if constexpr (std::is_void_v<R>) {
      co_await std::invoke(fn);
      if constexpr (Keeps) {
        keep_step(name, {});
      } else {
        co_await async_record(name, {});
      }
    } else {
      R result = co_await std::invoke(fn);
      std::string bytes;
      codec<R>::encode(result, bytes);
      if constexpr (Keeps) {
        keep_step(name, bytes);
      } else {
        co_await async_record(name, bytes);
      }
      co_return result;
    }
  }

  // A lookup's answer for step `name`'s reference, awaited when the lookup answers an
  // awaitable; unknown for a lookup that throws.
  template <class R, class Lookup>
  asio::awaitable<lookup_answer<R>> async_ask_lookup(std::string_view name, Lookup& lookup) {
    if constexpr (std::is_invocable_r_v<lookup_answer<R>, Lookup&, std::string_view>) {
      co_return ask_lookup<R>(name, lookup);
    } else {
      const key_buffer reference = downstream_key(name);
      std::optional<lookup_answer<R>> answer;
      try {
        answer.emplace(co_await std::invoke(lookup, reference.view()));
      } catch (const std::exception& error) {
        answer.emplace(lookup_answer<R>::unknown(std::string("the lookup threw: ") + error.what()));
      } catch (...) {
        answer.emplace(lookup_answer<R>::unknown("the lookup threw"));
      }
      co_return std::move(*answer);
    }
  }

  // The fenced write before a step's function runs: its started entry, and a renewed lease.
  asio::awaitable<void> async_start(std::string_view name) {
    co_await async_write_appended(append_started(name));
  }

  asio::awaitable<void> async_record(std::string_view name, std::string_view value) {
    co_await async_write_appended(append_step(name, value));
    count_step();
  }

  // handler_context::write_appended's rules, the write awaited where the store's calls run.
  asio::awaitable<void> async_write_appended(std::size_t before) {
    writing();
    bool applied = true;
    try {
      if (async_writer_ != nullptr) {
        applied = !async_writer_->lost();
        if (applied) applied = co_await async_writer_->async_write(recovery());
      }
    } catch (...) {
      take_back(before);
      throw;
    }
    if (!applied) {
      take_back(before);
      throw lease_lost{};
    }
  }

  friend void detail::signal_lease_lost(async_handler_context& context);

  detail::async_recovery_writer* async_writer_ = nullptr;
  asio::cancellation_signal lease_lost_;
};

inline void detail::signal_lease_lost(async_handler_context& context) {
  context.lease_lost_.emit(asio::cancellation_type::terminal);
}

}  // namespace idem

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_ASYNC_HANDLER_CONTEXT_HPP
