// idem::stream_consumer<Handler, Policies>: reads an outbox topic's Redis stream as one consumer
// of a consumer group and runs `handler` once per message, however often Redis delivers it.
//
//   auto ship = [](const idem::outbox_entry& entry, idem::sqlite_store::transaction& txn) {
//     txn.exec("INSERT INTO shipments (order_id) VALUES (?)", entry.message.partition_key);
//   };
//   idem::stream_consumer<decltype(ship), my_policies>::options options;
//   options.topic = "orders";  options.group = "shipping";  options.consumer = "shipping-1";
//   options.inbox.store = store;
//   idem::stream_consumer<decltype(ship), my_policies> consumer(ship, std::move(options));
//   consumer.run(stop_token);   // or consumer.poll_once() from a loop of your own
//
// Redis delivers an entry to one consumer of the group and keeps it pending until XACK; a
// consumer that dies holding entries leaves them pending, another claims them after
// `claim_idle`, and so an entry is delivered at least once, sometimes more. The consumer makes
// the effect happen once: it runs the handler through idem::inbox keyed by the message id, and
// acknowledges an entry only after the inbox recorded it; a delivery of a recorded id is
// acknowledged without running anything (a duplicate suppressed). With a TransactionalStore
// (SQLite, PostgreSQL) a handler that takes the store's transaction writes its effect in the
// transaction that records the message, so a crash anywhere leaves both or neither. An entry
// the handler fails keeps being delivered (after claim_idle) until it has been delivered
// max_deliveries times, then goes to a dead-letter stream with the reason; an entry that is not
// an outbox message (idem/redis_streams/entry.hpp) goes there at once.
//
// Threads: one consumer object is used by one thread at a time; run several objects (threads,
// processes) with different consumer names in one group to share a stream.
// docs/outbox_consumer.md has the whole story and every option.
#ifndef IDEM_REDIS_STREAMS_CONSUMER_HPP
#define IDEM_REDIS_STREAMS_CONSUMER_HPP

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <idem/outbox/sink.hpp>
#include <idem/policies.hpp>
#include <idem/redis_streams/consumer_observer.hpp>
#include <idem/redis_streams/detail/consumer_replies.hpp>
#include <idem/redis_streams/entry.hpp>
#include <idem/redis_streams/server.hpp>
#include <idem/redis_streams/stream_error.hpp>
#include <idem/server/inbox.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/connection.hpp>

namespace idem {

/// default_policies and the consumer's own: what it tells its observer (none by default).
struct stream_consumer_policies : default_policies {
  using stream_observer = no_stream_observer;
};

/// What one poll did: how many entries it met of each kind. A claimed entry is also counted
/// delivered; an entry the handler failed on its last allowed delivery is counted failed and
/// dead_lettered.
struct stream_poll {
  std::size_t delivered = 0;
  std::size_t claimed = 0;
  std::size_t processed = 0;
  std::size_t duplicates = 0;
  std::size_t failed = 0;
  std::size_t deferred = 0;
  std::size_t dead_lettered = 0;

  friend bool operator==(const stream_poll&, const stream_poll&) = default;
};

namespace redis_streams::detail {

template <class P>
concept names_stream_observer = requires {
  typename P::stream_observer;
};

template <class P>
constexpr bool check_consumer_policies() {
  static_assert(names_stream_observer<P>,
                "Policies must name a stream_observer: inherit from "
                "idem::stream_consumer_policies rather than idem::default_policies.");
  if constexpr (names_stream_observer<P>) {
    static_assert(StreamObserver<typename P::stream_observer>,
                  "Policies::stream_observer must be copyable and provide "
                  "on_stream_event(const idem::stream_event&) (see "
                  "idem/redis_streams/consumer_observer.hpp).");
  }
  return true;
}

template <class H, class Store>
concept transactional_stream_handler = TransactionalStore<Store> &&
    std::invocable<H&, const outbox_entry&, typename Store::transaction&>;

template <class H, class Store>
concept stream_handler =
    transactional_stream_handler<H, Store> || std::invocable<H&, const outbox_entry&>;

template <class H, class Store>
constexpr bool check_stream_handler() {
  static_assert(stream_handler<H, Store>,
                "Handler must be callable with (const idem::outbox_entry&), or, with a "
                "TransactionalStore (SQLite, PostgreSQL), with (const idem::outbox_entry&, "
                "Store::transaction&) to write its effect in the transaction that records the "
                "message.");
  return true;
}

}  // namespace redis_streams::detail

template <class Handler, class Policies = stream_consumer_policies>
class stream_consumer {
  static_assert(redis_streams::detail::check_consumer_policies<Policies>());
  static_assert(redis_streams::detail::check_stream_handler<Handler, typename Policies::store>());

