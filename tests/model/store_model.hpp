// Model-based property tests of the store contract: random sequences of store operations, run on
// a store and on locked_store (the reference model: one mutex around one map, obviously right),
// answer for answer. Any difference is a failure, shrunk by RapidCheck to a short sequence.
//
// Operations: claim (with one of two fingerprints: new claims, takeovers after the lease, key
// misuse), complete / release / checkpoint under the fence last handed out, an older one, a
// newer one or fence 1, find, sweep, stuck, and moves of the manual clock: +1 s, one lease, +1 h,
// -1 h, one retention. Scopes and keys are chosen so that plain concatenation collides
// ("" + "abc" = "a" + "bc" = "ab" + "c"): a store that joined them would be caught.
//
// Bounded and reproducible: a fixed seed and a fixed number of sequences per store. RC_PARAMS
// overrides both for a longer search (RC_PARAMS="max_success=5000 seed=7"); a failure prints the
// shrunk sequence and the seed that found it.
#pragma once

#include <rapidcheck.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <idem/core/clock.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/locked.hpp>

namespace idem::testing::model {

using namespace std::chrono_literals;

inline constexpr std::chrono::nanoseconds lease = 30s;
// Two hours: a jump of an hour forward or back moves records across their expiry.
inline constexpr std::chrono::nanoseconds retention = 2h;

enum class op_kind : std::uint8_t {
  claim,
  complete,
  release,
  checkpoint,
  find,
  sweep,
  stuck,
  advance,
};

// Which fence a write presents: the last one handed out for its (scope, key), the one before it
// (a holder that was taken over), the one after it (never handed out), or 1.
enum class fence_pick : std::uint8_t { last, older, newer, first };

inline const std::vector<std::string>& scopes() {
  static const std::vector<std::string> all{"", "a", "ab"};
  return all;
}
inline const std::vector<std::string>& keys() {
  static const std::vector<std::string> all{"c", "bc", "abc"};
  return all;
}
inline const std::vector<std::chrono::nanoseconds>& jumps() {
  static const std::vector<std::chrono::nanoseconds> all{1s, lease, 1h, -1h, retention};
  return all;
}

struct op {
  op_kind kind = op_kind::find;
  std::size_t scope = 0;
  std::size_t key = 0;
  std::uint8_t print = 0;  // which of two fingerprints a claim carries
  fence_pick fence = fence_pick::last;
  std::string bytes;         // a response, or recovery bytes (a checkpoint's, a new record's)
  std::size_t jump = 0;      // advance: index into jumps()
  bool short_lease = false;  // checkpoint: lease_until = now (already due) instead of now + lease
};

inline const char* name(op_kind kind) {
  switch (kind) {
    case op_kind::claim:
      return "claim";
    case op_kind::complete:
      return "complete";
    case op_kind::release:
      return "release";
    case op_kind::checkpoint:
      return "checkpoint";
    case op_kind::find:
      return "find";
    case op_kind::sweep:
      return "sweep";
    case op_kind::stuck:
      return "stuck";
    case op_kind::advance:
      return "advance";
  }
  return "?";
}

inline std::string printable(const std::string& bytes) {
  std::ostringstream out;
  out << '"';
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '"' && c != '\\') {
      out << c;
    } else {
      static const char* hex = "0123456789abcdef";
      out << "\\x" << hex[u >> 4] << hex[u & 15];
    }
  }
  out << '"';
  return out.str();
}

inline void showValue(const op& o, std::ostream& out) {
  out << name(o.kind);
  switch (o.kind) {
    case op_kind::claim:
      out << "(\"" << scopes()[o.scope] << "\", \"" << keys()[o.key] << "\", print " << int(o.print)
          << ") recovery " << printable(o.bytes);
      break;
    case op_kind::complete:
    case op_kind::release:
    case op_kind::checkpoint: {
      static const char* picks[] = {"last", "older", "newer", "first"};
      out << "(\"" << scopes()[o.scope] << "\", \"" << keys()[o.key] << "\", fence "
          << picks[static_cast<int>(o.fence)] << ")";
      if (o.kind != op_kind::release) out << " bytes " << printable(o.bytes);
      if (o.kind == op_kind::checkpoint && o.short_lease) out << " lease due now";
      break;
    }
    case op_kind::find:
      out << "(\"" << scopes()[o.scope] << "\", \"" << keys()[o.key] << "\")";
      break;
    case op_kind::advance:
      out << " " << std::chrono::duration_cast<std::chrono::seconds>(jumps()[o.jump]).count()
          << " s";
      break;
    case op_kind::sweep:
    case op_kind::stuck:
      break;
  }
}

