// payments_chaos: the client. Sends N payment intents, each under its own idempotency key,
// through idem::retrying, at a given concurrency, round-robin over one or more servers, while
// faults happen (processor 503s and servers crashing after charging, set on those programs; and
// here, connections dropped before the answer arrives). Then it reads the processor's ledger and
// checks that every intent was charged exactly once, with the charge its client was told about.
//
// Exits 0 when no intent was charged twice, none was left uncharged and every client got its
// answer; 1 otherwise; 2 for bad options.
#include "common.hpp"

#include <idem/idem.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char* usage = R"(payments_chaos: exactly-once payments under faults, checked

  --servers URL,...     payments servers, tried round-robin (default http://127.0.0.1:8080)
  --processor URL       the processor whose ledger is checked (default http://127.0.0.1:8081)
  --intents N           payment intents to send (default 1000)
  --concurrency C       intents in flight at once (default 8)
  --seed S              makes keys, bodies and faults reproducible (default: random)
  --drop-rate P         drop the connection before the answer with probability P per attempt
                        (default 0.05)
  --accounts N          spread intents over N accounts (scopes) (default 4)
)";

struct answer {
  int status = 0;
  std::string body;
  std::string retry_after;
  bool replayed = false;
};

// Everything the run counts, shared by the worker threads.
struct counters {
  std::atomic<long> attempts{0};
  std::atomic<long> replays{0};
  std::atomic<long> conflicts{0};    // 409: the same key in flight elsewhere
  std::atomic<long> bad_gateway{0};  // 502: the processor kept failing
  std::atomic<long> unavailable{0};  // 503
  std::atomic<long> transport{0};    // refused or broken connections (a server down)
  std::atomic<long> dropped{0};      // connections this client dropped on purpose
};

struct job {
  std::size_t index;
  std::string account;
  payments::intent payment;
};

// 409 and every 5xx are worth another attempt under the same key; other 4xx are final.
struct chaos_classifier {
  idem::classification classify(const answer& a) const {
    if (a.status == 201 || a.status == 200)
      return {idem::disposition::success, a.status, false, {}};
    if (a.status == 409 || a.status >= 500) {
      return {idem::disposition::transient, a.status, a.status >= 500, a.retry_after};
    }
    return {idem::disposition::permanent, a.status, false, {}};
  }
  idem::classification classify_exception(const std::exception_ptr& error) const noexcept {
    return idem::default_classifier{}.classify_exception(error);
  }
};

struct chaos_policies : idem::default_policies {
  using classifier = chaos_classifier;
  // The run checks exactly-once, not load shedding: every intent keeps trying.
  using budget = idem::unlimited_budget;
  static constexpr int max_attempts = 60;
  static constexpr std::chrono::milliseconds deadline{120'000};
};

struct send_payment {
  const std::vector<payments::endpoint>* servers;
  counters* count;
  double drop_rate;

  answer operator()(const idem::attempt_context& attempt, const job& j) const {
    // Round-robin per attempt: a retry goes to another replica than the one that failed.
    const auto& server =
        (*servers)[(j.index + static_cast<std::size_t>(attempt.attempt()) - 1) % servers->size()];
    httplib::Client client(server.host, server.port);
    client.set_connection_timeout(std::chrono::milliseconds{500});
    const bool drop = payments::chance(drop_rate);
    // A dropped connection: the client stops waiting before the answer can arrive, and the
    // server goes on with the request. Whether it took effect is for the retry to find out.
    client.set_read_timeout(drop ? std::chrono::milliseconds{2} : std::chrono::seconds{15});
    ++count->attempts;
    const httplib::Headers headers{{"Idempotency-Key", std::string(attempt.key())},
                                   {"X-Account", j.account}};
    auto res = client.Post("/v1/payments", headers, j.payment.json(), "application/json");
    if (!res) {
      ++(drop ? count->dropped : count->transport);
      payments::throw_transport_error(res.error());
    }
    answer a{res->status, res->body, res->get_header_value("Retry-After"),
             res->get_header_value("Idempotent-Replayed") == "true"};
    if (a.replayed) ++count->replays;
    if (a.status == 409) ++count->conflicts;
    if (a.status == 502) ++count->bad_gateway;
    if (a.status == 503) ++count->unavailable;
    return a;
  }
};

struct result {
  bool answered = false;  // the client got its 201
  std::string charge_id;  // the charge it was told about
  std::string failure;    // why not, when not
  std::chrono::nanoseconds latency{};
};

}  // namespace

int main(int argc, char** argv) {
  const payments::command_line args(
      argc, argv,
      {"servers", "processor", "intents", "concurrency", "seed", "drop-rate", "accounts"}, usage);
  std::vector<payments::endpoint> servers;
  payments::endpoint processor;
  try {
    std::string list = args.text("servers", "http://127.0.0.1:8080");
    for (std::size_t start = 0; start <= list.size();) {
      const auto comma = std::min(list.find(',', start), list.size());
      servers.push_back(payments::endpoint::parse(list.substr(start, comma - start)));
      start = comma + 1;
    }
    processor = payments::endpoint::parse(args.text("processor", "http://127.0.0.1:8081"));
  } catch (const std::exception& e) {
    args.fail(e.what());
  }
  const auto intents = static_cast<std::size_t>(args.integer("intents", 1000, 1, 10'000'000));
  const auto concurrency = static_cast<int>(args.integer("concurrency", 8, 1, 1024));
  const auto accounts = args.integer("accounts", 4, 1, 1'000'000);
  const double drop_rate = args.probability("drop-rate");
  const auto seed = static_cast<std::uint64_t>(
      args.integer("seed", static_cast<long long>(std::random_device{}() & 0x7fffffff), 0,
                   std::numeric_limits<long long>::max()));

  // Each intent's source is unique to this run, so the ledger says which intent a charge is for.
  const std::string run = "tok_" + std::to_string(seed) + "_";
  std::vector<job> jobs;
  jobs.reserve(intents);
  for (std::size_t i = 0; i < intents; ++i) {
    jobs.push_back({i,
                    "acct_" + std::to_string(static_cast<long long>(i) % accounts),
                    {100 + static_cast<long long>(i % 9900), "EUR", run + std::to_string(i)}});
  }

  counters count;
  using client_type = idem::retrying<send_payment, chaos_policies>;
  client_type::options options;
  options.seed = seed;
  options.backoff = idem::full_jitter{std::chrono::milliseconds{25}, std::chrono::seconds{1}};
  client_type client(send_payment{&servers, &count, drop_rate}, options);

  std::printf("payments_chaos: %zu intents, concurrency %d, %zu server(s), seed %llu\n", intents,
              concurrency, servers.size(), static_cast<unsigned long long>(seed));
  std::fflush(stdout);

  std::vector<result> results(intents);
  std::atomic<std::size_t> next{0};
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < intents;) {
        const auto begin = std::chrono::steady_clock::now();
        auto outcome = client(jobs[i]);
        result& r = results[i];
        r.latency = std::chrono::steady_clock::now() - begin;
        if (outcome) {
          try {
            r.charge_id = nlohmann::json::parse(outcome.value().body).at("charge_id");
            r.answered = true;
          } catch (const std::exception& e) {
            r.failure = std::string("unreadable answer: ") + e.what();
          }
        } else {
          r.failure = std::string(idem::to_string(outcome.verdict()));
          if (outcome.has_value()) {
            r.failure += ", last status " + std::to_string(outcome.value().status) + " " +
                         outcome.value().body;
          }
        }
      }
    });
  }
  for (auto& t : workers)
    t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // The processor's ledger: which intents were charged, and how often.
  httplib::Client ledger(processor.host, processor.port);
  ledger.set_read_timeout(std::chrono::seconds{30});
  const auto res = ledger.Get("/v1/charges");
  if (!res || res->status != 200) {
    std::fprintf(
        stderr, "payments_chaos: cannot read the processor's ledger at %s: %s\n",
        processor.url().c_str(),
        res ? std::to_string(res->status).c_str() : httplib::to_string(res.error()).c_str());
    return 1;
  }
  std::map<std::size_t, std::vector<std::string>> charged;  // intent → charge ids
  std::size_t charges = 0;
  for (const auto& row : nlohmann::json::parse(res->body)) {
    const auto source = row.at("source").get<std::string>();
    if (!source.starts_with(run)) continue;  // another run's
    ++charges;
    charged[std::stoul(source.substr(run.size()))].push_back(row.at("charge_id"));
  }

  std::size_t duplicates = 0, missing = 0, unanswered = 0, mismatched = 0;
  std::vector<double> latencies_ms;
  for (std::size_t i = 0; i < intents; ++i) {
    const auto& ids = charged[i];
    const result& r = results[i];
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(r.latency).count());
    if (ids.size() > 1) {
      ++duplicates;
      std::printf("  DUPLICATE: intent %zu charged %zu times\n", i, ids.size());
    }
    if (ids.empty()) {
      ++missing;
      std::printf("  MISSING: intent %zu never charged (%s)\n", i,
                  r.answered ? "yet answered 201" : r.failure.c_str());
    }
    if (!r.answered) {
      ++unanswered;
      if (!ids.empty()) std::printf("  UNANSWERED: intent %zu: %s\n", i, r.failure.c_str());
    } else if (ids.size() == 1 && ids.front() != r.charge_id) {
      ++mismatched;
      std::printf("  MISMATCH: intent %zu told %s, ledger has %s\n", i, r.charge_id.c_str(),
                  ids.front().c_str());
    }
  }

  std::printf("\n== payments_chaos report\n");
  std::printf("intents              %zu in %.1f s (%.0f/s)\n", intents, seconds,
              static_cast<double>(intents) / seconds);
  std::printf("charges              %zu\n", charges);
  std::printf("duplicate charges    %zu\n", duplicates);
  std::printf("missing charges      %zu\n", missing);
  std::printf("unanswered intents   %zu\n", unanswered);
  std::printf("wrong charge told    %zu\n", mismatched);
  std::printf("attempts             %ld (%.2f per intent)\n", count.attempts.load(),
              static_cast<double>(count.attempts.load()) / static_cast<double>(intents));
  std::printf("replays              %ld\n", count.replays.load());
  std::printf("409 in flight        %ld\n", count.conflicts.load());
  std::printf("502 processor        %ld\n", count.bad_gateway.load());
  std::printf("503 unavailable      %ld\n", count.unavailable.load());
  std::printf("connections refused  %ld (a server down or restarting)\n", count.transport.load());
  std::printf("connections dropped  %ld (by this client, on purpose)\n", count.dropped.load());
  std::printf("latency p50 / p99    %.1f / %.1f ms\n", payments::percentile(latencies_ms, 0.50),
              payments::percentile(latencies_ms, 0.99));
  const bool exact = duplicates == 0 && missing == 0 && unanswered == 0 && mismatched == 0;
  std::printf("charges verdict      %s\n",
              exact ? "EXACTLY ONCE: every intent charged once, as its client was told" : "FAILED");
  return exact ? 0 : 1;
}