 public:
  using inbox_type = idem::inbox<Policies>;
  using store_type = typename Policies::store;
  using observer_type = typename Policies::stream_observer;

  /// Everything a consumer is configured with; docs/outbox_consumer.md has the table.
  struct options {
    /// Where Redis listens, how to log in, the timeouts (command_timeout longer than `block`).
    redis_streams::server server{};

    /// The stream is stream_prefix + topic (idem/redis_streams/entry.hpp), as the sink names it.
    std::string stream_prefix{redis_streams::default_stream_prefix};
    std::string topic{};
    /// The consumer group, and this consumer's name in it: unique among the group's live
    /// consumers (a host and process id, a pod name).
    std::string group{};
    std::string consumer{};
    /// Entries read (and claimed) per poll.
    std::size_t batch = 100;
    /// How long run() waits in XREADGROUP BLOCK for new entries; poll_once() never waits.
    std::chrono::milliseconds block{1000};
    /// An entry pending this long (its consumer died, or its handler failed) is claimed and
    /// delivered again. At least the inbox's lease, so that a message whose consumer died
    /// mid-handler is free to take over when its entry is claimed.
    std::chrono::milliseconds claim_idle{60000};
    /// An entry is delivered at most this many times: a handler failing on the last of them,
    /// or a delivery past it (every consumer that had it died), sends it to the dead letters.
    std::uint32_t max_deliveries = 5;
    /// Where dead letters go; empty: the stream's name + ":dead".
    std::string dead_letter_stream{};
    /// The inbox scope the message ids are recorded under; empty: the group's name.
    std::string scope{};
    /// Create the group (and the stream) when missing, reading from `group_start`: "0", the
    /// stream's first entry, so that messages the relay sent before the first consumer ever
    /// started are consumed too ("$" would skip them).
    bool create_group = true;
    std::string group_start = "0";

    /// The inbox's parts: its store (where message ids are recorded, with the effect for a
    /// TransactionalStore), clock, lease, retention.
    typename inbox_type::options inbox{};
    observer_type observer{};
  };

  /// Checks the options (std::invalid_argument says which is wrong) and, with create_group,
  /// creates the group: store_error(unavailable) when Redis cannot be reached, stream_error
  /// when it refuses.
  stream_consumer(Handler handler, options given)
      : options_(checked(std::move(given))),
        stream_(redis_streams::stream_name(options_.stream_prefix, options_.topic)),
        dead_letter_stream_(options_.dead_letter_stream.empty() ? stream_ + ":dead"
                                                                : options_.dead_letter_stream),
        scope_(options_.scope.empty() ? options_.group : options_.scope),
        claim_idle_ms_(std::to_string(options_.claim_idle.count())),
        batch_text_(std::to_string(options_.batch)),
        max_deliveries_text_(std::to_string(options_.max_deliveries)),
        handler_(std::move(handler)),
        inbox_(options_.inbox),
        observer_(options_.observer),
        // One thread uses a consumer at a time: one connection is all it ever holds.
        client_(std::make_unique<idem::detail::redis_client>(
            redis_streams::detail::client_settings(options_.server, 1, "idem::stream_consumer"))) {
    if (dead_letter_stream_ == stream_) {
      throw std::invalid_argument(
          "idem::stream_consumer: the dead-letter stream is the stream it reads");
    }
    if (options_.create_group) create_group();
  }

