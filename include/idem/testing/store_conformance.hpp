// The store conformance suite: the store contract (idem/store/contract.hpp) as Catch2 test cases, for any
// store, including your own.
//
//   #include <catch2/catch.hpp>                       // Catch2 v2, before this header
//   #include <idem/testing/store_conformance.hpp>
//
//   struct my_store_factory {
//     static constexpr bool bounded = true;             // honours store_limits (else false)
//     my_store make(const idem::testing::store_limits& limits);  // a fresh, empty store
//   };
//   IDEM_STORE_CONFORMANCE_TESTS(my_store_factory)
//
// Each behaviour is one test case, named "store conformance: <behaviour> - <factory>", tagged
// [conformance]; the many-thread storm is also tagged [concurrency]. The factory object lives as
// long as the test case, so a durable store can keep its temporary directory or server in it.
//
// It checks the store directly (claim, complete, release, checkpoint, find, sweep, stuck, with
// fences, expiry, scopes, capacity and awkward bytes) and through idempotent and inbox: every
// row of the semantics table, fenced takeover with a paused holder, the failure policies, and a
// storm of 64 threads on 1,000 keys with an effect counter. Time is a manual_clock, so leases
// and retention are exact and instant.
#ifndef IDEM_TESTING_STORE_CONFORMANCE_HPP
#define IDEM_TESTING_STORE_CONFORMANCE_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/store_conformance.hpp>."
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <idem/server/codec.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/server/inbox.hpp>
#include <idem/policies.hpp>
#include <idem/server/request.hpp>
#include <idem/store/contract.hpp>
#include <idem/testing/faulty_store.hpp>

namespace idem::testing {

/// What a factory's store may hold, for the capacity cases.
struct store_limits {
  std::size_t max_records = std::numeric_limits<std::size_t>::max();
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
};

/// What IDEM_STORE_CONFORMANCE_TESTS needs of its argument.
template <class F>
concept StoreFactory = std::default_initializable<F> &&
    requires(F& factory, const store_limits& limits) {
  { factory.make(limits) } -> Store;
  { F::bounded } -> std::convertible_to<bool>;
};

namespace conformance {

using namespace std::chrono_literals;

template <class Factory>
using store_of = decltype(std::declval<Factory&>().make(store_limits{}));

inline constexpr std::chrono::nanoseconds lease = 30s;
inline constexpr std::chrono::nanoseconds retention = 24h;

// 2026-01-01T00:00:00Z: manual_clock's default wall start, so direct and wrapped cases agree.
inline store_time start() {
  return store_time{std::chrono::seconds{1767225600}};
}

inline digest print(std::uint8_t seed) {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(seed * 31 + i);
  return digest{bytes};
}

inline claim_request ask(std::string_view scope, std::string_view key, const digest& fingerprint,
                         store_time now) {
  return claim_request{scope, key, fingerprint, now, lease, retention};
}

inline std::string every_byte() {
  std::string bytes;
  for (int round = 0; round < 3; ++round) {
    for (int b = 0; b < 256; ++b)
      bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

template <class Factory>
store_of<Factory> fresh(Factory& factory, store_limits limits = {}) {
  return factory.make(limits);
}

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

// ---- through idempotent and inbox --------------------------------------------------------

template <class S>
struct wrapped_policies : default_policies {
  using store = S;
  using clock = manual_clock;
};

struct counted_handler {
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);
  http_response operator()(handler_context& context, const http_request& request) const {
    runs->fetch_add(1);
    return http_response{
        201,
        {{"content-type", "application/octet-stream"}, {"x-key", std::string(context.key())}},
        request.body + every_byte()};
  }
};

inline http_request charge(std::string body = "{\"amount\":100}") {
  return http_request{"POST", "/charges", {{"content-type", "application/json"}}, std::move(body)};
}

template <class Factory, class Handler = counted_handler>
auto guarded(store_of<Factory> store, manual_clock clock, Handler handler = {}) {
  using policies = wrapped_policies<store_of<Factory>>;
  typename idempotent<Handler, policies>::options parts;
  parts.store = std::move(store);
  parts.clock = std::move(clock);
  return std::make_unique<idempotent<Handler, policies>>(std::move(handler), std::move(parts));
}

template <class Factory>
void a_missing_or_invalid_key_is_refused_and_stores_nothing() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory>(store, clock, handler);

  const auto missing = (*payments)("tenant", std::nullopt, charge());
  CHECK(missing.verdict() == verdict::missing_key);
  CHECK(missing.http_status() == 400);

  const std::string too_long(256, 'k');
  for (const std::string& bad :
       {std::string{}, too_long, std::string("has space"), std::string("tab\tkey"),
        std::string("nul\0key", 7), std::string("caf\xc3\xa9"), std::string("del\x7f")}) {
    INFO("key of " << bad.size() << " bytes");
    const auto refused = (*payments)("tenant", bad, charge());
    CHECK(refused.verdict() == verdict::invalid_key);
    CHECK(refused.http_status() == 400);
    CHECK_FALSE(refused.message().empty());
    CHECK_FALSE(store.find("tenant", bad, clock.wall_now()));
  }
  CHECK(*handler.runs == 0);
  // 255 bytes is the limit, not past it.
  const std::string longest(255, 'k');
  CHECK((*payments)("tenant", longest, charge()).verdict() == verdict::executed);
}

template <class Factory>
void a_repeat_replays_the_stored_response_byte_for_byte() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory>(store, clock, handler);

