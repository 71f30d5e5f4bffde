// The event-version gate's cases that every SQL store passes alike (SQLite and PostgreSQL): an
// event applies only when its version is newer than the stored one, its consumer's writes commit
// with the bump or not at all, and bad entity ids and versions are refused with nothing written.
// Each store's test registers them with IDEM_VERSION_GATE_CASES(Fixture, tags), its fixture
// saying how to reach its tables:
//
//   struct fixture {
//     using store_type = ...;          // sqlite_store, postgres_store
//     using transaction = store_type::transaction;
//     store_type store;
//     ..._version_gate gate;           // on `store`
//     // Applies (entity, version) in `scope`, with a consumer that writes one effect row.
//     version_gate_outcome deliver(const std::string& entity, std::int64_t version,
//                                  const std::string& scope = "orders");
//     // The effect row deliver writes, written in `t` (for consumers that fail after it).
//     void write_effect(transaction& t, const std::string& entity, std::int64_t version);
//     // The versions whose effects committed for `entity`, in order, one a line.
//     std::string effects(const std::string& entity, const std::string& scope = "orders");
//     long long rows();                           // the gate's rows
//     long long outbox_rows(const std::string& id);  // outbox rows with that id
//   };
#pragma once

#include <catch2/catch.hpp>

#include <idem/outbox/message.hpp>
#include <idem/store/version_gate.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace idem::testing::version_gate_cases {

struct consumer_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The consumer that must never run.
template <class Fixture>
auto never() {
  return [](typename Fixture::transaction&) { FAIL("the consumer ran"); };
}

template <class Fixture>
void first_event_applied() {
  Fixture f;
  CHECK_FALSE(f.gate.stored_version("orders", "order-1"));
  const version_gate_outcome outcome = f.deliver("order-1", 3);
  CHECK(outcome == version_gate_outcome{version_gate_verdict::applied, 3});
  CHECK(outcome.applied());
  CHECK(f.gate.stored_version("orders", "order-1") == 3);
  CHECK(f.effects("order-1") == "3");
  CHECK(f.rows() == 1);  // one row per entity, not per event
}

template <class Fixture>
void newer_applied() {
  Fixture f;
  REQUIRE(f.deliver("order-1", 1).applied());
  CHECK(f.deliver("order-1", 2) == version_gate_outcome{version_gate_verdict::applied, 2});
  CHECK(f.gate.stored_version("orders", "order-1") == 2);
  CHECK(f.effects("order-1") == "1\n2");
  CHECK(f.rows() == 1);
}

template <class Fixture>
void version_zero() {
  Fixture f;
  CHECK(f.deliver("order-1", 0).applied());
  CHECK(f.deliver("order-1", 0).verdict == version_gate_verdict::duplicate);
  CHECK(f.gate.stored_version("orders", "order-1") == 0);
}

template <class Fixture>
void redelivered_duplicate() {
  Fixture f;
  REQUIRE(f.deliver("order-1", 5).applied());
  const version_gate_outcome outcome = f.gate.apply("orders", "order-1", 5, never<Fixture>());
  CHECK(outcome == version_gate_outcome{version_gate_verdict::duplicate, 5});
  CHECK_FALSE(outcome.applied());
  CHECK(f.effects("order-1") == "5");
}

template <class Fixture>
void older_stale() {
  Fixture f;
  REQUIRE(f.deliver("order-1", 7).applied());
  const version_gate_outcome outcome = f.gate.apply("orders", "order-1", 4, never<Fixture>());
  CHECK(outcome == version_gate_outcome{version_gate_verdict::stale, 7});
  CHECK(f.gate.stored_version("orders", "order-1") == 7);
  CHECK(f.effects("order-1") == "7");
}

template <class Fixture>
void largest_version() {
  Fixture f;
  constexpr std::int64_t largest = std::numeric_limits<std::int64_t>::max();
  CHECK(f.deliver("order-1", largest).applied());
  CHECK(f.gate.apply("orders", "order-1", largest - 1, never<Fixture>()).verdict ==
        version_gate_verdict::stale);
  CHECK(f.gate.stored_version("orders", "order-1") == largest);
}

