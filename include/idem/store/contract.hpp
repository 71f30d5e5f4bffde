// The store contract: what a backend must do for idempotent to give exactly-once effect.
//
// A store keeps one record per (scope, key). Everything idempotent promises rests on five
// operations being atomic per record; how a backend achieves that (a mutex, a compare-and-swap,
// a unique constraint, a Lua script) is its own business. Write your own store by providing the
// members the Store concept lists, with these semantics, and run the conformance suite
// (idem/testing/store_conformance.hpp) against it.
//
// Time. Every operation that needs the time is given it (`now`, from idempotent's clock, on the
// wall-clock timeline), so stores never read a clock of their own and tests can move time.
//
// Records. (scope, key) is the identity: two scopes never share or see each other's records,
// even when their keys are equal, and a scope or key may hold any bytes (length-prefix or use
// two columns; never join them with a separator). A record is *live* until `expires_at`; after
// that it counts as absent for every operation, whether or not sweep has removed it yet.
//
// claim(request) — the one atomic step that decides who runs. Never read-then-insert.
//   * no live record, or a released one: create it in progress, with
//       fence       = 1, or one more than the fence of the expired/released record it replaces,
//       lease_until = now + lease, expires_at = now + retention, created_at = now,
//       recovery    = request.recovery (what a resumable wrapper keeps from the start: the
//                     request itself, so a reconciler can finish the work without its client);
//     answer {claimed, fence}. Recovery bytes that do not fit a bounded store answer {full}.
//   * a live in-progress record with the same fingerprint whose lease_until <= now: take it
//     over in the same atomic step: fence + 1, lease_until = now + lease; recovery bytes kept;
//     answer {taken_over, new fence, snapshot (with the recovery bytes)}.
//   * any other live record (completed; in progress with a live lease; another fingerprint):
//     change nothing; answer {existing, 0, snapshot}. A claim's snapshots may leave scope and
//     key empty: the caller has them.
//   * no room for a new record: answer {full}. A live record is never evicted to make room.
//
// complete / release / checkpoint(fenced_key, ...) — each applies only when the record is still
// there and its fence equals the caller's, and says whether it applied. A holder that paused
// past its lease and was taken over holds an old fence, so it can never overwrite the recovered
// result, release the new holder's claim, or move its recovery point.
//   * complete: state = completed, response stored; expires_at unchanged.
//   * release: the key becomes free, but the fence is remembered: the next claim gets a higher
//     fence (keep a tombstone until expires_at, or never reuse fences), so an old holder of a
//     released-and-reclaimed key still cannot write. find answers nothing for a released key,
//     and its response and recovery bytes no longer count against max_bytes.
//   These three check the fence only: on a record past expires_at that no claim or sweep has
//   replaced yet, the holder's write still applies (the record answers as absent all the same).
//   Fences restart at 1 once sweep has removed a record, so a holder paused longer than the
//   whole retention window could write into a new record of the same key: keep retention far
//   above any lease.
//   * checkpoint: recovery bytes replaced; lease_until = the given time (a heartbeat).
//
// find(scope, key, now) — a snapshot of the live, unreleased record, or nothing.
// sweep(now) — removes records whose expires_at <= now, and answers how many. Its cost should
// follow what it removes, not what the store holds. Sweep is not atomic across keys: it
// linearizes per record, somewhere within the call.
// stuck(now, limit) — live in-progress records whose lease_until <= now: what a reconciliation
// pass compares with the downstream system of record. It reports; it never changes a record.
//
// Transactions (optional: TransactionalStore). A store whose records live in a database the
// handler can write to can complete a record in the same transaction as the handler's own
// writes, so the effect and its record commit together or not at all:
//   complete_within(held, now, produce): begins a transaction; if the record is not in progress
//   under held.fence, rolls back and answers false without calling produce; otherwise calls
//   produce(transaction&), which runs the handler and answers the encoded response, completes
//   the record fenced in that transaction (zero rows: roll back, false), and commits (true).
//   produce throwing rolls back and rethrows the same exception. The store's own failures roll
//   back and throw store_error. A store may call produce again after a rollback it caused (a
//   serialization failure), so produce starts from scratch each time.
//   transaction::checkpoint(held, recovery, lease_until): checkpoint's semantics on the open
//   transaction's connection (another connection would wait on the locks it holds); it commits
//   or rolls back with the transaction.
// A handler whose work is partly outside the database (a payment processor's charge) and partly
// writes in it (the payment's row) answers commit_with<R, Store::transaction> instead: its
// response, and the writes the wrapper makes in the transaction that completes its record, once
// the handler has returned. No transaction is open, and no connection held, while it runs.
//
// Failures. A backend that cannot answer (down, timed out, I/O error) throws store_error with
// store_failure::unavailable; a write that does not fit (a response larger than the store
// accepts, a full disk) throws store_error with store_failure::full. Nothing is written then.
// Operations never fail silently: a lost write is an exception, a lost fence is `false`.
#ifndef IDEM_STORE_CONTRACT_HPP
#define IDEM_STORE_CONTRACT_HPP

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/core/fingerprint/digest.hpp>

