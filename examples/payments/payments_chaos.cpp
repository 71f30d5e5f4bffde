// payments_chaos: the client. Sends N payment intents, each under its own idempotency key,
// through idem::retrying, at a given concurrency, round-robin over one or more servers, while
// faults happen (processor 503s and servers crashing after charging, set on those programs; and
// here, connections dropped before the answer arrives). Then it reads the processor's ledger and
// checks that every intent was charged exactly once, with the charge its client was told about.
//
// A share of the intents (--give-up P) have a client that gives up: it sends once and never
// retries, whatever happens (and --give-up-crash asks the server to crash on some of them, so
// that they leave unfinished payments behind). Those are listed in --given-up-log and checked
// after payments_reconcile ran, by --mode check-given-up: each was charged at most once, and is
// either complete (a replay of its request now answers its one charge) or listed in the
// reconciler's report.
//
// --mode check-webhooks holds the processor's webhooks, as the servers applied them (their
// --webhook-db), against its ledger (webhook_check.hpp).
//
// --mode bench is load, not faults (scripts/serve_bench.sh): --concurrency clients, each sending
// one intent after another under a fresh key, once, for a fixed time; it prints the intents
// answered per second and their latency, and checks nothing.
//
// Exits 0 when no intent was charged twice, none was left uncharged and every client got its
// answer (a given-up intent: charged at most once, as its client was told if it was told); 1
// otherwise; 2 for bad options. --mode bench exits 0 when every intent was answered 201.
#include "auth.hpp"
#include "common.hpp"
#include "webhook_check.hpp"

#include <idem/idem.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
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
  --give-up P           the share of intents whose client sends once and never retries,
                        whatever happens (default 0)
  --give-up-crash P     the share of those whose request asks its server to crash after the
                        charge ("X-Chaos-Crash: after-charge", obeyed by payments_server
                        --crash-when-asked), so that they leave unfinished payments (default 0)
  --given-up-log PATH   writes the given-up intents there, a JSON line each (default: none)
  --mode M              run (default): send the intents and check the ledger;
                        check-given-up: after payments_reconcile, check the intents of
                        --given-up-log against the ledger, the --report it wrote, and a replay
                        of each request;
                        check-webhooks: once the processor delivered its webhooks, check
                        the servers' --webhook-db against its ledger (each event applied at
                        most once, every charge in its final state);
                        bench: --concurrency clients send intents (fresh keys, no faults, no
                        retries, a new connection each) for --warmup-s then --duration-s
                        seconds, and print one line: the intents answered 201 per second in
                        the measured seconds, and their latency p50 and p99
  --report PATH         check-given-up: payments_reconcile's report
  --webhook-db PATH     check-webhooks: the servers' webhook database
  --wait-s S            check-webhooks: how long the processor may take to deliver (default 30)
  --duration-s S        bench: the seconds measured (default 10)
  --warmup-s S          bench: the seconds sent before, not counted (default 2)
  --path P              bench: the route POSTed (default /v1/payments; /v1/charges drives a
                        payments_processor alone)
  --auth-secret-file F  the secret the servers check API keys under (payments_server's
                        option): each account's requests carry that account's key, issued
                        under it (default: the built-in development secret)
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
  // The transport failures (transport, dropped) by cpp-httplib's error, for --mode bench.
  std::array<std::atomic<long>, 32> by_error{};
};

struct job {
  std::size_t index;
  std::string account;
  payments::intent payment;
  bool ask_crash = false;  // sends "X-Chaos-Crash: after-charge"
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
  const payments::api_keys* keys;  // this client plays every account: it issues their keys
  counters* count;
  double drop_rate;
  std::string path = "/v1/payments";
  // Short, so that a server down is found quickly; --mode bench waits as long as a user would.
  std::chrono::milliseconds connect_timeout{500};

