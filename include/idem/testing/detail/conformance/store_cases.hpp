// The conformance cases that drive a store directly: claim, complete, release, checkpoint, find,
// sweep and stuck, with fences, expiry, scopes, capacity and awkward bytes.
#ifndef IDEM_TESTING_DETAIL_CONFORMANCE_STORE_CASES_HPP
#define IDEM_TESTING_DETAIL_CONFORMANCE_STORE_CASES_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/store_conformance.hpp>."
#endif

#include <idem/testing/detail/conformance/support.hpp>

namespace idem::testing {

namespace conformance {

// ---- the store itself --------------------------------------------------------------------

template <class Factory>
void new_key_is_claimed_under_fence_one() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  const claim_result claimed = store.claim(ask("tenant", "key-1", print(1), now));
  REQUIRE(claimed.status == claim_status::claimed);
  CHECK(claimed.fence == 1);

  const std::optional<record> found = store.find("tenant", "key-1", now);
  REQUIRE(found);
  CHECK(found->scope == "tenant");
  CHECK(found->key == "key-1");
  CHECK(found->state == record_state::in_progress);
  CHECK(found->fingerprint == print(1));
  CHECK(found->fence == 1);
  CHECK(found->created_at == now);
  CHECK(found->lease_until == now + lease);
  CHECK(found->expires_at == now + retention);
}

template <class Factory>
void a_live_claim_is_not_claimed_again() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  REQUIRE(store.claim(ask("tenant", "key", print(1), now)).status == claim_status::claimed);
  for (const digest& fingerprint : {print(1), print(2)}) {
    const claim_result again = store.claim(ask("tenant", "key", fingerprint, now + 1s));
    REQUIRE(again.status == claim_status::existing);
    CHECK(again.existing.state == record_state::in_progress);
    CHECK(again.existing.fingerprint == print(1));
    CHECK(again.existing.fence == 1);
    CHECK(again.existing.lease_until == now + lease);
  }
}

template <class Factory>
void a_completed_record_keeps_its_response_byte_for_byte() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  const std::string response = every_byte();
  const claim_result claimed = store.claim(ask("tenant", "key", print(1), now));
  REQUIRE(store.complete({"tenant", "key", claimed.fence}, response, now + 1s));

  const claim_result again = store.claim(ask("tenant", "key", print(1), now + 2s));
  REQUIRE(again.status == claim_status::existing);
  CHECK(again.existing.state == record_state::completed);
  CHECK(again.existing.response == response);
  CHECK(again.existing.expires_at == now + retention);
  const std::optional<record> found = store.find("tenant", "key", now + 2s);
  REQUIRE(found);
  CHECK(found->response == response);
}

template <class Factory>
void a_large_response_is_stored_whole() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  std::string response(1 << 20, '\0');
  std::mt19937_64 random(20261130);
  for (char& c : response)
    c = static_cast<char>(random());
  const claim_result claimed = store.claim(ask("tenant", "big", print(1), now));
  REQUIRE(store.complete({"tenant", "big", claimed.fence}, response, now));
  const std::optional<record> found = store.find("tenant", "big", now);
  REQUIRE(found);
  CHECK(found->response == response);
}

template <class Factory>
void an_abandoned_claim_is_taken_over_under_the_next_fence() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  const claim_result first = store.claim(ask("tenant", "key", print(1), now));
  REQUIRE(store.checkpoint({"tenant", "key", first.fence}, "step one", now + 1s + lease));

  // Still within the renewed lease: not yet.
  CHECK(store.claim(ask("tenant", "key", print(1), now + lease)).status == claim_status::existing);

  const auto later = now + 1s + lease;
  const claim_result second = store.claim(ask("tenant", "key", print(1), later));
  REQUIRE(second.status == claim_status::taken_over);
  CHECK(second.fence == first.fence + 1);
  CHECK(second.existing.recovery == "step one");
  CHECK(second.existing.lease_until == later + lease);

  const std::optional<record> found = store.find("tenant", "key", later);
  REQUIRE(found);
  CHECK(found->fence == second.fence);
  CHECK(found->lease_until == later + lease);
}

template <class Factory>
void an_abandoned_claim_is_not_taken_over_by_another_request() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  REQUIRE(store.claim(ask("tenant", "key", print(1), now)).status == claim_status::claimed);
  const claim_result other = store.claim(ask("tenant", "key", print(2), now + 2 * lease));
  REQUIRE(other.status == claim_status::existing);
  CHECK(other.existing.fingerprint == print(1));
  CHECK(other.existing.fence == 1);
}

