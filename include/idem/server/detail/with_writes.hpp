// completion::with_writes, for engine::run_claimed: the handler answered commit_with
// (idem/store/contract.hpp), and its writes are made in the transaction that completes the
// record, which opens only once the handler has returned.
#ifndef IDEM_SERVER_DETAIL_WITH_WRITES_HPP
#define IDEM_SERVER_DETAIL_WITH_WRITES_HPP

#include <string>
#include <utility>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/server/detail/held_claim.hpp>
#include <idem/server/outcome.hpp>
#include <idem/store/contract.hpp>

namespace idem::detail {

/// Completes `claim` on `owner`'s store (an engine) with `answered`'s response and writes in one
/// transaction. Writes that throw end the call as a handler that threw (`handler_threw`, for
/// run_claimed's settling); the store's own failures keep the claim, as a transactional
/// handler's do; a lost fence writes nothing and answers as a lost fence does.
template <class Response, class Engine, class Transaction>
idempotent_outcome<Response> record_with_writes(Engine& owner, const held_claim& claim,
                                                const digest& print,
                                                commit_with<Response, Transaction>& answered,
                                                bool& handler_threw) {
  typename Engine::completion_bytes done;
  owner.completion_for(answered.response, done);
  auto produce = [&](Transaction& transaction) -> std::string {
    handler_threw = false;
    if (answered.writes) {
      try {
        answered.writes(transaction);
      } catch (...) {
        handler_threw = true;
        throw;
      }
    }
    return std::string(done.bytes);
  };
  bool applied = false;
  try {
    applied =
        owner.store().complete_within(claim.held, owner.completion_time(claim.claimed_at), produce);
  } catch (const store_error& error) {
    if (handler_threw) throw;
    return Engine::template refused<Response>(error, "the handler's writes did not commit: ");
  }
  if (!applied)
    return owner.template answer_lost<Response>(claim.held.scope, claim.held.key, print);
  return owner.recorded(claim, std::move(answered.response), done);
}

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_WITH_WRITES_HPP
