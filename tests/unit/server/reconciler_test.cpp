// The reconciler on the memory stores: the reconciler conformance suite (resumable records
// finished with one effect a step, the report against a ground truth, races, lookup before
// retry, bad input) on memory_store and locked_store, and what needs no store: the report's
// JSON line and the options a reconciler refuses.
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/testing/reconciler_conformance.hpp>

#include <stdexcept>
#include <stop_token>
#include <string>

using namespace std::chrono_literals;

namespace {

struct memory_factory {
  static constexpr bool bounded = false;
  idem::memory_store make(const idem::testing::store_limits& /*limits*/) { return {}; }
};

struct locked_factory {
  static constexpr bool bounded = false;
  idem::locked_store make(const idem::testing::store_limits& /*limits*/) { return {}; }
};

using idem::testing::reconciler_conformance::ledger;
using idem::testing::reconciler_conformance::three_steps;
using payments_type = idem::testing::reconciler_conformance::payments_of<memory_factory>;

struct test_reconciler_policies : idem::default_reconciler_policies {
  using clock = idem::manual_clock;
};

}  // namespace

IDEM_RECONCILER_CONFORMANCE_TESTS(memory_factory)
IDEM_RECONCILER_CONFORMANCE_TESTS(locked_factory)

TEST_CASE("a report row is one line of JSON with every field", "[reconciler]") {
  idem::discrepancy row;
  row.scope = "acct \"7\"\n\xff";
  row.redacted_key = idem::redacted_key("secret").str();
  row.age = 3725s;
  row.handler = "payments";
  row.step = "charge";
  row.downstream_key = "abc";
  row.classification = idem::landing::unknown;
  row.source = idem::evidence::lookup;
  row.reason = "the lookup threw: down";
  CHECK(idem::json_line(row) ==
        "{\"scope\":\"acct \\\"7\\\"\\u000a\xef\xbf\xbd\",\"key\":\"" + row.redacted_key +
            "\",\"age_seconds\":3725,\"handler\":\"payments\",\"step\":\"charge\","
            "\"downstream_key\":\"abc\",\"classification\":\"unknown\",\"evidence\":\"lookup\","
            "\"reason\":\"the lookup threw: down\"}");
}

TEST_CASE("a reconciler refuses options and wrappers that cannot work", "[reconciler]") {
  idem::memory_store store;
  idem::manual_clock clock;
  idem::reconciler_options none;
  none.batch_size = 0;
  CHECK_THROWS_AS(idem::reconciler<test_reconciler_policies>(store, none, clock),
                  std::invalid_argument);
  idem::reconciler_options short_retention;
  short_retention.retention = short_retention.lease;
  CHECK_THROWS_AS(idem::reconciler<test_reconciler_policies>(store, short_retention, clock),
                  std::invalid_argument);

  ledger downstream;
  std::atomic<int> stops{0};
  idem::reconciler<test_reconciler_policies> reconciler(store, {}, clock);
  payments_type::options keeps_nothing;
  keeps_nothing.store = store;
  payments_type plain{three_steps{&downstream, &stops}, keeps_nothing};
  CHECK_THROWS_AS(reconciler.resume_with<idem::http_request>(plain), std::invalid_argument);
  payments_type one{
      three_steps{&downstream, &stops},
      idem::testing::reconciler_conformance::resumable_options<memory_factory>(store, clock)};
  payments_type two{
      three_steps{&downstream, &stops},
      idem::testing::reconciler_conformance::resumable_options<memory_factory>(store, clock)};
  reconciler.resume_with<idem::http_request>(one);
  CHECK_THROWS_AS(reconciler.resume_with<idem::http_request>(two), std::invalid_argument);
}

TEST_CASE("run_for makes passes idle_wait apart until its time is up, or it is stopped",
          "[reconciler]") {
  struct counting_policies : idem::default_reconciler_policies {
    using clock = idem::manual_clock;
    using observer = idem::counting_reconciler_observer;
  };
  idem::memory_store store;
  idem::manual_clock clock;
  idem::reconciler_options options;
  options.idle_wait = 1s;
  idem::reconciler<counting_policies> reconciler(store, options, clock);
  const auto started = clock.now();
  (void)reconciler.run_for(5s);
  CHECK(reconciler.observer().passes() == 6);  // at 0, 1, 2, 3, 4 and 5 s
  CHECK(clock.now() - started == 5s);

  std::stop_source stop;
  stop.request_stop();
  (void)reconciler.run_for(5s, stop.get_token());
  CHECK(reconciler.observer().passes() == 6);  // stopped before its first pass
}