template <class Factory>
void a_paused_holder_cannot_complete_release_or_checkpoint_after_a_takeover() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  const claim_result paused = store.claim(ask("tenant", "key", print(1), now));
  const claim_result taker = store.claim(ask("tenant", "key", print(1), now + lease));
  REQUIRE(taker.status == claim_status::taken_over);

  const fenced_key old_holder{"tenant", "key", paused.fence};
  CHECK_FALSE(store.checkpoint(old_holder, "stale", now + 10 * lease));
  CHECK_FALSE(store.complete(old_holder, "stale response", now + lease));
  CHECK_FALSE(store.release(old_holder));

  const std::optional<record> during = store.find("tenant", "key", now + lease);
  REQUIRE(during);
  CHECK(during->state == record_state::in_progress);
  CHECK(during->fence == taker.fence);
  CHECK(during->recovery.empty());

  REQUIRE(store.complete({"tenant", "key", taker.fence}, "recovered", now + lease + 1s));
  CHECK_FALSE(store.complete(old_holder, "stale response", now + lease + 2s));
  const std::optional<record> after = store.find("tenant", "key", now + lease + 2s);
  REQUIRE(after);
  CHECK(after->state == record_state::completed);
  CHECK(after->response == "recovered");
}

template <class Factory>
void a_released_key_is_claimed_again_under_a_higher_fence() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  const claim_result first = store.claim(ask("tenant", "key", print(1), now));
  REQUIRE(store.release({"tenant", "key", first.fence}));
  CHECK_FALSE(store.find("tenant", "key", now));
  CHECK_FALSE(store.release({"tenant", "key", first.fence}));

  // A corrected retry may even carry another body: the released key is free.
  const claim_result second = store.claim(ask("tenant", "key", print(2), now + 1s));
  REQUIRE(second.status == claim_status::claimed);
  CHECK(second.fence > first.fence);
  CHECK_FALSE(store.complete({"tenant", "key", first.fence}, "stale", now + 2s));
  const std::optional<record> found = store.find("tenant", "key", now + 2s);
  REQUIRE(found);
  CHECK(found->fingerprint == print(2));
  CHECK(found->state == record_state::in_progress);
}

template <class Factory>
void writes_to_an_unknown_key_do_nothing() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  CHECK_FALSE(store.complete({"tenant", "nobody", 1}, "x", now));
  CHECK_FALSE(store.checkpoint({"tenant", "nobody", 1}, "x", now));
  CHECK_FALSE(store.release({"tenant", "nobody", 1}));
  CHECK_FALSE(store.find("tenant", "nobody", now));
}

template <class Factory>
void scopes_never_share_or_see_records() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  // A separator-joined identity would make these two one record.
  const claim_result left = store.claim(ask("a:b", "c", print(1), now));
  const claim_result right = store.claim(ask("a", "b:c", print(2), now));
  REQUIRE(left.status == claim_status::claimed);
  REQUIRE(right.status == claim_status::claimed);
  // Equal keys in different scopes, including an empty scope and one with a NUL byte.
  const std::string nul_scope("t\0x", 3);
  for (const std::string_view scope : {std::string_view{"tenant-1"}, std::string_view{"tenant-2"},
                                       std::string_view{}, std::string_view{nul_scope}}) {
    INFO("scope of " << scope.size() << " bytes");
    REQUIRE(store.claim(ask(scope, "same-key", print(3), now)).status == claim_status::claimed);
  }
  REQUIRE(store.complete({"tenant-1", "same-key", 1}, "one", now));
  const std::optional<record> other = store.find("tenant-2", "same-key", now);
  REQUIRE(other);
  CHECK(other->state == record_state::in_progress);
  CHECK(other->response.empty());
  // Another scope's key answers exactly as an absent one.
  CHECK_FALSE(store.find("tenant-3", "same-key", now));
  CHECK(store.claim(ask("tenant-3", "same-key", print(9), now)).status == claim_status::claimed);
}

