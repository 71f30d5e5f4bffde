// Who is calling: the payments server's API keys. The key's scope (the account its payments are
// charged to and its idempotency keys belong to) comes from the key alone, never from a field the
// caller may set as it likes.
//
// An account's API key is "<account>.<HMAC-SHA256(secret, account), 64 hex digits>": the
// server keeps one secret (--auth-secret-file), not a table of keys, and checks a key by
// computing its MAC again; whoever holds the secret issues keys (payments_server --issue-key, or
// payments_chaos, which plays every account's client). A caller sends it as
// "Authorization: Bearer <key>". X-Account is optional: when sent, once, it must name the key's
// account, so that a client that believes it pays for another account is told so (403) instead
// of being charged to its own.
#pragma once

#include "common.hpp"

#include <idem/core/fingerprint/hmac.hpp>
#include <idem/http/exchange.hpp>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace payments {

/// Issues and checks API keys under one secret.
class api_keys {
 public:
  /// The secret is at least 16 bytes: a MAC under a guessable secret proves nothing.
  explicit api_keys(std::string secret) : secret_(std::move(secret)) {
    if (secret_.size() < 16)
      throw std::invalid_argument("the API key secret needs 16 bytes or more");
  }

  /// The secret in `path`, its trailing line end left out.
  static api_keys from_file(const std::string& path) { return api_keys(secret_from_file(path)); }

  /// Whether `account` may have a key: 1 to 64 letters, digits, '_' or '-'.
  static bool valid_account(std::string_view account) noexcept {
    if (account.empty() || account.size() > 64) return false;
    for (const char c : account) {
      const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-';
      if (!word) return false;
    }
    return true;
  }

  /// The key of `account`; std::invalid_argument for an account that may have none.
  std::string issue(std::string_view account) const {
    if (!valid_account(account)) throw std::invalid_argument("not an account name");
    std::string key(account);
    key += '.';
    key += idem::hmac_sha256::hex(idem::hmac_sha256::sign(secret_, {account}));
    return key;
  }

  /// The account `key` was issued for, or std::nullopt for a key this secret never issued.
  std::optional<std::string> account_of(std::string_view key) const {
    const std::size_t dot = key.rfind('.');
    if (dot == std::string_view::npos) return std::nullopt;
    const std::string_view account = key.substr(0, dot);
    const auto given = idem::hmac_sha256::from_hex(key.substr(dot + 1));
    if (!valid_account(account) || !given) return std::nullopt;
    // Every byte compared whatever the first difference: the time taken says nothing of how
    // much of a forged MAC was right.
    if (!idem::hmac_sha256::equal(*given, idem::hmac_sha256::sign(secret_, {account}))) {
      return std::nullopt;
    }
    return std::string(account);
  }

 private:
  std::string secret_;
};

/// The field a caller's key comes in, and the one naming the account it believes it pays for.
inline constexpr std::string_view authorization_field = "Authorization";
inline constexpr std::string_view account_field = "X-Account";

/// The refusals of authenticate: 401 with a WWW-Authenticate challenge, or 403.
inline idem::http::reply auth_refusal(int status, std::string_view message) {
  idem::http::reply answer{status, {}, "application/json", error_body(message)};
  if (status == 401) answer.add_header("WWW-Authenticate", "Bearer realm=\"payments\"");
  return answer;
}

/// The caller's account, from every value of Authorization and of X-Account the request carries:
/// one "Bearer <key>" whose key `keys` issued, and X-Account absent or once with that account.
/// Else the refusal: 401 for no key, two, or one that is malformed or forged; 403 for an
/// X-Account naming another account than the key's, or sent twice (which of the two would a
/// proxy in front have read?). Checked before anything is read of the body or claimed.
inline std::variant<std::string, idem::http::reply> authenticate(
    const api_keys& keys, const std::vector<std::string_view>& authorization,
    const std::vector<std::string_view>& accounts) {
  if (authorization.empty())
    return auth_refusal(401, "an API key is needed: Authorization: Bearer <key>");
  if (authorization.size() > 1) return auth_refusal(401, "one Authorization field, not several");
  constexpr std::string_view scheme = "Bearer ";
  std::string_view credential = authorization.front();
  if (credential.size() <= scheme.size() ||
      !idem::header_name_equals(credential.substr(0, scheme.size()), scheme)) {
    return auth_refusal(401, "Authorization must be: Bearer <key>");
  }
  credential.remove_prefix(scheme.size());
  while (!credential.empty() && credential.front() == ' ')
    credential.remove_prefix(1);
  std::optional<std::string> account = keys.account_of(credential);
  if (!account) return auth_refusal(401, "the API key is not valid");
  // An empty X-Account names nothing: cpp-httplib drops a field with no value before anything
  // sees it, so the event-loop server leaves it out too, and the two answer alike.
  std::size_t named = 0;
  for (const std::string_view name : accounts) {
    if (name.empty()) continue;
    if (++named > 1) return auth_refusal(403, "X-Account sent more than once");
    if (name != *account) {
      return auth_refusal(403, "X-Account names another account than the API key's");
    }
  }
  return std::move(*account);
}

/// The secret payments_server and payments_chaos use when given no --auth-secret-file, so that a
/// server and a client started by hand (and scripts/serve_bench.sh) agree. Anyone who reads this
/// line can issue keys under it: the servers print a warning when they use it, and
/// scripts/demo.sh gives them a secret of its own.
inline constexpr std::string_view development_secret = "idem-payments-demo-development-secret";

/// The keys of --auth-secret-file PATH, or of the development secret when PATH is empty (with a
/// warning on stderr from `program`, when `warn`).
inline api_keys keys_from(const std::string& path, const char* program, bool warn) {
  if (!path.empty()) return api_keys::from_file(path);
  if (warn) {
    std::fprintf(stderr,
                 "%s: no --auth-secret-file: API keys are checked under the built-in development "
                 "secret, which anyone can read in the source\n",
                 program);
  }
  return api_keys(std::string(development_secret));
}

}  // namespace payments
