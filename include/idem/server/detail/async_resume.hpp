// async_idempotent::async_resume's machinery: engine::resume, awaited, on the asynchronous
// engine (async_engine.hpp): the stuck record claimed back through the store's calls where the
// wrapper's always run, the handler run under the claim from its recovery points (run_held),
// and every ending a resume_result, as the blocking engine's (idem/server/detail/engine.hpp).
#ifndef IDEM_SERVER_DETAIL_ASYNC_RESUME_HPP
#define IDEM_SERVER_DETAIL_ASYNC_RESUME_HPP

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include <idem/async/asio.hpp>
#include <idem/core/fingerprint/digest.hpp>
#include <idem/server/detail/async_engine.hpp>
#include <idem/server/detail/engine.hpp>
#include <idem/server/outcome.hpp>
#include <idem/server/resumption.hpp>
#include <idem/store/contract.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

// The recovery bytes a failed resume left in the record it still holds (opened), or none.
template <class Engine>
asio::awaitable<std::string> async_recovery_left(Engine& engine, std::string_view scope,
                                                 std::string_view key, std::uint64_t fence) {
  std::optional<record> found;
  try {
    found = co_await engine.calls().find(engine.core().store(), scope, key,
                                         engine.core().clock().wall_now());
  } catch (const std::exception&) {
    co_return std::string{};
  }
  if (!found || found->fence != fence || found->state != record_state::in_progress) {
    co_return std::string{};
  }
  co_return engine.core().opened_recovery(std::move(found->recovery));
}

/// engine::resume, awaited: takes over the stuck record (scope, key), claimed for a request
/// with fingerprint `print`, and runs `run` under the claim from its recovery points; never
/// starts work anew (a record released or expired since it was listed is claimed back and
/// released at once). A handler that fails again keeps the claim. The store's calls run as
/// run's do; nothing here throws: every ending is a resume_result.
template <class Response, completion How, class Engine, class Run>
asio::awaitable<resume_result> async_resume(Engine& engine, std::string_view scope,
                                            std::string_view key, digest print, Run run) {
  store_time claimed_at{};
  claim_result claimed;
  try {
    const claim_request request =
        engine.core().claim_request_for(scope, key, print, claimed_at, std::string_view{});
    claimed = co_await engine.calls().claim(engine.core().store(), request);
  } catch (const store_error& error) {
    co_return resume_result{resumption::store_failed, error.what(), 0, {}};
  }
  switch (claimed.status) {
    case claim_status::full:
      co_return resume_result{
          resumption::settled, "the record is gone (its key has no record now)", 0, {}};
    case claim_status::existing:
      if (claimed.existing.state == record_state::completed) {
        co_return resume_result{resumption::settled, "completed by another attempt", 0, {}};
      }
      if (claimed.existing.fingerprint != print) {
        co_return resume_result{resumption::settled, "the key now holds another request", 0, {}};
      }
      co_return resume_result{resumption::lost, "another attempt holds the claim", 0, {}};
    case claim_status::claimed: {
      // Released or expired after it was listed: nothing to finish; a new run is the
      // client's to ask for. A failed release ends with its lease.
      try {
        (void)co_await engine.calls().release(engine.core().store(),
                                              fenced_key{scope, key, claimed.fence});
      } catch (const store_error&) {
      }
      co_return resume_result{
          resumption::settled, "released or expired since it was listed", 0, {}};
    }
    case claim_status::taken_over:
      break;
  }
  const std::uint64_t fence = claimed.fence;
  std::optional<idempotent_outcome<Response>> outcome;
  std::optional<resume_result> failed;
  try {
    outcome.emplace(co_await engine.template run_held<Response, How>(
        engine.core().hold(scope, key, claimed, claimed_at), print, run, keep_claim_on_failure{}));
  } catch (const std::exception& error) {
    failed.emplace(resume_result{resumption::failed, error.what(), fence, {}});
  } catch (...) {
    failed.emplace(resume_result{resumption::failed, "the handler threw", fence, {}});
  }
  if (failed) {
    failed->recovery = co_await async_recovery_left(engine, scope, key, fence);
    co_return std::move(*failed);
  }
  switch (outcome->verdict()) {
    case verdict::executed:
    case verdict::response_too_large:
      co_return resume_result{resumption::resumed, std::string(outcome->message()), fence, {}};
    case verdict::store_unavailable:
    case verdict::store_full:
      co_return resume_result{resumption::store_failed, std::string(outcome->message()), fence, {}};
    case verdict::cancelled:
      co_return resume_result{resumption::failed, std::string(outcome->message()), fence,
                              co_await async_recovery_left(engine, scope, key, fence)};
    default:  // answer_lost: a takeover took the fence from this run
      co_return resume_result{resumption::lost, std::string(outcome->message()), fence, {}};
  }
}

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_SERVER_DETAIL_ASYNC_RESUME_HPP
