// The outbox writer's cases that every transactional store passes alike (SQLite and PostgreSQL):
// a handler's message commits with its effect and its record, a payload past the limit throws
// at publish and rolls everything back, a run after a takeover publishes under the crashed run's
// id once, and an inbox consumer's message commits with its event's record. Each store's test
// registers them with IDEM_OUTBOX_WRITER_CASES(Fixture, tags), its fixture saying how to reach
// its tables:
//
//   struct fixture {
//     using store_type = ...;                        // a transactional store
//     static constexpr const char* publish_who;      // how publish's errors name it
//     store_type store;
//     explicit fixture(std::size_t max_payload = idem::default_max_outbox_payload_bytes);
//     void effect(store_type::transaction& txn, const std::string& key);  // one effect row
//     std::vector<std::string> effects();            // the effect rows' keys
//     std::vector<idem::testing::stored_message> outbox();  // the outbox, in sequence order
//   };
#pragma once

#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/outbox/message.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/records.hpp"

namespace idem::testing {

/// An outbox row as a store keeps it, read back by the store's own SQL.
struct stored_message {
  std::string id;
  outbox_message message;
  std::int64_t created_at_ns = 0;
  /// Not published, no attempt, due when written: what a fresh row must be.
  bool fresh = false;
};

namespace outbox_writer_cases {

inline outbox_message charged(std::string payload = "{\"amount\":250}") {
  return {.topic = "payments",
          .partition_key = "acct-7",
          .payload = std::move(payload),
          .headers = {{"type", "charged"}}};
}

template <class Fixture>
struct policies : default_policies {
  using store = typename Fixture::store_type;
  using clock = manual_clock;
};

struct simulated_crash : std::runtime_error {
  simulated_crash() : std::runtime_error("the process died here") {}
};

template <class Fixture>
void a_handlers_message_commits_with_its_effect_and_its_record() {
  using transaction = typename Fixture::store_type::transaction;
  Fixture f;
  std::string published;
  auto charge = [&](handler_context& ctx, const std::string& amount, transaction& txn) {
    f.effect(txn, std::string(ctx.key()));
    published = txn.publish("charged", charged());
    return "charged " + amount;
  };
  idempotent<decltype(charge), policies<Fixture>> payments{
      charge, {.store = f.store, .clock = manual_clock{start}}};
  REQUIRE(payments("tenant", "order-1", std::string("250")).verdict() == verdict::executed);
  CHECK(published == outbox_message_id("tenant", "order-1", "charged"));
  const std::vector<stored_message> rows = f.outbox();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].id == published);
  CHECK(rows[0].message.topic == "payments");
  CHECK(rows[0].message.partition_key == "acct-7");
  CHECK(rows[0].message.payload == "{\"amount\":250}");
  CHECK(rows[0].message.headers == std::vector<outbox_header>{{"type", "charged"}});
  CHECK(rows[0].created_at_ns ==
        std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count());
  CHECK(rows[0].fresh);
  // A replay runs nothing and publishes nothing.
  CHECK(payments("tenant", "order-1", std::string("250")).verdict() == verdict::replayed);
  CHECK(f.outbox().size() == 1);
  CHECK(f.effects() == std::vector<std::string>{"order-1"});
}

template <class Fixture>
void a_payload_past_the_limit_throws_at_publish_and_rolls_everything_back() {
  using transaction = typename Fixture::store_type::transaction;
  Fixture f{16};
  auto charge = [&](handler_context& ctx, const std::string& payload, transaction& txn) {
    f.effect(txn, std::string(ctx.key()));
    txn.publish("charged", charged(payload));
    return std::string("charged");
  };
  idempotent<decltype(charge), policies<Fixture>> payments{
      charge, {.store = f.store, .clock = manual_clock{start}}};
  CHECK_THROWS_WITH(payments("tenant", "big", std::string(17, 'p')),
                    Catch::Matchers::Contains(Fixture::publish_who) &&
                        Catch::Matchers::Contains("17 bytes") &&
                        Catch::Matchers::Contains("max_outbox_payload_bytes (16)"));
  // No effect, no message, no completed record: the key was released, a retry runs afresh.
  CHECK(f.effects().empty());
  CHECK(f.outbox().empty());
  CHECK_FALSE(f.store.find("tenant", "big", start));
  // At the limit it fits.
  CHECK(payments("tenant", "big", std::string(16, 'p')).verdict() == verdict::executed);
  CHECK(f.outbox().size() == 1);
}

