// End-to-end lag of the outbox: from a writer's COMMIT to the consumer's effect.
//
//   outbox_lag/R   a writer commits outbox messages at R messages a second for 3 s; one
//                  idem::outbox_relay (PostgreSQL reader, Redis Streams sink, default options:
//                  batches of 64) runs in a thread of its own; one idem::stream_consumer reads
//                  the stream and runs the effect. Each message's lag is the time its effect ran
//                  minus the time its transaction's COMMIT returned to the writer.
//
// Counters: p50_ms and p99_ms over every message of the run, and msgs/s, the rate the writer
// reached (what it committed over the time it took: below R when the machine could not keep up).
//
// The relay's session does not wait for the WAL flush (idem_bench::relay_conninfo says why).
// The writer is one connection with synchronous commits (fsync on): each transaction holds the
// messages that came due since its last commit, as the commits of concurrent requests would
// share a WAL flush; the payload (the message's number) is 8 bytes or so. The relay wakes at a
// commit through the outbox's NOTIFY trigger, enabled here (off by default:
// docs/outbox_relay.md), rather than polling every idle_wait (1 s). The consumer's inbox is
// the in-memory store: the lag is the outbox's, not the consumer's own commit (a transactional
// inbox adds its commit to each message). Everything shares the machine with both servers.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <idem/outbox/relay.hpp>
#include <idem/redis_streams/consumer.hpp>
#include <idem/redis_streams/sink.hpp>
#include <idem/store/postgres/outbox.hpp>
#include <idem/store/postgres/outbox_reader.hpp>

#include "outbox_bench_servers.hpp"

namespace {

using steady = std::chrono::steady_clock;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
      .count();
}

// The first failure of a thread, for the benchmark to report.
class first_error {
 public:
  void keep(const std::string& what) {
    const std::lock_guard lock(mutex_);
    if (what_.empty()) what_ = what;
    failed_ = true;
  }
  bool failed() const noexcept { return failed_; }
  std::string what() const {
    const std::lock_guard lock(mutex_);
    return what_;
  }

 private:
  mutable std::mutex mutex_;
  std::string what_;
  std::atomic<bool> failed_{false};
};

// What one run measured.
struct lag_run {
  std::vector<std::int64_t> lags_ns;  // one per message consumed
  double written_per_second = 0;
};

// One message's commit time and effect: the writer stamps a message once its COMMIT returned,
// the consumer's effect reads the stamp (waiting for it in the instant between the commit and
// the stamp, when the relay was quicker than the writer's next line).
class lag_ledger {
 public:
  explicit lag_ledger(std::size_t messages)
      : committed_(new std::atomic<std::int64_t>[messages]()), lags_(messages, -1) {}

  void committed(std::size_t message, std::int64_t at) { committed_[message].store(at); }

  void effect(std::size_t message) {
    const std::int64_t now = steady_ns();
    std::int64_t at = 0;
    while ((at = committed_[message].load()) == 0)
      std::this_thread::yield();
    lags_[message] = std::max<std::int64_t>(0, now - at);
    consumed_.fetch_add(1);
  }

  std::size_t consumed() const noexcept { return consumed_.load(); }
  std::vector<std::int64_t> lags() const {
    std::vector<std::int64_t> measured;
    for (const std::int64_t lag : lags_) {
      if (lag >= 0) measured.push_back(lag);
    }
    return measured;
  }

 private:
  std::unique_ptr<std::atomic<std::int64_t>[]> committed_;
  std::vector<std::int64_t> lags_;  // written by the consumer's thread only
  std::atomic<std::size_t> consumed_{0};
};

struct lag_consumer_policies : idem::stream_consumer_policies {};

