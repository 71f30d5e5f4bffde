// Resumable records of the asynchronous wrapper: async_idempotent with max_kept_request_bytes
// keeps each request in its record exactly as idempotent does, so that idem::reconciler (which
// is blocking) finishes the work of a holder that died through an idempotent registered under
// the same name; over the cap a request answers 413 with nothing claimed; without the option
// nothing is kept and the reconciler can only report the record.
#include <catch2/catch.hpp>

#include <idem/asio.hpp>
#include <idem/idem.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "asio/event_loop.hpp"
#include "asio/server_support.hpp"

namespace {

using namespace std::chrono_literals;
using test_async::charge;
using test_async::completion;
using test_async::downstream;
using test_async::run_until;
namespace asio = idem::asio;
using outcome = idem::idempotent_outcome<idem::http_response>;
using idem::verdict;

// A response codec that seals: every stored byte is changed, and a prefix marks the sealed form,
// so that bytes that skipped the sealing, or were sealed twice, do not open.
struct reversing_codec {
  void seal(std::string_view plain, std::string& out) const {
    out += "sealed:";
    out.append(plain.rbegin(), plain.rend());
  }
  void open(std::string_view sealed, std::string& out) const {
    if (!sealed.starts_with("sealed:")) throw idem::codec_error("not sealed");
    sealed.remove_prefix(7);
    out.append(sealed.rbegin(), sealed.rend());
  }
};

struct sealing_policies : test_async::manual_policies {
  using response_codec = reversing_codec;
};

template <class Policies>
struct reconciler_policies_of : idem::default_reconciler_policies {
  using clock = idem::manual_clock;
  using response_codec = typename Policies::response_codec;
};

struct effects {
  int charges = 0;
  int emails = 0;
};

// The payment's logic twice, as a coroutine for the asynchronous wrapper and as a function for
// the blocking one the reconciler resumes it through: the same steps under the same names. The
// asynchronous holder stalls after its charge on the first attempt (fence 1): its lease runs out
// there, as a holder's that died.
struct async_payment {
  idem::manual_clock clock;
  std::shared_ptr<effects> done;

  asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                  const idem::http_request& request) const {
    const std::string id = co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
      ++done->charges;
      co_return "ch_" + std::to_string(done->charges);
    });
    if (ctx.fence() == 1) co_await downstream(clock, 1h);
    co_await ctx.async_step("email", [&]() -> asio::awaitable<void> {
      ++done->emails;
      co_return;
    });
    co_return idem::http_response{201, {}, id + " for " + request.body};
  }
};

struct blocking_payment {
  std::shared_ptr<effects> done;

  idem::http_response operator()(idem::handler_context& ctx,
                                 const idem::http_request& request) const {
    const std::string id = ctx.step("charge", [&] {
      ++done->charges;
      return "ch_" + std::to_string(done->charges);
    });
    ctx.step("email", [&] { ++done->emails; });
    return idem::http_response{201, {}, id + " for " + request.body};
  }
};

template <class Policies>
using async_wrapper = idem::async_idempotent<async_payment, Policies>;
template <class Policies>
using blocking_wrapper = idem::idempotent<blocking_payment, Policies>;

template <class Policies>
typename async_wrapper<Policies>::options async_options(const idem::memory_store& store,
                                                        const idem::manual_clock& clock,
                                                        std::size_t keep) {
  typename async_wrapper<Policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.heartbeat = false;  // the stalled holder's lease runs out
  parts.max_kept_request_bytes = keep;
  parts.name = "payments";
  return parts;
}

template <class Policies>
typename blocking_wrapper<Policies>::options blocking_options(const idem::memory_store& store,
                                                              const idem::manual_clock& clock) {
  typename blocking_wrapper<Policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.max_kept_request_bytes = 4096;
  parts.name = "payments";
  return parts;
}

template <class T>
T run_to_end(asio::io_context& io, idem::manual_clock& clock, asio::awaitable<T> work) {
  completion<T> done;
  asio::co_spawn(io, std::move(work), done.handler());
  run_until(io, clock, [&] { return done.done; });
  return done.take();
}

// The recovery bytes of the record of (tenant, order-1), opened.
template <class Policies>
std::string opened_recovery(idem::memory_store& store, const idem::manual_clock& clock) {
  const std::optional<idem::record> found = store.find("tenant", "order-1", clock.wall_now());
  REQUIRE(found);
  CHECK(found->state == idem::record_state::in_progress);
  std::string plain;
  typename Policies::response_codec{}.open(found->recovery, plain);
  return plain;
}