template <class Fixture>
void a_run_after_a_takeover_publishes_under_the_crashed_runs_id_once() {
  using namespace std::chrono_literals;
  using transaction = typename Fixture::store_type::transaction;
  Fixture f;
  const auto first = f.store.claim({"tenant", "order-1", print(1), start, 30s, 24h});
  std::string crashed_id;
  // The first holder publishes, then dies before its transaction commits.
  CHECK_THROWS_AS(f.store.complete_within({"tenant", "order-1", first.fence}, start,
                                          [&](transaction& txn) -> std::string {
                                            crashed_id = txn.publish("charged", charged());
                                            throw simulated_crash{};
                                          }),
                  simulated_crash);
  CHECK(f.outbox().empty());
  // Its lease passes; the next holder takes over and runs the handler again.
  const auto second = f.store.claim({"tenant", "order-1", print(1), start + 31s, 30s, 24h});
  REQUIRE(second.status == claim_status::taken_over);
  std::vector<std::string> ids;
  CHECK(f.store.complete_within({"tenant", "order-1", second.fence}, start + 31s,
                                [&](transaction& txn) {
                                  ids.push_back(txn.publish("charged", charged()));
                                  // Publishing one name twice in a run adds nothing either.
                                  ids.push_back(txn.publish("charged", charged("other")));
                                  return std::string("charged");
                                }));
  CHECK(ids == std::vector<std::string>{crashed_id, crashed_id});
  const std::vector<stored_message> rows = f.outbox();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].id == crashed_id);
  CHECK(rows[0].message.payload == "{\"amount\":250}");
}

template <class Fixture>
void an_inbox_consumers_message_commits_with_its_events_record() {
  using transaction = typename Fixture::store_type::transaction;
  Fixture f;
  inbox<policies<Fixture>> consumed{{.store = f.store, .clock = manual_clock{start}}};
  auto ship = [&](handler_context& ctx, transaction& txn) {
    f.effect(txn, std::string(ctx.key()));
    txn.publish("shipped", {.topic = "shipping", .partition_key = "order-9", .payload = "go"});
  };
  for (int delivery = 0; delivery < 3; ++delivery) {
    CHECK(consumed.deduplicate("orders", "evt-1", ship).verdict() ==
          (delivery == 0 ? verdict::executed : verdict::replayed));
  }
  const std::vector<stored_message> rows = f.outbox();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].id == outbox_message_id("orders", "evt-1", "shipped"));
  CHECK(f.effects() == std::vector<std::string>{"evt-1"});
  // A consumer that throws leaves neither its row nor its message, and the event may come again.
  auto failing = [](transaction& txn) {
    txn.publish("shipped", {.topic = "shipping", .payload = "go"});
    throw std::runtime_error("the warehouse is closed");
  };
  CHECK_THROWS_AS(consumed.deduplicate("orders", "evt-2", failing), std::runtime_error);
  CHECK(f.outbox().size() == 1);
}

}  // namespace outbox_writer_cases
}  // namespace idem::testing

// One test case per behaviour, for the store's fixture.
#define IDEM_OUTBOX_WRITER_CASE(Fixture, tags, behaviour, function) \
  TEMPLATE_TEST_CASE("outbox writer: " behaviour, tags, Fixture) {  \
    ::idem::testing::outbox_writer_cases::function<TestType>();     \
  }

#define IDEM_OUTBOX_WRITER_CASES(Fixture, tags)                                                 \
  IDEM_OUTBOX_WRITER_CASE(Fixture, tags,                                                        \
                          "a handler's message commits with its effect and its record",         \
                          a_handlers_message_commits_with_its_effect_and_its_record)            \
  IDEM_OUTBOX_WRITER_CASE(Fixture, tags,                                                        \
                          "a payload past the limit throws at publish and rolls back",          \
                          a_payload_past_the_limit_throws_at_publish_and_rolls_everything_back) \
  IDEM_OUTBOX_WRITER_CASE(Fixture, tags,                                                        \
                          "a run after a takeover publishes under the crashed run's id, once",  \
                          a_run_after_a_takeover_publishes_under_the_crashed_runs_id_once)      \
  IDEM_OUTBOX_WRITER_CASE(Fixture, tags,                                                        \
                          "an inbox consumer's message commits with its event's record",        \
                          an_inbox_consumers_message_commits_with_its_events_record)
