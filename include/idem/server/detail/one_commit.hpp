// The run path of commit_mode::one_commit (idem/store/one_commit.hpp, docs/one_commit.md):
// what idempotent and inbox call instead of engine::run when their policies ask for one commit.
//
// The store claims, calls the handler and completes the record in one transaction
// (OneCommitStore::claim_within); this turns what it answers into the call's outcome:
//   committed  executed (or response_too_large, as on the two-commit path);
//   existing   as for any claim that found a record: replayed, mismatch (422), or in_progress
//              for a live claim of the two-commit path;
//   busy       in_progress: a duplicate's transaction held the key past the lock timeout;
//   full       store_full.
// A handler that throws rolls everything back: nothing is recorded, so there is nothing for the
// failure policy to release or store, and the exception passes through unchanged.
//
// Recovery points. Everything of a run commits at once, so a recovery point has nothing to make
// durable before the end: ctx.step runs its function and keeps the result in the context only,
// and a crash leaves no record to resume from. Steps recorded by an attempt of the two-commit
// path on the same key (a record it left in progress past its lease, taken over here) are still
// honoured: they are not run again. renew_lease does nothing (the row is locked, not leased).
#ifndef IDEM_SERVER_DETAIL_ONE_COMMIT_HPP
#define IDEM_SERVER_DETAIL_ONE_COMMIT_HPP

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/server/detail/engine.hpp>
#include <idem/server/detail/held_claim.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/outcome.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/one_commit.hpp>

namespace idem::detail {

/// Policies::commit == one_commit needs a store that can claim inside the completing transaction.
template <class Policies>
constexpr bool check_commit_mode() {
  static_assert(commit_mode_of<Policies> != commit_mode::one_commit ||
                    OneCommitStore<typename Policies::store>,
                "commit_mode::one_commit needs a OneCommitStore (idem::sqlite_store or "
                "idem::postgres_store, with their headers included): one whose claim, handler "
                "and completion can share one transaction of the database the effect is "
                "written to. Use commit_mode::two_commits with this store.");
  return true;
}

/// Under one_commit the handler writes its effect in the store's transaction, so it must take it.
template <bool takes_transaction>
constexpr bool check_one_commit_handler() {
  static_assert(takes_transaction,
                "commit_mode::one_commit: the handler must take the store's transaction as its "
                "last parameter (Store::transaction&) and write its effect through it: one "
                "commit is only for effects local to the store's database.");
  return true;
}

/// Runs `run(handler_context&, Store::transaction&)` for (scope, key) under commit_mode::one_commit
/// on `owner`'s store; `kept`: a resumable wrapper's kept request, or null.
template <class Response, class Engine, class Run>
idempotent_outcome<Response> run_one_commit(Engine& owner, std::string_view scope,
                                            std::string_view key, const digest& print, Run& run,
                                            const kept_bytes* kept = nullptr) {
  using outcome_type = idempotent_outcome<Response>;
  using store_type = typename Engine::store_type;
  using transaction_type = typename store_type::transaction;
  using completion_bytes = typename Engine::completion_bytes;
  store_time claimed_at{};
  const claim_request request =
      owner.claim_request_for(scope, key, print, claimed_at, Engine::kept_stored(kept));
  std::optional<Response> response;
  std::optional<held_claim> claim;
  completion_bytes done;
  bool handler_threw = false;
  // Called once per transaction the store runs (again after a serialization failure), so each
  // call starts from what the claim found, not from the rolled-back call's steps.
  auto produce = [&](transaction_type& transaction, claim_result& claimed) -> std::string {
    handler_threw = false;
    response.reset();
    done = completion_bytes{};
    claim.emplace(owner.hold(scope, key, claimed, claimed_at, kept));
    handler_context context{
        scope,           key,    claim->held.fence, claim->resumed,
        claim->recovery, nullptr};  // steps are kept in memory: see the top of this header
    try {
      response.emplace(run(context, transaction));
    } catch (...) {
      handler_threw = true;
      throw;
    }
    owner.completion_for(*response, done);
    return std::string(done.bytes);
  };
  one_commit_result result;
  try {
    result = owner.store().claim_within(request, produce);
  } catch (const store_error& error) {
    if (handler_threw) throw;  // the handler's own SQL failing is the handler's exception
    return Engine::template refused<Response>(error, "the one-commit transaction did not commit: ");
  }
  switch (result.status) {
    case one_commit_status::committed:
      return owner.recorded(*claim, std::move(*response), done);
    case one_commit_status::existing:
      return owner.template answer_existing<Response>(result.existing, print, claimed_at);
    case one_commit_status::busy:
      return outcome_type{verdict::in_progress,
                          "another request with this key held its transaction past the lock "
                          "timeout; it is still being processed",
                          std::chrono::nanoseconds::zero()};
    case one_commit_status::full:
      break;
  }
  return Engine::template no_room<Response>();
}

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_ONE_COMMIT_HPP
