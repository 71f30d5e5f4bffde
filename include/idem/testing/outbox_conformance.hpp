// The outbox conformance check: the Outbox contract (idem/outbox/source.hpp) and the operator's
// dead-letter calls as Catch2 test cases, for any store's outbox reader: the SQLite and
// PostgreSQL readers idem ships, and one you write for your own store.
//
//   #include <catch2/catch.hpp>                       // Catch2 v2, before this header
//   #include <idem/testing/outbox_conformance.hpp>
//
//   struct my_outbox_factory {
//     my_reader make();                 // a reader of its own over this factory's outbox
//     void write(const std::string& id, const std::string& partition_key,
//                const std::string& payload);         // commits one message (see below)
//     void corrupt_headers(const std::string& id);    // makes its stored headers unreadable
//   };
//   IDEM_OUTBOX_CONFORMANCE_TESTS(my_outbox_factory)
//
// The factory object lives as long as one test case; its outbox starts empty. `write` commits
// one message with topic "orders", the given key and payload and the headers {"type",
// "placed"}, through the store's own writer, in a transaction of its own, stamped with the time
// of the writing (the tests fetch as of a minute later, so it is due at once). `make` answers a
// new reader each call, with a connection (and, where the store has one, a lease holder name) of
// its own. The reader provides, besides the Outbox concept, the operator's calls of
// idem/outbox/dead_letter.hpp: `dead_letters(limit, after)` (the dead letters after that
// sequence, in sequence order, as outbox_dead_letter) and `requeue(sequences, now)` (answering
// an outbox_requeue_report: what became of each sequence, in the order asked). Each behaviour is
// one test case, "outbox conformance: <behaviour> - <factory>", tagged [conformance]; each is the
// function of the same name in idem::testing::outbox_conformance.
//
// What it checks: a batch holds the due unpublished rows in sequence order, with every field
// byte for byte; the limit; rows not yet due wait; a batch dropped unsettled changes nothing;
// settles that cannot be right (a wrong count, a second one, another reader's) are refused and
// write nothing; the hold-back rule (a failed row, and a row left out of a batch, hold back the
// later rows of their key and nothing else); dead letters (with reason, attempts and time; no
// longer holding back their key; requeued under their id with a new sequence; not requeued
// beside a message of the same id written since; a requeue of several answering each one, in
// the order asked, and requeueing in the old sequence order; an empty requeue; a sequence asked
// twice refused with nothing requeued); a row whose headers cannot be read buried
// with the reason instead of stopping the relay; purge; the backlog; and idem::outbox_relay
// driving the reader through failures, a rejection and retention. Not checked (nothing
// store-independent can): several relays at once, lost connections, schema versions; test
// those against your store, as tests/stores/* do for idem's.
#ifndef IDEM_TESTING_OUTBOX_CONFORMANCE_HPP
#define IDEM_TESTING_OUTBOX_CONFORMANCE_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/outbox_conformance.hpp>."
#endif

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <idem/outbox/dead_letter.hpp>
#include <idem/outbox/relay.hpp>
#include <idem/outbox/sink.hpp>
#include <idem/outbox/source.hpp>
#include <idem/testing/detail/conformance/registration.hpp>

// A report in a failed check's message: "{sequence: status}, ..." rather than Catch's "{?}".
template <>
struct Catch::StringMaker<idem::outbox_requeue_result> {
  static std::string convert(const idem::outbox_requeue_result& result) {
    static constexpr const char* names[] = {"requeued", "no_such_dead_letter",
                                            "id_already_in_outbox"};
    const auto status = static_cast<std::size_t>(result.status);
    return std::to_string(result.sequence) + ": " + (status < 3 ? names[status] : "?");
  }
};

