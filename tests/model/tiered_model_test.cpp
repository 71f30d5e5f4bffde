// Two tiered_stores over one durable store (memory_store, and PostgreSQL on the server
// scripts/test.sh started) against the locked_store model: each call of a random sequence goes
// to one tier or the other, as two processes sharing the durable store would make them, and
// every answer must be the model's.
//
// The sequences keep what tiered_store assumes (idem/store/tiered.hpp): no complete, release or
// checkpoint of a live completed record, and no clock stepping back (they are dropped from
// each generated sequence, which is otherwise store_model.hpp's). Everything else stays:
// takeovers, released keys claimed again, fences old and new, expiry and claims anew after it,
// sweeps, stuck.
#include <catch2/catch.hpp>

#include <idem/store/memory.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/tiered.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "store_model.hpp"
#include "stores/postgres/postgres_test_support.hpp"

namespace model = idem::testing::model;
namespace pgtest = idem::testing::postgres;

namespace {

// Two tiers over copies of one durable store; each call goes to the one a fixed pseudo-random
// sequence picks.
template <class Durable>
class two_tiers {
 public:
  explicit two_tiers(const Durable& durable, std::uint64_t seed)
      : one_(durable), two_(durable), state_(seed) {}
  idem::claim_result claim(const idem::claim_request& request) { return pick().claim(request); }
  bool complete(const idem::fenced_key& held, std::string_view response, idem::store_time now) {
    return pick().complete(held, response, now);
  }
  bool release(const idem::fenced_key& held) { return pick().release(held); }
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    return pick().checkpoint(held, recovery, lease_until);
  }
  std::optional<idem::record> find(std::string_view scope, std::string_view key,
                                   idem::store_time now) {
    return pick().find(scope, key, now);
  }
  std::size_t sweep(idem::store_time now) { return pick().sweep(now); }
  std::vector<idem::record> stuck(idem::store_time now, std::size_t limit) {
    return pick().stuck(now, limit);
  }
  std::uint64_t hits() const { return one_.tier_statistics().hits + two_.tier_statistics().hits; }

 private:
  idem::tiered_store<Durable>& pick() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state_ >> 63) != 0 ? one_ : two_;
  }
  idem::tiered_store<Durable> one_;
  idem::tiered_store<Durable> two_;
  std::uint64_t state_;
};

// `ops` less what breaks the tier's assumption, found by running them on the model as
// model::first_difference will (same start time, same choice of fences).
std::vector<model::op> keeping_the_assumption(const std::vector<model::op>& ops) {
  idem::locked_store reference;
  idem::manual_clock clock;
  std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> last_fence;
  std::vector<model::op> kept;
  for (const model::op& o : ops) {
    const idem::store_time now = clock.wall_now();
    const std::string& scope = model::scopes()[o.scope];
    const std::string& key = model::keys()[o.key];
    const auto identity = std::make_pair(o.scope, o.key);
    std::uint64_t fence = 1;
    if (const auto known = last_fence.find(identity); known != last_fence.end()) {
      switch (o.fence) {
        case model::fence_pick::last:
          fence = known->second;
          break;
        case model::fence_pick::older:
          fence = known->second > 1 ? known->second - 1 : 1;
          break;
        case model::fence_pick::newer:
          fence = known->second + 1;
          break;
        case model::fence_pick::first:
          fence = 1;
          break;
      }
    }
    const idem::fenced_key held{scope, key, fence};
    switch (o.kind) {
      case model::op_kind::complete:
      case model::op_kind::release:
      case model::op_kind::checkpoint: {
        const std::optional<idem::record> found = reference.find(scope, key, now);
        if (found && found->state == idem::record_state::completed) continue;
        if (o.kind == model::op_kind::complete) {
          (void)reference.complete(held, o.bytes, now);
        } else if (o.kind == model::op_kind::release) {
          (void)reference.release(held);
        } else {
          (void)reference.checkpoint(held, o.bytes, o.short_lease ? now : now + model::lease);
        }
        break;
      }
      case model::op_kind::claim: {
        const idem::claim_result got =
            reference.claim({scope, key, model::fingerprint(o.print), now, model::lease,
                             model::retention, o.bytes});
        if (got.status == idem::claim_status::claimed ||
            got.status == idem::claim_status::taken_over) {
          last_fence[identity] = got.fence;
        }
        break;
      }
      case model::op_kind::sweep:
        (void)reference.sweep(now);
        break;
      case model::op_kind::advance:
        if (model::jumps()[o.jump] < std::chrono::nanoseconds::zero()) continue;
        clock.advance(model::jumps()[o.jump]);
        break;
      case model::op_kind::find:
      case model::op_kind::stuck:
        break;
    }
    kept.push_back(o);
  }
  return kept;
}

// REQUIREs that two tiers made by `make` (each call a fresh pair over an empty durable store)
// answer every kept sequence as the model does, and that the sequences reached every kind of
// answer, tier hits included.
template <class Make>
void require_two_tiers_agree(Make make, const model::budget& limits) {
  model::coverage reached;
  std::uint64_t hits = 0;
  std::uint64_t seed = 0;
  const auto property = [&] {
    const std::vector<model::op> ops =
        keeping_the_assumption(*rc::gen::container<std::vector<model::op>>(model::gen_op()));
    auto store = make(++seed);
    const std::optional<std::string> difference = model::first_difference(store, ops, &reached);
    hits += store.hits();
    if (difference) RC_FAIL(*difference);
  };
  const rc::detail::TestResult result =
      rc::detail::checkTestable(property, rc::detail::TestMetadata{}, model::params_for(limits));
  if (!result.template is<rc::detail::SuccessResult>()) {
    std::ostringstream message;
    rc::detail::printResultMessage(result, message);
    FAIL(message.str());
  }
  INFO(reached.operations << " operations: " << reached.claimed << " claimed, "
                          << reached.taken_over << " taken over, " << reached.existing
                          << " existing, " << reached.applied << " applied, " << reached.refused
                          << " refused, " << reached.found << " found, " << reached.swept
                          << " swept, " << reached.stuck << " stuck, " << hits << " tier hits");
  CHECK(reached.claimed > 0);
  CHECK(reached.taken_over > 0);
  CHECK(reached.existing > 0);
  CHECK(reached.applied > 0);
  CHECK(reached.refused > 0);
  CHECK(reached.found > 0);
  CHECK(reached.swept > 0);
  CHECK(reached.stuck > 0);
  CHECK(hits > 0);
  SUCCEED();
}

}  // namespace

TEST_CASE("two tiered_stores over one memory_store answer as the locked_store model does",
          "[model][tiered]") {
  require_two_tiers_agree(
      [](std::uint64_t seed) {
        idem::memory_store::options bounds;
        bounds.expected_records = 64;
        return two_tiers<idem::memory_store>{idem::memory_store{bounds}, seed};
      },
      model::budget{500, 100});
}

TEST_CASE("two tiered_stores over one postgres_store answer as the locked_store model does",
          "[model][tiered]") {
  const std::string table = pgtest::unique_table("model_tiered");
  const pgtest::table_guard guard(table);
  pgtest::connection admin;
  idem::postgres_store::options config = pgtest::caller_time_options(table);
  config.conninfo += " options='-c synchronous_commit=off'";
  const idem::postgres_store store{config};
  require_two_tiers_agree(
      [&](std::uint64_t seed) {
        admin.exec("DELETE FROM \"" + table + "\"");
        return two_tiers<idem::postgres_store>{store, seed};
      },
      model::budget{200, 100});
}
