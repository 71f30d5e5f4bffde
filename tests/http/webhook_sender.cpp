// A webhook sender, as a payment provider runs one: it delivers one event, signed
// (idem::http::sign_webhook, re-signed with a fresh timestamp at every attempt, as providers
// do), to http://127.0.0.1:PORT/webhooks/provider, and retries with backoff on anything but a
// 2xx or a 4xx it will not retry (a 409 and a 5xx are retried, Retry-After honoured, and so is a
// connection that failed or was cut). For webhook_delivery_test.cpp.
//
// Usage: idem_webhook_sender --port=N --secret=S --id=EVENT_ID --type=TYPE --charge=ID
//          --amount=N --version=N [--copies=N] [--threads=N] [--spacing-ms=MS] [--give-up-s=S]
// Delivers the event `copies` times (a duplicate delivery on purpose each after the first),
// from `threads` threads at once, `spacing-ms` apart within a thread. Prints one line a copy:
// "delivered STATUS processed|duplicate ATTEMPTS", "refused STATUS" or "gave up"; exits 0 when
// every copy was delivered.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <idem/http/webhook.hpp>

#include "support/worker_io.hpp"

namespace {

using idem::testing::say;
using idem::testing::worker_arguments;

struct delivery {
  int port;
  std::string secret;
  std::string body;
  std::chrono::seconds give_up;
};

// One copy delivered until it lands, is refused, or the sender gives up.
std::string deliver(const delivery& d) {
  const auto deadline = std::chrono::steady_clock::now() + d.give_up;
  std::chrono::milliseconds backoff{50};
  for (int attempt = 1;; ++attempt) {
    httplib::Client client("127.0.0.1", d.port);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(10, 0);
    const auto at =
        std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now());
    const httplib::Headers headers{
        {"Webhook-Signature", idem::http::sign_webhook(d.secret, at, d.body)}};
    const auto result = client.Post("/webhooks/provider", headers, d.body, "application/json");
    std::chrono::milliseconds wait = backoff;
    if (result) {
      const int status = result->status;
      if (status >= 200 && status < 300) {
        const bool duplicate = result->get_header_value("Idempotent-Replayed") == "true";
        return "delivered " + std::to_string(status) + (duplicate ? " duplicate " : " processed ") +
               std::to_string(attempt);
      }
      if (status != 409 && status < 500) return "refused " + std::to_string(status);
      const std::string after = result->get_header_value("Retry-After");
      if (!after.empty()) wait = std::max(wait, std::chrono::milliseconds(std::stoi(after) * 1000));
    }
    if (std::chrono::steady_clock::now() + wait > deadline) return "gave up";
    std::this_thread::sleep_for(wait);
    backoff = std::min(backoff * 2, std::chrono::milliseconds{1000});
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const worker_arguments arguments(argc, argv);
    delivery d;
    d.port = static_cast<int>(arguments.number("port"));
    d.secret = arguments.option("secret");
    d.body = R"({"id":")" + arguments.option("id") + R"(","type":")" + arguments.option("type") +
             R"(","data":{"charge":")" + arguments.option("charge") + R"(","amount":)" +
             std::to_string(arguments.number("amount")) + R"(,"version":)" +
             std::to_string(arguments.number("version")) + "}}";
    d.give_up = std::chrono::seconds{arguments.number_or("give-up-s", 30)};
    const auto copies = arguments.number_or("copies", 1);
    const auto threads = std::max<std::int64_t>(1, arguments.number_or("threads", 1));
    const std::chrono::milliseconds spacing{arguments.number_or("spacing-ms", 0)};
    std::atomic<std::int64_t> next{0};
    std::atomic<bool> all_delivered{true};
    std::mutex printing;
    std::vector<std::thread> senders;
    for (std::int64_t t = 0; t < threads; ++t) {
      senders.emplace_back([&] {
        for (bool first = true; next.fetch_add(1) < copies; first = false) {
          if (!first) std::this_thread::sleep_for(spacing);
          const std::string line = deliver(d);
          if (!line.starts_with("delivered")) all_delivered = false;
          const std::lock_guard lock(printing);
          say(line);
        }
      });
    }
    for (auto& sender : senders)
      sender.join();
    return all_delivered ? 0 : 1;
  } catch (const idem::testing::worker_usage_error& error) {
    say(std::string("usage: ") + error.what());
    return 2;
  } catch (const std::exception& error) {
    say(std::string("error: ") + error.what());
    return 1;
  }
}