  const auto first = (*payments)("tenant", "order-17", charge());
  REQUIRE(first.verdict() == verdict::executed);
  CHECK(first.recorded());
  CHECK(first.fence() == 1);
  clock.advance(1h);
  const auto second = (*payments)("tenant", "order-17", charge());
  REQUIRE(second.verdict() == verdict::replayed);
  CHECK(second.value() == first.value());
  CHECK(second.http_status() == 201);
  CHECK(*handler.runs == 1);
}

template <class Factory>
void a_key_reused_with_another_request_is_rejected_with_422() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory>(store, clock, handler);

  REQUIRE((*payments)("tenant", "k", charge("{\"amount\":100}")).verdict() == verdict::executed);
  const auto reused = (*payments)("tenant", "k", charge("{\"amount\":999}"));
  CHECK(reused.verdict() == verdict::mismatch);
  CHECK(reused.http_status() == 422);
  http_request other_target = charge();
  other_target.target = "/refunds";
  CHECK((*payments)("tenant", "k", other_target).verdict() == verdict::mismatch);

  // In progress too.
  const digest held = payments->fingerprint()(view_of(charge("{\"amount\":1}")));
  REQUIRE(store.claim(claim_request{"tenant", "running", held, clock.wall_now(), lease, retention})
              .status == claim_status::claimed);
  CHECK((*payments)("tenant", "running", charge("{\"amount\":2}")).verdict() == verdict::mismatch);
  CHECK(*handler.runs == 1);
}

template <class Factory>
void a_duplicate_of_a_request_in_progress_gets_409() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory>(store, clock, handler);
  const digest held = payments->fingerprint()(view_of(charge()));
  REQUIRE(
      store.claim(claim_request{"tenant", "k", held, clock.wall_now(), lease, retention}).status ==
      claim_status::claimed);

  const auto duplicate = (*payments)("tenant", "k", charge());
  CHECK(duplicate.verdict() == verdict::in_progress);
  CHECK(duplicate.http_status() == 409);
  CHECK_FALSE(duplicate.has_value());
  CHECK(*handler.runs == 0);
}

// Where a handler thread stops until the test lets it go: a request in flight, or a holder
// paused past its lease.
class gate {
 public:
  // The handler's side: says it got here, then waits to be let through.
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    reached_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
  }
  // The test's side.
  void wait_until_reached() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return reached_; });
  }
  void open() {
    const std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool reached_ = false;
  bool open_ = false;
};