template <class Fixture>
void scopes_apart() {
  Fixture f;
  REQUIRE(f.deliver("order-1", 9).applied());
  CHECK(f.deliver("order-2", 1).applied());
  CHECK(f.deliver("order-1", 1, "invoices").applied());
  CHECK(f.gate.stored_version("orders", "order-1") == 9);
  CHECK(f.gate.stored_version("orders", "order-2") == 1);
  CHECK(f.gate.stored_version("invoices", "order-1") == 1);
  CHECK_FALSE(f.gate.stored_version("invoices", "order-2"));
}

template <class Fixture>
void throwing_consumer_rolls_back() {
  Fixture f;
  REQUIRE(f.deliver("order-1", 1).applied());
  CHECK_THROWS_AS(f.gate.apply("orders", "order-1", 2,
                               [&](typename Fixture::transaction& t) {
                                 f.write_effect(t, "order-1", 2);
                                 throw consumer_failed("the consumer's own failure");
                               }),
                  consumer_failed);
  CHECK(f.gate.stored_version("orders", "order-1") == 1);
  CHECK(f.effects("order-1") == "1");
  // Redelivered, the event applies: the failure left nothing behind, not even a lock.
  CHECK(f.deliver("order-1", 2).applied());
  CHECK(f.effects("order-1") == "1\n2");
}

template <class Fixture>
void first_event_throws() {
  Fixture f;
  CHECK_THROWS_WITH(f.gate.apply("orders", "order-1", 1,
                                 [](typename Fixture::transaction&) {
                                   throw consumer_failed("passes through unchanged");
                                 }),
                    "passes through unchanged");
  CHECK_FALSE(f.gate.stored_version("orders", "order-1"));
  CHECK(f.rows() == 0);
}

template <class Fixture>
void shuffled_sequence() {
  Fixture f;
  std::vector<std::int64_t> versions(40);
  std::iota(versions.begin(), versions.end(), 1);
  // Each version twice: a redelivery of everything.
  versions.insert(versions.end(), versions.begin(), versions.end());
  std::mt19937_64 random{20240601};
  std::shuffle(versions.begin(), versions.end(), random);

  std::string expected;
  std::int64_t current = -1;
  for (const std::int64_t version : versions) {
    const version_gate_outcome outcome = f.deliver("order-1", version);
    if (version > current) {
      CHECK(outcome == version_gate_outcome{version_gate_verdict::applied, version});
      expected += (expected.empty() ? "" : "\n") + std::to_string(version);
      current = version;
    } else if (version == current) {
      CHECK(outcome == version_gate_outcome{version_gate_verdict::duplicate, current});
    } else {
      CHECK(outcome == version_gate_outcome{version_gate_verdict::stale, current});
    }
  }
  CHECK(current == 40);
  CHECK(f.gate.stored_version("orders", "order-1") == 40);
  CHECK(f.effects("order-1") == expected);
}

template <class Fixture>
void published_messages_named() {
  Fixture f;
  std::string id;
  REQUIRE(f.gate
              .apply("orders", "order-1", 4,
                     [&](typename Fixture::transaction& t) {
                       id = t.publish("shipped", {.topic = "orders", .payload = "order-1 v4"});
                     })
              .applied());
  CHECK(id == outbox_message_id("orders", "order-1 4", "shipped"));
  CHECK(f.outbox_rows(id) == 1);
}

template <class Fixture>
void empty_entity_refused() {
  Fixture f;
  CHECK_THROWS_WITH(f.gate.apply("orders", "", 1, never<Fixture>()),
                    Catch::Matchers::Contains("entity id must be 1 to 255 bytes of visible ASCII"));
  CHECK_THROWS_AS(f.gate.stored_version("orders", ""), std::invalid_argument);
  CHECK(f.rows() == 0);
}