  /// One pass without waiting: claims entries pending past claim_idle (another consumer's or
  /// its own), reads new ones, handles each, then acknowledges in one XACK what the inbox
  /// recorded. Throws store_error when Redis or the inbox's store cannot answer (what this poll
  /// recorded is acknowledged first, where Redis still answers), stream_error when Redis
  /// refuses a command. A handler's exception is not thrown: the entry counts as failed.
  stream_poll poll_once() { return poll(std::chrono::milliseconds::zero()); }

  /// Polls until `stop` is requested, waiting up to `block` for new entries each time, so a
  /// stop takes effect within `block`. Exceptions of poll_once pass through and end the run.
  void run(const std::stop_token& stop) {
    while (!stop.stop_requested())
      poll(options_.block);
  }

  /// The stream read, and where dead letters go.
  const std::string& stream() const noexcept { return stream_; }
  const std::string& dead_letter_stream() const noexcept { return dead_letter_stream_; }
  inbox_type& inbox() noexcept { return inbox_; }
  observer_type& observer() noexcept { return observer_; }

 private:
  using entry_type = redis_streams::detail::stream_entry;
  using words = std::vector<std::string_view>;

  static options checked(options given) {
    const auto refuse = [](const std::string& why) {
      throw std::invalid_argument("idem::stream_consumer: " + why);
    };
    if (given.topic.empty()) refuse("options::topic is empty: name the topic whose stream to read");
    if (given.group.empty()) refuse("options::group is empty: name the consumer group");
    if (given.consumer.empty()) {
      refuse("options::consumer is empty: give each consumer of the group a name of its own");
    }
    if (given.group_start.empty()) refuse("options::group_start is empty (\"0\" or \"$\")");
    if (given.batch == 0) refuse("options::batch must be at least 1");
    if (given.max_deliveries == 0) refuse("options::max_deliveries must be at least 1");
    if (given.block < std::chrono::milliseconds::zero()) refuse("options::block is negative");
    if (given.block >= given.server.command_timeout) {
      refuse("options::block (" + std::to_string(given.block.count()) +
             " ms) must be shorter than command_timeout (" +
             std::to_string(given.server.command_timeout.count()) +
             " ms), or every wait for new entries would time out");
    }
    if (given.claim_idle <= std::chrono::milliseconds::zero()) {
      refuse("options::claim_idle must be positive");
    }
    if (given.claim_idle < given.inbox.lease) {
      refuse("options::claim_idle (" + std::to_string(given.claim_idle.count()) +
             " ms) is shorter than the inbox's lease (" +
             std::to_string(
                 std::chrono::duration_cast<std::chrono::milliseconds>(given.inbox.lease).count()) +
             " ms): an entry claimed from a consumer that died mid-handler would find its "
             "message still in progress, and be delivered again and again until it is "
             "dead-lettered. Make claim_idle at least the lease");
    }
    return given;
  }

  idem::detail::redis_reply ask(words command, const char* name) {
    const std::vector<words> commands{std::move(command)};
    auto replies = client_->plain(commands, name);
    return std::move(replies.front());
  }

  void create_group() {
    const auto reply =
        ask({"XGROUP", "CREATE", stream_, options_.group, options_.group_start, "MKSTREAM"},
            "XGROUP CREATE");
    // BUSYGROUP: another consumer of the group made it first, which is what was wanted.
    if (reply->type == REDIS_REPLY_ERROR &&
        idem::detail::reply_text(reply.get()).starts_with("BUSYGROUP")) {
      return;
    }
    if (reply->type != REDIS_REPLY_STATUS) {
      redis_streams::detail::unexpected_reply("XGROUP CREATE", reply.get());
    }
  }

  // One delivery of a poll: the entry, its delivery count, and the consumer it was claimed
  // from (empty when new, or this consumer's own).
  struct delivery {
    entry_type entry;
    std::uint64_t deliveries = 0;
    std::string previous_owner;
  };

