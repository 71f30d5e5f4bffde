// A Jepsen-style history checker for exactly-once under failover: what clients were told (the
// history of their calls through idem::idempotent) against what happened (the ledger of the
// handler's effects), checked once the nemesis is over and the system healed. It knows no store:
// the Redis failover test uses it (tests/failover/redis_failover_test.cpp), and any replicated
// store's test can.
//
// The rules, each a kind of violation:
//   double_effect         a key's effect ran more than once (the ledger holds two for it);
//   lost_acknowledgement  a key a client was acknowledged (a stored response: executed and
//                         recorded, or replayed), then a call made after that acknowledgement
//                         returned that was answered, but not with that response: the record went
//                         back in progress, or was gone and the handler ran again; and every
//                         acknowledged key's final read (after healing) must replay it;
//   changed_response      two clients were acknowledged different responses for one key;
//   unexplained_response  an acknowledged response that no effect in the ledger produced.
// Ambiguous calls (the store unavailable, or a response the store failed to record) promise
// nothing, as a timeout promises nothing: they are neither acknowledgements nor violations. A
// call refused as in progress (409) before any acknowledgement of its key is no violation either.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem::testing::failover {

/// What one call told its client.
enum class answer : std::uint8_t {
  acknowledged,  // a response the store recorded: executed (and recorded) or replayed
  ambiguous,     // no promise: the store unavailable, a response not recorded, an exception
  refused,       // answered without a response: in progress (409), or any other refusal
};

/// One client call, as the client saw it. Times are from one steady clock, in nanoseconds.
struct call {
  std::string key;
  answer result = answer::ambiguous;
  bool executed = false;  // the handler ran in this call
  std::string response;   // the response, when acknowledged
  std::int64_t invoked = 0;
  std::int64_t returned = 0;
  bool final = false;  // a read after healing
};

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The calls of every client, appended from any thread.
class history {
 public:
  void add(call made) {
    const std::lock_guard lock(mutex_);
    calls_.push_back(std::move(made));
  }
  std::vector<call> calls() const {
    const std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<call> calls_;
};

/// The effects, as the downstream system counts them: each run of a key's effect leaves one
/// entry, a token that names that run (what its response carries). Kept outside every node the
/// nemesis touches, so it survives all of them.
class ledger {
 public:
  /// Records one effect of `key`; answers its token ("key#n").
  std::string effect(std::string_view key) {
    const std::lock_guard lock(mutex_);
    std::string token = std::string(key) + "#" + std::to_string(++count_);
    effects_[std::string(key)].push_back(token);
    return token;
  }
  /// Records an effect with a token of the caller's (hand-made histories).
  void add(std::string key, std::string token) {
    const std::lock_guard lock(mutex_);
    ++count_;
    effects_[std::move(key)].push_back(std::move(token));
  }
  std::map<std::string, std::vector<std::string>> effects() const {
    const std::lock_guard lock(mutex_);
    return effects_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::string>> effects_;
  std::size_t count_ = 0;
};

enum class violation_kind : std::uint8_t {
  double_effect,
  lost_acknowledgement,
  changed_response,
  unexplained_response,
};

inline std::string_view to_string(violation_kind kind) {
  switch (kind) {
    case violation_kind::double_effect:
      return "double effect";
    case violation_kind::lost_acknowledgement:
      return "lost acknowledgement";
    case violation_kind::changed_response:
      return "changed response";
    case violation_kind::unexplained_response:
      return "unexplained response";
  }
  return "?";
}

struct violation {
  violation_kind kind;
  std::string key;
  std::string detail;
};

/// What the checker found, with the history's size.
struct report {
  std::vector<violation> violations;
  std::size_t calls = 0;
  std::size_t acknowledged = 0;
  std::size_t ambiguous = 0;
  std::size_t keys = 0;
  std::size_t effects = 0;

