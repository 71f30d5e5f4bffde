// What the payments programs share: their command lines, URLs, the payment intent's JSON, the
// payment.succeeded message, and the HTTP client errors turned into the exceptions idem's
// classifier understands.
//
// The demo uses cpp-httplib and nlohmann-json; the library itself never does.
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <idem/http/httplib/listen.hpp>
#include <idem/outbox/message.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace payments {

/// Whether `flag` (a flag without a value, as "--async") is on the command line, taken out of it
/// so that what is left is `--name value` pairs for command_line.
inline bool take_flag(int& argc, char** argv, std::string_view flag) {
  bool found = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (argv[i] == flag) {
      found = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return found;
}

/// `--name value` pairs. Every option must be known to the program (a typo is an error, not a
/// silently ignored setting) and given once.
class command_line {
 public:
  command_line(int argc, char** argv, std::set<std::string> known, std::string usage)
      : usage_(std::move(usage)) {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg == "-h" || arg == "--help") {
        std::printf("%s", usage_.c_str());
        std::exit(0);
      }
      if (!arg.starts_with("--")) fail("unexpected argument '" + std::string(arg) + "'");
      std::string name(arg.substr(2));
      std::string value;
      if (const auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        fail("--" + name + " needs a value");
      }
      if (!known.contains(name)) fail("unknown option --" + name);
      if (!values_.emplace(name, value).second) fail("--" + name + " given twice");
    }
  }

  std::string text(const std::string& name, std::string fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? std::move(fallback) : it->second;
  }

  long long integer(const std::string& name, long long fallback, long long low,
                    long long high) const {
    const auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    long long value = 0;
    const auto& text = it->second;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size() || value < low || value > high) {
      fail("--" + name + " wants an integer from " + std::to_string(low) + " to " +
           std::to_string(high) + ", not '" + text + "'");
    }
    return value;
  }

  double probability(const std::string& name, double fallback = 0.0) const {
    const auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    char* end = nullptr;
    const double value = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !(value >= 0.0 && value <= 1.0)) {
      fail("--" + name + " wants a probability from 0 to 1, not '" + it->second + "'");
    }
    return value;
  }

  [[noreturn]] void fail(const std::string& message) const {
    std::fprintf(stderr, "error: %s\n\n%s", message.c_str(), usage_.c_str());
    std::exit(2);
  }

 private:
  std::string usage_;
  std::map<std::string, std::string> values_;
};

/// "http://host:port" (a trailing slash allowed), the only form the demo needs.
struct endpoint {
  std::string host;
  int port = 0;

  static endpoint parse(std::string_view url) {
    constexpr std::string_view scheme = "http://";
    if (!url.starts_with(scheme)) {
      throw std::invalid_argument("'" + std::string(url) + "' is not an http://host:port URL");
    }
    url.remove_prefix(scheme.size());
    if (url.ends_with('/')) url.remove_suffix(1);
    const auto colon = url.rfind(':');
    int port = 0;
    if (colon == std::string_view::npos || colon == 0) {
      throw std::invalid_argument("'" + std::string(url) + "' has no host:port");
    }
    const auto digits = url.substr(colon + 1);
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (error != std::errc{} || end != digits.data() + digits.size() || port < 1 || port > 65535) {
      throw std::invalid_argument("'" + std::string(digits) + "' is not a port");
    }
    return {std::string(url.substr(0, colon)), port};
  }

  std::string url() const { return "http://" + host + ":" + std::to_string(port); }
};

/// The body of a payment and of a charge: {"amount": int, "currency": str, "source": str}.
struct intent {
  long long amount = 0;
  std::string currency;
  std::string source;

  /// The intent in `body`, or the reason it is not one (for a 400).
  static std::pair<std::optional<intent>, std::string> parse(const std::string& body) {
    const auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) return {std::nullopt, "the body is not valid JSON"};
    if (!json.is_object()) return {std::nullopt, "the body must be a JSON object"};
    const auto amount = json.find("amount");
    if (amount == json.end() || !amount->is_number_integer()) {
      return {std::nullopt, "\"amount\" must be an integer"};
    }
    if (amount->get<long long>() <= 0) return {std::nullopt, "\"amount\" must be positive"};
    for (const char* field : {"currency", "source"}) {
      const auto it = json.find(field);
      if (it == json.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
        return {std::nullopt, "\"" + std::string(field) + "\" must be a non-empty string"};
      }
    }
    return {intent{amount->get<long long>(), json["currency"].get<std::string>(),
                   json["source"].get<std::string>()},
            {}};
  }

  std::string json() const {
    return nlohmann::ordered_json{{"amount", amount}, {"currency", currency}, {"source", source}}
        .dump();
  }
};

