// The inspection conformance suite: InspectableStore (idem/store/inspect.hpp) as Catch2 test
// cases, for any store that has it, including your own.
//
//   #include <catch2/catch.hpp>                        // Catch2 v2, before this header
//   #include <idem/testing/inspect_conformance.hpp>
//   IDEM_INSPECT_CONFORMANCE_TESTS(my_store_factory)    // the store conformance suite's factory
//
// Each case is named "inspect conformance: <behaviour> - <factory>", tagged [inspect]. Records
// are made with the store's own claim, complete, release and checkpoint, as a wrapper makes
// them; time is given to every call, so leases and retention are exact.
#ifndef IDEM_TESTING_INSPECT_CONFORMANCE_HPP
#define IDEM_TESTING_INSPECT_CONFORMANCE_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/inspect_conformance.hpp>."
#endif

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/inspect.hpp>
#include <idem/testing/detail/conformance/registration.hpp>
#include <idem/testing/store_conformance.hpp>

namespace idem::testing::inspect {

using namespace std::chrono_literals;

inline const store_time t0 = store_time{} + std::chrono::hours{24 * 365 * 50};

inline digest print_of(std::uint8_t byte) {
  std::array<std::uint8_t, 16> bytes{};
  bytes.fill(byte);
  return digest(bytes);
}

/// A claim of (scope, key) at `now`: lease 10 s, retention 1 h.
template <class Store>
claim_result claim_at(Store& store, std::string_view scope, std::string_view key, store_time now,
                      std::string_view recovery = {}) {
  claim_request request{scope, key, print_of(7), now, 10s, 1h, recovery};
  return store.claim(request);
}

template <class Store>
std::vector<record> every_page(Store& store, const record_filter& filter, std::size_t limit,
                               store_time now, std::size_t* pages = nullptr) {
  std::vector<record> all;
  std::string cursor;
  std::size_t count = 0;
  for (;;) {
    record_page page = store.list_records(filter, cursor, limit, now);
    ++count;
    REQUIRE(page.records.size() <= limit);
    for (record& r : page.records)
      all.push_back(std::move(r));
    if (page.next.empty()) break;
    REQUIRE(page.next != cursor);
    cursor = page.next;
    REQUIRE(count < 100000);
  }
  if (pages != nullptr) *pages = count;
  return all;
}

template <class Factory>
auto fresh(Factory& factory) {
  return factory.make(store_limits{});
}

template <class Factory>
void pages_visit_every_live_record_once() {
  Factory factory;
  auto store = fresh(factory);
  static_assert(InspectableStore<decltype(store)>);
  // 3 scopes × 25 keys: completed, in progress, released and expired among them.
  std::set<std::pair<std::string, std::string>> live;
  for (const char* scope : {"acct-a", "acct-b", "acct-c"}) {
    for (int i = 0; i < 25; ++i) {
      const std::string key = "key-" + std::to_string(i);
      const claim_result claimed = claim_at(store, scope, key, t0);
      REQUIRE(claimed.status == claim_status::claimed);
      const fenced_key held{scope, key, claimed.fence};
      if (i % 5 == 0) {
        REQUIRE(store.release(held));
        continue;  // released: not listed
      }
      if (i % 2 == 0) REQUIRE(store.complete(held, "answer " + key, t0));
      live.emplace(scope, key);
    }
  }
  // A record past its retention is not listed either.
  REQUIRE(claim_at(store, "acct-old", "gone", t0 - 2h).status == claim_status::claimed);
  for (const std::size_t limit : {std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
    CAPTURE(limit);
    std::size_t pages = 0;
    const std::vector<record> all = every_page(store, record_filter{}, limit, t0 + 1s, &pages);
    std::set<std::pair<std::string, std::string>> seen;
    for (const record& r : all) {
      CHECK(seen.emplace(r.scope, r.key).second);  // once
    }
    CHECK(seen == live);
    CHECK(pages >= (live.size() + limit - 1) / limit);
  }
  // Whole: the response of a completed record, the fence, the times.
  const std::vector<record> all = every_page(store, record_filter{}, 1000, t0 + 1s);
  for (const record& r : all) {
    CAPTURE(r.scope, r.key);
    CHECK(r.fence == 1);
    CHECK(r.created_at == t0);
    CHECK(r.expires_at == t0 + 1h);
    if (r.state == record_state::completed) CHECK(r.response == "answer " + r.key);
  }
}

template <class Factory>
void filters_narrow_the_pages() {
  Factory factory;
  auto store = fresh(factory);
  // acct-a: k1 completed (claimed at t0), k2 in progress (t0 + 1 min, lease to + 10 s),
  // k3 in progress with recovery bytes, checkpointed to a lease far out; acct-b: k1 completed.
  const claim_result a1 = claim_at(store, "acct-a", "k1", t0);
  REQUIRE(store.complete(fenced_key{"acct-a", "k1", a1.fence}, "r1", t0));
  REQUIRE(claim_at(store, "acct-a", "k2", t0 + 1min).status == claim_status::claimed);
  const claim_result a3 = claim_at(store, "acct-a", "k3", t0 + 1min, "request");
  REQUIRE(store.checkpoint(fenced_key{"acct-a", "k3", a3.fence}, "step one", t0 + 30min));
  const claim_result b1 = claim_at(store, "acct-b", "k1", t0);
  REQUIRE(store.complete(fenced_key{"acct-b", "k1", b1.fence}, "rb", t0));
  const store_time now = t0 + 2min;
  auto keys = [&](const record_filter& filter) {
    std::set<std::string> out;
    for (const record& r : every_page(store, filter, 2, now))
      out.insert(r.scope + "/" + r.key);
    return out;
  };
  record_filter scope_a;
  scope_a.scope = "acct-a";
  CHECK(keys(scope_a) == std::set<std::string>{"acct-a/k1", "acct-a/k2", "acct-a/k3"});
  record_filter in_progress;
  in_progress.state = record_state::in_progress;
  CHECK(keys(in_progress) == std::set<std::string>{"acct-a/k2", "acct-a/k3"});
  record_filter completed_b = scope_a;
  completed_b.scope = "acct-b";
  completed_b.state = record_state::completed;
  CHECK(keys(completed_b) == std::set<std::string>{"acct-b/k1"});
  record_filter older;
  older.created_before = t0 + 30s;
  CHECK(keys(older) == std::set<std::string>{"acct-a/k1", "acct-b/k1"});
  record_filter lease_past;
  lease_past.lease_ended_by = now;  // k2's lease ended at t0 + 1 min 10 s; k3's is far out
  CHECK(keys(lease_past) == std::set<std::string>{"acct-a/k2"});
  // The recovery bytes come whole.
  record_filter one = in_progress;
  one.scope = "acct-a";
  for (const record& r : every_page(store, one, 10, now)) {
    if (r.key == "k3") CHECK(r.recovery == "step one");
  }
  // An empty scope, a scope of no record: empty pages, no next.
  record_filter nobody;
  nobody.scope = "acct-z";
  const record_page none = store.list_records(nobody, "", 10, now);
  CHECK(none.records.empty());
  CHECK(none.next.empty());
}

template <class Factory>
void a_cursor_the_store_did_not_make_is_refused() {
  Factory factory;
  auto store = fresh(factory);
  REQUIRE(claim_at(store, "s", "k", t0).status == claim_status::claimed);
  CHECK_THROWS_AS(store.list_records(record_filter{}, "not a cursor!", 10, t0),
                  std::invalid_argument);
  CHECK_THROWS_AS(store.list_records(record_filter{}, "", 0, t0), std::invalid_argument);
}

template <class Factory>
void forgetting_a_completed_record_lets_its_key_run_again() {
  Factory factory;
  auto store = fresh(factory);
  const claim_result first = claim_at(store, "s", "k", t0);
  REQUIRE(store.complete(fenced_key{"s", "k", first.fence}, "first answer", t0));
  // The operator looked at fence 1; it is still 1.
  forget_request request{"s", "k", t0 + 1s, first.fence, false};
  const forget_result forgotten = store.forget(request);
  CHECK(forgotten.status == forget_status::forgotten);
  CHECK(forgotten.fence == first.fence);
  CHECK_FALSE(store.find("s", "k", t0 + 1s).has_value());
  CHECK(every_page(store, record_filter{}, 10, t0 + 1s).empty());
  // Again: nothing left to forget.
  CHECK(store.forget(request).status == forget_status::absent);
  // The next claim runs anew, under a fence higher than any handed out before.
  const claim_result again = claim_at(store, "s", "k", t0 + 2s);
  CHECK(again.status == claim_status::claimed);
  CHECK(again.fence > first.fence);
}

template <class Factory>
void forgetting_refuses_a_live_claim_and_a_changed_fence() {
  Factory factory;
  auto store = fresh(factory);
  const claim_result held = claim_at(store, "s", "k", t0);
  // A live claim: refused, unchanged.
  const forget_result live = store.forget(forget_request{"s", "k", t0 + 1s, std::nullopt, false});
  CHECK(live.status == forget_status::live_claim);
  CHECK(live.fence == held.fence);
  REQUIRE(store.find("s", "k", t0 + 1s).has_value());
  // A fence other than the record's: refused, unchanged.
  const forget_result stale = store.forget(forget_request{"s", "k", t0 + 1s, held.fence + 5, true});
  CHECK(stale.status == forget_status::fence_changed);
  CHECK(stale.fence == held.fence);
  // Absent keys and other scopes.
  CHECK(store.forget(forget_request{"s", "other", t0 + 1s, std::nullopt, true}).status ==
        forget_status::absent);
  CHECK(store.forget(forget_request{"t", "k", t0 + 1s, std::nullopt, true}).status ==
        forget_status::absent);
  // Its holder still completes it.
  CHECK(store.complete(fenced_key{"s", "k", held.fence}, "done", t0 + 2s));
  // A claim whose lease has passed may be forgotten without force.
  const claim_result other = claim_at(store, "s", "k2", t0);
  CHECK(store.forget(forget_request{"s", "k2", t0 + 11s, other.fence, false}).status ==
        forget_status::forgotten);
}

template <class Factory>
void a_forced_forget_fences_out_the_live_holder() {
  Factory factory;
  auto store = fresh(factory);
  const claim_result held = claim_at(store, "s", "k", t0);
  const fenced_key holder{"s", "k", held.fence};
  const forget_result forced = store.forget(forget_request{"s", "k", t0 + 1s, held.fence, true});
  CHECK(forced.status == forget_status::forgotten);
  // The holder, still running, can write nothing more.
  CHECK_FALSE(store.checkpoint(holder, "late step", t0 + 20s));
  CHECK_FALSE(store.complete(holder, "late answer", t0 + 2s));
  CHECK_FALSE(store.release(holder));
  // Not even after the key was claimed again: the new holder's record is untouched.
  const claim_result next = claim_at(store, "s", "k", t0 + 3s);
  REQUIRE(next.status == claim_status::claimed);
  CHECK(next.fence > held.fence);
  CHECK_FALSE(store.complete(holder, "late answer", t0 + 4s));
  REQUIRE(store.complete(fenced_key{"s", "k", next.fence}, "new answer", t0 + 4s));
  const auto found = store.find("s", "k", t0 + 4s);
  REQUIRE(found.has_value());
  CHECK(found->response == "new answer");
}

}  // namespace idem::testing::inspect

// One Catch2 test case per behaviour; none is tagged [concurrency], so a build that defines
// IDEM_TESTING_CONCURRENCY_ONLY registers none (detail/conformance/registration.hpp).
#define IDEM_INSPECT_CASE(Factory, behaviour, function)                             \
  IDEM_CONFORMANCE_SERIAL(                                                          \
      TEMPLATE_TEST_CASE("inspect conformance: " behaviour, "[inspect]", Factory) { \
        ::idem::testing::inspect::function<TestType>();                             \
      })

#define IDEM_INSPECT_CONFORMANCE_TESTS(Factory)                                         \
  IDEM_INSPECT_CASE(Factory, "pages visit every live record once, whole",               \
                    pages_visit_every_live_record_once)                                 \
  IDEM_INSPECT_CASE(Factory, "filters narrow the pages by scope, state, age and lease", \
                    filters_narrow_the_pages)                                           \
  IDEM_INSPECT_CASE(Factory, "a cursor the store did not make is refused",              \
                    a_cursor_the_store_did_not_make_is_refused)                         \
  IDEM_INSPECT_CASE(Factory, "forgetting a completed record lets its key run again",    \
                    forgetting_a_completed_record_lets_its_key_run_again)               \
  IDEM_INSPECT_CASE(Factory, "forgetting refuses a live claim and a changed fence",     \
                    forgetting_refuses_a_live_claim_and_a_changed_fence)                \
  IDEM_INSPECT_CASE(Factory, "a forced forget fences out the live holder",              \
                    a_forced_forget_fences_out_the_live_holder)

#endif  // IDEM_TESTING_INSPECT_CONFORMANCE_HPP