// A handler that runs until the test lets it go: a request in flight.
struct gated_handler {
  struct shared {
    gate in_flight;
    std::atomic<int> runs{0};
  };
  std::shared_ptr<shared> state = std::make_shared<shared>();

  http_response operator()(handler_context& context, const http_request& request) const {
    state->runs.fetch_add(1);
    // Only the first run waits; a takeover runs straight through.
    if (context.fence() == 1) state->in_flight.arrive_and_wait();
    context.step("after the gate", [] {});
    return http_response{200, {}, "done:" + request.body};
  }

  void wait_until_entered() const { state->in_flight.wait_until_reached(); }
  void open() const { state->in_flight.open(); }
};

template <class S>
struct coalescing_policies : default_policies {
  using store = S;
  using clock = steady_clock;  // the wait is real: a real thread completes the request
};

template <class Factory>
void a_coalescing_duplicate_waits_for_the_response_and_replays_it() {
  Factory factory;
  using policies = coalescing_policies<store_of<Factory>>;
  gated_handler handler;
  typename idempotent<gated_handler, policies>::options parts;
  parts.store = fresh(factory);
  parts.coalesce = 10s;
  idempotent<gated_handler, policies> payments(handler, std::move(parts));

  std::optional<idempotent_outcome<http_response>> original;
  std::thread first([&] { original.emplace(payments("tenant", "k", charge())); });
  handler.wait_until_entered();
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    handler.open();
  });
  const auto duplicate = payments("tenant", "k", charge());
  first.join();
  opener.join();
  REQUIRE(original);
  CHECK(original->verdict() == verdict::executed);
  CHECK(duplicate.verdict() == verdict::replayed);
  CHECK(duplicate.value() == original->value());
  CHECK(handler.state->runs == 1);
}

template <class Factory>
void a_coalescing_wait_is_bounded() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  using policies = wrapped_policies<store_of<Factory>>;
  typename idempotent<counted_handler, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.coalesce = 2s;
  idempotent<counted_handler, policies> payments(counted_handler{}, std::move(parts));
  const digest held = payments.fingerprint()(view_of(charge()));
  REQUIRE(
      store.claim(claim_request{"tenant", "k", held, clock.wall_now(), lease, retention}).status ==
      claim_status::claimed);

  const auto waited = payments("tenant", "k", charge());
  CHECK(waited.verdict() == verdict::in_progress);
  CHECK(clock.slept() == 2s);
  CHECK(*payments.handler().runs == 0);
}

// A handler that records a step, then stops until released: a holder paused past its lease.
struct resumable_handler {
  struct shared {
    std::atomic<int> charges{0};
    std::atomic<int> emails{0};
    gate pause;
  };
  std::shared_ptr<shared> state = std::make_shared<shared>();

  http_response operator()(handler_context& context, const http_request&) const {
    const std::string charge_id = context.step("charge", [&] {
      state->charges.fetch_add(1);
      return std::string("ch_") + std::to_string(context.fence());
    });
    if (context.fence() == 1) state->pause.arrive_and_wait();
    context.step("email", [&] { state->emails.fetch_add(1); });
    return http_response{201, {}, charge_id + " fence " + std::to_string(context.fence())};
  }

  void wait_until_paused() const { state->pause.wait_until_reached(); }
  void resume() const { state->pause.open(); }
};