namespace idem::testing {

/// What IDEM_OUTBOX_CONFORMANCE_TESTS needs of its argument.
template <class F>
concept OutboxFactory = std::default_initializable<F> &&
    requires(F& factory, const std::string& text, std::int64_t sequence,
             std::chrono::system_clock::time_point now) {
  { factory.make() } -> Outbox;
  factory.write(text, text, text);
  factory.corrupt_headers(text);
  {
    std::declval<decltype(factory.make())&>().requeue(std::span<const std::int64_t>{}, now)
    } -> std::same_as<outbox_requeue_report>;
  {
    std::declval<decltype(factory.make())&>().dead_letters(std::size_t{}, sequence)
    } -> std::same_as<std::vector<outbox_dead_letter>>;
};

namespace outbox_conformance {

using kind = outbox_settlement::kind;
using time_point = std::chrono::system_clock::time_point;

/// As of `ahead` from now: rows written during a test are due then.
inline time_point later(std::chrono::minutes ahead = std::chrono::minutes{1}) {
  return std::chrono::system_clock::now() + ahead;
}

using status = outbox_requeue_status;

/// Requeues the sequences given, as an operator would.
template <class Reader>
outbox_requeue_report requeue(Reader& reader, std::vector<std::int64_t> sequences, time_point now) {
  return reader.requeue(std::span<const std::int64_t>(sequences), now);
}

template <class Batch>
std::vector<std::string> ids(const Batch& batch) {
  std::vector<std::string> out;
  for (const outbox_entry& entry : batch.entries())
    out.push_back(entry.id);
  return out;
}

inline std::vector<outbox_settlement> all(std::size_t n, kind what, const std::string& error = {},
                                          time_point next = {}) {
  return std::vector<outbox_settlement>(n, outbox_settlement{what, error, next});
}

/// A sink for the relay case: acknowledges, but fails an id `failures[id]` times and rejects
/// the ids in `rejected`; what it acknowledged is `delivered`, in order.
struct scripted_sink {
  std::map<std::string, int> failures;
  std::set<std::string> rejected;
  std::vector<outbox_entry> delivered;