lag_run run_once(const idem_bench::outbox_servers& servers, const idem_bench::outbox_table& table,
                 const std::string& prefix, std::size_t run, std::int64_t rate) {
  constexpr auto writing = std::chrono::seconds{3};
  constexpr auto drain_limit = std::chrono::seconds{180};
  const std::string topic = "payments";
  const auto messages = static_cast<std::size_t>(rate * writing.count());
  {
    const auto redis = idem_bench::redis_connect(servers.redis);
    idem_bench::redis_do(redis.get(), {"DEL", prefix + topic, prefix + topic + ":dead"});
  }
  lag_ledger ledger(messages);
  first_error error;

  auto effect = [&](const idem::outbox_entry& entry) {
    std::size_t message = 0;
    const std::string& text = entry.message.payload;
    std::from_chars(text.data(), text.data() + text.size(), message);
    if (message < messages) ledger.effect(message);
  };
  idem::stream_consumer<decltype(effect), lag_consumer_policies>::options consumer_options;
  consumer_options.server = servers.redis;
  consumer_options.stream_prefix = prefix;
  consumer_options.topic = topic;
  consumer_options.group = "lag";
  consumer_options.consumer = "lag-1";
  consumer_options.block = std::chrono::milliseconds{100};
  idem::stream_consumer<decltype(effect), lag_consumer_policies> consumer(
      effect, std::move(consumer_options));

  idem::postgres_outbox::reader reader{
      {.conninfo = idem_bench::relay_conninfo(servers.conninfo), .table = table.name()}};
  idem::redis_streams::sink sink{{.server = servers.redis, .stream_prefix = prefix}};
  idem::outbox_relay relay(reader, sink);

  std::jthread consuming([&](const std::stop_token& stop) {
    try {
      consumer.run(stop);
    } catch (const std::exception& failure) {
      error.keep(std::string("the consumer: ") + failure.what());
    }
  });
  std::jthread relaying([&](const std::stop_token& stop) {
    try {
      relay.run(stop);
    } catch (const std::exception& failure) {
      error.keep(std::string("the relay: ") + failure.what());
    }
  });

  // The writer: at each turn, one transaction with every message due by now.
  idem_bench::pg_connection writer(servers.conninfo);
  const idem::postgres_outbox::target where{.table = table.name()};
  const std::string run_id = std::to_string(run);
  const auto start = steady::now();
  std::size_t sent = 0;
  while (sent < messages && !error.failed()) {
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - start);
    const auto due = std::min<std::size_t>(
        messages, static_cast<std::size_t>(elapsed.count() * rate / 1'000'000'000) + 1);
    if (due <= sent) {
      std::this_thread::sleep_until(
          start + std::chrono::nanoseconds{static_cast<std::int64_t>(sent) * 1'000'000'000 / rate});
      continue;
    }
    writer.exec("BEGIN");
    for (std::size_t message = sent; message < due; ++message) {
      idem::postgres_outbox::publish(writer.get(), "lag-" + run_id + "-" + std::to_string(message),
                                     {.topic = topic,
                                      .partition_key = "acct-" + std::to_string(message % 100),
                                      .payload = std::to_string(message)},
                                     where);
    }
    writer.exec("COMMIT");
    const std::int64_t at = steady_ns();
    for (std::size_t message = sent; message < due; ++message)
      ledger.committed(message, at);
    sent = due;
  }
  const std::chrono::duration<double> wrote = steady::now() - start;

  const auto give_up = steady::now() + drain_limit;
  while (ledger.consumed() < sent && !error.failed() && steady::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  relaying.request_stop();
  consuming.request_stop();
  relaying.join();
  consuming.join();
  if (error.failed()) throw std::runtime_error(error.what());
  if (ledger.consumed() < sent) {
    throw std::runtime_error(std::to_string(sent - ledger.consumed()) + " of " +
                             std::to_string(sent) + " messages not consumed within " +
                             std::to_string(drain_limit.count()) + " s");
  }
  return {ledger.lags(), static_cast<double>(sent) / wrote.count()};
}

double percentile_ms(std::vector<std::int64_t>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  const auto at = static_cast<std::size_t>(fraction * static_cast<double>(sorted.size() - 1));
  return static_cast<double>(sorted[at]) / 1e6;
}

void outbox_lag(benchmark::State& state) {
  const auto servers = idem_bench::outbox_servers::from_environment();
  if (!servers.missing.empty()) {
    state.SkipWithError(servers.missing.c_str());
    return;
  }
  const std::int64_t rate = state.range(0);
  try {
    idem_bench::outbox_table table(servers.conninfo, "bench_lag");
    table.admin().exec("ALTER TABLE " + table.outbox() + " ENABLE TRIGGER idem_outbox_notify");
    const std::string prefix = "bench:lag:" + table.name() + ":";
    std::vector<std::int64_t> lags;
    double written = 0;
    std::size_t runs = 0;
    for (auto _ : state) {
      lag_run measured = run_once(servers, table, prefix, runs++, rate);
      lags.insert(lags.end(), measured.lags_ns.begin(), measured.lags_ns.end());
      written += measured.written_per_second;
    }
    std::sort(lags.begin(), lags.end());
    state.counters["p50_ms"] = percentile_ms(lags, 0.50);
    state.counters["p99_ms"] = percentile_ms(lags, 0.99);
    state.counters["msgs/s"] = written / static_cast<double>(runs);
  } catch (const std::exception& failure) {
    state.SkipWithError(failure.what());
  }
}

}  // namespace

BENCHMARK(outbox_lag)
    ->Name("outbox_lag")
    ->Arg(1000)
    ->Arg(10000)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