template <class Factory>
void an_expired_claim_is_taken_over_and_resumes_from_its_recovery_point() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  resumable_handler handler;
  auto payments = guarded<Factory, resumable_handler>(store, clock, handler);

  std::optional<idempotent_outcome<http_response>> paused_outcome;
  std::thread paused([&] { paused_outcome.emplace((*payments)("tenant", "k", charge())); });
  handler.wait_until_paused();

  // Within the lease a repeat is told to wait.
  CHECK((*payments)("tenant", "k", charge()).verdict() == verdict::in_progress);

  clock.advance(lease + 1s);
  const auto taken = (*payments)("tenant", "k", charge());
  REQUIRE(taken.verdict() == verdict::executed);
  CHECK(taken.resumed());
  CHECK(taken.fence() == 2);
  // The charge was recorded before the pause: it is not made again.
  CHECK(taken->body == "ch_1 fence 2");
  CHECK(handler.state->charges == 1);
  CHECK(handler.state->emails == 1);

  // The paused holder wakes up: its next step finds the fence gone, so it neither sends the
  // email again nor overwrites the recovered response; it is answered with that response.
  handler.resume();
  paused.join();
  REQUIRE(paused_outcome);
  CHECK(paused_outcome->verdict() == verdict::replayed);
  CHECK(paused_outcome->value() == taken.value());
  CHECK(handler.state->emails == 1);
  const std::optional<record> found = store.find("tenant", "k", clock.wall_now());
  REQUIRE(found);
  CHECK(found->fence == 2);
  CHECK(decode<http_response>(found->response) == taken.value());
}

struct declined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct throwing_handler {
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<bool>> fail = std::make_shared<std::atomic<bool>>(true);
  std::shared_ptr<std::atomic<bool>> step_first = std::make_shared<std::atomic<bool>>(false);
  http_response operator()(handler_context& context, const http_request&) const {
    runs->fetch_add(1);
    if (*step_first) context.step("charge", [] { return 1; });
    if (*fail) throw declined("card declined, attempt " + std::to_string(*runs));
    return http_response{200, {}, "charged"};
  }
};

template <class Factory>
void a_handler_that_throws_releases_the_key_and_its_exception_passes_through() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  throwing_handler handler;
  auto payments = guarded<Factory, throwing_handler>(store, clock, handler);

  try {
    (void)(*payments)("tenant", "k", charge());
    FAIL("the handler's exception did not pass through");
  } catch (const declined& error) {
    CHECK(std::string(error.what()) == "card declined, attempt 1");
  }
  CHECK_FALSE(store.find("tenant", "k", clock.wall_now()));
  *handler.fail = false;
  const auto corrected = (*payments)("tenant", "k", charge());
  CHECK(corrected.verdict() == verdict::executed);
  CHECK(corrected->body == "charged");
  CHECK(*handler.runs == 2);
}

template <class S>
struct stripe_policies : wrapped_policies<S> {
  using failure = store_failures_after_effect<>;
};

template <class Factory>
void a_failure_after_the_effect_began_is_stored_under_the_stripe_policy() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  using policies = stripe_policies<store_of<Factory>>;
  throwing_handler handler;
  typename idempotent<throwing_handler, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  idempotent<throwing_handler, policies> payments(handler, std::move(parts));

  // Failing before any recovery point: released, as by default.
  CHECK_THROWS_AS(payments("tenant", "early", charge()), declined);
  CHECK_FALSE(store.find("tenant", "early", clock.wall_now()));

  // Failing after one: stored, and replayed to every repeat.
  *handler.step_first = true;
  CHECK_THROWS_AS(payments("tenant", "late", charge()), declined);
  *handler.fail = false;
  const auto repeat = payments("tenant", "late", charge());
  CHECK(repeat.verdict() == verdict::replayed);
  CHECK(repeat.http_status() == 500);
  CHECK(*handler.runs == 2);
}

