// A downstream service with a heavy-tailed latency, for the hedging test and the hedging CDF run
// (tests/asio/async_retrying_hedging_test.cpp, bench/tools/hedging_cdf.cpp): answers take a
// log-normal time around 10 ms, and 2% of them 100 times longer (a pause, a cold cache), on a
// manual clock. The service performs its effect once per key: a request under a key it has
// seen is a replay, so counting its effects counts distinct keys.
#pragma once

#include <idem/asio.hpp>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace idem_test {

/// Latencies from the heavy tail; copies share one random stream.
struct heavy_tail {
  std::shared_ptr<std::mt19937_64> random = std::make_shared<std::mt19937_64>(2024);
  std::chrono::nanoseconds operator()(int) const {
    std::normal_distribution<double> normal{0.0, 0.2};
    std::uniform_real_distribution<double> slow{0.0, 1.0};
    double ms = 10.0 * std::exp(normal(*random));
    if (slow(*random) < 0.02) ms *= 100;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double, std::milli>(ms));
  }
};

/// What the downstream answers: an HTTP-like status.
struct status_response {
  int status;
};

/// The downstream service: each request takes `latency(n)` of the clock (n: the requests sent
/// before it), then answers `status(n)`. Copies share what they saw.
struct downstream {
  idem::manual_clock clock;
  std::function<std::chrono::nanoseconds(int)> latency;
  std::function<int(int)> status = [](int) { return 200; };
  std::shared_ptr<std::vector<std::string>> keys = std::make_shared<std::vector<std::string>>();
  /// The keys whose effect was performed.
  std::shared_ptr<std::set<std::string>> effects = std::make_shared<std::set<std::string>>();
  std::shared_ptr<int> finished = std::make_shared<int>(0);

  idem::asio::awaitable<status_response> operator()(const idem::attempt_context& attempt) {
    const int number = static_cast<int>(keys->size());
    keys->emplace_back(attempt.key());
    idem::clock_timer timer{co_await idem::asio::this_coro::executor, clock};
    co_await timer.async_wait_for(latency(number), idem::asio::use_awaitable);
    ++*finished;
    const int answer = status(number);
    if (answer < 400) effects->emplace(attempt.key());
    co_return status_response{answer};
  }
};

}  // namespace idem_test
