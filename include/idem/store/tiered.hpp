// tiered_store<Durable>: repeats of a completed key answered from process memory.
//
//   idem::tiered_store<idem::postgres_store> store{idem::postgres_store{config}};
//   struct my_policies : idem::default_policies {
//     using store = idem::tiered_store<idem::postgres_store>;
//   };
//
// A completed record does not change until it expires, so a process that has once seen it
// completed may answer its repeats itself, without a round trip. tiered_store keeps such records
// in a local tier (idem/store/tiered/detail/tier.hpp: bounded in bytes, CLOCK eviction, sharded)
// and sends everything else to the durable store:
//   * claim: a live completed record in the tier answers {existing, 0, snapshot}, exactly what
//     the durable store would answer (the engine compares fingerprints, so another request under
//     the key is still a mismatch). Otherwise the durable store answers; a completed record it
//     answers is kept.
//   * find: the same, with the snapshot's scope and key.
//   * complete, release, checkpoint, complete_within, stuck: the durable store's. A completion is
//     not kept: the engine's claim answered {claimed, fence} with no expiry to keep it under (a
//     store on server time sets its own), so a key's first repeat reads the durable store once
//     and its later repeats hit.
//   * sweep: the durable store's, then the tier drops what has expired (a walk of the tier, which
//     max_bytes bounds).
// A record is served from the tier only while now + expiry_margin < expires_at, with the `now`
// each call is given; at or past that it is never served, and the call goes to the durable
// store as any other.
//
// What it assumes (docs/stores/tiered.md says it at length):
//   1. A completed record is never written again before it expires: no complete, release or
//      checkpoint under its fence once it is completed. idempotent and inbox never do; the
//      contract would allow it. In this process it is honoured even so (a local write drops the
//      key from the tier and bars it until the write returns); in another process it is not: a
//      tier that already holds the record keeps answering it until it expires.
//   2. Nothing outside idem deletes or edits records (a DELETE by hand, a Redis eviction or
//      FLUSHDB, a restore of an older backup): a tier keeps answering what it saw.
//   3. The clocks that give `now` to the processes sharing the durable store agree within
//      expiry_margin (and within the skew the durable store itself tolerates). A process whose
//      clock runs behind serves a record that another process already sees expired and may have
//      claimed anew; with a store on server time, the same holds between this clock and the
//      server's. Time never steps back past a record's expiry.
// Under these the tier answers what the durable store would have answered at that moment.
//
// Concurrency: every member may be called from many threads at once. A tier lookup takes its
// shard's mutex for a hash-index probe and a copy of the record; the durable store's calls are
// made outside any tier lock. Copies share the tier and the durable store (a store is a handle).
//
// never_blocks stays false: a miss is the durable store's round trip.
#ifndef IDEM_STORE_TIERED_HPP
#define IDEM_STORE_TIERED_HPP

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/inspect.hpp>
#include <idem/store/tiered/detail/tier.hpp>

namespace idem {

namespace detail::tiered {

/// tiered_store's options (tiered_store<D>::options).
struct tier_options {
  /// The most the tier holds, counted per record as scope + key + response + recovery bytes
  /// plus tier_overhead_bytes. Split evenly between the shards; a record larger than one
  /// shard's share is never kept. Must be at least `shards`.
  std::size_t max_bytes = std::size_t{64} << 20;
  /// How many independently locked parts the tier has: a power of two, 1 to 4096.
  std::size_t shards = 64;
  /// A record is served from the tier only while now + expiry_margin < expires_at: the clock
  /// skew between the processes sharing the durable store (or between this clock and a
  /// server's, for a store on server time) that the tier allows for. Not negative.
  std::chrono::nanoseconds expiry_margin{0};
};

// The durable store's transaction type, where it has one (TransactionalStore).
template <class Durable>
struct transaction_of {};
template <class Durable>
requires requires {
  typename Durable::transaction;
}
struct transaction_of<Durable> {
  using transaction = typename Durable::transaction;
};

}  // namespace detail::tiered

template <Store Durable>
class tiered_store : public detail::tiered::transaction_of<Durable> {
  using tier_type = detail::tiered::tier<Durable>;

 public:
  /// The durable store's answer (idem::reads_completion_time): completions go to it.
  static constexpr bool reads_completion_time = idem::reads_completion_time<Durable>;

  /// The tier's settings (the same type for every durable store).
  using options = detail::tiered::tier_options;

  using tier_stats = detail::tiered::tier_stats;

  /// The memory each kept record takes beyond its scope, key, response and recovery bytes.
  static constexpr std::size_t tier_overhead_bytes = tier_type::entry_overhead_bytes;

  /// A default-made durable store (idempotent's options default-construct the store policy).
  tiered_store() requires std::default_initializable<Durable> : tiered_store(Durable{}) {}
  explicit tiered_store(Durable durable) : tiered_store(std::move(durable), options{}) {}
  tiered_store(Durable durable, const options& settings)
      : durable_(std::move(durable)), tier_(make_tier(settings)) {}