template <class Factory>
void a_store_that_is_down_or_full_answers_503_and_runs_nothing() {
  Factory factory;
  faulty_store<store_of<Factory>> store(fresh(factory));
  manual_clock clock;
  counted_handler handler;
  using policies = wrapped_policies<faulty_store<store_of<Factory>>>;
  typename idempotent<counted_handler, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  idempotent<counted_handler, policies> payments(handler, std::move(parts));

  store.fail(faulty_store<store_of<Factory>>::mode::unavailable);
  const auto down = payments("tenant", "k", charge());
  CHECK(down.verdict() == verdict::store_unavailable);
  CHECK(down.http_status() == 503);
  CHECK_THAT(std::string(down.message()), Catch::Matchers::Contains("down"));

  store.fail(faulty_store<store_of<Factory>>::mode::full);
  const auto full = payments("tenant", "k", charge());
  CHECK(full.verdict() == verdict::store_full);
  CHECK(full.http_status() == 503);
  CHECK(*handler.runs == 0);

  // Recovered, the same key runs: the refusals stored nothing.
  store.heal();
  CHECK(payments("tenant", "k", charge()).verdict() == verdict::executed);
  CHECK(*handler.runs == 1);

  if constexpr (Factory::bounded) {
    Factory bounded_factory;
    store_limits limits;
    limits.max_records = 1;
    typename idempotent<counted_handler, wrapped_policies<store_of<Factory>>>::options small;
    small.store = fresh(bounded_factory, limits);
    small.clock = clock;
    idempotent<counted_handler, wrapped_policies<store_of<Factory>>> tiny(handler,
                                                                          std::move(small));
    CHECK(tiny("tenant", "one", charge()).verdict() == verdict::executed);
    const auto no_room = tiny("tenant", "two", charge());
    CHECK(no_room.verdict() == verdict::store_full);
    CHECK(no_room.http_status() == 503);
    CHECK(*handler.runs == 2);
  }
}

template <class Factory>
void a_store_failing_after_the_handler_ran_is_reported_not_swallowed() {
  Factory factory;
  faulty_store<store_of<Factory>> store(fresh(factory));
  manual_clock clock;
  using policies = wrapped_policies<faulty_store<store_of<Factory>>>;
  struct failing_midway {
    faulty_store<store_of<Factory>> store;
    http_response operator()(handler_context&, const http_request&) {
      store.fail(faulty_store<store_of<Factory>>::mode::unavailable);
      return http_response{200, {}, "effect done"};
    }
  };
  typename idempotent<failing_midway, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  idempotent<failing_midway, policies> payments(failing_midway{store}, std::move(parts));

  const auto outcome = payments("tenant", "k", charge());
  CHECK(outcome.verdict() == verdict::executed);
  CHECK(outcome->body == "effect done");
  CHECK_FALSE(outcome.recorded());
  CHECK_THAT(std::string(outcome.message()), Catch::Matchers::Contains("not stored"));
  // The claim stays: a repeat within the lease waits rather than running the effect again.
  store.heal();
  CHECK(payments("tenant", "k", charge()).verdict() == verdict::in_progress);
  CHECK(payments.stuck().empty());
  clock.advance(lease);
  CHECK(payments.stuck().size() == 1);
}

template <class Factory>
void a_repeat_after_retention_runs_again_and_sweep_forgets() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory>(store, clock, handler);

  REQUIRE((*payments)("tenant", "k", charge()).verdict() == verdict::executed);
  clock.advance(retention - 1s);
  CHECK((*payments)("tenant", "k", charge()).verdict() == verdict::replayed);
  CHECK(payments->sweep() == 0);
  clock.advance(1s);
  CHECK(payments->sweep() == 1);
  CHECK((*payments)("tenant", "k", charge()).verdict() == verdict::executed);
  CHECK(*handler.runs == 2);
}

template <class Factory>
void reconciliation_lists_requests_stuck_past_their_lease() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  resumable_handler handler;
  auto payments = guarded<Factory, resumable_handler>(store, clock, handler);
  std::thread paused([&] { (void)(*payments)("tenant", "stuck-key", charge()); });
  handler.wait_until_paused();
  CHECK(payments->stuck().empty());
  clock.advance(lease);
  const std::vector<record> stuck = payments->stuck();
  REQUIRE(stuck.size() == 1);
  CHECK(stuck[0].key == "stuck-key");
  CHECK(stuck[0].scope == "tenant");
  CHECK_FALSE(stuck[0].recovery.empty());
  handler.resume();
  paused.join();
  // Reporting took nothing over: the paused holder still completed under fence 1.
  const std::optional<record> found = store.find("tenant", "stuck-key", clock.wall_now());
  REQUIRE(found);
  CHECK(found->state == record_state::completed);
  CHECK(found->fence == 1);
}