namespace idem {

/// The timeline stores work on: wall-clock time, comparable across processes.
using store_time = std::chrono::system_clock::time_point;

enum class record_state : std::uint8_t {
  in_progress,  // claimed; its holder is running the handler
  completed,    // the response is stored; every repeat replays it
};

constexpr std::string_view to_string(record_state state) noexcept {
  return state == record_state::completed ? "completed" : "in_progress";
}

/// A snapshot of one record, as find, claim and stuck report it.
struct record {
  std::string scope;
  std::string key;
  digest fingerprint;
  record_state state = record_state::in_progress;
  std::uint64_t fence = 0;
  store_time created_at{};
  store_time lease_until{};  // in progress: the claim is honoured until then
  store_time expires_at{};   // the record is gone from then on
  std::string response;      // completed: the stored response bytes
  std::string recovery;      // in progress: the recovery points recorded so far (opaque bytes)
};

/// What claim is asked to do.
struct claim_request {
  std::string_view scope;
  std::string_view key;
  digest fingerprint;
  store_time now;
  std::chrono::nanoseconds lease;      // positive
  std::chrono::nanoseconds retention;  // longer than the lease
  std::string_view recovery{};         // the recovery bytes a new record starts with
};

enum class claim_status : std::uint8_t {
  claimed,     // a new record: the caller holds `fence` and runs the handler
  taken_over,  // an abandoned claim, now the caller's under `fence`; `existing` has its recovery
  existing,    // a record the caller may not run; `existing` is its snapshot
  full,        // no room for a new record
};

struct claim_result {
  claim_status status = claim_status::full;
  std::uint64_t fence = 0;  // claimed, taken_over: the fence the caller now holds
  // taken_over, existing. Default-initialized, which runs record's member initializers: `{}`
  // here would value-initialize it, and GCC clears all 216 bytes of the result with `rep stos`
  // before it writes a field, in every claim (4.5 ns of a claim of a new key).
  record existing;
};

/// The (scope, key) a caller holds, and the fence it holds it under.
struct fenced_key {
  std::string_view scope;
  std::string_view key;
  std::uint64_t fence;
};

enum class store_failure : std::uint8_t {
  unavailable,  // the backend cannot answer: down, timed out, I/O error
  full,         // the write does not fit
};

/// A store could not do what it was asked; nothing was written.
class store_error : public std::runtime_error {
 public:
  store_error(store_failure failure, const std::string& what)
      : std::runtime_error(what), failure_(failure) {}
  store_failure failure() const noexcept { return failure_; }