  void publish(std::span<const outbox_entry> batch, std::span<sink_result> results) {
    std::set<std::string> failed_keys;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const outbox_entry& entry = batch[i];
      if (failed_keys.contains(entry.message.partition_key)) {
        results[i] = {sink_status::failed, "held back behind an earlier failure of its key"};
      } else if (rejected.contains(entry.id)) {
        results[i] = {sink_status::rejected, "scripted rejection"};
      } else if (int& left = failures[entry.id]; left > 0) {
        --left;
        results[i] = {sink_status::failed, "scripted failure"};
        failed_keys.insert(entry.message.partition_key);
      } else {
        delivered.push_back(entry);
        results[i].status = sink_status::acknowledged;
      }
    }
  }
  std::vector<std::string> payloads_of(const std::string& partition_key) const {
    std::vector<std::string> out;
    for (const outbox_entry& entry : delivered) {
      if (entry.message.partition_key == partition_key) out.push_back(entry.message.payload);
    }
    return out;
  }
};

// ---- the batch ------------------------------------------------------------------------------

template <class Factory>
void a_batch_holds_the_due_rows_in_sequence_order_with_every_field() {
  Factory factory;
  const std::string with_nul("t\0o", 3);
  factory.write("m1", "acct-1", "one");
  factory.write("m2", "acct-2", with_nul);
  factory.write("m3", "acct-1", "three");
  auto outbox = factory.make();
  const time_point before = std::chrono::system_clock::now();
  auto batch = outbox.fetch(10, later());
  REQUIRE(ids(batch) == std::vector<std::string>{"m1", "m2", "m3"});
  const outbox_entry& entry = batch.entries()[0];
  CHECK(entry.message.topic == "orders");
  CHECK(entry.message.partition_key == "acct-1");
  CHECK(entry.message.payload == "one");
  CHECK(entry.message.headers == std::vector<outbox_header>{{"type", "placed"}});
  CHECK(entry.attempts == 0);
  CHECK(entry.created_at <= before);
  CHECK(entry.created_at > before - std::chrono::hours{1});
  CHECK(batch.entries()[1].message.payload == with_nul);
  CHECK(batch.entries()[1].sequence > entry.sequence);
  CHECK(batch.entries()[2].sequence > batch.entries()[1].sequence);
  outbox.settle(batch, all(3, kind::published), later());
  CHECK(outbox.fetch(10, later()).entries().empty());
  CHECK(outbox.backlog(later()).waiting == 0);
}

template <class Factory>
void fetch_takes_at_most_the_limit_and_rows_not_yet_due_wait() {
  Factory factory;
  for (const char* id : {"a", "b", "c"})
    factory.write(id, id, "p");
  auto outbox = factory.make();
  {
    auto batch = outbox.fetch(2, later());
    CHECK(ids(batch) == std::vector<std::string>{"a", "b"});
  }
  // Written just now: an hour ago nothing was due.
  CHECK(
      outbox.fetch(10, std::chrono::system_clock::now() - std::chrono::hours{1}).entries().empty());
  CHECK(outbox.fetch(0, later()).entries().empty());
}

template <class Factory>
void a_batch_dropped_unsettled_changes_nothing() {
  Factory factory;
  factory.write("m1", "k", "p");
  factory.write("m2", "k", "p");
  auto outbox = factory.make();
  std::vector<std::int64_t> first;
  {
    auto batch = outbox.fetch(10, later());
    for (const outbox_entry& entry : batch.entries())
      first.push_back(entry.sequence);
  }  // dropped: what a relay that dies or throws mid-pass leaves
  auto again = outbox.fetch(10, later());
  REQUIRE(ids(again) == std::vector<std::string>{"m1", "m2"});
  CHECK(again.entries()[0].sequence == first[0]);
  CHECK(again.entries()[1].sequence == first[1]);
  CHECK(again.entries()[0].attempts == 0);
  CHECK(outbox.dead_letters(10, 0).empty());
}

template <class Factory>
void a_settle_that_cannot_be_right_is_refused_and_writes_nothing() {
  Factory factory;
  factory.write("m1", "k", "p");
  auto outbox = factory.make();
  auto other = factory.make();
  auto batch = outbox.fetch(10, later());
  REQUIRE(batch.entries().size() == 1);
  CHECK_THROWS_AS(other.settle(batch, all(1, kind::published), later()), std::logic_error);
  CHECK_THROWS_AS(outbox.settle(batch, all(2, kind::published), later()), std::invalid_argument);
  CHECK_THROWS_AS(outbox.settle(batch, all(0, kind::published), later()), std::invalid_argument);
  // Still open and still this reader's: a corrected settle goes through, once.
  outbox.settle(batch, all(1, kind::retry, "boom", later(-std::chrono::minutes{1})), later());
  CHECK_THROWS_AS(outbox.settle(batch, all(1, kind::published), later()), std::logic_error);
  auto again = outbox.fetch(10, later());
  REQUIRE(ids(again) == std::vector<std::string>{"m1"});
  CHECK(again.entries()[0].attempts == 1);
}

// ---- order ----------------------------------------------------------------------------------

template <class Factory>
void a_failed_row_holds_back_the_later_rows_of_its_key_and_no_other() {
  Factory factory;
  for (const char* id : {"a1", "b1", "a2", "b2"})
    factory.write(id, std::string(1, id[0]), "p");
  auto outbox = factory.make();
  {
    auto batch = outbox.fetch(10, later());
    REQUIRE(ids(batch) == std::vector<std::string>{"a1", "b1", "a2", "b2"});
    // The sink failed a1, so the relay did not hand it a2 (left untouched).
    const std::vector<outbox_settlement> settled{
        {kind::retry, "timeout", later(std::chrono::minutes{60})},
        {kind::published},
        {kind::untouched},
        {kind::published}};
    outbox.settle(batch, settled, later());
  }
  factory.write("b3", "b", "p");
  factory.write("c1", "c", "p");
  {
    // a1 waits for its retry, and a2 waits for a1; b and c go on.
    auto next = outbox.fetch(10, later());
    CHECK(ids(next) == std::vector<std::string>{"b3", "c1"});
    outbox.settle(next, all(2, kind::published), later());
  }
  auto retried = outbox.fetch(10, later(std::chrono::minutes{120}));
  REQUIRE(ids(retried) == std::vector<std::string>{"a1", "a2"});
  CHECK(retried.entries()[0].attempts == 1);
  CHECK(retried.entries()[1].attempts == 0);
}

template <class Factory>
void small_batches_hand_out_each_key_in_order() {
  Factory factory;
  for (const char* id : {"a1", "b1", "a2", "b2", "a3", "c1", "a4"})
    factory.write(id, std::string(1, id[0]), id);
  auto outbox = factory.make();
  std::map<std::string, std::vector<std::string>> sent;
  std::size_t batches = 0;
  for (;;) {
    auto batch = outbox.fetch(2, later());
    if (batch.entries().empty()) break;
    REQUIRE(++batches < 10);
    for (const outbox_entry& entry : batch.entries())
      sent[entry.message.partition_key].push_back(entry.id);
    outbox.settle(batch, all(batch.entries().size(), kind::published), later());
  }
  CHECK(sent["a"] == std::vector<std::string>{"a1", "a2", "a3", "a4"});
  CHECK(sent["b"] == std::vector<std::string>{"b1", "b2"});
  CHECK(sent["c"] == std::vector<std::string>{"c1"});
}

// ---- dead letters ---------------------------------------------------------------------------

template <class Factory>
void a_dead_row_becomes_a_dead_letter_and_is_requeued_under_its_id() {
  Factory factory;
  factory.write("a1", "a", "first");
  factory.write("a2", "a", "second");
  auto outbox = factory.make();
  std::int64_t buried = 0;
  {
    auto batch = outbox.fetch(10, later());
    REQUIRE(batch.entries().size() == 2);
    buried = batch.entries()[0].sequence;
    const std::vector<outbox_settlement> settled{{kind::retry, "once", later()}, {kind::untouched}};
    outbox.settle(batch, settled, later());
  }
  const time_point dead_at = later(std::chrono::minutes{2});
  {
    auto batch = outbox.fetch(10, dead_at);
    REQUIRE(ids(batch) == std::vector<std::string>{"a1", "a2"});
    const std::vector<outbox_settlement> settled{{kind::dead, "too large for the topic"},
                                                 {kind::untouched}};
    outbox.settle(batch, settled, dead_at);
  }
  const auto letters = outbox.dead_letters(10, 0);
  REQUIRE(letters.size() == 1);
  CHECK(letters[0].entry.sequence == buried);
  CHECK(letters[0].entry.id == "a1");
  CHECK(letters[0].entry.message.topic == "orders");
  CHECK(letters[0].entry.message.payload == "first");
  CHECK(letters[0].entry.message.partition_key == "a");
  CHECK(letters[0].entry.message.headers == std::vector<outbox_header>{{"type", "placed"}});
  CHECK(letters[0].entry.attempts == 2);
  CHECK(letters[0].reason == "too large for the topic");
  CHECK(letters[0].dead_at == dead_at);
  CHECK(outbox.dead_letters(10, buried).empty());
  CHECK(outbox.backlog(dead_at).waiting == 1);
  {
    // No longer holding back its key.
    auto next = outbox.fetch(10, dead_at);
    CHECK(ids(next) == std::vector<std::string>{"a2"});
    outbox.settle(next, all(1, kind::published), dead_at);
  }
  CHECK(requeue(outbox, {buried}, dead_at) == outbox_requeue_report{{buried, status::requeued}});
  CHECK(outbox.dead_letters(10, 0).empty());
  CHECK(requeue(outbox, {buried}, dead_at) ==
        outbox_requeue_report{{buried, status::no_such_dead_letter}});
  auto again = outbox.fetch(10, later(std::chrono::minutes{3}));
  REQUIRE(ids(again) == std::vector<std::string>{"a1"});
  CHECK(again.entries()[0].sequence > buried);
  CHECK(again.entries()[0].attempts == 0);
  CHECK(again.entries()[0].message.payload == "first");
}

template <class Factory>
void a_dead_letter_whose_id_was_written_again_stays_a_dead_letter() {
  Factory factory;
  factory.write("a1", "a", "first");
  auto outbox = factory.make();
  {
    auto batch = outbox.fetch(10, later());
    outbox.settle(batch, all(1, kind::dead, "rejected"), later());
  }
  factory.write("a1", "a", "again");  // the same id, written again after it died
  const auto letters = outbox.dead_letters(10, 0);
  REQUIRE(letters.size() == 1);
  const std::int64_t sequence = letters[0].entry.sequence;
  CHECK(requeue(outbox, {sequence}, later()) ==
        outbox_requeue_report{{sequence, status::id_already_in_outbox}});
  CHECK(outbox.dead_letters(10, 0).size() == 1);
  auto batch = outbox.fetch(10, later());
  REQUIRE(ids(batch) == std::vector<std::string>{"a1"});
  CHECK(batch.entries()[0].message.payload == "again");
}

template <class Factory>
void a_requeue_of_several_answers_each_sequence_in_the_order_asked() {
  Factory factory;
  factory.write("a1", "a", "first a");
  factory.write("b1", "b", "first b");
  factory.write("c1", "c", "first c");
  factory.write("a2", "a", "second a");
  auto outbox = factory.make();
  {
    auto batch = outbox.fetch(10, later());
    REQUIRE(ids(batch) == std::vector<std::string>{"a1", "b1", "c1", "a2"});
    outbox.settle(batch, all(4, kind::dead, "rejected"), later());
  }
  const auto letters = outbox.dead_letters(10, 0);
  REQUIRE(letters.size() == 4);
  const std::int64_t a1 = letters[0].entry.sequence;
  const std::int64_t b1 = letters[1].entry.sequence;
  const std::int64_t c1 = letters[2].entry.sequence;
  const std::int64_t a2 = letters[3].entry.sequence;
  const std::int64_t none = a2 + 1000;  // no dead letter has it
  factory.write("c1", "c", "c again");  // c1's id is in the outbox again
  // Asked out of order, with a sequence that is no dead letter and one whose id is queued.
  const outbox_requeue_report report = requeue(outbox, {a2, none, c1, b1, a1}, later());
  CHECK(report == outbox_requeue_report{{a2, status::requeued},
                                        {none, status::no_such_dead_letter},
                                        {c1, status::id_already_in_outbox},
                                        {b1, status::requeued},
                                        {a1, status::requeued}});
  const auto left = outbox.dead_letters(10, 0);
  REQUIRE(left.size() == 1);
  CHECK(left[0].entry.sequence == c1);
  CHECK(left[0].entry.message.payload == "first c");
  // Requeued in their old order, whatever the order asked: a1 still before a2.
  auto batch = outbox.fetch(10, later());
  REQUIRE(ids(batch) == std::vector<std::string>{"c1", "a1", "b1", "a2"});
  CHECK(batch.entries()[0].message.payload == "c again");
  CHECK(batch.entries()[1].sequence > a2);
  CHECK(batch.entries()[1].attempts == 0);
  CHECK(batch.entries()[3].message.payload == "second a");
}

template <class Factory>
void a_requeue_of_nothing_answers_nothing_and_changes_nothing() {
  Factory factory;
  factory.write("a1", "a", "p");
  auto outbox = factory.make();
  {
    auto batch = outbox.fetch(10, later());
    outbox.settle(batch, all(1, kind::dead, "rejected"), later());
  }
  CHECK(requeue(outbox, {}, later()).empty());
  CHECK(outbox.dead_letters(10, 0).size() == 1);
  CHECK(outbox.fetch(10, later()).entries().empty());
}

template <class Factory>
void a_requeue_asking_a_sequence_twice_is_refused() {
  Factory factory;
  factory.write("a1", "a", "p");
  factory.write("b1", "b", "p");
  auto outbox = factory.make();
  {
    auto batch = outbox.fetch(10, later());
    outbox.settle(batch, all(2, kind::dead, "rejected"), later());
  }
  const auto letters = outbox.dead_letters(10, 0);
  REQUIRE(letters.size() == 2);
  const std::int64_t a1 = letters[0].entry.sequence;
  const std::int64_t b1 = letters[1].entry.sequence;
  CHECK_THROWS_AS(requeue(outbox, {a1, b1, a1}, later()), std::invalid_argument);
  CHECK(outbox.dead_letters(10, 0).size() == 2);
  CHECK(outbox.fetch(10, later()).entries().empty());
  // Asked once each, both go.
  CHECK(requeue(outbox, {b1, a1}, later()) ==
        outbox_requeue_report{{b1, status::requeued}, {a1, status::requeued}});
  CHECK(ids(outbox.fetch(10, later())) == std::vector<std::string>{"a1", "b1"});
}

template <class Factory>
void a_row_whose_headers_cannot_be_read_is_buried_with_the_reason() {
  Factory factory;
  factory.write("a1", "a", "p");
  factory.write("a2", "a", "p");
  factory.corrupt_headers("a1");
  auto outbox = factory.make();
  {
    auto batch = outbox.fetch(10, later());
    CHECK(ids(batch) == std::vector<std::string>{"a2"});
    outbox.settle(batch, all(batch.entries().size(), kind::published), later());
  }
  const auto letters = outbox.dead_letters(10, 0);
  REQUIRE(letters.size() == 1);
  CHECK(letters[0].entry.id == "a1");
  CHECK(letters[0].entry.message.headers.empty());
  CHECK_FALSE(letters[0].reason.empty());
  // Alone in its batch: buried at once, the batch empty.
  factory.write("b1", "b", "p");
  factory.corrupt_headers("b1");
  CHECK(outbox.fetch(10, later()).entries().empty());
  CHECK(outbox.dead_letters(10, 0).size() == 2);
  CHECK(outbox.backlog(later()).waiting == 0);
}

// ---- retention and backlog ------------------------------------------------------------------

template <class Factory>
void purge_removes_rows_published_before_the_time_never_an_unpublished_one() {
  Factory factory;
  for (const char* id : {"m1", "m2", "m3", "m4"})
    factory.write(id, id, "p");
  auto outbox = factory.make();
  const time_point base = later();
  for (int i = 0; i < 3; ++i) {
    auto batch = outbox.fetch(1, base);
    outbox.settle(batch, all(1, kind::published), base + std::chrono::hours(i));
  }
  const time_point cut = base + std::chrono::minutes{90};
  CHECK(outbox.purge(cut, 1) == 1);
  CHECK(outbox.purge(cut, 10) == 1);
  CHECK(outbox.purge(cut, 10) == 0);
  CHECK(outbox.purge(base + std::chrono::hours{10}, 10) == 1);
  CHECK(outbox.purge(base + std::chrono::hours{10}, 10) == 0);
  CHECK(outbox.backlog(base).waiting == 1);
  CHECK(ids(outbox.fetch(10, base)) == std::vector<std::string>{"m4"});
}

template <class Factory>
void the_backlog_counts_what_waits_and_says_when_the_oldest_was_written() {
  Factory factory;
  auto outbox = factory.make();
  const outbox_backlog empty = outbox.backlog(later());
  CHECK(empty.waiting == 0);
  CHECK_FALSE(empty.oldest_created_at.has_value());
  factory.write("m1", "a", "p");
  factory.write("m2", "b", "p");
  factory.write("m3", "c", "p");
  time_point m2_written{};
  {
    auto batch = outbox.fetch(2, later());
    REQUIRE(batch.entries().size() == 2);
    m2_written = batch.entries()[1].created_at;
    const std::vector<outbox_settlement> settled{
        {kind::published}, {kind::retry, "later", later(std::chrono::minutes{60})}};
    outbox.settle(batch, settled, later());
  }
  const outbox_backlog waiting = outbox.backlog(later());
  CHECK(waiting.waiting == 2);  // m2 waiting for its retry, m3 due
  REQUIRE(waiting.oldest_created_at.has_value());
  CHECK(*waiting.oldest_created_at == m2_written);
}

// ---- driven by the relay --------------------------------------------------------------------

struct relay_policies : default_relay_policies {
  using clock = manual_clock;
  using backoff = exponential_backoff;  // no jitter: 100 ms, 200 ms, ...
  using budget = unlimited_budget;
  using observer = counting_relay_observer;
};

template <class Factory>
void the_relay_delivers_everything_once_through_failures_and_a_rejection() {
  Factory factory;
  for (int i = 0; i < 12; ++i) {
    const std::string key = "acct-" + std::to_string(i % 3);
    factory.write(key + "/" + std::to_string(i), key, std::to_string(i));
  }
  auto outbox = factory.make();
  scripted_sink sink;
  sink.failures["acct-0/3"] = 2;
  sink.failures["acct-1/1"] = 1;
  sink.rejected.insert("acct-2/5");
  manual_clock clock{later()};
  counting_relay_observer observer;
  relay_options options;
  options.batch_size = 4;
  options.retention = std::chrono::hours{1};
  outbox_relay<decltype(outbox), scripted_sink, relay_policies> relay(
      outbox, sink, options, {.clock = clock, .observer = observer, .seed = seed_from(7)});
  for (int round = 0; round < 20 && outbox.backlog(clock.wall_now()).waiting > 0; ++round) {
    relay.drain();
    clock.advance(std::chrono::seconds{1});
  }
  CHECK(sink.payloads_of("acct-0") == std::vector<std::string>{"0", "3", "6", "9"});
  CHECK(sink.payloads_of("acct-1") == std::vector<std::string>{"1", "4", "7", "10"});
  CHECK(sink.payloads_of("acct-2") == std::vector<std::string>{"2", "8", "11"});
  CHECK(sink.delivered.size() == 11);
  CHECK(observer.published() == 11);
  CHECK(observer.retried() == 3);
  CHECK(observer.dead_lettered() == 1);
  const auto letters = outbox.dead_letters(10, 0);
  REQUIRE(letters.size() == 1);
  CHECK(letters[0].entry.id == "acct-2/5");
  CHECK(letters[0].reason == "scripted rejection");
  CHECK(outbox.backlog(clock.wall_now()).waiting == 0);
  CHECK(relay.purge() == 0);  // published under an hour ago
  clock.advance(std::chrono::hours{1} + std::chrono::seconds{1});
  CHECK(relay.purge() == 11);
  CHECK(observer.purged() == 11);
}

}  // namespace outbox_conformance
}  // namespace idem::testing

