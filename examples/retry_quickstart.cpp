// Quick start for the client side: a payment call retried safely under one idempotency key.
//
// The "payment provider" here is a local object that fails the way real ones do: a 503 with a
// Retry-After, then a timeout after it had already recorded the charge. The provider
// deduplicates by key, as Stripe and Adyen do, so the retry cannot charge twice.
#include <idem/idem.hpp>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <system_error>

namespace {

struct http_response {
  int status;
  std::string body;
  std::string retry_after;  // read by idem's HTTP classifier
};

// A provider that charges at most once per idempotency key.
class payment_provider {
 public:
  http_response charge(std::string_view key, int amount_cents) {
    ++requests_;
    if (requests_ == 1) return {503, "busy", "1"};  // try again in one second
    auto [it, inserted] = charges_.try_emplace(std::string(key), amount_cents);
    if (requests_ == 2) {
      // The charge is recorded, but the answer is lost on the way back.
      throw std::system_error(std::make_error_code(std::errc::timed_out), "read timed out");
    }
    return {inserted ? 201 : 200, "charged " + std::to_string(it->second), ""};
  }
  int charges() const { return static_cast<int>(charges_.size()); }
  int requests() const { return requests_; }

 private:
  std::map<std::string, int> charges_;
  int requests_ = 0;
};

// Tests and examples do not want to wait: the manual clock jumps instead of sleeping.
struct example_policies : idem::default_policies {
  using clock = idem::manual_clock;
  using observer = idem::callback_observer;
  static constexpr int max_attempts = 4;
};

}  // namespace

int main() {
  payment_provider provider;

  auto charge = [&](const idem::attempt_context& attempt, int amount_cents) {
    return provider.charge(attempt.key(), amount_cents);
  };

  idem::retrying<decltype(charge), example_policies>::options options;
  options.observer.attempt = [](const idem::attempt_event& e) {
    std::printf("attempt %d: %s\n", e.record.attempt,
                std::string(idem::to_string(e.record.kind)).c_str());
  };
  options.observer.delay = [](const idem::delay_event& e) {
    std::printf("  waiting %lld ms%s\n", static_cast<long long>(e.delay.count() / 1'000'000),
                e.from_retry_after ? " (the server's Retry-After)" : "");
  };
  idem::retrying<decltype(charge), example_policies> pay{charge, options};

  auto outcome = pay(1999);

  if (!outcome) {
    std::printf("gave up: %s\n", std::string(idem::to_string(outcome.verdict())).c_str());
    return 1;
  }
  // The key is logged redacted (a stable hash): it is the caller's secret, not log material.
  std::printf("%s after %d attempts under %s: %d %s\n",
              std::string(idem::to_string(outcome.verdict())).c_str(), outcome.attempts(),
              idem::redacted_key{outcome.key()}.str().c_str(), outcome.value().status,
              outcome.value().body.c_str());
  std::printf("the provider saw %d requests and made %d charge\n", provider.requests(),
              provider.charges());
  return provider.charges() == 1 ? 0 : 1;
}