inline rc::Gen<op> gen_op() {
  using namespace rc;
  return gen::construct<op>(gen::weightedElement<op_kind>({{6, op_kind::claim},
                                                           {4, op_kind::complete},
                                                           {2, op_kind::release},
                                                           {2, op_kind::checkpoint},
                                                           {3, op_kind::find},
                                                           {1, op_kind::sweep},
                                                           {1, op_kind::stuck},
                                                           {3, op_kind::advance}}),
                            gen::inRange<std::size_t>(0, scopes().size()),
                            gen::inRange<std::size_t>(0, keys().size()),
                            gen::inRange<std::uint8_t>(0, 2),
                            gen::weightedElement<fence_pick>({{5, fence_pick::last},
                                                              {2, fence_pick::older},
                                                              {1, fence_pick::newer},
                                                              {1, fence_pick::first}}),
                            gen::resize(12, gen::container<std::string>(gen::arbitrary<char>())),
                            gen::inRange<std::size_t>(0, jumps().size()), gen::arbitrary<bool>());
}

inline digest fingerprint(std::uint8_t which) {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(0x40 + which * 17 + i);
  return digest{bytes};
}

inline std::string describe(const std::optional<record>& r) {
  if (!r) return "nothing";
  std::ostringstream out;
  out << "{scope " << printable(r->scope) << ", key " << printable(r->key) << ", "
      << to_string(r->state) << ", fence " << r->fence << ", created "
      << r->created_at.time_since_epoch().count() << ", lease "
      << r->lease_until.time_since_epoch().count() << ", expires "
      << r->expires_at.time_since_epoch().count() << ", response " << printable(r->response)
      << ", recovery " << printable(r->recovery) << "}";
  return out.str();
}

inline bool same_record(const record& a, const record& b, bool with_identity) {
  if (with_identity && (a.scope != b.scope || a.key != b.key)) return false;
  return a.fingerprint == b.fingerprint && a.state == b.state && a.fence == b.fence &&
         a.created_at == b.created_at && a.lease_until == b.lease_until &&
         a.expires_at == b.expires_at && a.response == b.response && a.recovery == b.recovery;
}

inline const char* name(claim_status status) {
  switch (status) {
    case claim_status::claimed:
      return "claimed";
    case claim_status::taken_over:
      return "taken_over";
    case claim_status::existing:
      return "existing";
    case claim_status::full:
      return "full";
  }
  return "?";
}

/// What the sequences of one property reached, so that a test can insist its generator still
/// reaches every interesting answer (a takeover, a refused fence, a sweep that removed, ...).
struct coverage {
  std::size_t operations = 0;
  std::size_t claimed = 0, taken_over = 0, existing = 0;
  std::size_t applied = 0, refused = 0;  // complete, release, checkpoint
  std::size_t found = 0, swept = 0, stuck = 0, backwards = 0, full = 0;
};