template <class Fixture>
void invisible_bytes_refused() {
  Fixture f;
  CHECK_THROWS_AS(f.gate.apply("orders", "order 1", 1, never<Fixture>()), std::invalid_argument);
  CHECK_THROWS_AS(f.gate.apply("orders", std::string("order\0001", 7), 1, never<Fixture>()),
                  std::invalid_argument);
  CHECK_THROWS_AS(f.gate.apply("orders", "ordr\xc3\xa9", 1, never<Fixture>()),
                  std::invalid_argument);
  CHECK(f.rows() == 0);
}

template <class Fixture>
void negative_version_refused() {
  Fixture f;
  REQUIRE(f.deliver("order-1", 2).applied());
  CHECK_THROWS_WITH(f.gate.apply("orders", "order-1", -1, never<Fixture>()),
                    Catch::Matchers::Contains("negative"));
  CHECK_THROWS_AS(
      f.gate.apply("orders", "order-2", std::numeric_limits<std::int64_t>::min(), never<Fixture>()),
      std::invalid_argument);
  CHECK(f.gate.stored_version("orders", "order-1") == 2);
  CHECK_FALSE(f.gate.stored_version("orders", "order-2"));
}

}  // namespace idem::testing::version_gate_cases

// One test case per behaviour, for the store's fixture.
#define IDEM_VERSION_GATE_CASE(Fixture, tags, behaviour, function) \
  TEST_CASE("version gate: " behaviour, tags) {                    \
    ::idem::testing::version_gate_cases::function<Fixture>();      \
  }

#define IDEM_VERSION_GATE_CASES(Fixture, tags)                                                    \
  IDEM_VERSION_GATE_CASE(                                                                         \
      Fixture, tags,                                                                              \
      "the first event of an entity is applied and its writes commit with the version",           \
      first_event_applied)                                                                        \
  IDEM_VERSION_GATE_CASE(Fixture, tags, "a newer version is applied", newer_applied)              \
  IDEM_VERSION_GATE_CASE(Fixture, tags, "version zero is a first event like any other",           \
                         version_zero)                                                            \
  IDEM_VERSION_GATE_CASE(Fixture, tags,                                                           \
                         "a redelivered version is a duplicate and its consumer does not run",    \
                         redelivered_duplicate)                                                   \
  IDEM_VERSION_GATE_CASE(Fixture, tags,                                                           \
                         "an older version arriving late is stale and names the newer stored "    \
                         "version",                                                               \
                         older_stale)                                                             \
  IDEM_VERSION_GATE_CASE(Fixture, tags,                                                           \
                         "the largest version is accepted and nothing is newer than it",          \
                         largest_version)                                                         \
  IDEM_VERSION_GATE_CASE(Fixture, tags, "scopes and entity ids keep their versions apart",        \
                         scopes_apart)                                                            \
  IDEM_VERSION_GATE_CASE(Fixture, tags,                                                           \
                         "a throwing consumer rolls back its writes and the version bump",        \
                         throwing_consumer_rolls_back)                                            \
  IDEM_VERSION_GATE_CASE(Fixture, tags,                                                           \
                         "a consumer whose first event throws leaves no row for the entity",      \
                         first_event_throws)                                                      \
  IDEM_VERSION_GATE_CASE(Fixture, tags,                                                           \
                         "a shuffled sequence ends at the highest version, each applied only "    \
                         "if newer",                                                              \
                         shuffled_sequence)                                                       \
  IDEM_VERSION_GATE_CASE(Fixture, tags,                                                           \
                         "messages the consumer publishes are named after the applied event",     \
                         published_messages_named)                                                \
  IDEM_VERSION_GATE_CASE(Fixture, tags, "an empty entity id is refused and nothing is written",   \
                         empty_entity_refused)                                                    \
  IDEM_VERSION_GATE_CASE(Fixture, tags, "an entity id with a space or a control byte is refused", \
                         invisible_bytes_refused)                                                 \
  IDEM_VERSION_GATE_CASE(Fixture, tags,                                                           \
                         "a negative version is refused and the stored one is kept",              \
                         negative_version_refused)
