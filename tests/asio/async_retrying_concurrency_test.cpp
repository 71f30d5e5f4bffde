// One async_retrying shared by operations on an io_context run by two threads: each operation
// keeps its own key, and the shared counters add up exactly. The ThreadSanitizer build runs it.
#include "asio/driver.hpp"

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>

using namespace std::chrono_literals;
namespace asio = test_net::asio;
using test_net::response;

namespace {

struct counted_policies : idem::default_policies {
  using backoff = idem::constant_backoff;
  using budget = idem::unlimited_budget;
  using observer = idem::counting_observer;
};

}  // namespace

TEST_CASE("operations on two threads keep their own key and share counters exactly",
          "[concurrency]") {
  constexpr int operations = 2000;
  asio::io_context io{2};
  std::mutex mutex;
  std::set<std::string> first_keys;
  std::atomic<int> calls{0};
  // Each operation fails once, then succeeds: the second attempt checks it kept its key.
  auto call = [&](const idem::attempt_context& attempt,
                  std::shared_ptr<std::string> first) -> asio::awaitable<response> {
    calls.fetch_add(1, std::memory_order_relaxed);
    if (attempt.attempt() == 1) {
      *first = std::string(attempt.key());
      const std::lock_guard lock(mutex);
      first_keys.insert(*first);
      co_return response{503};
    }
    co_return response{*first == attempt.key() ? 200 : 400};
  };
  typename idem::async_retrying<decltype(call), counted_policies>::options o;
  o.backoff = idem::constant_backoff{100us};
  idem::async_retrying<decltype(call), counted_policies> retry{io.get_executor(), call, o};
  std::atomic<int> succeeded{0};
  for (int i = 0; i < operations; ++i) {
    retry.async_call(std::make_shared<std::string>(),
                     [&](std::exception_ptr, idem::retry_outcome<response> outcome) {
                       if (outcome.succeeded()) succeeded.fetch_add(1);
                     });
  }
  std::thread second{[&] { io.run(); }};
  io.run();
  second.join();

  CHECK(succeeded.load() == operations);
  CHECK(calls.load() == 2 * operations);
  CHECK(first_keys.size() == static_cast<std::size_t>(operations));
  CHECK(retry.observer().attempts() == 2 * operations);
  CHECK(retry.observer().retries() == operations);
  CHECK(retry.observer().successes() == operations);
}
