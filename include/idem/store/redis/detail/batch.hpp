// redis_store's batches (idem/store/batch.hpp): the claim (or complete) scripts of a whole batch
// pipelined in one write on one connection, every reply read back, one round trip. The records
// of a batch hash to many slots, so one script over all their keys is not an option (a Redis
// Cluster would refuse it); each record keeps its own atomic script, exactly as claim and
// complete run it, and with options::replicas one WAIT follows the whole batch. Each claim is
// followed by its scope's enrolment, as claim sends it. Included by idem/store/redis.hpp.
#ifndef IDEM_STORE_REDIS_DETAIL_BATCH_HPP
#define IDEM_STORE_REDIS_DETAIL_BATCH_HPP

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/command.hpp>
#include <idem/store/redis/detail/keys.hpp>
#include <idem/store/redis/detail/operations.hpp>
#include <idem/store/redis/detail/store.hpp>

namespace idem::detail {

// The batch operations, with the store's private parts (redis_store befriends this).
struct redis_batch_access {
  // The words of one claim's two commands (the script, the enrolment), kept until the batch's
  // exchange is over: the commands view them.
  struct claim_words {
    redis_keys names;
    std::string registry;
  };

  static std::vector<claim_result> claim_batch(redis_store& store,
                                               std::span<const claim_request> requests) {
    std::vector<claim_result> answers;
    if (requests.empty()) return answers;
    const redis_operations& calls = store.state().operations;
    const redis_record_settings& settings = calls.settings();
    const claim_request& first = requests.front();
    if (first.lease <= std::chrono::nanoseconds::zero() ||
        first.retention <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument(calls.who() + ": lease and retention must be positive");
    }
    // Shared by every claim of the batch (the contract's precondition).
    const std::string now = calls.now_argument(first.now);
    const std::string lease = redis_decimal(first.lease.count());
    const std::string retention = redis_decimal(first.retention.count());
    const std::string extra = redis_decimal(
        settings.clock == time_source::caller ? settings.caller_time_margin.count() : 0);
    const std::string cap =
        settings.max_records_per_scope == std::numeric_limits<std::size_t>::max()
            ? std::string()
            : redis_decimal(settings.max_records_per_scope);
    std::vector<claim_words> words(requests.size());
    std::vector<redis_command> commands;
    commands.reserve(2 * requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const claim_request& request = requests[i];
      claim_words& mine = words[i];
      mine.names = redis_keys_of(settings.prefix, request.scope, request.key);
      const std::string_view registry = calls.registry_of(mine.names.tag, mine.registry);
      const std::string_view fingerprint{reinterpret_cast<const char*>(request.fingerprint.data()),
                                         request.fingerprint.size()};
      commands.push_back(redis_command{
          redis_script::claim,
          {mine.names.record, mine.names.expiry, mine.names.lease},
          {now, lease, retention, fingerprint, request.key, extra, cap, request.recovery}});
      commands.push_back(redis_command{redis_script::enroll, {registry}, {mine.names.tag}});
    }
    std::vector<redis_reply> replies = calls.replicated(
        store.state().client.exchange(commands, "claim_batch", calls.wait_for_replicas(true)),
        "claim_batch", true);
    if (replies.size() != commands.size()) {
      throw store_error(store_failure::unavailable,
                        calls.who() + ": claim_batch: unexpected number of answers");
    }
    answers.reserve(requests.size());
    std::vector<redis_reply> pair(2);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      pair[0] = std::move(replies[2 * i]);
      pair[1] = std::move(replies[2 * i + 1]);
      answers.push_back(calls.claim_result_of(pair));
    }
    return answers;
  }

  static std::vector<bool> complete_batch(redis_store& store,
                                          std::span<const batch_completion> done) {
    std::vector<bool> applied;
    if (done.empty()) return applied;
    const redis_operations& calls = store.state().operations;
    const std::string& prefix = calls.settings().prefix;
    std::vector<redis_keys> names(done.size());
    std::vector<std::string> fences(done.size());
    std::vector<redis_command> commands;
    commands.reserve(done.size());
    for (std::size_t i = 0; i < done.size(); ++i) {
      names[i] = redis_keys_of(prefix, done[i].held.scope, done[i].held.key);
      fences[i] = redis_decimal(done[i].held.fence);
      commands.push_back(redis_command{redis_script::complete,
                                       {names[i].record, names[i].lease},
                                       {fences[i], done[i].response, done[i].held.key}});
    }
    std::vector<redis_reply> replies = calls.replicated(
        store.state().client.exchange(commands, "complete_batch", calls.wait_for_replicas(false)),
        "complete_batch", false);
    if (replies.size() != commands.size()) {
      throw store_error(store_failure::unavailable,
                        calls.who() + ": complete_batch: unexpected number of answers");
    }
    applied.reserve(done.size());
    std::vector<redis_reply> one(1);
    for (std::size_t i = 0; i < done.size(); ++i) {
      one[0] = std::move(replies[i]);
      applied.push_back(calls.applied(one, "complete"));
    }
    return applied;
  }
};

}  // namespace idem::detail

namespace idem {

inline std::vector<claim_result> redis_store::claim_batch(std::span<const claim_request> requests) {
  return detail::redis_batch_access::claim_batch(*this, requests);
}

inline std::vector<bool> redis_store::complete_batch(std::span<const batch_completion> done,
                                                     store_time /*now*/) {
  return detail::redis_batch_access::complete_batch(*this, done);
}

}  // namespace idem

#endif  // IDEM_STORE_REDIS_DETAIL_BATCH_HPP