  // What a poll tells Redis at its end, in one pipeline: the entries the inbox recorded (XACK),
  // and the deliveries that must not count against max_deliveries (XCLAIM ... RETRYCOUNT n-1
  // JUSTID to itself): an entry deferred because another consumer holds its message, and every
  // entry a failing inbox store kept from a verdict. An outage then dead-letters nothing.
  struct settlement {
    std::vector<std::string> acknowledged;
    std::vector<std::pair<std::string, std::uint64_t>> given_back;
  };

  stream_poll poll(std::chrono::milliseconds block) {
    stream_poll counts;
    settlement settled;
    try {
      handle_all(claim_stale(), counts, settled);
      handle_all(read_new(counts.delivered == 0 ? block : std::chrono::milliseconds::zero()),
                 counts, settled);
    } catch (...) {
      // What was recorded is acknowledged now, so not delivered again; if Redis is gone this
      // fails too, and those entries come back and are suppressed as duplicates.
      try {
        settle(settled);
      } catch (...) {  // NOLINT(bugprone-empty-catch): the first failure is the one to report
      }
      throw;
    }
    settle(settled);
    return counts;
  }

  void handle_all(const std::vector<delivery>& deliveries, stream_poll& counts,
                  settlement& settled) {
    for (std::size_t i = 0; i < deliveries.size(); ++i) {
      try {
        handle(deliveries[i], counts, settled);
      } catch (...) {
        // The poll stops here: this delivery and those after it reached no verdict.
        for (std::size_t rest = i; rest < deliveries.size(); ++rest) {
          settled.given_back.emplace_back(deliveries[rest].entry.id,
                                          deliveries[rest].deliveries - 1);
        }
        throw;
      }
    }
  }

  // XPENDING with IDLE rather than XAUTOCLAIM: it answers each entry's owner (to tell a claim
  // from another consumer apart from this one's own retry) and its delivery count (for
  // max_deliveries), neither of which XAUTOCLAIM answers. XCLAIM with the same min-idle-time
  // then takes only what is still idle, so of two consumers claiming at once, one gets each
  // entry.
  std::vector<delivery> claim_stale() {
    const auto pending_reply =
        ask({"XPENDING", stream_, options_.group, "IDLE", claim_idle_ms_, "-", "+", batch_text_},
            "XPENDING");
    const auto pending = redis_streams::detail::pending_entries_of(pending_reply.get());
    std::vector<delivery> claimed;
    if (pending.empty()) return claimed;
    words claim{"XCLAIM", stream_, options_.group, options_.consumer, claim_idle_ms_};
    for (const auto& each : pending)
      claim.push_back(each.id);
    const auto claimed_reply = ask(std::move(claim), "XCLAIM");
    for (entry_type& entry : redis_streams::detail::entries_of("XCLAIM", claimed_reply.get())) {
      const auto from = std::find_if(pending.begin(), pending.end(),
                                     [&](const auto& each) { return each.id == entry.id; });
      if (from == pending.end()) continue;  // not one asked for: Redis answers only those
      // XCLAIM counted this delivery.
      claimed.push_back({std::move(entry), from->deliveries + 1,
                         from->owner == options_.consumer ? std::string{} : from->owner});
    }
    return claimed;
  }

  std::vector<delivery> read_new(std::chrono::milliseconds block) {
    const std::string block_ms = std::to_string(block.count());
    words read{"XREADGROUP", "GROUP", options_.group, options_.consumer, "COUNT", batch_text_};
    if (block > std::chrono::milliseconds::zero()) {
      read.push_back("BLOCK");
      read.push_back(block_ms);
    }
    read.push_back("STREAMS");
    read.push_back(stream_);
    read.push_back(">");
    const auto reply = ask(std::move(read), "XREADGROUP");
    std::vector<delivery> fresh;
    for (entry_type& entry : redis_streams::detail::read_entries_of(reply.get()))
      fresh.push_back({std::move(entry), 1, {}});
    return fresh;
  }

