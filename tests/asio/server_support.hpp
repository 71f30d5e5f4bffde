// What the asynchronous server's own tests share: policies on the manual clock, requests, a
// downstream call that takes time on that clock, and stores that watch or steal the claim.
#ifndef IDEM_TESTS_ASIO_SERVER_SUPPORT_HPP
#define IDEM_TESTS_ASIO_SERVER_SUPPORT_HPP

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <idem/asio.hpp>

#include "asio/event_loop.hpp"
#include "asio/net.hpp"
#include "support/forwarding_store.hpp"

namespace test_async {

using namespace std::chrono_literals;

struct manual_policies : idem::default_policies {
  using clock = idem::manual_clock;
};

template <class S>
struct store_policies : manual_policies {
  using store = S;
};

template <class S>
struct stripe_store_policies : store_policies<S> {
  using failure = idem::store_failures_after_effect<>;
};

inline idem::http_request charge(std::string key = "order-1",
                                 std::string body = "{\"amount\":100}") {
  idem::http_request request{
      "POST", "/charges", {{"content-type", "application/json"}}, std::move(body)};
  if (!key.empty()) request.headers.emplace_back("Idempotency-Key", std::move(key));
  return request;
}

/// A downstream call that takes `how_long` on the clock (a provider's API, say): a wait on a
/// clock_timer, ended early, with an exception, by the coroutine's cancellation.
inline asio::awaitable<void> downstream(idem::manual_clock clock,
                                        std::chrono::nanoseconds how_long) {
  idem::clock_timer timer{co_await asio::this_coro::executor, clock};
  co_await timer.async_wait_for(how_long, asio::use_awaitable);
}

/// The same, ended early by `slot` instead (a handler's context's lease_lost_slot()).
inline asio::awaitable<void> downstream(idem::manual_clock clock, std::chrono::nanoseconds how_long,
                                        asio::cancellation_slot slot) {
  idem::clock_timer timer{co_await asio::this_coro::executor, clock};
  co_await timer.async_wait_for(how_long, asio::bind_cancellation_slot(slot, asio::use_awaitable));
}

/// A memory store whose fence a test can steal: once stolen, every fenced write (checkpoint,
/// complete, release) is refused, as after a takeover by another process.
class fence_thief_store : public idem_test::forwarding_store<idem::memory_store> {
 public:
  static constexpr bool never_blocks = true;
  static constexpr bool reads_completion_time = false;

  void steal() { stolen_->store(true); }

  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    if (stolen_->load()) return false;
    return inner_.checkpoint(held, recovery, lease_until);
  }
  bool complete(const idem::fenced_key& held, std::string_view response, idem::store_time now) {
    if (stolen_->load()) return false;
    return inner_.complete(held, response, now);
  }
  bool release(const idem::fenced_key& held) {
    if (stolen_->load()) return false;
    return inner_.release(held);
  }

 private:
  std::shared_ptr<std::atomic<bool>> stolen_ = std::make_shared<std::atomic<bool>>(false);
};

/// A memory store that says nothing about blocking, so it is treated as a blocking store, and
/// notes the thread of every call.
class thread_noting_store : public idem_test::forwarding_store<idem::memory_store> {
 public:
  idem::claim_result claim(const idem::claim_request& request) {
    note();
    return inner_.claim(request);
  }
  bool complete(const idem::fenced_key& held, std::string_view response, idem::store_time now) {
    note();
    return inner_.complete(held, response, now);
  }
  bool release(const idem::fenced_key& held) {
    note();
    return inner_.release(held);
  }
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    note();
    return inner_.checkpoint(held, recovery, lease_until);
  }
  std::optional<idem::record> find(std::string_view scope, std::string_view key,
                                   idem::store_time now) {
    note();
    return inner_.find(scope, key, now);
  }

  std::set<std::thread::id> threads() const {
    const std::lock_guard lock(seen_->mutex);
    return seen_->threads;
  }
  std::size_t calls() const {
    const std::lock_guard lock(seen_->mutex);
    return seen_->calls;
  }

 private:
  struct seen {
    std::mutex mutex;
    std::set<std::thread::id> threads;
    std::size_t calls = 0;
  };
  void note() {
    const std::lock_guard lock(seen_->mutex);
    seen_->threads.insert(std::this_thread::get_id());
    ++seen_->calls;
  }
  std::shared_ptr<seen> seen_ = std::make_shared<seen>();
};

}  // namespace test_async

#endif  // IDEM_TESTS_ASIO_SERVER_SUPPORT_HPP
