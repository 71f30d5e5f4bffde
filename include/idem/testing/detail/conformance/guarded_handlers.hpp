// What the guarded conformance cases (guarded_cases.hpp) run: the policies, the handlers and
// their gates, the request, and the drivers that call a wrapper. Included by guarded_cases.hpp.
#ifndef IDEM_TESTING_DETAIL_CONFORMANCE_GUARDED_HANDLERS_HPP
#define IDEM_TESTING_DETAIL_CONFORMANCE_GUARDED_HANDLERS_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/store_conformance.hpp>."
#endif

#include <idem/testing/detail/conformance/support.hpp>

namespace idem::testing {

namespace conformance {

/// How the guarded cases reach a wrapper. A driver names the wrapper types the cases build:
/// guard<Handler, Policies> (with a nested options, a (Handler, options) constructor,
/// operator()(scope, key, request) answering idempotent_outcome, handler(), fingerprint(),
/// sweep() and stuck()) and inbox<Policies> (with options, an (options) constructor and
/// deduplicate(scope, event_id, fn)). The blocking driver names idempotent and inbox
/// themselves; an asynchronous driver (tests/asio) names adapters that run each call on an
/// event loop to its end, so one case body specifies both.
struct blocking_driver {
  template <class Handler, class Policies>
  using guard = idempotent<Handler, Policies>;
  template <class Policies>
  using inbox = idem::inbox<Policies>;
};

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

template <class S>
struct stripe_policies : wrapped_policies<S> {
  using failure = store_failures_after_effect<>;
};

// A handler whose effect happens while its store goes down: the response cannot be recorded.
// At namespace scope, not in its case, so that a coroutine frame holding it has linkage.
template <class S>
struct store_failing_midway {
  faulty_store<S> store;
  http_response operator()(handler_context&, const http_request&) {
    store.fail(faulty_store<S>::mode::unavailable);
    return http_response{200, {}, "effect done"};
  }
};

}  // namespace conformance
}  // namespace idem::testing

#endif  // IDEM_TESTING_DETAIL_CONFORMANCE_GUARDED_HANDLERS_HPP