/// Runs `ops` on `store` and on a fresh locked_store from the same start time; answers the
/// first difference, described, or nothing when every answer agreed.
/// `scope_cap`: the stores were made with max_records_per_scope = scope_cap, and so is the
/// model.
template <Store S>
std::optional<std::string> first_difference(
    S& store, const std::vector<op>& ops, coverage* reached = nullptr,
    std::size_t scope_cap = std::numeric_limits<std::size_t>::max()) {
  coverage ignored;
  coverage& seen = reached != nullptr ? *reached : ignored;
  locked_store::options model_limits;
  model_limits.max_records_per_scope = scope_cap;
  locked_store reference{model_limits};
  manual_clock clock;  // 2026-01-01T00:00:00Z; moved forward and back by advance
  std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> last_fence;
  std::ostringstream trail;

  auto fail = [&](std::size_t step, const std::string& what) {
    std::ostringstream out;
    out << "step " << step << ": " << what << "\nsequence up to it:\n" << trail.str();
    return out.str();
  };

  for (std::size_t step = 0; step < ops.size(); ++step) {
    const op& o = ops[step];
    ++seen.operations;
    const store_time now = clock.wall_now();
    showValue(o, trail);
    trail << "  @" << now.time_since_epoch().count() << "\n";
    const std::string& scope = scopes()[o.scope];
    const std::string& key = keys()[o.key];
    const auto identity = std::make_pair(o.scope, o.key);
    std::uint64_t fence = 1;
    if (const auto known = last_fence.find(identity); known != last_fence.end()) {
      switch (o.fence) {
        case fence_pick::last:
          fence = known->second;
          break;
        case fence_pick::older:
          fence = known->second > 1 ? known->second - 1 : 1;
          break;
        case fence_pick::newer:
          fence = known->second + 1;
          break;
        case fence_pick::first:
          fence = 1;
          break;
      }
    }
    const fenced_key held{scope, key, fence};

    switch (o.kind) {
      case op_kind::claim: {
        // The op's bytes are the recovery bytes a new record starts with (a kept request).
        const claim_request request{scope,     key,    fingerprint(o.print), now, lease,
                                    retention, o.bytes};
        const claim_result want = reference.claim(request);
        const claim_result got = store.claim(request);
        if (got.status != want.status || got.fence != want.fence) {
          return fail(step, std::string("claim answered ") + name(got.status) + " fence " +
                                std::to_string(got.fence) + ", the model " + name(want.status) +
                                " fence " + std::to_string(want.fence));
        }
        if (want.status == claim_status::existing &&
            !same_record(got.existing, want.existing, false)) {
          return fail(step, "claim's snapshot " + describe(got.existing) + ", the model's " +
                                describe(want.existing));
        }
        if (want.status == claim_status::taken_over &&
            got.existing.recovery != want.existing.recovery) {
          return fail(step, "takeover's recovery " + printable(got.existing.recovery) +
                                ", the model's " + printable(want.existing.recovery));
        }
        if (want.status == claim_status::claimed || want.status == claim_status::taken_over) {
          last_fence[identity] = want.fence;
        }
        ++(want.status == claim_status::claimed      ? seen.claimed
           : want.status == claim_status::taken_over ? seen.taken_over
           : want.status == claim_status::full       ? seen.full
                                                     : seen.existing);
        break;
      }
      case op_kind::complete:
      case op_kind::release:
      case op_kind::checkpoint: {
        bool want = false;
        bool got = false;
        if (o.kind == op_kind::complete) {
          want = reference.complete(held, o.bytes, now);
          got = store.complete(held, o.bytes, now);
        } else if (o.kind == op_kind::release) {
          want = reference.release(held);
          got = store.release(held);
        } else {
          const store_time until = o.short_lease ? now : now + lease;
          want = reference.checkpoint(held, o.bytes, until);
          got = store.checkpoint(held, o.bytes, until);
        }
        if (got != want) {
          return fail(step, std::string(name(o.kind)) + " under fence " + std::to_string(fence) +
                                " answered " + (got ? "applied" : "refused") + ", the model " +
                                (want ? "applied" : "refused"));
        }
        ++(want ? seen.applied : seen.refused);
        break;
      }
      case op_kind::find: {
        const std::optional<record> want = reference.find(scope, key, now);
        const std::optional<record> got = store.find(scope, key, now);
        if (want.has_value() != got.has_value() || (want && !same_record(*got, *want, true))) {
          return fail(step, "find answered " + describe(got) + ", the model " + describe(want));
        }
        if (want) ++seen.found;
        break;
      }
      case op_kind::sweep: {
        const std::size_t want = reference.sweep(now);
        const std::size_t got = store.sweep(now);
        if (got != want) {
          return fail(
              step, "sweep removed " + std::to_string(got) + ", the model " + std::to_string(want));
        }
        seen.swept += want;
        break;
      }
      case op_kind::stuck: {
        // Stores list in their own order: compare as sets, ordered by (scope, key).
        auto sorted = [](std::vector<record> records) {
          std::sort(records.begin(), records.end(), [](const record& a, const record& b) {
            return std::tie(a.scope, a.key) < std::tie(b.scope, b.key);
          });
          return records;
        };
        const std::vector<record> want = sorted(reference.stuck(now, 100));
        const std::vector<record> got = sorted(store.stuck(now, 100));
        bool same = want.size() == got.size();
        for (std::size_t i = 0; same && i < want.size(); ++i)
          same = same_record(got[i], want[i], true);
        if (!same) {
          std::string listed;
          for (const record& r : got)
            listed += "\n  got  " + describe(r);
          for (const record& r : want)
            listed += "\n  want " + describe(r);
          return fail(step, "stuck differs:" + listed);
        }
        seen.stuck += want.size();
        break;
      }
      case op_kind::advance:
        if (jumps()[o.jump] < std::chrono::nanoseconds::zero()) ++seen.backwards;
        clock.advance(jumps()[o.jump]);
        break;
    }
  }
  return std::nullopt;
}