  void handle(const delivery& given, stream_poll& counts, settlement& settled) {
    const entry_type& raw = given.entry;
    const std::uint64_t deliveries = given.deliveries;
    std::vector<std::string>& acknowledged = settled.acknowledged;
    if (raw.deleted) {
      // Trimmed or deleted after it was delivered: nothing is left to handle.
      acknowledged.push_back(raw.id);
      return;
    }
    stream_event event{.kind = stream_event_kind::delivered,
                       .stream = stream_,
                       .entry_id = raw.id,
                       .deliveries = deliveries};
    ++counts.delivered;
    observer_.on_stream_event(event);
    if (!given.previous_owner.empty()) {
      ++counts.claimed;
      event.kind = stream_event_kind::claimed;
      event.previous_owner = given.previous_owner;
      observer_.on_stream_event(event);
      event.previous_owner = {};
    }
    if (deliveries > options_.max_deliveries) {
      dead_letter(raw, deliveries,
                  "delivered " + std::to_string(deliveries) + " times, more than max_deliveries (" +
                      max_deliveries_text_ +
                      "), without being settled: each consumer that had it stopped before "
                      "acknowledging it",
                  event, counts);
      return;
    }
    std::vector<std::pair<std::string_view, std::string_view>> fields(raw.fields.begin(),
                                                                      raw.fields.end());
    outbox_entry entry;
    try {
      entry = redis_streams::decode_entry(options_.topic, fields);
    } catch (const std::invalid_argument& malformed) {
      // Never retried: no delivery can make it readable.
      dead_letter(raw, deliveries, malformed.what(), event, counts);
      return;
    }
    event.message_id = entry.id;

    std::optional<idempotent_outcome<std::monostate>> outcome;
    std::string failure;
    try {
      outcome.emplace(deduplicate(entry));
    } catch (const std::exception& error) {
      failure = error.what();
    } catch (...) {
      failure = "an exception not derived from std::exception";
    }
    if (!outcome) {
      ++counts.failed;
      event.kind = stream_event_kind::failed;
      event.reason = failure;
      observer_.on_stream_event(event);
      if (deliveries >= options_.max_deliveries) {
        dead_letter(raw, deliveries,
                    "the handler failed on delivery " + std::to_string(deliveries) + " of " +
                        max_deliveries_text_ + ": " + failure,
                    event, counts);
      }
      return;  // pending: claimed and delivered again after claim_idle
    }
    switch (outcome->verdict()) {
      case verdict::executed:
        if (!outcome->recorded()) {
          // The effect ran and its record did not land: acknowledging would lose the only
          // trace of it. Stop, as for any store failure.
          throw store_error(store_failure::unavailable,
                            "idem::stream_consumer: the inbox did not record message " + entry.id +
                                " after its handler ran: " + std::string(outcome->message()));
        }
        ++counts.processed;
        event.kind = stream_event_kind::processed;
        observer_.on_stream_event(event);  // before the XACK: the inbox has recorded it
        acknowledged.push_back(raw.id);
        return;
      case verdict::replayed:
        ++counts.duplicates;
        event.kind = stream_event_kind::duplicate;
        observer_.on_stream_event(event);
        acknowledged.push_back(raw.id);
        return;
      case verdict::in_progress: {
        ++counts.deferred;
        const std::string why = "another consumer is handling message " + entry.id + " now";
        event.kind = stream_event_kind::deferred;
        event.reason = why;
        observer_.on_stream_event(event);
        settled.given_back.emplace_back(raw.id, deliveries - 1);  // not this message's failure
        return;
      }
      case verdict::invalid_key:
        // The id is longer than the inbox's max_key_length: no delivery can change that.
        dead_letter(raw, deliveries, std::string(outcome->message()), event, counts);
        return;
      case verdict::store_full:
        throw store_error(store_failure::full,
                          "idem::stream_consumer: the inbox's store has no room for message " +
                              entry.id + ": " + std::string(outcome->message()));
      default:
        throw store_error(store_failure::unavailable,
                          "idem::stream_consumer: the inbox's store could not take message " +
                              entry.id + ": " + std::string(outcome->message()));
    }
  }