template <class Policies>
void resumed_through_a_blocking_wrapper(std::chrono::nanoseconds coalesce) {
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  auto done = std::make_shared<effects>();
  auto parts = async_options<Policies>(store, clock, 4096);
  parts.coalesce = coalesce;  // on: the claim is made by the awaited path, not at once
  async_wrapper<Policies> payments{io.get_executor(), async_payment{clock, done}, parts};
  const idem::http_request request = charge();

  completion<outcome> stalled;
  payments.async_call("tenant", request, stalled.handler());
  run_until(io, clock, [&] { return clock.waiting_wakes() == 1; });
  REQUIRE(done->charges == 1);
  // The record holds the request from its claim on, and still after the charge's checkpoint.
  const std::string recovery = opened_recovery<Policies>(store, clock);
  CHECK(recovery.starts_with(idem::detail::kept_request("payments", idem::encode(request))));
  std::string_view charged;
  CHECK(idem::detail::find_step(recovery, "charge", charged));

  clock.advance(31s);  // past the lease: the record is stuck
  idem::reconciler<reconciler_policies_of<Policies>> reconciler(store, {}, clock);
  blocking_wrapper<Policies> resumer{blocking_payment{done},
                                     blocking_options<Policies>(store, clock)};
  reconciler.template resume_with<idem::http_request>(resumer);
  const idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.resumed == 1);
  CHECK(report.summary.not_resumable == 0);
  CHECK(report.rows.empty());
  CHECK(done->charges == 1);
  CHECK(done->emails == 1);

  // A client's retry replays what the reconciler finished; the stalled holder, woken, finds its
  // fence lost before its email and answers the same.
  const outcome retried =
      run_to_end(io, clock, payments.async_call("tenant", request, asio::use_awaitable));
  REQUIRE(retried.verdict() == verdict::replayed);
  CHECK(retried->body == "ch_1 for {\"amount\":100}");
  run_until(io, clock, [&] { return stalled.done; });
  const outcome original = stalled.take();
  REQUIRE(original.verdict() == verdict::replayed);
  CHECK(original->body == retried->body);
  CHECK(done->charges == 1);
  CHECK(done->emails == 1);
}

}  // namespace

TEST_CASE(
    "a request an async wrapper kept is resumed by the reconciler through a blocking wrapper") {
  SECTION("claimed at once") {
    resumed_through_a_blocking_wrapper<test_async::manual_policies>(0s);
  }
  SECTION("claimed after coalescing's waits") {
    resumed_through_a_blocking_wrapper<test_async::manual_policies>(1s);
  }
  SECTION("sealed by the response codec") {
    resumed_through_a_blocking_wrapper<sealing_policies>(0s);
  }
}

TEST_CASE("an async wrapper answers 413 for a request over its keeping cap, with nothing claimed") {
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  auto done = std::make_shared<effects>();
  for (const auto coalesce : {0s, 1s}) {
    auto parts = async_options<test_async::manual_policies>(store, clock, 16);
    parts.coalesce = coalesce;
    async_wrapper<test_async::manual_policies> payments{io.get_executor(),
                                                        async_payment{clock, done}, parts};
    const outcome refused =
        run_to_end(io, clock, payments.async_call("tenant", charge(), asio::use_awaitable));
    CHECK(refused.verdict() == verdict::body_too_large);
    CHECK(refused.http_status() == 413);
    CHECK_THAT(std::string(refused.message()),
               Catch::Matchers::Contains("max_kept_request_bytes (16)"));
    CHECK_FALSE(store.find("tenant", "order-1", clock.wall_now()));
    CHECK(done->charges == 0);
  }
}

TEST_CASE("an async wrapper without the option keeps nothing, and the reconciler can only report") {
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  auto done = std::make_shared<effects>();
  async_wrapper<test_async::manual_policies> payments{
      io.get_executor(), async_payment{clock, done},
      async_options<test_async::manual_policies>(store, clock, 0)};
  const idem::http_request request = charge();  // read until the call completes
  completion<outcome> stalled;
  payments.async_call("tenant", request, stalled.handler());
  run_until(io, clock, [&] { return clock.waiting_wakes() == 1; });
  const std::string recovery = opened_recovery<test_async::manual_policies>(store, clock);
  bool kept = false;
  idem::detail::for_each_entry(recovery, [&](std::string_view name, std::string_view) {
    kept = kept || name == idem::detail::kept_request_entry;
  });
  CHECK_FALSE(kept);

  clock.advance(31s);
  idem::reconciler<reconciler_policies_of<test_async::manual_policies>> reconciler(store, {},
                                                                                   clock);
  blocking_wrapper<test_async::manual_policies> resumer{
      blocking_payment{done}, blocking_options<test_async::manual_policies>(store, clock)};
  reconciler.resume_with<idem::http_request>(resumer);
  const idem::reconcile_report report = reconciler.run_once();
  CHECK(report.summary.not_resumable == 1);
  CHECK(report.summary.resumed == 0);
  CHECK(done->emails == 0);
  run_until(io, clock, [&] { return stalled.done; });  // its fence was taken for the report
  CHECK(stalled.take().verdict() == verdict::in_progress);
}