/// How many sequences a property runs, and from which seed; RC_PARAMS overrides both.
struct budget {
  int sequences = 300;
  int max_length = 100;
  std::uint64_t seed = 0x1de3'5eed;
  /// The per-scope record cap the stores were made with (none by default); the model gets it too.
  std::size_t scope_cap = std::numeric_limits<std::size_t>::max();
};

/// The RapidCheck parameters for `limits`: ours, unless RC_PARAMS says otherwise.
inline rc::detail::TestParams params_for(const budget& limits) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while tests run
  if (std::getenv("RC_PARAMS") == nullptr) {
    params.seed = limits.seed;
    params.maxSuccess = limits.sequences;
    params.maxSize = limits.max_length;
  }
  return params;
}

/// Checks the property "every sequence of operations gets the model's answers" for stores made
/// by `make` (a fresh, empty store each call). Answers RapidCheck's result: success, or the
/// shrunk failing sequence and how to reproduce it.
template <class Make>
rc::detail::TestResult check_against_model(Make make, const budget& limits = {},
                                           coverage* reached = nullptr) {
  const auto property = [&] {
    const std::vector<op> ops = *rc::gen::container<std::vector<op>>(gen_op());
    auto store = make();
    const std::optional<std::string> difference =
        first_difference(store, ops, reached, limits.scope_cap);
    if (difference) RC_FAIL(*difference);
  };
  return rc::detail::checkTestable(property, rc::detail::TestMetadata{}, params_for(limits));
}

/// REQUIREs that the property holds, for every one of the budget's sequences, for stores made
/// by `make`, and that the sequences reached every kind of answer.
template <class Make>
void require_model_agreement(Make make, const budget& limits = {}) {
  coverage reached;
  const rc::detail::TestResult result = check_against_model(std::move(make), limits, &reached);
  if (!result.template is<rc::detail::SuccessResult>()) {
    std::ostringstream message;
    rc::detail::printResultMessage(result, message);
    FAIL(message.str());
  }
  CHECK(result.template get<rc::detail::SuccessResult>().numSuccess ==
        params_for(limits).maxSuccess);
  INFO(reached.operations << " operations: " << reached.claimed << " claimed, "
                          << reached.taken_over << " taken over, " << reached.existing
                          << " existing, " << reached.applied << " fenced writes applied, "
                          << reached.refused << " refused, " << reached.found << " found, "
                          << reached.swept << " swept, " << reached.stuck << " stuck, "
                          << reached.backwards << " backward jumps, " << reached.full << " full");
  CHECK(reached.claimed > 0);
  CHECK(reached.taken_over > 0);
  CHECK(reached.existing > 0);
  CHECK(reached.applied > 0);
  CHECK(reached.refused > 0);
  CHECK(reached.found > 0);
  CHECK(reached.swept > 0);
  CHECK(reached.stuck > 0);
  CHECK(reached.backwards > 0);
  if (limits.scope_cap != std::numeric_limits<std::size_t>::max()) CHECK(reached.full > 0);
  // Shown with -s, to see what a budget buys.
  SUCCEED();
}

}  // namespace idem::testing::model