template <class Factory>
void another_scopes_key_is_answered_as_an_absent_one() {
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  counted_handler handler;
  auto payments = guarded<Factory>(store, clock, handler);
  REQUIRE((*payments)("tenant-a", "shared-key", charge("{\"a\":1}")).verdict() ==
          verdict::executed);
  // Another body under the same key in another scope is neither a mismatch nor a replay.
  const auto other = (*payments)("tenant-b", "shared-key", charge("{\"b\":2}"));
  CHECK(other.verdict() == verdict::executed);
  CHECK(*handler.runs == 2);
}

template <class Factory>
void an_inbox_runs_each_event_once() {
  Factory factory;
  using policies = wrapped_policies<store_of<Factory>>;
  typename inbox<policies>::options parts;
  parts.store = fresh(factory);
  inbox<policies> consumed(std::move(parts));
  int shipped = 0;
  for (int delivery = 0; delivery < 3; ++delivery) {
    const auto outcome = consumed.deduplicate("orders", "evt-1", [&] { ++shipped; });
    CHECK(outcome.verdict() == (delivery == 0 ? verdict::executed : verdict::replayed));
  }
  const auto counted = consumed.deduplicate("orders", "evt-2", [&] { return ++shipped; });
  CHECK(counted.value() == 2);
  CHECK(consumed.deduplicate("orders", "evt-2", [] { return -1; }).value() == 2);
  CHECK(consumed.deduplicate("refunds", "evt-1", [&] { ++shipped; }).verdict() ==
        verdict::executed);
  CHECK(consumed.deduplicate("orders", "", [&] { ++shipped; }).verdict() == verdict::invalid_key);
  CHECK(shipped == 3);
}

// 64 threads race over the same 1,000 keys, each in its own order. The effect counter proves
// exactly one effect per key; every other call is a 409 or the identical replay.
template <class Factory>
void a_storm_of_duplicates_has_one_effect_per_key() {
  constexpr int threads = 64;
  constexpr int keys = 1000;
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  auto effects = std::make_shared<std::vector<std::atomic<int>>>(keys);
  struct effect_handler {
    std::shared_ptr<std::vector<std::atomic<int>>> effects;
    std::string operator()(handler_context& context, const std::string& body) const {
      const int index = std::stoi(std::string(context.key().substr(4)));
      (*effects)[static_cast<std::size_t>(index)].fetch_add(1);
      return "response to " + body + " under " + std::string(context.key());
    }
  };
  using policies = wrapped_policies<store_of<Factory>>;
  typename idempotent<effect_handler, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  idempotent<effect_handler, policies> guarded_effect(effect_handler{effects}, std::move(parts));

  std::atomic<int> executed{0}, replayed{0}, conflicts{0}, wrong{0};
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<int> order(keys);
      for (int i = 0; i < keys; ++i)
        order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(t)));
      for (const int index : order) {
        const std::string key = std::string("key-").append(std::to_string(index));
        const std::string body = std::string("body-").append(std::to_string(index));
        const auto outcome = guarded_effect("storm", key, body);
        const std::string expected = "response to " + body + " under " + key;
        switch (outcome.verdict()) {
          case verdict::executed:
            ++executed;
            if (outcome.value() != expected) ++wrong;
            break;
          case verdict::replayed:
            ++replayed;
            if (outcome.value() != expected) ++wrong;
            break;
          case verdict::in_progress:
            ++conflicts;
            break;
          default:
            ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : pool)
    thread.join();

  CHECK(wrong == 0);
  CHECK(executed == keys);
  CHECK(executed + replayed + conflicts == threads * keys);
  int not_once = 0;
  for (int i = 0; i < keys; ++i) {
    if ((*effects)[static_cast<std::size_t>(i)] != 1) ++not_once;
    const std::optional<record> found =
        store.find("storm", "key-" + std::to_string(i), clock.wall_now());
    if (!found || found->state != record_state::completed) ++not_once;
  }
  CHECK(not_once == 0);
}

}  // namespace conformance
}  // namespace idem::testing

