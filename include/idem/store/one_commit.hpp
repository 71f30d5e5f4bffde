// One commit for a local effect: the claim, the handler's own writes and the completion of its
// record in ONE transaction of the store's database (docs/one_commit.md).
//
// The two-commit path (claim; run; complete) commits the claim first, so that a duplicate sees
// it at once and is answered in_progress (409), and a handler with external effects has a record
// to resume from. When the whole effect is writes in the store's own database, that first commit
// buys nothing: claim, effect and record can commit together, one commit and one fsync per new
// key, and a crash at any point leaves nothing at all (the idempotency key is, in effect, a unique
// constraint on the effect's own transaction). The price is the semantics below, which is why it
// is an explicit opt-in (commit_mode::one_commit in the policies).
//
// claim_within(request, produce) — what a OneCommitStore provides:
//   begins a write transaction, and in it claims as claim() does (contract.hpp): a new key, or an
//   expired or released record, is created; an in-progress record of the two-commit path whose
//   lease passed (same fingerprint) is taken over, keeping its recovery bytes. Then
//     * claimed or taken over: calls produce(transaction&, claim_result&) (the claim_result says
//       claimed or taken_over, the fence, and for a takeover the record with its recovery bytes),
//       which runs the handler and answers the encoded response; completes the record under its
//       fence in the same transaction; commits; answers {committed, fence}.
//     * any other live record: changes nothing; answers {existing, 0, snapshot}.
//     * no room for a new record: {full}.
//   A concurrent claim_within or claim of the same key WAITS until this transaction ends (the
//   key's unique index on PostgreSQL, the database's write lock on SQLite), then sees what it
//   committed: a replay, or, if it rolled back, a free key it claims itself. The wait is bounded
//   (PostgreSQL: options::one_commit_lock_timeout; SQLite: the busy timeout): past it the answer
//   is {busy}, and nothing was written.
//   produce throwing rolls everything back (no record, no effect) and rethrows the exception.
//   The store's own failures roll back and throw store_error; a commit whose answer was lost
//   throws store_error(unavailable) too, and may have committed: everything or nothing, never
//   a part. A store may call produce again after a rollback it caused (a serialization
//   failure), so produce starts from scratch each time.
#ifndef IDEM_STORE_ONE_COMMIT_HPP
#define IDEM_STORE_ONE_COMMIT_HPP

#include <concepts>
#include <cstdint>
#include <string>

#include <idem/store/contract.hpp>

namespace idem {

/// How idempotent and inbox commit a new key's work (Policies::commit, optional; default
/// two_commits). one_commit needs a OneCommitStore and a handler taking Store::transaction&.
enum class commit_mode : std::uint8_t {
  /// Claim (commit), run, complete (commit): duplicates in flight answer in_progress (409); the
  /// handler may have external effects and recovery points.
  two_commits,
  /// Claim, run and complete in one transaction, one commit: for effects that are writes in the
  /// store's own database only. Duplicates in flight wait for the transaction (bounded: then
  /// in_progress); a throw or a crash leaves nothing; recovery points record nothing.
  one_commit,
};

enum class one_commit_status : std::uint8_t {
  committed,  // claimed, produced, completed and committed under `fence`
  existing,   // a record the caller may not run; `existing` is its snapshot
  busy,       // another transaction held the key past the lock timeout; nothing was written
  full,       // no room for a new record
};

struct one_commit_result {
  one_commit_status status = one_commit_status::busy;
  std::uint64_t fence = 0;  // committed: the fence the record was completed under
  record existing;          // existing: the record's snapshot
};

/// A TransactionalStore that can also claim inside the transaction that completes the record
/// (see the top of this header).
template <class S>
concept OneCommitStore = TransactionalStore<S> &&
    requires(S& store, const claim_request& request,
             std::string (&produce)(typename S::transaction&, claim_result&)) {
  { store.claim_within(request, produce) } -> std::same_as<one_commit_result>;
};

namespace detail {

// Policies::commit when the policies name one, else two_commits: default_policies need not.
template <class Policies>
inline constexpr commit_mode commit_mode_of = commit_mode::two_commits;
template <class Policies>
requires requires {
  Policies::commit;
}
inline constexpr commit_mode commit_mode_of<Policies> = static_cast<commit_mode>(Policies::commit);

}  // namespace detail

}  // namespace idem

#endif  // IDEM_STORE_ONE_COMMIT_HPP