TEST_CASE(
    "an async wrapper resumes its own stuck record with async_resume, as idempotent::resume") {
  using policies = test_async::manual_policies;
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  auto done = std::make_shared<effects>();
  async_wrapper<policies> payments{io.get_executor(), async_payment{clock, done},
                                   async_options<policies>(store, clock, 4096)};
  const idem::http_request request = charge();
  const std::string kept = idem::encode(request);

  completion<outcome> stalled;
  payments.async_call("tenant", request, stalled.handler());
  run_until(io, clock, [&] { return clock.waiting_wakes() == 1; });
  REQUIRE(done->charges == 1);
  clock.advance(31s);  // past the lease: the record is stuck
  const std::vector<idem::record> stuck = payments.stuck();
  REQUIRE(stuck.size() == 1);

  // A request that is not the one the record was claimed for is never run.
  idem::http_request other = request;
  other.body = "{\"amount\":999}";
  const idem::resume_result refused =
      run_to_end(io, clock,
                 payments.template async_resume<idem::http_request>(stuck[0], idem::encode(other),
                                                                    asio::use_awaitable));
  CHECK(refused.what == idem::resumption::unreadable);
  const idem::resume_result garbled =
      run_to_end(io, clock,
                 payments.template async_resume<idem::http_request>(stuck[0], "not a request",
                                                                    asio::use_awaitable));
  CHECK(garbled.what == idem::resumption::unreadable);
  CHECK(done->emails == 0);

  // The kept request: taken over (fence 2), the charge answered from its recovery point, the
  // email sent, the response recorded.
  const idem::resume_result resumed = run_to_end(
      io, clock,
      payments.template async_resume<idem::http_request>(stuck[0], kept, asio::use_awaitable));
  CHECK(resumed.what == idem::resumption::resumed);
  CHECK(resumed.fence == 2);
  CHECK(done->charges == 1);
  CHECK(done->emails == 1);

  // Once more: nothing left to do.
  const idem::resume_result again = run_to_end(
      io, clock,
      payments.template async_resume<idem::http_request>(stuck[0], kept, asio::use_awaitable));
  CHECK(again.what == idem::resumption::settled);

  // A client's retry replays what the resume finished; the stalled holder answers the same.
  const outcome retried =
      run_to_end(io, clock, payments.async_call("tenant", request, asio::use_awaitable));
  REQUIRE(retried.verdict() == verdict::replayed);
  CHECK(retried->body == "ch_1 for {\"amount\":100}");
  run_until(io, clock, [&] { return stalled.done; });
  CHECK(stalled.take().verdict() == verdict::replayed);
  CHECK(done->charges == 1);
  CHECK(done->emails == 1);
}

TEST_CASE("an async resume whose handler throws again keeps the claim and reports failed") {
  // The first holder stalls after its charge (fence 1) and its lease runs out; a resume (fence
  // 2) finds the charge recorded and throws before its email.
  struct failing_payment {
    idem::manual_clock clock;
    std::shared_ptr<effects> done;
    asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                    const idem::http_request&) const {
      co_await ctx.async_step("charge", [&]() -> asio::awaitable<std::string> {
        ++done->charges;
        co_return "ch_1";
      });
      if (ctx.fence() == 1) co_await downstream(clock, 1h);
      throw std::runtime_error("the mail server is down");
    }
  };
  using policies = test_async::manual_policies;
  using failing_wrapper = idem::async_idempotent<failing_payment, policies>;
  asio::io_context io;
  idem::manual_clock clock;
  idem::memory_store store;
  auto done = std::make_shared<effects>();
  failing_wrapper::options parts;
  parts.store = store;
  parts.clock = clock;
  parts.heartbeat = false;
  parts.max_kept_request_bytes = 4096;
  parts.name = "payments";
  failing_wrapper payments{io.get_executor(), failing_payment{clock, done}, parts};
  const idem::http_request request = charge();

  completion<outcome> stalled;
  payments.async_call("tenant", request, stalled.handler());
  run_until(io, clock, [&] { return clock.waiting_wakes() == 1; });
  clock.advance(31s);
  const std::vector<idem::record> stuck = payments.stuck();
  REQUIRE(stuck.size() == 1);

  const idem::resume_result failed =
      run_to_end(io, clock,
                 payments.template async_resume<idem::http_request>(stuck[0], idem::encode(request),
                                                                    asio::use_awaitable));
  CHECK(failed.what == idem::resumption::failed);
  CHECK(failed.message == "the mail server is down");
  CHECK(failed.fence == 2);
  // The charge ran once; the recovery the resume left still holds it.
  CHECK(done->charges == 1);
  std::string_view charged;
  CHECK(idem::detail::find_step(failed.recovery, "charge", charged));
  // The claim is kept, not released: the record stays in progress under fence 2.
  const std::optional<idem::record> kept = store.find("tenant", "order-1", clock.wall_now());
  REQUIRE(kept);
  CHECK(kept->state == idem::record_state::in_progress);
  CHECK(kept->fence == 2);
  // The first holder, woken, throws too; its fence is gone, so the resume's claim stays.
  run_until(io, clock, [&] { return stalled.done; });
  const std::optional<idem::record> still = store.find("tenant", "order-1", clock.wall_now());
  REQUIRE(still);
  CHECK(still->fence == 2);
}