/// The name payments_server publishes a payment's message under (its id is
/// idem::outbox_message_id(account, idempotency key, this name)), and its `type` header.
inline constexpr std::string_view payment_succeeded = "payment.succeeded";
/// The outbox topic, and so the Redis stream (idem:outbox:payments) the relay writes.
inline constexpr std::string_view payments_topic = "payments";

/// payment.succeeded's payload: {"payment_id","account","amount","currency","charge_id"}.
struct receipt_event {
  std::string payment_id;
  std::string account;
  long long amount = 0;
  std::string currency;
  std::string charge_id;

  /// The message, partitioned by account: one account's payments reach the stream in order.
  idem::outbox_message message() const {
    return {std::string(payments_topic),
            account,
            nlohmann::ordered_json{{"payment_id", payment_id},
                                   {"account", account},
                                   {"amount", amount},
                                   {"currency", currency},
                                   {"charge_id", charge_id}}
                .dump(),
            {{"type", std::string(payment_succeeded)}}};
  }

  /// The event in `payload`; throws std::invalid_argument saying what is wrong.
  static receipt_event parse(const std::string& payload) {
    const auto json = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (!json.is_object()) throw std::invalid_argument("the payload is not a JSON object");
    try {
      return {json.at("payment_id").get<std::string>(), json.at("account").get<std::string>(),
              json.at("amount").get<long long>(), json.at("currency").get<std::string>(),
              json.at("charge_id").get<std::string>()};
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(std::string("the payload is not a payment: ") + e.what());
    }
  }
};

/// The header payments_chaos sends, as "X-Chaos-Crash: after-charge", on the intents whose
/// server it asks to crash (payments_server --crash-when-asked).
inline constexpr std::string_view chaos_crash_header = "X-Chaos-Crash";

/// The secret in the file at `path` (API keys', webhooks'), its trailing line end left out.
inline std::string secret_from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read the secret file " + path);
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r'))
    secret.pop_back();
  return secret;
}

/// {"error": message}, the body of every refusal.
inline std::string error_body(std::string_view message) {
  return nlohmann::json{{"error", message}}.dump();
}

/// A transport failure of cpp-httplib as the std::system_error idem's classifiers read: a refused
/// or failed connection means the request never arrived (transient); a read that failed or
/// timed out means it may have taken effect (ambiguous).
[[noreturn]] inline void throw_transport_error(httplib::Error error) {
  std::errc code = std::errc::io_error;
  switch (error) {
    case httplib::Error::Connection:
      code = std::errc::connection_refused;
      break;
    case httplib::Error::Read:
      code = std::errc::connection_reset;
      break;
    case httplib::Error::Write:
      code = std::errc::broken_pipe;
      break;
    case httplib::Error::ConnectionTimeout:
      code = std::errc::timed_out;
      break;
    default:
      break;
  }
  throw std::system_error(std::make_error_code(code), "HTTP: " + httplib::to_string(error));
}

/// The value at rank p (0 to 1) of `values`, nearest rank; 0 for none.
inline double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(rank, values.size() - 1)];
}

/// True with probability `p`, from a per-thread engine.
inline bool chance(double p) {
  if (p <= 0.0) return false;
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return std::uniform_real_distribution<double>{0.0, 1.0}(engine) < p;
}

/// Binds `server` to 127.0.0.1:port (0: any free port) with a listen backlog of `backlog`
/// (cpp-httplib's own is 5: a burst of connections past it is left half-connected), prints
/// "listening on PORT" (what the scripts and tests wait for) and serves until stopped.
inline int listen_and_serve(httplib::Server& server, const char* name, int port,
                            int backlog = SOMAXCONN) {
  const int bound = idem::http::bind_with_backlog(server, "127.0.0.1", port, backlog);
  if (bound <= 0) {
    std::fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d\n", name, port);
    return 1;
  }
  std::printf("%s: listening on %d\n", name, bound);
  std::fflush(stdout);
  return server.listen_after_bind() ? 0 : 1;
}

}  // namespace payments