template <class Factory>
void awkward_bytes_round_trip() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  const std::string key(255, '~');
  const std::string scope = every_byte().substr(0, 256);
  const std::string recovery = every_byte();
  const claim_result claimed = store.claim(ask(scope, key, print(7), now));
  REQUIRE(claimed.status == claim_status::claimed);
  REQUIRE(store.checkpoint({scope, key, claimed.fence}, recovery, now + lease));
  std::optional<record> found = store.find(scope, key, now);
  REQUIRE(found);
  CHECK(found->scope == scope);
  CHECK(found->key == key);
  CHECK(found->recovery == recovery);
  REQUIRE(store.complete({scope, key, claimed.fence}, std::string_view{}, now));
  found = store.find(scope, key, now);
  REQUIRE(found);
  CHECK(found->state == record_state::completed);
  CHECK(found->response.empty());
}

template <class Factory>
void records_expire_after_retention_and_sweep_removes_them() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  for (int i = 0; i < 10; ++i) {
    const std::string key = "key-" + std::to_string(i);
    const claim_result claimed = store.claim(ask("tenant", key, print(1), now));
    if (i % 2 == 0) REQUIRE(store.complete({"tenant", key, claimed.fence}, "done", now));
  }
  const auto later = now + 1h;
  REQUIRE(store.claim(ask("tenant", "young", print(1), later)).status == claim_status::claimed);

  CHECK(store.find("tenant", "key-0", now + retention - 1ns));
  CHECK_FALSE(store.find("tenant", "key-0", now + retention));
  CHECK_FALSE(store.find("tenant", "key-1", now + retention));

  // An expired record is absent for claims too, swept or not.
  const claim_result again = store.claim(ask("tenant", "key-0", print(2), now + retention));
  REQUIRE(again.status == claim_status::claimed);
  CHECK(again.fence >= 1);

  // key-1..key-9 expired; key-0 was replaced by a fresh claim; "young" is live.
  CHECK(store.sweep(now + retention) == 9);
  CHECK(store.sweep(now + retention) == 0);
  CHECK(store.find("tenant", "young", now + retention));
  CHECK(store.find("tenant", "key-0", now + retention));
  CHECK(store.sweep(later + retention) == 1);
  CHECK(store.sweep(now + retention + retention) == 1);
}

template <class Factory>
void stuck_lists_claims_past_their_lease_and_changes_nothing() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  const claim_result done = store.claim(ask("tenant", "done", print(1), now));
  REQUIRE(store.complete({"tenant", "done", done.fence}, "ok", now));
  store.claim(ask("tenant", "abandoned-1", print(1), now));
  store.claim(ask("tenant", "abandoned-2", print(1), now));
  store.claim(ask("other", "abandoned-3", print(1), now));
  store.claim(ask("tenant", "running", print(1), now + lease));

  std::vector<record> stuck = store.stuck(now + lease, 100);
  std::vector<std::string> keys;
  for (const record& r : stuck) {
    CHECK(r.state == record_state::in_progress);
    keys.push_back(r.key);
  }
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"abandoned-1", "abandoned-2", "abandoned-3"});
  CHECK(store.stuck(now + lease, 2).size() == 2);
  CHECK(store.stuck(now, 100).empty());
  // Reporting did not take anything over.
  const std::optional<record> still = store.find("tenant", "abandoned-1", now + lease);
  REQUIRE(still);
  CHECK(still->fence == 1);
  // Expired records are not stuck, they are gone.
  CHECK(store.stuck(now + lease + retention, 100).empty());
}

template <class Factory>
void a_full_store_refuses_new_claims_and_keeps_live_records() {
  if constexpr (!Factory::bounded) {
    SUCCEED("this store has no capacity bound to test");
  } else {
    Factory factory;
    store_limits limits;
    limits.max_records = 3;
    auto store = fresh(factory, limits);
    const auto now = start();
    for (const char* key : {"a", "b", "c"}) {
      REQUIRE(store.claim(ask("tenant", key, print(1), now)).status == claim_status::claimed);
    }
    CHECK(store.claim(ask("tenant", "d", print(1), now + 1s)).status == claim_status::full);
    // A claim past its lease is still live: it is never evicted to make room.
    CHECK(store.claim(ask("tenant", "d", print(1), now + 2 * lease)).status == claim_status::full);
    for (const char* key : {"a", "b", "c"})
      CHECK(store.find("tenant", key, now + 2 * lease));
    // Existing keys are still answered when full.
    CHECK(store.claim(ask("tenant", "a", print(1), now + 1s)).status == claim_status::existing);
    // Expired records make room.
    CHECK(store.claim(ask("tenant", "d", print(1), now + retention)).status ==
          claim_status::claimed);
  }
}