  idempotent_outcome<std::monostate> deduplicate(const outbox_entry& entry) {
    if constexpr (redis_streams::detail::transactional_stream_handler<Handler, store_type>) {
      return inbox_.deduplicate(scope_, entry.id,
                                [&](typename store_type::transaction& transaction) {
                                  std::invoke(handler_, entry, transaction);
                                });
    } else {
      return inbox_.deduplicate(scope_, entry.id, [&] { std::invoke(handler_, entry); });
    }
  }

  // The dead letter and the XACK in one MULTI/EXEC: a crash between the two cannot leave the
  // entry both dead-lettered and pending (which would dead-letter it twice).
  void dead_letter(const entry_type& raw, std::uint64_t deliveries, const std::string& reason,
                   stream_event& event, stream_poll& counts) {
    const std::string count = std::to_string(deliveries);
    words add{"XADD", dead_letter_stream_, "*",  "stream", stream_, "entry", raw.id, "reason",
              reason, "deliveries",        count};
    for (const auto& [name, value] : raw.fields) {
      add.push_back(name);
      add.push_back(value);
    }
    const std::vector<words> commands{
        {"MULTI"}, std::move(add), {"XACK", stream_, options_.group, raw.id}, {"EXEC"}};
    const auto replies = client_->plain(commands, "dead-lettering");
    const redisReply* done = replies.back().get();
    if (done->type != REDIS_REPLY_ARRAY || done->elements != 2 ||
        done->element[0]->type != REDIS_REPLY_STRING) {
      const redisReply* why = done;
      if (done->type == REDIS_REPLY_ARRAY && done->elements > 0) why = done->element[0];
      redis_streams::detail::unexpected_reply("XADD to the dead-letter stream", why);
    }
    ++counts.dead_lettered;
    event.kind = stream_event_kind::dead_lettered;
    event.reason = reason;
    observer_.on_stream_event(event);
  }

  void settle(settlement& settled) {
    std::vector<words> commands;
    if (!settled.acknowledged.empty()) {
      words acknowledge{"XACK", stream_, options_.group};
      for (const std::string& id : settled.acknowledged)
        acknowledge.push_back(id);
      commands.push_back(std::move(acknowledge));
    }
    std::vector<std::string> retry_counts;
    retry_counts.reserve(settled.given_back.size());  // the views below point into it
    for (const auto& [id, count] : settled.given_back) {
      retry_counts.push_back(std::to_string(count));
      // JUSTID: this XCLAIM does not count a delivery itself; min-idle-time 0: the entry is
      // this consumer's already. Its idle time starts again, so it comes back after claim_idle.
      commands.push_back({"XCLAIM", stream_, options_.group, options_.consumer, "0", id,
                          "RETRYCOUNT", retry_counts.back(), "JUSTID"});
    }
    if (commands.empty()) return;
    const auto replies = client_->plain(commands, "XACK");
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const bool acknowledging = i == 0 && !settled.acknowledged.empty();
      const int expected = acknowledging ? REDIS_REPLY_INTEGER : REDIS_REPLY_ARRAY;
      if (replies[i]->type != expected) {
        redis_streams::detail::unexpected_reply(acknowledging ? "XACK" : "XCLAIM RETRYCOUNT",
                                                replies[i].get());
      }
    }
    settled = {};
  }

  options options_;
  std::string stream_;
  std::string dead_letter_stream_;
  std::string scope_;
  std::string claim_idle_ms_;
  std::string batch_text_;
  std::string max_deliveries_text_;
  Handler handler_;
  inbox_type inbox_;
  observer_type observer_;
  std::unique_ptr<idem::detail::redis_client> client_;
};

}  // namespace idem

#endif  // IDEM_REDIS_STREAMS_CONSUMER_HPP
