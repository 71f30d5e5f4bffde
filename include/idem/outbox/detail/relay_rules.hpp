// The relay's rules for one settled batch, apart from any store, sink or clock so that each
// rule is testable alone: what becomes of an entry given what the sink answered for it.
//
//   acknowledged                          -> published
//   rejected                              -> dead at once, with the sink's reason
//   failed, attempts + 1 >= max_attempts  -> dead, with the last error
//   failed, behind a failed entry of its  -> held back: left as it was, no attempt counted
//     partition key earlier in the batch
//   failed otherwise                      -> retried after a backoff (the relay picks when)
//
// Held back, because the sink contract asks a sink that fails an entry to fail the later entries
// of its key too (to keep their order): those were never really tried, and the earlier entry
// holds them back in the outbox anyway until it is published or dead. Counting attempts against
// them would dead-letter messages the sink never refused.
#ifndef IDEM_OUTBOX_DETAIL_RELAY_RULES_HPP
#define IDEM_OUTBOX_DETAIL_RELAY_RULES_HPP

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <idem/outbox/sink.hpp>

namespace idem::detail {

enum class relay_verdict : std::uint8_t { publish, retry, dead_failed, dead_rejected, held_back };

// One verdict per entry, in the batch's order. `results` has one element per entry.
inline void relay_verdicts(std::span<const outbox_entry> entries,
                           std::span<const sink_result> results, std::uint32_t max_attempts,
                           std::vector<relay_verdict>& out) {
  out.clear();
  out.reserve(entries.size());
  std::unordered_set<std::string_view> failed_keys;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const outbox_entry& entry = entries[i];
    switch (results[i].status) {
      case sink_status::acknowledged:
        out.push_back(relay_verdict::publish);
        break;
      case sink_status::rejected:
        out.push_back(relay_verdict::dead_rejected);
        break;
      case sink_status::failed:
        if (!failed_keys.insert(entry.message.partition_key).second) {
          out.push_back(relay_verdict::held_back);
        } else if (entry.attempts + std::uint64_t{1} >= max_attempts) {
          out.push_back(relay_verdict::dead_failed);
        } else {
          out.push_back(relay_verdict::retry);
        }
        break;
    }
  }
}

}  // namespace idem::detail

#endif  // IDEM_OUTBOX_DETAIL_RELAY_RULES_HPP