  claim_result claim(const claim_request& request) {
    const std::uint64_t h = tier_->hash(request.scope, request.key);
    claim_result out;
    const detail::tiered::lookup_result looked =
        tier_->lookup(h, request.scope, request.key, request.now, out.existing, false);
    if (looked.hit) {
      out.status = claim_status::existing;
      out.fence = 0;
      return out;
    }
    out = durable_.claim(request);
    if (out.status == claim_status::existing && out.existing.state == record_state::completed) {
      tier_->offer(h, looked.ticket, request.scope, request.key, out.existing, request.now);
    }
    return out;
  }

  bool complete(const fenced_key& held, std::string_view response, store_time now) {
    const write_bracket bracket(*tier_, held);
    return durable_.complete(held, response, now);
  }

  bool release(const fenced_key& held) {
    const write_bracket bracket(*tier_, held);
    return durable_.release(held);
  }

  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    const write_bracket bracket(*tier_, held);
    return durable_.checkpoint(held, recovery, lease_until);
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    const std::uint64_t h = tier_->hash(scope, key);
    std::optional<record> out(std::in_place);
    const detail::tiered::lookup_result looked = tier_->lookup(h, scope, key, now, *out, true);
    if (looked.hit) return out;
    out = durable_.find(scope, key, now);
    if (out && out->state == record_state::completed) {
      tier_->offer(h, looked.ticket, scope, key, *out, now);
    }
    return out;
  }

  /// The durable store's sweep (its count), then the tier drops what it may no longer serve: a
  /// walk of every kept record, under each shard's lock in turn.
  std::size_t sweep(store_time now) {
    const std::size_t removed = durable_.sweep(now);
    (void)tier_->drop_expired(now);
    return removed;
  }

  std::vector<record> stuck(store_time now, std::size_t limit) const {
    return durable_.stuck(now, limit);
  }

  /// InspectableStore (idem/store/inspect.hpp), where the durable store is one: its pages (the
  /// durable store holds every record the tier does).
  record_page list_records(const record_filter& filter, std::string_view cursor, std::size_t limit,
                           store_time now) requires InspectableStore<Durable> {
    return durable_.list_records(filter, cursor, limit, now);
  }

  /// The durable store's forget, bracketed like a write: this process's tier drops the key and
  /// serves it from the durable store from then on. Another process's tier is not told: it may
  /// replay the forgotten record until it drops it (docs/stores/tiered.md).
  forget_result forget(const forget_request& request) requires InspectableStore<Durable> {
    const write_bracket bracket(*tier_, fenced_key{request.scope, request.key, 0});
    return durable_.forget(request);
  }

  /// The durable store's complete_within (TransactionalStore), bracketed like complete.
  template <class Produce>
  requires TransactionalStore<Durable>
  bool complete_within(const fenced_key& held, store_time now, Produce&& produce) {
    const write_bracket bracket(*tier_, held);
    return durable_.complete_within(held, now, std::forward<Produce>(produce));
  }

  /// The durable store this one sends to (a handle sharing its records).
  Durable& durable() noexcept { return durable_; }
  const Durable& durable() const noexcept { return durable_; }

  /// What the tier holds and has done so far.
  tier_stats tier_statistics() const { return tier_->statistics(); }

 private:
  // A local write's bracket on the tier (tier.hpp, "Local writes"), however the write ends.
  class write_bracket {
   public:
    write_bracket(tier_type& tier, const fenced_key& held)
        : tier_(tier), hash_(tier.hash(held.scope, held.key)) {
      tier_.begin_write(hash_);
    }
    write_bracket(const write_bracket&) = delete;
    write_bracket& operator=(const write_bracket&) = delete;
    ~write_bracket() { tier_.end_write(hash_); }

   private:
    tier_type& tier_;
    std::uint64_t hash_;
  };

  static std::shared_ptr<tier_type> make_tier(const options& settings) {
    const auto refuse = [](const std::string& why) {
      throw std::invalid_argument("idem::tiered_store: " + why);
    };
    if (settings.max_bytes == 0) refuse("options::max_bytes is 0: the tier could hold nothing");
    if (settings.shards == 0 || settings.shards > 4096 ||
        (settings.shards & (settings.shards - 1)) != 0) {
      refuse("options::shards must be a power of two from 1 to 4096, not " +
             std::to_string(settings.shards));
    }
    if (settings.max_bytes < settings.shards) {
      refuse("options::max_bytes (" + std::to_string(settings.max_bytes) +
             ") is less than one byte per shard (" + std::to_string(settings.shards) + " shards)");
    }
    if (settings.expiry_margin < std::chrono::nanoseconds::zero()) {
      refuse("options::expiry_margin is negative: the tier would serve expired records");
    }
    return std::make_shared<tier_type>(settings.max_bytes, settings.shards, settings.expiry_margin);
  }

  mutable Durable durable_;  // a handle: find and stuck, const here, need not be const there
  std::shared_ptr<tier_type> tier_;
};

}  // namespace idem

#endif  // IDEM_STORE_TIERED_HPP
