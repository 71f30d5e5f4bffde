// The floor server's idempotency, written by hand from the usual recipe, as a user without idem
// would write it beside the payments demo (examples/payments): what both of its servers (the
// blocking one and the event-loop one) and both of its stores (SQLite, PostgreSQL) share.
//
//   1. claim:    INSERT INTO records (account, key, request_hash) ... ON CONFLICT DO NOTHING;
//                one row inserted: this request runs. None: the row there answers (answer_for):
//                another request hash → 422, no response yet → 409, else the stored response,
//                replayed (Idempotent-Replayed: true).
//   2. effect:   the processor's charge, under a key derived from (account, key), so that the
//                processor charges once however often it is asked (the demo's processor client).
//   3. complete: one transaction writes the payment row, its payment.succeeded message in the
//                outbox and the response into the record (UPDATE), all or nothing.
//      release:  the charge failed: DELETE the claim, so that a retry runs (502).
//
// What it leaves out, and idem's server pays for (docs/performance.md, "The floor server"): a
// lease and its takeover (a claim whose server died stays 409 here until someone deletes it),
// fencing, the charge as a recovery point (idem's ctx.step, one more write), the request kept
// for a reconciler, canonical JSON (the hash here is of the bytes), expiry and sweeping, bounds.
#pragma once

#include "service.hpp"

#include <openssl/sha.h>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace floor_server {

using payments::reply;

/// A store of records that failed (unreachable, a statement refused): the demo's book_error, so
/// that the demo's failure_reply answers it 503.
struct records_error : payments::book_error {
  using payments::book_error::book_error;
};

/// A record as the claim's SELECT reads it back.
struct record {
  std::string request_hash;
  std::optional<int> response_status;  // none while the request that claimed it runs
  std::string response_body;
};

/// What complete() writes, in one transaction: the payment row, its message and the response.
struct completion {
  std::string payment_id;  // the payments table's key, and the message's id
  std::string body;        // the 201's body, kept in the record and the payment row
  std::string message_headers;
  std::string message_payload;
};

/// The topic and the message type, the demo's (common.hpp).
inline constexpr std::string_view outbox_topic = payments::payments_topic;

/// SHA-256 of `text`, in lowercase hex (OpenSSL: what a user writing this by hand links).
inline std::string sha256_hex(std::string_view text) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  constexpr std::string_view hex = "0123456789abcdef";
  std::string out;
  out.reserve(digest.size() * 2);
  for (const unsigned char byte : digest) {
    out += hex[byte >> 4];
    out += hex[byte & 0xF];
  }
  return out;
}

/// The request's hash: of the body's bytes (the route and the account are the record's key).
inline std::string request_hash(std::string_view body) {
  return sha256_hex(body);
}

/// Nanoseconds since the Unix epoch, as the SQLite tables keep time.
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// RFC 9457 problem details under idem's problem types (include/idem/http/problem.hpp), written
/// by hand, so that a client reads the floor's refusals as it reads idem's.
inline reply problem(int status, std::string_view fragment, std::string_view title,
                     std::string_view detail) {
  return {status,
          {{"Content-Language", "en"}},
          "application/problem+json",
          nlohmann::json{{"type", "/idempotency#" + std::string(fragment)},
                         {"title", title},
                         {"status", status},
                         {"detail", detail}}
              .dump()};
}

/// The key of an Idempotency-Key field: a bare token or an sf-string ("..."), 1 to 255 bytes of
/// visible ASCII; the refusal (400) otherwise.
struct key_read {
  std::string key;
  std::optional<reply> refusal;
};
inline key_read read_key(const std::optional<std::string>& field) {
  if (!field)
    return {{},
            problem(400, "missing-key", "Idempotency-Key is missing",
                    "send the payment with an Idempotency-Key field")};
  std::string_view key = *field;
  if (key.size() >= 2 && key.front() == '"' && key.back() == '"') {
    key = key.substr(1, key.size() - 2);
  }
  bool visible = !key.empty() && key.size() <= 255;
  for (const char c : key)
    visible = visible && c >= 0x21 && c <= 0x7E;
  if (!visible)
    return {{},
            problem(400, "invalid-key", "Idempotency-Key is not valid",
                    "a key is 1 to 255 characters of visible ASCII")};
  return {std::string(key), std::nullopt};
}

/// The answer to a request whose claim found `existing`.
inline reply answer_for(const record& existing, std::string_view request_hash) {
  if (existing.request_hash != request_hash) {
    return problem(422, "key-reused", "Idempotency-Key is already used",
                   "this key was sent with another request body");
  }
  if (!existing.response_status) {
    reply busy =
        problem(409, "request-outstanding", "A request is outstanding for this Idempotency-Key",
                "retry after the first request has been answered");
    busy.headers.emplace_back("Retry-After", "1");
    return busy;
  }
  return {*existing.response_status,
          {{"Idempotent-Replayed", "true"}},
          "application/json",
          existing.response_body};
}

/// The answer when the record vanished between the claim and its SELECT (released meanwhile):
/// the client tries again.
inline reply answer_released() {
  reply busy =
      problem(409, "request-outstanding", "A request is outstanding for this Idempotency-Key",
              "retry after the first request has been answered");
  busy.headers.emplace_back("Retry-After", "1");
  return busy;
}

/// The keys derived from (account, key): the processor's Idempotency-Key and the payment's id,
/// the same on every run of the request.
struct derived_keys {
  std::string charge_key;
  std::string payment_id;
};
inline derived_keys derive(std::string_view account, std::string_view key) {
  std::string scoped(account);
  scoped += '\n';
  scoped += key;
  const std::string digest = sha256_hex(scoped);
  return {"floor-charge-" + digest.substr(0, 32), "pay_" + digest.substr(32, 24)};
}

/// The completion of a payment once the processor answered `charged_json`: the demo's 201 body
/// and payment.succeeded message (service.hpp's describe_payment, common.hpp's receipt_event).
inline completion describe(const derived_keys& keys, const std::string& account,
                           const payments::intent& payment, const std::string& charged_json) {
  const auto charge = nlohmann::json::parse(charged_json);
  const std::string charge_id = charge.at("charge_id").get<std::string>();
  std::string body = nlohmann::ordered_json{
      {"id", keys.payment_id},
      {"amount", payment.amount},
      {"currency", payment.currency},
      {"charge_id",
       charge_id}}.dump();
  const payments::receipt_event event{keys.payment_id, account, payment.amount, payment.currency,
                                      charge_id};
  const idem::outbox_message message = event.message();
  nlohmann::ordered_json headers = nlohmann::ordered_json::object();
  for (const idem::outbox_header& header : message.headers)
    headers[header.name] = header.value;
  return {keys.payment_id, std::move(body), headers.dump(), message.payload};
}

}  // namespace floor_server