// One Catch2 test case per behaviour, for the factory given. A macro only because Catch2
// registers test cases with macros; each case is the function of the same name above.
#define IDEM_OUTBOX_CONFORMANCE_CASE(Factory, behaviour, function)                          \
  IDEM_CONFORMANCE_SERIAL(                                                                  \
      TEMPLATE_TEST_CASE("outbox conformance: " behaviour, "[conformance]", Factory) {      \
        static_assert(::idem::testing::OutboxFactory<TestType>,                             \
                      "An outbox conformance factory must be default-constructible and "    \
                      "provide make() returning an Outbox with dead_letters(limit, after) " \
                      "and requeue(sequences, now) (idem/outbox/dead_letter.hpp), "         \
                      "write(id, partition_key, payload) and corrupt_headers(id).");        \
        ::idem::testing::outbox_conformance::function<TestType>();                          \
      })

#define IDEM_OUTBOX_CONFORMANCE_TESTS(Factory)                                                   \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "a batch holds the due rows in sequence order, with every field", \
                               a_batch_holds_the_due_rows_in_sequence_order_with_every_field)    \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "fetch takes at most the limit, and rows not yet due wait",       \
                               fetch_takes_at_most_the_limit_and_rows_not_yet_due_wait)          \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory, "a batch dropped unsettled changes nothing",             \
                               a_batch_dropped_unsettled_changes_nothing)                        \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "a settle that cannot be right is refused and writes nothing",    \
                               a_settle_that_cannot_be_right_is_refused_and_writes_nothing)      \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "a failed row holds back the later rows of its key, no other",    \
                               a_failed_row_holds_back_the_later_rows_of_its_key_and_no_other)   \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory, "small batches hand out each key in order",              \
                               small_batches_hand_out_each_key_in_order)                         \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "a dead row becomes a dead letter and is requeued under its id",  \
                               a_dead_row_becomes_a_dead_letter_and_is_requeued_under_its_id)    \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "a dead letter whose id was written again stays a dead letter",   \
                               a_dead_letter_whose_id_was_written_again_stays_a_dead_letter)     \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "a requeue of several answers each sequence, in the order asked", \
                               a_requeue_of_several_answers_each_sequence_in_the_order_asked)    \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory, "a requeue of nothing answers nothing, changes nothing", \
                               a_requeue_of_nothing_answers_nothing_and_changes_nothing)         \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "a requeue asking a sequence twice is refused, requeues nothing", \
                               a_requeue_asking_a_sequence_twice_is_refused)                     \
  IDEM_OUTBOX_CONFORMANCE_CASE(Factory,                                                          \
                               "a row whose headers cannot be read is buried with the reason",   \
                               a_row_whose_headers_cannot_be_read_is_buried_with_the_reason)     \
  IDEM_OUTBOX_CONFORMANCE_CASE(                                                                  \
      Factory, "purge removes rows published before the time, never an unpublished one",         \
      purge_removes_rows_published_before_the_time_never_an_unpublished_one)                     \
  IDEM_OUTBOX_CONFORMANCE_CASE(                                                                  \
      Factory, "the backlog counts what waits and says when the oldest was written",             \
      the_backlog_counts_what_waits_and_says_when_the_oldest_was_written)                        \
  IDEM_OUTBOX_CONFORMANCE_CASE(                                                                  \
      Factory, "the relay delivers everything once through failures and a rejection",            \
      the_relay_delivers_everything_once_through_failures_and_a_rejection)

#endif  // IDEM_TESTING_OUTBOX_CONFORMANCE_HPP