  answer operator()(const idem::attempt_context& attempt, const job& j) const {
    // Round-robin per attempt: a retry goes to another replica than the one that failed.
    const auto& server =
        (*servers)[(j.index + static_cast<std::size_t>(attempt.attempt()) - 1) % servers->size()];
    httplib::Client client(server.host, server.port);
    client.set_connection_timeout(connect_timeout);
    const bool drop = payments::chance(drop_rate);
    // A dropped connection: the client stops waiting before the answer can arrive, and the
    // server goes on with the request. Whether it took effect is for the retry to find out.
    client.set_read_timeout(drop ? std::chrono::milliseconds{2} : std::chrono::seconds{15});
    ++count->attempts;
    httplib::Headers headers{{"Idempotency-Key", std::string(attempt.key())},
                             {"Authorization", "Bearer " + keys->issue(j.account)},
                             {"X-Account", j.account}};
    if (j.ask_crash) headers.emplace(payments::chaos_crash_header, "after-charge");
    auto res = client.Post(path, headers, j.payment.json(), "application/json");
    if (!res) {
      ++(drop ? count->dropped : count->transport);
      ++count->by_error[std::min<std::size_t>(static_cast<std::size_t>(res.error()),
                                              count->by_error.size() - 1)];
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
  int status = 0;         // the last status it got, 0 for none
  std::chrono::nanoseconds latency{};
};

using client_type = idem::retrying<send_payment, chaos_policies>;

// The processor's ledger: the charge ids of each source (an intent's source is unique to it).
std::map<std::string, std::vector<std::string>> read_ledger(const payments::endpoint& processor) {
  httplib::Client ledger(processor.host, processor.port);
  ledger.set_read_timeout(std::chrono::seconds{30});
  const auto res = ledger.Get("/v1/charges");
  if (!res || res->status != 200) {
    throw std::runtime_error("cannot read the processor's ledger at " + processor.url() + ": " +
                             (res ? std::to_string(res->status) : httplib::to_string(res.error())));
  }
  std::map<std::string, std::vector<std::string>> charged;
  for (const auto& row : nlohmann::json::parse(res->body)) {
    charged[row.at("source").get<std::string>()].push_back(row.at("charge_id"));
  }
  return charged;
}

// A given-up intent, as --given-up-log keeps it.
struct given_up {
  std::size_t index = 0;
  std::string account;
  std::string key;
  payments::intent payment;
  bool ask_crash = false;
  int status = 0;         // the answer's status, 0 for none
  std::string charge_id;  // of a 201
  std::string failure;

  nlohmann::ordered_json json() const {
    return {{"intent", index},        {"account", account},       {"key", key},
            {"body", payment.json()}, {"asked_crash", ask_crash}, {"status", status},
            {"charge_id", charge_id}, {"failure", failure}};
  }
  static given_up parse(const std::string& line) {
    const auto json = nlohmann::json::parse(line);
    given_up out;
    out.index = json.at("intent").get<std::size_t>();
    out.account = json.at("account").get<std::string>();
    out.key = json.at("key").get<std::string>();
    auto [parsed, reason] = payments::intent::parse(json.at("body").get<std::string>());
    if (!parsed) throw std::invalid_argument("a given-up intent's body: " + reason);
    out.payment = *parsed;
    out.ask_crash = json.at("asked_crash").get<bool>();
    out.status = json.at("status").get<int>();
    out.charge_id = json.at("charge_id").get<std::string>();
    out.failure = json.at("failure").get<std::string>();
    return out;
  }
};

// --mode check-given-up: after payments_reconcile, every given-up intent was charged at most
// once, and is either listed in the report (by account and redacted key) or complete: a replay
// of its request answers 201 with the ledger's one charge, marked replayed when the ledger had
// the charge before the replay (else the replay would have finished, or made, it itself).
int check_given_up(const std::vector<payments::endpoint>& servers, const payments::api_keys& keys,
                   const payments::endpoint& processor, const std::string& log_path,
                   const std::string& report_path) {
  std::vector<given_up> intents;
  {
    std::ifstream log(log_path);
    if (!log) throw std::runtime_error("cannot read --given-up-log " + log_path);
    for (std::string line; std::getline(log, line);)
      if (!line.empty()) intents.push_back(given_up::parse(line));
  }
  // The report's rows, by (account, redacted key): the classification of its charge step.
  std::map<std::pair<std::string, std::string>, std::string> reported;
  {
    std::ifstream report(report_path);
    if (!report) throw std::runtime_error("cannot read --report " + report_path);
    for (std::string line; std::getline(report, line);) {
      if (line.empty()) continue;
      const auto row = nlohmann::json::parse(line);
      auto& classification =
          reported[{row.at("scope").get<std::string>(), row.at("key").get<std::string>()}];
      if (classification.empty() || row.at("step") == "charge") {
        classification = row.at("classification").get<std::string>();
      }
    }
  }

  const auto before = read_ledger(processor);
  counters count;
  client_type::options options;
  options.backoff = idem::full_jitter{std::chrono::milliseconds{25}, std::chrono::seconds{1}};
  client_type client(send_payment{&servers, &keys, &count, 0.0}, options);

  std::size_t unanswered = 0, asked_crash = 0, finished_without_client = 0, listed = 0,
              completed = 0, fresh = 0, twice = 0, wrong = 0;
  std::vector<std::pair<const given_up*, std::string>> replayed_charge;  // intent, told
  for (const given_up& intent : intents) {
    const auto found = before.find(intent.payment.source);
    const std::size_t charges = found == before.end() ? 0 : found->second.size();
    if (intent.status == 0) ++unanswered;
    if (intent.ask_crash) ++asked_crash;
    if (charges > 1) {
      ++twice;
      std::printf("  DUPLICATE: given-up intent %zu charged %zu times\n", intent.index, charges);
      continue;
    }
    if (intent.status == 201 && (charges != 1 || found->second.front() != intent.charge_id)) {
      ++wrong;
      std::printf("  MISMATCH: given-up intent %zu told %s, the ledger has %zu charge(s)\n",
                  intent.index, intent.charge_id.c_str(), charges);
      continue;
    }
    const auto row = reported.find({intent.account, idem::redacted_key(intent.key).str()});
    if (row != reported.end()) {
      ++listed;
      // The report's word on the charge must be the ledger's (unknown says nothing).
      if ((row->second == "landed" && charges != 1) ||
          (row->second == "not_landed" && charges != 0)) {
        ++wrong;
        std::printf("  WRONG REPORT: given-up intent %zu reported %s, the ledger has %zu\n",
                    intent.index, row->second.c_str(), charges);
      }
      continue;
    }
    job replay{intent.index, intent.account, intent.payment, false};
    auto outcome = client.with_key(intent.key, replay);
    if (!outcome || outcome.value().status != 201) {
      ++wrong;
      std::printf("  NOT FINISHED: given-up intent %zu: its replay got %s\n", intent.index,
                  outcome.has_value() ? std::to_string(outcome.value().status).c_str()
                                      : std::string(idem::to_string(outcome.verdict())).c_str());
      continue;
    }
    const answer& got = outcome.value();
    if (charges == 1 && !got.replayed) {
      ++wrong;
      std::printf(
          "  NOT FINISHED: given-up intent %zu was charged, yet its record was neither complete "
          "nor reported: the replay ran it\n",
          intent.index);
      continue;
    }
    if (charges == 0) {
      ++fresh;  // the key was free (never claimed, or released): the replay charged it now
    } else {
      ++completed;
      if (intent.status == 0) ++finished_without_client;
    }
    replayed_charge.emplace_back(
        &intent, nlohmann::json::parse(got.body).at("charge_id").get<std::string>());
  }
  // After the replays: one charge each, the one its replay answered.
  const auto after = read_ledger(processor);
  for (const auto& [intent, told] : replayed_charge) {
    const auto found = after.find(intent->payment.source);
    if (found == after.end() || found->second.size() != 1 || found->second.front() != told) {
      ++wrong;
      std::printf("  MISMATCH: given-up intent %zu: its replay told %s, the ledger disagrees\n",
                  intent->index, told.c_str());
    }
  }

  std::printf(
      "given up             %zu (sent once, never retried; %zu asked their server to "
      "crash)\n",
      intents.size(), asked_crash);
  std::printf("  without an answer  %zu\n", unanswered);
  std::printf(
      "complete             %zu (a replay answers their one charge; %zu of them had no "
      "answer: finished by their server or the reconciler)\n",
      completed, finished_without_client);
  std::printf("listed in report     %zu\n", listed);
  std::printf("never charged        %zu (nothing kept their key: the replay charged them, once)\n",
              fresh);
  std::printf("charged twice        %zu\n", twice);
  std::printf("wrong or unfinished  %zu\n", wrong);
  const bool ok = twice == 0 && wrong == 0;
  std::printf("given-up verdict     %s\n",
              ok ? "EXACTLY ONCE: every given-up intent complete once or in the report" : "FAILED");
  return ok ? 0 : 1;
}

// --mode bench: `concurrency` clients, each sending one intent after another, every one under a
// fresh key and once (a failure is counted, not retried), for warmup_s + duration_s seconds.
// An intent counts when its 201 arrives within the measured duration_s; those finished during
// the warm-up or after the end are left out, so the rate is the steady state's.
int bench(const std::vector<payments::endpoint>& servers, const payments::api_keys& keys,
          const std::string& path, int concurrency, long long accounts, double warmup_s,
          double duration_s, std::uint64_t seed) {
  counters count;
  client_type::options once;
  once.seed = seed;
  once.limits = {1, std::chrono::seconds{30}};
  // A connection the server's full backlog delays (its SYN dropped, sent again a second later)
  // is latency here, not a failure.
  client_type client(send_payment{&servers, &keys, &count, 0.0, path, std::chrono::seconds{15}},
                     once);

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto measured_from =
      start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(warmup_s));
  const auto until = measured_from + std::chrono::duration_cast<clock::duration>(
                                         std::chrono::duration<double>(duration_s));
  const std::string run = "bench_" + std::to_string(seed) + "_";

  struct tally {
    std::vector<double> latencies_ms;  // of the intents answered 201 in the measured window
    long failed = 0;                   // any other answer, or none, in the window
  };
  std::vector<tally> tallies(static_cast<std::size_t>(concurrency));
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&, w] {
      tally& mine = tallies[static_cast<std::size_t>(w)];
      while (clock::now() < until) {
        const std::size_t i = next.fetch_add(1);
        const job j{i,
                    "acct_" + std::to_string(static_cast<long long>(i) % accounts),
                    {100 + static_cast<long long>(i % 9900), "EUR", run + std::to_string(i)}};
        const auto begin = clock::now();
        const auto outcome = client(j);
        const auto end = clock::now();
        if (end < measured_from || end > until) continue;
        if (outcome) {
          mine.latencies_ms.push_back(
              std::chrono::duration<double, std::milli>(end - begin).count());
        } else {
          ++mine.failed;
        }
      }
    });
  }
  for (auto& t : workers)
    t.join();

  std::vector<double> latencies_ms;
  long failed = 0;
  for (const tally& t : tallies) {
    latencies_ms.insert(latencies_ms.end(), t.latencies_ms.begin(), t.latencies_ms.end());
    failed += t.failed;
  }
  const auto answered = static_cast<double>(latencies_ms.size());
  // Failures over the whole run (warm-up and end included), by kind.
  std::string transport;
  for (std::size_t error = 0; error < count.by_error.size(); ++error) {
    if (const long n = count.by_error[error].load(); n > 0) {
      transport +=
          ", " + std::to_string(n) + " " + httplib::to_string(static_cast<httplib::Error>(error));
    }
  }
  std::printf(
      "bench: %.1f/s p50 %.1f ms p99 %.1f ms (%zu answered 201 in %.1f s, %ld failed; in the "
      "whole run %ld 503, %ld 502%s; concurrency %d, POST %s)\n",
      answered / duration_s, payments::percentile(latencies_ms, 0.50),
      payments::percentile(latencies_ms, 0.99), latencies_ms.size(), duration_s, failed,
      count.unavailable.load(), count.bad_gateway.load(), transport.c_str(), concurrency,
      path.c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const payments::command_line args(
      argc, argv,
      {"servers", "processor", "intents", "concurrency", "seed", "drop-rate", "accounts", "give-up",
       "give-up-crash", "given-up-log", "mode", "report", "duration-s", "warmup-s", "path",
       "auth-secret-file", "webhook-db", "wait-s"},
      usage);
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
  std::optional<payments::api_keys> keys;
  try {
    keys.emplace(payments::keys_from(args.text("auth-secret-file", ""), "payments_chaos", false));
  } catch (const std::exception& e) {
    args.fail(std::string("--auth-secret-file: ") + e.what());
  }
  const std::string mode = args.text("mode", "run");
  const std::string given_up_log = args.text("given-up-log", "");
  if (mode == "check-given-up") {
    if (given_up_log.empty() || args.text("report", "").empty()) {
      args.fail("--mode check-given-up needs --given-up-log and --report");
    }
    try {
      return check_given_up(servers, *keys, processor, given_up_log, args.text("report", ""));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "payments_chaos: %s\n", e.what());
      return 1;
    }
  }
  if (mode == "check-webhooks") {
    if (args.text("webhook-db", "").empty()) args.fail("--mode check-webhooks needs --webhook-db");
    try {
      return payments::check_webhooks(processor, args.text("webhook-db", ""),
                                      static_cast<int>(args.integer("wait-s", 30, 0, 3600)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "payments_chaos: %s\n", e.what());
      return 1;
    }
  }
  if (mode != "run" && mode != "bench") {
    args.fail("--mode wants run, check-given-up, check-webhooks or bench, not '" + mode + "'");
  }
  const auto intents = static_cast<std::size_t>(args.integer("intents", 1000, 1, 10'000'000));
  const auto concurrency = static_cast<int>(args.integer("concurrency", 8, 1, 1024));
  const auto accounts = args.integer("accounts", 4, 1, 1'000'000);
  if (mode == "bench") {
    const auto duration_s = static_cast<double>(args.integer("duration-s", 10, 1, 3600));
    const auto warmup_s = static_cast<double>(args.integer("warmup-s", 2, 0, 3600));
    const std::string path = args.text("path", "/v1/payments");
    if (!path.starts_with("/")) args.fail("--path wants a route starting with '/'");
    const auto seed = static_cast<std::uint64_t>(
        args.integer("seed", static_cast<long long>(std::random_device{}() & 0x7fffffff), 0,
                     std::numeric_limits<long long>::max()));
    return bench(servers, *keys, path, concurrency, accounts, warmup_s, duration_s, seed);
  }
  const double drop_rate = args.probability("drop-rate");
  const double give_up = args.probability("give-up");
  const double give_up_crash = args.probability("give-up-crash");
  const auto seed = static_cast<std::uint64_t>(
      args.integer("seed", static_cast<long long>(std::random_device{}() & 0x7fffffff), 0,
                   std::numeric_limits<long long>::max()));

  // Each intent's source is unique to this run, so the ledger says which intent a charge is for.
  // Which intents give up, and their keys, follow from the seed.
  const std::string run = "tok_" + std::to_string(seed) + "_";
  std::mt19937_64 draw{seed};
  const auto drawn = [&](double p) {
    return std::uniform_real_distribution<double>{0.0, 1.0}(draw) < p;
  };
  std::vector<job> jobs;
  std::vector<std::string> give_up_keys(intents);  // empty: the client retries
  jobs.reserve(intents);
  for (std::size_t i = 0; i < intents; ++i) {
    jobs.push_back({i,
                    "acct_" + std::to_string(static_cast<long long>(i) % accounts),
                    {100 + static_cast<long long>(i % 9900), "EUR", run + std::to_string(i)}});
    if (drawn(give_up)) {
      char key[40];
      std::snprintf(key, sizeof key, "gave-up-%016llx", static_cast<unsigned long long>(draw()));
      give_up_keys[i] = key;
      jobs.back().ask_crash = drawn(give_up_crash);
    }
  }

  counters count;
  client_type::options options;
  options.seed = seed;
  options.backoff = idem::full_jitter{std::chrono::milliseconds{25}, std::chrono::seconds{1}};
  client_type client(send_payment{&servers, &*keys, &count, drop_rate}, options);
  // The clients that give up: one attempt, whatever it brings.
  client_type::options once = options;
  once.limits = {1, std::chrono::seconds{30}};
  client_type giving_up(send_payment{&servers, &*keys, &count, drop_rate}, once);

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
        auto outcome = give_up_keys[i].empty() ? client(jobs[i])
                                               : giving_up.with_key(give_up_keys[i], jobs[i]);
        result& r = results[i];
        r.latency = std::chrono::steady_clock::now() - begin;
        if (outcome.has_value()) r.status = outcome.value().status;
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

  std::map<std::string, std::vector<std::string>> ledger;
  try {
    ledger = read_ledger(processor);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "payments_chaos: %s\n", e.what());
    return 1;
  }

  std::ofstream given_up_out;
  if (!given_up_log.empty()) given_up_out.open(given_up_log, std::ios::trunc);
  std::size_t charges = 0, duplicates = 0, missing = 0, unanswered = 0, mismatched = 0;
  std::size_t gave_up = 0, gave_up_unanswered = 0, gave_up_asked_crash = 0;
  std::vector<double> latencies_ms;
  for (std::size_t i = 0; i < intents; ++i) {
    const auto found = ledger.find(jobs[i].payment.source);
    const std::vector<std::string> ids =
        found == ledger.end() ? std::vector<std::string>{} : found->second;
    charges += ids.size();
    const result& r = results[i];
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(r.latency).count());
    if (ids.size() > 1) {
      ++duplicates;
      std::printf("  DUPLICATE: intent %zu charged %zu times\n", i, ids.size());
    }
    if (!give_up_keys[i].empty()) {
      // Charged at most once, and as told when told: the rest is checked after the reconciler.
      ++gave_up;
      if (jobs[i].ask_crash) ++gave_up_asked_crash;
      if (!r.answered) ++gave_up_unanswered;
      if (r.answered && (ids.size() != 1 || ids.front() != r.charge_id)) {
        ++mismatched;
        std::printf("  MISMATCH: given-up intent %zu told %s, the ledger has %zu charge(s)\n", i,
                    r.charge_id.c_str(), ids.size());
      }
      given_up entry{i,        jobs[i].account, give_up_keys[i], jobs[i].payment, jobs[i].ask_crash,
                     r.status, r.charge_id,     r.failure};
      given_up_out << entry.json().dump() << '\n';
      continue;
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
  if (given_up_out.is_open()) {
    given_up_out.close();
    if (!given_up_out) {
      std::fprintf(stderr, "payments_chaos: cannot write %s\n", given_up_log.c_str());
      return 1;
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
  std::printf(
      "given up             %zu (sent once, never retried: %zu without an answer; %zu "
      "asked their server to crash)\n",
      gave_up, gave_up_unanswered, gave_up_asked_crash);
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
              !exact        ? "FAILED"
              : gave_up > 0 ? "EXACTLY ONCE: every retrying intent charged once, as its client "
                              "was told; no given-up intent charged twice"
                            : "EXACTLY ONCE: every intent charged once, as its client was told");
  return exact ? 0 : 1;
}
