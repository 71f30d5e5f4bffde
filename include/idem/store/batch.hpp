// Batches: many claims or completions in one round trip, for stream consumers
// (idem::inbox::deduplicate_batch). An optional capability of a store; any Store works without
// it, one call per record (claim_batch_of, complete_batch_of below).
//
// claim_batch(requests) — one claim_result per request, in the same order, each with exactly
//   the semantics of claim(request) (idem/store/contract.hpp): new, expired and released
//   records are claimed, abandoned claims taken over, anything else answered as its snapshot.
//   Preconditions, which the inbox meets: the requests name distinct (scope, key) pairs and
//   share `now`, `lease` and `retention`. Atomic per record, not across the batch: a store
//   failure (store_error) may leave some of the batch claimed; their leases free them.
// complete_batch(done, now) — complete(held, response, now) for each entry, each applied or
//   not on its own fence; one bool per entry, in order.
// complete_batch_within(held, now, produce) (TransactionalBatchStore) — complete_within for a
//   batch, in ONE transaction: begins it, locks the records, and for each record still in
//   progress under its fence calls produce(transaction&, i) (i: its position in `held`; the
//   transaction names held[i], so what it publishes is that record's), which answers the
//   encoded response; completes those records in the same transaction and commits once.
//   Records no longer held answer false and their produce is not called. produce throwing
//   rolls the whole batch back and rethrows; a store may roll back and call every produce
//   again (a serialization failure), so produce starts from scratch each time.
// checkpoint_batch(entries, lease_until) (CheckpointBatchStore) — checkpoint(held, recovery,
//   lease_until) for each entry, each applied or not on its own fence; one bool per entry, in
//   order. What the asynchronous driver's heartbeat sends once a tick for every lease it renews
//   (the AsyncStore's async_checkpoint_batch, idem/store/async_contract.hpp). The entries name
//   distinct records. Atomic per record, not across the batch: a store failure may leave some
//   renewed; the heartbeat asks again at its next tick.
#ifndef IDEM_STORE_BATCH_HPP
#define IDEM_STORE_BATCH_HPP

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <idem/store/contract.hpp>

namespace idem {

/// One entry of complete_batch: the claim held, and the response bytes to store.
struct batch_completion {
  fenced_key held;
  std::string_view response;
};

/// One entry of checkpoint_batch: the claim held, and the recovery bytes to store.
struct batch_checkpoint {
  fenced_key held;
  std::string_view recovery;
};

/// A Store that claims and completes many records in one round trip.
template <class S>
concept BatchStore = Store<S> && requires(S& store, std::span<const claim_request> requests,
                                          std::span<const batch_completion> done, store_time now) {
  { store.claim_batch(requests) } -> std::same_as<std::vector<claim_result>>;
  { store.complete_batch(done, now) } -> std::same_as<std::vector<bool>>;
};

/// A BatchStore that completes a batch inside one transaction with the handler's own writes.
template <class S>
concept TransactionalBatchStore = BatchStore<S> && TransactionalStore<S> &&
    requires(S& store, std::span<const fenced_key> held, store_time now,
             std::string (&produce)(typename S::transaction&, std::size_t)) {
  { store.complete_batch_within(held, now, produce) } -> std::same_as<std::vector<bool>>;
};

/// A Store that renews many leases (checkpoints many records) in one round trip.
template <class S>
concept CheckpointBatchStore = Store<S> &&
    requires(S& store, std::span<const batch_checkpoint> entries, store_time when) {
  { store.checkpoint_batch(entries, when) } -> std::same_as<std::vector<bool>>;
};

namespace detail {

/// claim_batch where the store has it, else one claim per request.
template <class S>
std::vector<claim_result> claim_batch_of(S& store, std::span<const claim_request> requests) {
  if constexpr (BatchStore<S>) {
    return store.claim_batch(requests);
  } else {
    std::vector<claim_result> answers;
    answers.reserve(requests.size());
    for (const claim_request& request : requests)
      answers.push_back(store.claim(request));
    return answers;
  }
}

/// complete_batch where the store has it, else one complete per entry.
template <class S>
std::vector<bool> complete_batch_of(S& store, std::span<const batch_completion> done,
                                    store_time now) {
  if constexpr (BatchStore<S>) {
    return store.complete_batch(done, now);
  } else {
    std::vector<bool> applied;
    applied.reserve(done.size());
    for (const batch_completion& each : done) {
      applied.push_back(store.complete(each.held, each.response, now));
    }
    return applied;
  }
}

/// checkpoint_batch where the store has it, else one checkpoint per entry.
template <class S>
std::vector<bool> checkpoint_batch_of(S& store, std::span<const batch_checkpoint> entries,
                                      store_time lease_until) {
  if constexpr (CheckpointBatchStore<S>) {
    return store.checkpoint_batch(entries, lease_until);
  } else {
    std::vector<bool> applied;
    applied.reserve(entries.size());
    for (const batch_checkpoint& each : entries)
      applied.push_back(store.checkpoint(each.held, each.recovery, lease_until));
    return applied;
  }
}

}  // namespace detail
}  // namespace idem

#endif  // IDEM_STORE_BATCH_HPP
