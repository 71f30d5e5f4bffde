// bench/hedging: 10,000 calls to a heavy-tailed dependency (tests/support/heavy_tail.hpp: a
// log-normal around 10 ms, 2% of answers 100 times slower) through async_retrying, without
// hedges and with idem::hedging (the latency tracker's p95 as the delay, a 5% budget), on a
// manual clock. Prints one line a call, "unhedged <ns>" or "hedged <ns>", then a summary on
// stderr; scripts/hedging.sh turns it into the two CDFs and their plot (docs/performance/).
#include <idem/asio.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "heavy_tail.hpp"

namespace {

using namespace std::chrono_literals;
using idem_test::downstream;
using std::chrono::nanoseconds;

struct unhedged_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using budget = idem::unlimited_budget;
  using latency = idem::latency_tracker;
};

struct hedged_policies : unhedged_policies {
  using hedge = idem::hedging;
};

template <class Policies>
std::vector<nanoseconds> run(int calls, int& attempts) {
  idem::asio::io_context io;
  idem::manual_clock clock;
  downstream service{clock, idem_test::heavy_tail{}};
  typename idem::async_retrying<downstream, Policies>::options o;
  o.clock = clock;
  o.seed = 7;
  o.latency = idem::latency_tracker{{.window = 4096, .min_samples = 200}};
  o.timeouts.start = 10s;  // timeouts far above the tail: this run is about hedges
  o.timeouts.factor = 4;
  if constexpr (idem::detail::hedges<typename Policies::hedge>) {
    o.hedge = idem::hedging{{.ratio = 0.05}};
  }
  idem::async_retrying<downstream, Policies> retry{io.get_executor(), service, o};
  std::vector<nanoseconds> took;
  for (int i = 0; i < calls; ++i) {
    const nanoseconds start = clock.elapsed();
    bool done = false;
    retry.async_call([&](std::exception_ptr, auto) { done = true; });
    while (!done) {
      io.restart();
      io.poll();
      if (!done && !clock.advance_to_next_wake()) {
        std::fputs("hedging_cdf: a call never completed\n", stderr);
        std::exit(1);
      }
    }
    took.push_back(clock.elapsed() - start);
  }
  attempts = static_cast<int>(service.keys->size());
  return took;
}

nanoseconds at(std::vector<nanoseconds> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(q * static_cast<double>(values.size() - 1))];
}

}  // namespace

int main() {
  constexpr int calls = 10'000;
  int plain_attempts = 0, hedged_attempts = 0;
  const auto plain = run<unhedged_policies>(calls, plain_attempts);
  const auto hedged = run<hedged_policies>(calls, hedged_attempts);
  for (const nanoseconds d : plain)
    std::printf("unhedged %lld\n", static_cast<long long>(d.count()));
  for (const nanoseconds d : hedged)
    std::printf("hedged %lld\n", static_cast<long long>(d.count()));
  const auto ms = [](nanoseconds d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  std::fprintf(stderr,
               "hedging_cdf: %d calls; p50 %.1f / %.1f ms, p95 %.1f / %.1f ms, p99 %.1f / %.1f "
               "ms, p99.9 %.1f / %.1f ms (unhedged / hedged); attempts %d / %d (%.2f%% more)\n",
               calls, ms(at(plain, 0.5)), ms(at(hedged, 0.5)), ms(at(plain, 0.95)),
               ms(at(hedged, 0.95)), ms(at(plain, 0.99)), ms(at(hedged, 0.99)),
               ms(at(plain, 0.999)), ms(at(hedged, 0.999)), plain_attempts, hedged_attempts,
               100.0 * (hedged_attempts - plain_attempts) / plain_attempts);
  return 0;
}