 private:
  store_failure failure_;
};

/// What a `store` policy must provide. Copies of a store must share its records (a store type is
/// a handle), so one store can serve several idempotent wrappers and the tests that inspect it.
template <class S>
concept Store = std::copy_constructible<S> &&
    requires(S& store, const claim_request& request, const fenced_key& held, std::string_view bytes,
             std::string_view scope, std::string_view key, store_time now, std::size_t limit) {
  { store.claim(request) } -> std::same_as<claim_result>;
  { store.complete(held, bytes, now) } -> std::same_as<bool>;
  { store.release(held) } -> std::same_as<bool>;
  { store.checkpoint(held, bytes, now) } -> std::same_as<bool>;
  { store.find(scope, key, now) } -> std::same_as<std::optional<record>>;
  { store.sweep(now) } -> std::same_as<std::size_t>;
  { store.stuck(now, limit) } -> std::same_as<std::vector<record>>;
};

/// Whether a store reads the `now` that complete and complete_within are given. A store whose
/// records keep no completion time (every store idem provides: completing leaves expires_at as
/// the claim set it) declares `static constexpr bool reads_completion_time = false;`, and the
/// engine then passes the time it read for the claim instead of reading the clock again, which is
/// one clock read fewer on every first call. Any other store is given the clock's time.
template <class S>
inline constexpr bool reads_completion_time = true;
template <class S>
requires requires {
  S::reads_completion_time;
}
inline constexpr bool reads_completion_time<S> = static_cast<bool>(S::reads_completion_time);

/// Whether every call of a store returns without waiting on I/O or on another process: it
/// answers from memory, under at most a short lock. An asynchronous driver (idem/asio) runs such
/// a store's calls inline, on the event loop; any other store's calls run on the executor the
/// user gives for blocking work, so that a database round trip never stalls the loop. A store
/// says so with `static constexpr bool never_blocks = true;` (memory_store and locked_store do);
/// a store that says nothing is taken to block, the safe answer.
template <class S>
inline constexpr bool never_blocks = false;
template <class S>
requires requires {
  S::never_blocks;
}
inline constexpr bool never_blocks<S> = static_cast<bool>(S::never_blocks);

/// A Store that can complete a record inside the transaction that holds the handler's own
/// writes (see "Transactions" above). A handler opts in by taking `typename S::transaction&` as
/// its last parameter.
template <class S>
concept TransactionalStore = Store<S> && requires {
  typename S::transaction;
} && requires(S& store, typename S::transaction& transaction, const fenced_key& held,
              std::string_view bytes, store_time now,
              std::string (&produce)(typename S::transaction&)) {
  { store.complete_within(held, now, produce) } -> std::same_as<bool>;
  { transaction.checkpoint(held, bytes, now) } -> std::same_as<bool>;
};

/// The writes a commit_with carries for `Transaction`: std::function<void(Transaction&)> for a
/// blocking store's transaction; an asynchronous store's transaction names its own (`writes_type`,
/// a function answering an awaitable: idem/store/async_contract.hpp).
template <class Transaction>
struct transaction_writes {
  using type = std::function<void(Transaction&)>;
};
template <class Transaction>
requires requires {
  typename Transaction::writes_type;
}
struct transaction_writes<Transaction> {
  using type = typename Transaction::writes_type;
};

/// What a handler of a TransactionalStore (idempotent) or an AsyncTransactionalStore
/// (async_idempotent) may answer instead of its response alone: the response, and the writes
/// that must commit with its record. The wrapper runs the handler outside any transaction (its
/// steps recorded as they happen), then makes `writes(transaction)` inside the transaction that
/// completes the record (the store's complete_within), so a connection is held for the writes,
/// not while the handler waits on the network:
///   * the writes and the completed record commit together or not at all;
///   * a store that retries its transaction (a serialization failure) calls `writes` again, on
///     a fresh transaction: it must do the same thing each time;
///   * writes that throw roll the transaction back, and the call ends as a handler that threw
///     after its steps (the failure policy settles the key; the exception passes through);
///   * a transaction that does not commit for the store's reasons (unavailable, full) answers
///     store_unavailable or store_full and keeps the claim: a retry after the lease resumes the
///     handler, its recorded steps replayed, and makes the writes then;
///   * a fence lost before the transaction (a takeover) writes nothing and answers as a lost
///     fence does.
/// The response is encoded before the transaction opens; an empty `writes` writes nothing.
template <class Response, class Transaction>
struct commit_with {
  Response response;
  typename transaction_writes<Transaction>::type writes;
};

namespace detail {
template <class T>
inline constexpr bool is_commit_with = false;
template <class Response, class Transaction>
inline constexpr bool is_commit_with<commit_with<Response, Transaction>> = true;

// What a handler's answer holds: its response, and for a commit_with the transaction its writes
// take.
template <class T>
struct commit_with_parts {
  using response = T;
};
template <class Response, class Transaction>
struct commit_with_parts<commit_with<Response, Transaction>> {
  using response = Response;
  using transaction = Transaction;
};
}  // namespace detail

}  // namespace idem

#endif  // IDEM_STORE_CONTRACT_HPP
