// What idem::stream_consumer tells its observer: one event for each thing that happens to a
// stream entry (delivered, claimed from another consumer, processed, a duplicate suppressed,
// failed, deferred, dead-lettered), and the observers idem ships for it.
//
// The default, no_stream_observer, has an empty inline member: the calls vanish, so a consumer
// that watches nothing pays nothing. counting_stream_observer keeps totals in atomics (copies
// share them, so a test or a metrics endpoint keeps one copy and the consumer the other);
// callback_stream_observer forwards to a user function. An event's views live as long as the
// call. Standard library only.
#ifndef IDEM_REDIS_STREAMS_CONSUMER_OBSERVER_HPP
#define IDEM_REDIS_STREAMS_CONSUMER_OBSERVER_HPP

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

namespace idem {

/// What happened to one stream entry.
enum class stream_event_kind : std::uint8_t {
  /// Read (XREADGROUP) or claimed (XCLAIM) by this consumer, before it is handled: every
  /// delivery, first or repeated.
  delivered,
  /// Claimed from another consumer whose entry stayed pending past claim_idle (it died or
  /// stalled); `previous_owner` names it. Comes after `delivered` for the same entry.
  claimed,
  /// The handler ran and the inbox recorded it. Reported before the XACK that follows it.
  processed,
  /// The inbox had already recorded this message id: the handler did not run; acknowledged.
  duplicate,
  /// The handler threw (`reason` is its what()): not acknowledged, delivered again later.
  failed,
  /// Another consumer is handling the same message id right now (the inbox said in_progress):
  /// not acknowledged, delivered again later, and not a failure.
  deferred,
  /// Moved to the dead-letter stream with `reason`, and acknowledged.
  dead_lettered,
};

/// One event. `entry_id` is the Redis stream entry id ("1700000000000-0"); `message_id` the
/// outbox message id, empty when the entry could not be read (malformed) or before it was.
struct stream_event {
  stream_event_kind kind = stream_event_kind::delivered;
  std::string_view stream{};
  std::string_view entry_id{};
  std::string_view message_id{};
  /// How many times Redis has delivered the entry, this delivery included.
  std::uint64_t deliveries = 0;
  /// Why, for failed, deferred and dead_lettered; empty otherwise.
  std::string_view reason{};
  /// The consumer it was claimed from, for claimed; empty otherwise.
  std::string_view previous_owner{};
};

/// What a `stream_observer` policy must provide.
template <class O>
concept StreamObserver = std::copy_constructible<O> &&
    requires(O& observer, const stream_event& event) {
  observer.on_stream_event(event);
};

/// Watches nothing, costs nothing.
struct no_stream_observer {
  constexpr void on_stream_event(const stream_event& /*event*/) const noexcept {}
};

/// Totals per kind, shared by copies, safe from many threads.
class counting_stream_observer {
 public:
  counting_stream_observer() : counts_(std::make_shared<counters>()) {}

  void on_stream_event(const stream_event& event) noexcept {
    counts_->by_kind[static_cast<std::size_t>(event.kind)].fetch_add(1, std::memory_order_relaxed);
  }

  long long delivered() const noexcept { return get(stream_event_kind::delivered); }
  long long claimed() const noexcept { return get(stream_event_kind::claimed); }
  long long processed() const noexcept { return get(stream_event_kind::processed); }
  long long duplicates() const noexcept { return get(stream_event_kind::duplicate); }
  long long failed() const noexcept { return get(stream_event_kind::failed); }
  long long deferred() const noexcept { return get(stream_event_kind::deferred); }
  long long dead_lettered() const noexcept { return get(stream_event_kind::dead_lettered); }

 private:
  struct counters {
    std::atomic<long long> by_kind[7]{};
  };
  long long get(stream_event_kind kind) const noexcept {
    return counts_->by_kind[static_cast<std::size_t>(kind)].load(std::memory_order_relaxed);
  }
  std::shared_ptr<counters> counts_;
};

/// Forwards each event to a user function; an unset function is skipped.
struct callback_stream_observer {
  std::function<void(const stream_event&)> on_event;

  void on_stream_event(const stream_event& event) const {
    if (on_event) on_event(event);
  }
};

}  // namespace idem

#endif  // IDEM_REDIS_STREAMS_CONSUMER_OBSERVER_HPP