  std::size_t count(violation_kind kind) const {
    return static_cast<std::size_t>(
        std::count_if(violations.begin(), violations.end(),
                      [kind](const violation& found) { return found.kind == kind; }));
  }
  /// Keys with at least one violation.
  std::size_t keys_violated() const {
    std::vector<std::string> keys;
    for (const violation& found : violations)
      keys.push_back(found.key);
    std::sort(keys.begin(), keys.end());
    return static_cast<std::size_t>(std::unique(keys.begin(), keys.end()) - keys.begin());
  }
  /// One line of figures, then the first `most` violations, one a line.
  std::string summary(std::size_t most = 10) const {
    std::ostringstream out;
    out << calls << " calls (" << acknowledged << " acknowledged, " << ambiguous
        << " ambiguous) on " << keys << " keys, " << effects
        << " effects; violations: " << violations.size() << " (double effect "
        << count(violation_kind::double_effect) << ", lost acknowledgement "
        << count(violation_kind::lost_acknowledgement) << ", changed response "
        << count(violation_kind::changed_response) << ", unexplained response "
        << count(violation_kind::unexplained_response) << ") on " << keys_violated() << " keys";
    for (std::size_t i = 0; i < violations.size() && i < most; ++i) {
      out << "\n  " << to_string(violations[i].kind) << " " << violations[i].key << ": "
          << violations[i].detail;
    }
    return out.str();
  }
};

/// Checks `calls` against `effects` (key -> the tokens of its effects), by the rules at the top
/// of this header. At most one violation of each kind per key.
inline report check(const std::vector<call>& calls,
                    const std::map<std::string, std::vector<std::string>>& effects) {
  report found;
  found.calls = calls.size();
  std::map<std::string, std::vector<const call*>> by_key;
  for (const call& each : calls) {
    by_key[each.key].push_back(&each);
    if (each.result == answer::acknowledged) ++found.acknowledged;
    if (each.result == answer::ambiguous) ++found.ambiguous;
  }
  for (const auto& [key, tokens] : effects) {
    found.effects += tokens.size();
    if (tokens.size() > 1) {
      found.violations.push_back({violation_kind::double_effect, key,
                                  std::to_string(tokens.size()) + " effects, the first " +
                                      tokens.front() + ", the last " + tokens.back()});
    }
  }
  found.keys = by_key.size();
  for (auto& [key, list] : by_key) {
    std::sort(list.begin(), list.end(),
              [](const call* a, const call* b) { return a->invoked < b->invoked; });
    const auto effects_of = effects.find(key);
    const call* first_ack = nullptr;
    bool changed = false;
    bool unexplained = false;
    for (const call* each : list) {
      if (each->result != answer::acknowledged) continue;
      if (first_ack == nullptr || each->returned < first_ack->returned) first_ack = each;
    }
    for (const call* each : list) {
      if (each->result != answer::acknowledged) continue;
      if (!changed && each->response != first_ack->response) {
        changed = true;
        found.violations.push_back(
            {violation_kind::changed_response, key,
             "acknowledged '" + first_ack->response + "' and '" + each->response + "'"});
      }
      const bool produced = effects_of != effects.end() &&
                            std::find(effects_of->second.begin(), effects_of->second.end(),
                                      each->response) != effects_of->second.end();
      if (!unexplained && !produced) {
        unexplained = true;
        found.violations.push_back({violation_kind::unexplained_response, key,
                                    "'" + each->response + "' came from no effect"});
      }
    }
    if (first_ack == nullptr) continue;
    // After the first acknowledgement returned, every answered call must replay it.
    std::string lost;
    for (const call* each : list) {
      if (each->invoked <= first_ack->returned || each->result == answer::ambiguous) continue;
      if (each->result == answer::refused) {
        lost = "a call after the acknowledgement was refused (in progress)";
      } else if (each->executed) {
        lost = "the handler ran again after the acknowledgement";
      } else if (each->response != first_ack->response) {
        lost = "a call after the acknowledgement was answered '" + each->response + "'";
      }
      if (!lost.empty()) break;
    }
    if (lost.empty()) {
      const bool read_back = std::any_of(list.begin(), list.end(), [&](const call* each) {
        return each->final && each->result == answer::acknowledged &&
               each->response == first_ack->response;
      });
      if (!read_back)
        lost = "the final read after healing did not replay '" + first_ack->response + "'";
    }
    if (!lost.empty()) {
      found.violations.push_back({violation_kind::lost_acknowledgement, key, lost});
    }
  }
  return found;
}

}  // namespace idem::testing::failover
