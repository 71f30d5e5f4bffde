// Quick start for the server side: a payment endpoint that charges once per idempotency key.
//
// The client's retries arrive as repeats of one request. The first runs the handler; the repeat
// gets the stored response byte for byte; the key reused for another amount is refused (422).
// The charge itself goes to a provider with a downstream key derived from the client's, inside a
// recovery point, so even a crash between charging and answering cannot charge twice.
#include <idem/idem.hpp>

#include <cstdio>
#include <functional>
#include <map>
#include <string>

namespace {

// A provider that deduplicates by key, as Stripe and Adyen do.
class payment_provider {
 public:
  std::string charge(std::string_view key, const std::string& amount) {
    auto [it, inserted] = charges_.try_emplace(std::string(key), "ch_" + std::to_string(++next_));
    if (inserted) std::printf("  provider: charged %s as %s\n", amount.c_str(), it->second.c_str());
    return it->second;
  }
  std::size_t charges() const { return charges_.size(); }

 private:
  std::map<std::string, std::string> charges_;
  int next_ = 0;
};

// Canonical JSON: {"amount":100} and { "amount" : 100 } are the same request.
struct payment_policies : idem::default_policies {
  using fingerprint = idem::canonical_json<>;
};

}  // namespace

int main() {
  payment_provider provider;

  idem::idempotent<
      std::function<idem::http_response(idem::handler_context&, const idem::http_request&)>,
      payment_policies>
      payments{[&](idem::handler_context& ctx, const idem::http_request& request) {
        const std::string charge_id = ctx.step("charge", [&] {
          return provider.charge(ctx.downstream_key("charge").view(), request.body);
        });
        return idem::http_response{
            201, {{"content-type", "application/json"}}, R"({"charge":")" + charge_id + R"("})"};
      }};

  auto handle = [&](const idem::http_request& request) {
    const auto outcome = payments("account-42", request);  // key: Idempotency-Key
    std::printf("%-9s %d %s\n", std::string(to_string(outcome.verdict())).c_str(),
                outcome.http_status(),
                outcome ? outcome->body.c_str() : std::string(outcome.message()).c_str());
    return outcome;
  };

  const idem::http_request first{
      "POST", "/charges", {{"Idempotency-Key", "8e0f6a52-0d8c-4b5e"}}, R"({"amount":100})"};
  const idem::http_request retry{
      "POST", "/charges", {{"Idempotency-Key", "8e0f6a52-0d8c-4b5e"}}, R"({ "amount" : 100 })"};
  const idem::http_request misuse{
      "POST", "/charges", {{"Idempotency-Key", "8e0f6a52-0d8c-4b5e"}}, R"({"amount":900})"};
  const idem::http_request no_key{"POST", "/charges", {}, R"({"amount":100})"};

  const auto executed = handle(first);  // executed  201 {"charge":"ch_1"}
  const auto replayed = handle(retry);  // replayed  201 {"charge":"ch_1"}
  const auto refused = handle(misuse);  // mismatch  422
  const auto missing = handle(no_key);  // missing_key 400

  const bool as_promised = executed.verdict() == idem::verdict::executed &&
                           replayed.verdict() == idem::verdict::replayed &&
                           replayed.value() == executed.value() && refused.http_status() == 422 &&
                           missing.http_status() == 400 && provider.charges() == 1;
  std::printf("charges made: %zu\n", provider.charges());
  return as_promised ? 0 : 1;
}
