// The asynchronous driver of the guarded conformance cases
// (idem/testing/detail/conformance/guarded_cases.hpp): the same case bodies, each call made through
// async_idempotent or async_inbox and run to its end on an event loop of its own under the
// cases' clock. The cases' blocking handlers become coroutines that run on that loop with the
// async_handler_context as their handler_context, so their steps are recorded through the
// asynchronous driver's writer. A store that blocks gets a thread pool for its calls.
#ifndef IDEM_TESTS_ASIO_ASYNC_CONFORMANCE_DRIVER_HPP
#define IDEM_TESTS_ASIO_ASYNC_CONFORMANCE_DRIVER_HPP

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <idem/asio.hpp>

#include "asio/event_loop.hpp"
#include "asio/net.hpp"

namespace test_async {

// A case's handler, awaited.
template <class Handler>
struct async_adapter {
  Handler inner;

  asio::awaitable<std::invoke_result_t<Handler&, idem::handler_context&, const idem::http_request&>>
  operator()(idem::async_handler_context& context, const idem::http_request& request) {
    co_return inner(context, request);
  }
};

// Where a store that blocks runs its calls, and the event loops the calls ran on. A thread that
// hands a call's result back (this pool's, or an asynchronous store's own, as posted_store's)
// is still inside the loop's post for a moment after the call resumed, holding the loop's work
// count until it lets go of its executor. So a loop is kept until the pool has stopped and the
// loop has no work left, as a service keeps its io_context until run() returns: freed earlier,
// that thread's last touch is a use after free (ASan saw it, once, on a loaded machine).
class store_threads {
 protected:
  store_threads() = default;
  store_threads(const store_threads&) = delete;
  store_threads& operator=(const store_threads&) = delete;
  ~store_threads() {
    pool_.join();
    for (asio::io_context& loop : loops_) {
      // Returns at once when no work is left, else when the last holder lets go of it.
      loop.restart();
      (void)loop.run_for(std::chrono::seconds(10));
    }
  }

  asio::io_context& new_loop() {
    const std::lock_guard lock(loops_mutex_);
    return loops_.emplace_back();
  }

  template <class Options, class Store>
  Options with_store_executor(Options parts) {
    if (!idem::never_blocks<Store> && !parts.store_executor) {
      parts.store_executor = pool_.get_executor();
    }
    return parts;
  }

  asio::thread_pool pool_{2};

 private:
  std::mutex loops_mutex_;
  std::list<asio::io_context> loops_;
};

template <class Handler, class Policies>
class async_guard : private store_threads {
  using wrapped = idem::async_idempotent<async_adapter<Handler>, Policies>;
  using store_type = typename wrapped::store_type;

 public:
  using options = typename wrapped::options;

  async_guard(Handler handler, options parts)
      : wrapped_(idle_.get_executor(), async_adapter<Handler>{std::move(handler)},
                 with_store_executor<options, store_type>(std::move(parts))) {}

  // One event loop per call, so that calls from several threads each run on their own.
  template <class Request>
  idem::idempotent_outcome<idem::http_response> operator()(std::string_view scope,
                                                           std::optional<std::string_view> key,
                                                           const Request& request) {
    asio::io_context& io = new_loop();
    completion<idem::idempotent_outcome<idem::http_response>> call;
    wrapped_.async_call(scope, key, request, asio::bind_executor(io, call.handler()));
    run_until(
        io, wrapped_.clock(), [&] { return call.done; }, !idem::never_blocks<store_type>);
    return call.take();
  }

  Handler& handler() noexcept { return wrapped_.handler().inner; }
  const auto& fingerprint() const noexcept { return wrapped_.fingerprint(); }
  std::size_t sweep() { return wrapped_.sweep(); }
  std::vector<idem::record> stuck(std::size_t limit = 1000) { return wrapped_.stuck(limit); }

 private:
  asio::io_context idle_;  // the wrapper's own executor: every call here binds its own
  wrapped wrapped_;
};

template <class Policies>
class async_inbox_adapter : private store_threads {
  using wrapped = idem::async_inbox<Policies>;
  using store_type = typename wrapped::store_type;

 public:
  using options = typename wrapped::options;

  explicit async_inbox_adapter(options parts)
      : wrapped_(idle_.get_executor(), with_store_executor<options, store_type>(std::move(parts))) {
  }

  template <class F>
  auto deduplicate(std::string_view scope, std::string_view event_id, F&& fn) {
    using result_type = std::invoke_result_t<F&>;
    using response_type =
        std::conditional_t<std::is_void_v<result_type>, std::monostate, result_type>;
    asio::io_context& io = new_loop();
    completion<idem::idempotent_outcome<response_type>> call;
    auto awaited = [&fn]() -> asio::awaitable<result_type> { co_return fn(); };
    wrapped_.async_deduplicate(scope, event_id, awaited, asio::bind_executor(io, call.handler()));
    run_until(
        io, wrapped_.clock(), [&] { return call.done; }, !idem::never_blocks<store_type>);
    return call.take();
  }

 private:
  asio::io_context idle_;
  wrapped wrapped_;
};

/// The driver the conformance cases are instantiated with here.
struct async_driver {
  template <class Handler, class Policies>
  using guard = async_guard<Handler, Policies>;
  template <class Policies>
  using inbox = async_inbox_adapter<Policies>;
};

}  // namespace test_async

#endif  // IDEM_TESTS_ASIO_ASYNC_CONFORMANCE_DRIVER_HPP