// One Catch2 test case per behaviour, for the factory given. A macro only because Catch2
// registers test cases with macros; each case is the function of the same name above.
#define IDEM_CONFORMANCE_CASE(Factory, behaviour, tags, function)                    \
  TEMPLATE_TEST_CASE("store conformance: " behaviour, tags, Factory) {               \
    static_assert(::idem::testing::StoreFactory<TestType>,                           \
                  "A conformance factory must be default-constructible, provide "    \
                  "make(const idem::testing::store_limits&) returning a Store, and " \
                  "static constexpr bool bounded.");                                 \
    ::idem::testing::conformance::function<TestType>();                              \
  }

#define IDEM_STORE_CONFORMANCE_TESTS(Factory)                                                      \
  IDEM_CONFORMANCE_CASE(Factory, "a new key is claimed under fence 1", "[conformance]",            \
                        new_key_is_claimed_under_fence_one)                                        \
  IDEM_CONFORMANCE_CASE(Factory, "a live claim is not claimed again", "[conformance]",             \
                        a_live_claim_is_not_claimed_again)                                         \
  IDEM_CONFORMANCE_CASE(Factory, "a completed record keeps its response byte for byte",            \
                        "[conformance]", a_completed_record_keeps_its_response_byte_for_byte)      \
  IDEM_CONFORMANCE_CASE(Factory, "a large response is stored whole", "[conformance]",              \
                        a_large_response_is_stored_whole)                                          \
  IDEM_CONFORMANCE_CASE(Factory, "an abandoned claim is taken over under the next fence",          \
                        "[conformance]", an_abandoned_claim_is_taken_over_under_the_next_fence)    \
  IDEM_CONFORMANCE_CASE(Factory, "an abandoned claim is not taken over by another request",        \
                        "[conformance]", an_abandoned_claim_is_not_taken_over_by_another_request)  \
  IDEM_CONFORMANCE_CASE(                                                                           \
      Factory, "a paused holder cannot complete, release or checkpoint after a takeover",          \
      "[conformance]", a_paused_holder_cannot_complete_release_or_checkpoint_after_a_takeover)     \
  IDEM_CONFORMANCE_CASE(Factory, "a released key is claimed again under a higher fence",           \
                        "[conformance]", a_released_key_is_claimed_again_under_a_higher_fence)     \
  IDEM_CONFORMANCE_CASE(Factory, "writes to an unknown key do nothing", "[conformance]",           \
                        writes_to_an_unknown_key_do_nothing)                                       \
  IDEM_CONFORMANCE_CASE(Factory, "scopes never share or see records", "[conformance]",             \
                        scopes_never_share_or_see_records)                                         \
  IDEM_CONFORMANCE_CASE(Factory, "awkward bytes round-trip", "[conformance]",                      \
                        awkward_bytes_round_trip)                                                  \
  IDEM_CONFORMANCE_CASE(Factory, "records expire after retention and sweep removes them",          \
                        "[conformance]", records_expire_after_retention_and_sweep_removes_them)    \
  IDEM_CONFORMANCE_CASE(Factory, "stuck lists claims past their lease and changes nothing",        \
                        "[conformance]", stuck_lists_claims_past_their_lease_and_changes_nothing)  \
  IDEM_CONFORMANCE_CASE(Factory, "a full store refuses new claims and keeps live records",         \
                        "[conformance]", a_full_store_refuses_new_claims_and_keeps_live_records)   \
  IDEM_CONFORMANCE_CASE(                                                                           \
      Factory, "a response larger than the store accepts is refused and writes nothing",           \
      "[conformance]", a_response_larger_than_the_store_accepts_is_refused_and_writes_nothing)     \
  IDEM_CONFORMANCE_CASE(Factory,                                                                   \
                        "a missing or invalid key is refused with 400 and stores nothing",         \
                        "[conformance]", a_missing_or_invalid_key_is_refused_and_stores_nothing)   \
  IDEM_CONFORMANCE_CASE(Factory, "a repeat replays the stored response byte for byte",             \
                        "[conformance]", a_repeat_replays_the_stored_response_byte_for_byte)       \
  IDEM_CONFORMANCE_CASE(Factory, "a key reused with another request is rejected with 422",         \
                        "[conformance]", a_key_reused_with_another_request_is_rejected_with_422)   \
  IDEM_CONFORMANCE_CASE(Factory, "a duplicate of a request in progress gets 409", "[conformance]", \
                        a_duplicate_of_a_request_in_progress_gets_409)                             \
  IDEM_CONFORMANCE_CASE(Factory, "a coalescing duplicate waits for the response and replays it",   \
                        "[conformance][concurrency]",                                              \
                        a_coalescing_duplicate_waits_for_the_response_and_replays_it)              \
  IDEM_CONFORMANCE_CASE(Factory, "a coalescing wait is bounded", "[conformance]",                  \
                        a_coalescing_wait_is_bounded)                                              \
  IDEM_CONFORMANCE_CASE(Factory,                                                                   \
                        "an expired claim is taken over and resumes from its recovery point",      \
                        "[conformance][concurrency]",                                              \
                        an_expired_claim_is_taken_over_and_resumes_from_its_recovery_point)        \
  IDEM_CONFORMANCE_CASE(                                                                           \
      Factory, "a handler that throws releases the key and its exception passes through",          \
      "[conformance]", a_handler_that_throws_releases_the_key_and_its_exception_passes_through)    \
  IDEM_CONFORMANCE_CASE(                                                                           \
      Factory, "a failure after the effect began is stored under the Stripe policy",               \
      "[conformance]", a_failure_after_the_effect_began_is_stored_under_the_stripe_policy)         \
  IDEM_CONFORMANCE_CASE(Factory, "a store that is down or full answers 503 and runs nothing",      \
                        "[conformance]",                                                           \
                        a_store_that_is_down_or_full_answers_503_and_runs_nothing)                 \
  IDEM_CONFORMANCE_CASE(                                                                           \
      Factory, "a store failing after the handler ran is reported, not swallowed",                 \
      "[conformance]", a_store_failing_after_the_handler_ran_is_reported_not_swallowed)            \
  IDEM_CONFORMANCE_CASE(Factory, "a repeat after retention runs again and sweep forgets",          \
                        "[conformance]", a_repeat_after_retention_runs_again_and_sweep_forgets)    \
  IDEM_CONFORMANCE_CASE(Factory, "reconciliation lists requests stuck past their lease",           \
                        "[conformance][concurrency]",                                              \
                        reconciliation_lists_requests_stuck_past_their_lease)                      \
  IDEM_CONFORMANCE_CASE(Factory, "another scope's key is answered as an absent one",               \
                        "[conformance]", another_scopes_key_is_answered_as_an_absent_one)          \
  IDEM_CONFORMANCE_CASE(Factory, "an inbox runs each event once", "[conformance]",                 \
                        an_inbox_runs_each_event_once)                                             \
  IDEM_CONFORMANCE_CASE(Factory, "a storm of 64 threads on 1000 keys has one effect per key",      \
                        "[conformance][concurrency]",                                              \
                        a_storm_of_duplicates_has_one_effect_per_key)

#endif  // IDEM_TESTING_STORE_CONFORMANCE_HPP