template <class Factory>
void a_response_larger_than_the_store_accepts_is_refused_and_writes_nothing() {
  if constexpr (!Factory::bounded) {
    SUCCEED("this store has no capacity bound to test");
  } else {
    Factory factory;
    store_limits limits;
    limits.max_bytes = 4096;
    auto store = fresh(factory, limits);
    const auto now = start();
    const claim_result claimed = store.claim(ask("tenant", "key", print(1), now));
    REQUIRE(claimed.status == claim_status::claimed);
    const std::string huge(8192, 'x');
    try {
      (void)store.complete({"tenant", "key", claimed.fence}, huge, now);
      FAIL("complete accepted more bytes than max_bytes");
    } catch (const store_error& error) {
      CHECK(error.failure() == store_failure::full);
    }
    const std::optional<record> found = store.find("tenant", "key", now);
    REQUIRE(found);
    CHECK(found->state == record_state::in_progress);
    CHECK(found->response.empty());
    // The holder can still store a response that fits.
    CHECK(store.complete({"tenant", "key", claimed.fence}, "fits", now));
  }
}

template <class Factory>
void a_new_record_starts_with_the_recovery_bytes_its_claim_gives() {
  Factory factory;
  auto store = fresh(factory);
  const auto now = start();
  const std::string kept = every_byte();
  claim_request first = ask("tenant", "key", print(1), now);
  first.recovery = kept;
  REQUIRE(store.claim(first).status == claim_status::claimed);
  std::optional<record> found = store.find("tenant", "key", now);
  REQUIRE(found);
  CHECK(found->recovery == kept);
  // Another claim, live or taking over, never replaces them: they are the first holder's.
  claim_request other = ask("tenant", "key", print(1), now + 1s);
  other.recovery = "another request";
  const claim_result live = store.claim(other);
  REQUIRE(live.status == claim_status::existing);
  CHECK(live.existing.recovery == kept);
  other.now = now + lease;
  const claim_result taken = store.claim(other);
  REQUIRE(taken.status == claim_status::taken_over);
  CHECK(taken.existing.recovery == kept);
  found = store.find("tenant", "key", now + lease);
  REQUIRE(found);
  CHECK(found->recovery == kept);
  const std::vector<record> stuck = store.stuck(now + 2 * lease, 10);
  REQUIRE(stuck.size() == 1);
  CHECK(stuck[0].recovery == kept);
  // A record that replaces a released one starts with its own claim's bytes, not the old ones.
  REQUIRE(store.release({"tenant", "key", taken.fence}));
  claim_request again = ask("tenant", "key", print(2), now + 2 * lease);
  again.recovery = "the next request";
  const claim_result next = store.claim(again);
  REQUIRE(next.status == claim_status::claimed);
  found = store.find("tenant", "key", now + 2 * lease);
  REQUIRE(found);
  CHECK(found->recovery == "the next request");
  // And one that replaces an expired record, too; none given, none kept.
  const claim_result fresh_one = store.claim(ask("tenant", "key", print(3), now + retention * 2));
  REQUIRE(fresh_one.status == claim_status::claimed);
  found = store.find("tenant", "key", now + retention * 2);
  REQUIRE(found);
  CHECK(found->recovery.empty());
}

template <class Factory>
void recovery_bytes_a_bounded_store_cannot_hold_answer_full_and_store_nothing() {
  if constexpr (!Factory::bounded) {
    SUCCEED("this store has no capacity bound to test");
  } else {
    Factory factory;
    store_limits limits;
    limits.max_bytes = 4096;
    auto store = fresh(factory, limits);
    const auto now = start();
    const std::string huge(8192, 'x');
    claim_request request = ask("tenant", "key", print(1), now);
    request.recovery = huge;
    CHECK(store.claim(request).status == claim_status::full);
    CHECK_FALSE(store.find("tenant", "key", now));
    request.recovery = "fits";
    CHECK(store.claim(request).status == claim_status::claimed);
  }
}

}  // namespace conformance
}  // namespace idem::testing

#endif  // IDEM_TESTING_DETAIL_CONFORMANCE_STORE_CASES_HPP
