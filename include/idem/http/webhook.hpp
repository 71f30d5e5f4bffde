// Receiving webhooks: a sender's at-least-once deliveries of its events, each acted on once.
// Standard library only; the server bindings (httplib.hpp, beast.hpp) read their requests into
// it and write its answers.
//
//   idem::http::webhook_receiver provider{{.name = "provider", .secrets = {current, previous}}};
//   idem::inbox<policies> events{...};
//   server.Post("/webhooks/provider", idem::http::webhook_handler(events, provider,
//       [&](const idem::http::webhook_event& event, idem::sqlite_store::transaction& t) {
//         apply(event.body, t);  // in the transaction that records the event
//       }));
//
// Every delivery is checked before anything else is read: its signature field
// (`t=<unix seconds>,v1=<hex HMAC-SHA-256 of "<t>.<raw body>">`, several v1 allowed), against
// every secret the receiver accepts (a rotation keeps the old one for a while), the comparison in
// constant time, and its timestamp within `tolerance` of now (a captured delivery replayed later
// is refused). Then the event's id is read from where the sender puts it (a header field, or a
// JSON Pointer into the body), and the handler runs through the inbox keyed by (the sender's
// name, the event id): never twice for one event, however often and however concurrently it is
// delivered, re-signed or not. The answers follow what senders retry on:
//
//   processed            200  {"event":ID,"outcome":"processed"}
//   duplicate            200  {"event":ID,"outcome":"duplicate"}, Idempotent-Replayed: true
//   bad or no signature  400  invalid-signature      (a sender's retries of it are finite)
//   timestamp too old    400  stale-webhook
//   no usable event id   400  missing-event-id
//   body too large       413  body-too-large
//   being processed      409  request-outstanding, Retry-After: the sender retries
//   handler failed       500  event-failed: the event released, a redelivery runs it again
//   store failed         503  store-unavailable: nothing ran, the sender retries
//
// A handler may return an http_response-like value instead of nothing: that is answered (and
// replayed to duplicates) in place of the default body.
#ifndef IDEM_HTTP_WEBHOOK_HPP
#define IDEM_HTTP_WEBHOOK_HPP

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <idem/core/fingerprint/hmac.hpp>
#include <idem/core/fingerprint/json/detail/parser.hpp>
#include <idem/core/fingerprint/json/document.hpp>
#include <idem/core/key.hpp>
#include <idem/http/exchange.hpp>
#include <idem/http/problem.hpp>
#include <idem/server/outcome.hpp>

namespace idem::http {

/// The field a sender signs its deliveries in, unless its webhook_sender names another.
inline constexpr std::string_view webhook_signature_field = "Webhook-Signature";

/// A sender of webhooks, as a receiver knows it.
struct webhook_sender {
  /// Its name: the inbox's scope, so that two senders' event ids never meet. Not empty.
  std::string name;
  /// The secrets a delivery may be signed with: one, or during a rotation the new and the old.
  /// At least one; none empty.
  std::vector<std::string> secrets;
  /// Where its event id is: a header field (`event_id_field`), or else a JSON Pointer (RFC 6901)
  /// into the body (`event_id_pointer`, "/id" by default). The id must be 1 to 255 visible ASCII
  /// bytes (idem::is_valid_key); a pointer may name a string or an integer.
  std::string event_id_field;
  std::string event_id_pointer = "/id";
  /// The field its signature is in.
  std::string signature_field = std::string(webhook_signature_field);
  /// How far a delivery's signed timestamp may be from now, either way.
  std::chrono::seconds tolerance{300};
  /// The longest body accepted, in bytes (413 past it).
  std::size_t max_body_bytes = std::size_t{1024} * 1024;
  /// Where the problems' types point (the server's idempotency specification).
  std::string specification_uri = "/idempotency";
};

/// A delivery that passed the checks: views into the request, but `id`, which may have been
/// decoded from the body.
struct webhook_event {
  std::string_view sender;
  std::string id;
  std::chrono::sys_seconds signed_at;
  std::string_view body;
};

/// The value of a signature field for `body` signed with `secret` at `at`:
/// "t=<unix seconds>,v1=<64 hex digits>". What a sender (and a test) writes.
inline std::string sign_webhook(std::string_view secret, std::chrono::sys_seconds at,
                                std::string_view body) {
  const std::string stamp = std::to_string(at.time_since_epoch().count());
  return "t=" + stamp + ",v1=" + hmac_sha256::hex(hmac_sha256::sign(secret, {stamp, ".", body}));
}

/// What a delivery's checks found: the event, or the problem to answer.
class webhook_check {
 public:
  explicit webhook_check(webhook_event event) : event_(std::move(event)) {}
  explicit webhook_check(problem refusal) : refusal_(std::move(refusal)) {}

  explicit operator bool() const noexcept { return !refusal_; }
  const webhook_event& event() const noexcept { return event_; }
  const std::optional<problem>& refusal() const noexcept { return refusal_; }

 private:
  webhook_event event_;
  std::optional<problem> refusal_;
};

namespace detail {

using idem::detail::json_document;
using idem::detail::json_kind;
using idem::detail::json_node;
using idem::detail::json_parser;

// The parts of a signature field: its timestamp and every v1 tag; std::nullopt when it is not
// one (a part without '=', a timestamp that is not a number, no v1, a v1 that is not 64 hex
// digits). Schemes other than t and v1 are skipped, as senders add new ones before old
// receivers know them.
struct signature_parts {
  std::int64_t timestamp = 0;
  std::string_view timestamp_text;  // as sent: what was signed
  std::vector<hmac_sha256::tag> tags;
};

inline std::optional<signature_parts> parse_signature(std::string_view value, std::string& why) {
  signature_parts parts;
  bool stamped = false;
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    std::string_view part = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view{} : value.substr(comma + 1);
    while (!part.empty() && (part.front() == ' ' || part.front() == '\t'))
      part.remove_prefix(1);
    while (!part.empty() && (part.back() == ' ' || part.back() == '\t'))
      part.remove_suffix(1);
    const std::size_t equals = part.find('=');
    if (equals == std::string_view::npos || equals == 0) {
      why = "a part of the signature field is not scheme=value";
      return std::nullopt;
    }
    const std::string_view scheme = part.substr(0, equals);
    const std::string_view text = part.substr(equals + 1);
    if (scheme == "t") {
      const auto [end, error] =
          std::from_chars(text.data(), text.data() + text.size(), parts.timestamp);
      if (stamped || error != std::errc{} || end != text.data() + text.size() || text.empty() ||
          text.front() == '-') {
        why = stamped ? "the signature field has two timestamps"
                      : "the signature field's timestamp is not a number of seconds";
        return std::nullopt;
      }
      stamped = true;
      parts.timestamp_text = text;
    } else if (scheme == "v1") {
      const auto tag = hmac_sha256::from_hex(text);
      if (!tag) {
        why = "a v1 signature is not 64 hexadecimal digits";
        return std::nullopt;
      }
      parts.tags.push_back(*tag);
    }
  }
  if (!stamped) {
    why = "the signature field has no timestamp (t=)";
    return std::nullopt;
  }
  if (parts.tags.empty()) {
    why = "the signature field has no v1 signature";
    return std::nullopt;
  }
  return parts;
}

// The node at `pointer` in `document` (RFC 6901, "/a/0/b", ~0 and ~1 unescaped); nullptr when
// there is none.
inline const json_node* node_at(const json_document<>& document, std::string_view pointer) {
  if (document.nodes.empty()) return nullptr;
  std::size_t at = 0;
  while (!pointer.empty()) {
    pointer.remove_prefix(1);  // '/'
    const std::size_t slash = pointer.find('/');
    std::string token;
    for (std::size_t i = 0; i < std::min(slash, pointer.size()); ++i) {
      if (pointer[i] == '~' && i + 1 < pointer.size() &&
          (pointer[i + 1] == '0' || pointer[i + 1] == '1')) {
        token += pointer[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        token += pointer[i];
      }
    }
    pointer = slash == std::string_view::npos ? std::string_view{} : pointer.substr(slash);
    const json_node& node = document.nodes[at];
    std::size_t child = at + 1;
    bool found = false;
    if (node.kind == json_kind::object) {
      while (child < node.end) {
        if (document.text(document.nodes[child]) == token) {
          at = child + 1;
          found = true;
          break;
        }
        child = document.nodes[child + 1].end;
      }
    } else if (node.kind == json_kind::array) {
      std::size_t index = 0;
      const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), index);
      if (error != std::errc{} || end != token.data() + token.size() || token.empty() ||
          (token.size() > 1 && token.front() == '0')) {
        return nullptr;
      }
      for (std::size_t i = 0; child < node.end; ++i, child = document.nodes[child].end) {
        if (i == index) {
          at = child;
          found = true;
          break;
        }
      }
    }
    if (!found) return nullptr;
  }
  return &document.nodes[at];
}

// The event id at `pointer` in `body`: a string, or an integer written in decimal.
inline std::optional<std::string> event_id_in_body(std::string_view body, std::string_view pointer,
                                                   std::string& why) {
  json_document<> document;
  try {
    json_parser<>(body, document).parse();
  } catch (const json_error& error) {
    why = std::string("the body is not JSON, so its event id cannot be read: ") + error.what();
    return std::nullopt;
  }
  const json_node* node = node_at(document, pointer);
  if (node == nullptr) {
    why = "the body has no event id at " + std::string(pointer);
    return std::nullopt;
  }
  if (node->kind == json_kind::string) return std::string(document.text(*node));
  if (node->kind == json_kind::number) {
    const double number = document.numbers[node->first];
    if (number >= 0 && number <= 9007199254740992.0 &&
        number == static_cast<double>(static_cast<std::int64_t>(number))) {
      return std::to_string(static_cast<std::int64_t>(number));
    }
  }
  why = "the event id at " + std::string(pointer) + " is not a string or an integer";
  return std::nullopt;
}

}  // namespace detail

/// A sender's deliveries checked: its settings, validated once.
class webhook_receiver {
 public:
  /// Throws std::invalid_argument for a sender without a name or a secret, an empty secret, a
  /// pointer that is not one, or a tolerance that is not positive.
  explicit webhook_receiver(webhook_sender sender) : sender_(std::move(sender)) {
    auto refuse = [](const std::string& why) {
      throw std::invalid_argument("idem::http::webhook_receiver: " + why);
    };
    if (sender_.name.empty()) refuse("the sender has no name (the inbox's scope)");
    if (sender_.secrets.empty()) refuse("the sender has no secret");
    for (const std::string& secret : sender_.secrets)
      if (secret.empty()) refuse("a secret is empty");
    if (sender_.event_id_field.empty() &&
        (sender_.event_id_pointer.empty() || sender_.event_id_pointer.front() != '/')) {
      refuse("the event id's JSON Pointer \"" + sender_.event_id_pointer +
             "\" does not start with '/' (and no header field is named)");
    }
    if (sender_.signature_field.empty()) refuse("the signature field has no name");
    if (sender_.tolerance <= std::chrono::seconds::zero()) refuse("the tolerance is not positive");
  }

  const webhook_sender& sender() const noexcept { return sender_; }

  /// Checks one delivery: `field_values(name)` answers every value of a field (as exchange's
  /// do), `body` is the raw body as received, `now` the time it is checked at.
  template <class FieldValues>
  webhook_check check(const FieldValues& field_values, std::string_view body,
                      std::chrono::system_clock::time_point now) const {
    auto refuse = [this](problem_kind kind, std::string_view why) {
      return webhook_check(make_problem(kind, why, sender_.specification_uri));
    };
    if (body.size() > sender_.max_body_bytes) {
      return refuse(problem_kind::body_too_large, "the body is longer than the " +
                                                      std::to_string(sender_.max_body_bytes) +
                                                      " bytes this receiver accepts");
    }
    const auto signatures = field_values(sender_.signature_field);
    std::size_t count = 0;
    std::string_view signature;
    for (const auto& value : signatures) {
      signature = value;
      ++count;
    }
    if (count == 0) return refuse(problem_kind::invalid_signature, "the delivery is not signed");
    if (count > 1) {
      return refuse(problem_kind::invalid_signature, "the delivery has several signature fields");
    }
    std::string why;
    const auto parts = detail::parse_signature(signature, why);
    if (!parts) return refuse(problem_kind::invalid_signature, why);
    const std::string_view stamp = parts->timestamp_text;
    bool matched = false;
    for (const std::string& secret : sender_.secrets) {
      const auto expected = hmac_sha256::sign(secret, {stamp, ".", body});
      for (const auto& tag : parts->tags)
        matched = hmac_sha256::equal(expected, tag) || matched;
    }
    if (!matched) {
      return refuse(problem_kind::invalid_signature,
                    "no signature matches the body under any secret this receiver accepts");
    }
    // Checked after the signature, so that the time said is the sender's; in whole seconds, so
    // that no timestamp a field can hold overflows.
    const std::int64_t now_s =
        std::chrono::floor<std::chrono::seconds>(now).time_since_epoch().count();
    const std::int64_t apart =
        parts->timestamp > now_s ? parts->timestamp - now_s : now_s - parts->timestamp;
    if (apart > sender_.tolerance.count()) {
      return refuse(problem_kind::stale_webhook,
                    "the delivery was signed " + std::to_string(apart) +
                        " s from now, more than the " + std::to_string(sender_.tolerance.count()) +
                        " s this receiver allows");
    }
    const auto signed_at = std::chrono::sys_seconds(std::chrono::seconds(parts->timestamp));
    std::optional<std::string> id;
    if (!sender_.event_id_field.empty()) {
      std::size_t ids = 0;
      for (const auto& value : field_values(sender_.event_id_field)) {
        id.emplace(value);
        ++ids;
      }
      if (ids != 1) {
        return refuse(problem_kind::missing_event_id,
                      ids == 0 ? "the delivery has no " + sender_.event_id_field + " field"
                               : "the delivery has several " + sender_.event_id_field + " fields");
      }
    } else {
      id = detail::event_id_in_body(body, sender_.event_id_pointer, why);
      if (!id) return refuse(problem_kind::missing_event_id, why);
    }
    if (!is_valid_key(*id)) {
      return refuse(problem_kind::missing_event_id,
                    "the event id is not 1 to 255 visible ASCII characters");
    }
    return webhook_check(webhook_event{sender_.name, std::move(*id), signed_at, body});
  }

 private:
  webhook_sender sender_;
};

/// Writes what a delivery's outcome answers (the table at the top of this file).
template <class Response, reply_writer Writer>
void write_webhook_outcome(const idempotent_outcome<Response>& outcome, const webhook_event& event,
                           const webhook_sender& sender, Writer& out) {
  if (!outcome) return write_problem(problem_of(outcome, sender.specification_uri), out);
  const bool duplicate = outcome.verdict() == verdict::replayed;
  if constexpr (http_response_like<Response>) {
    write_response(*outcome, duplicate, out);
  } else {
    out.set_status(200);
    if (duplicate) out.add_header(replayed_field, "true");
    std::string body = "{\"event\":";
    detail::append_json_string(body, event.id);
    body += duplicate ? ",\"outcome\":\"duplicate\"}" : ",\"outcome\":\"processed\"}";
    out.set_body(body, "application/json");
  }
}

/// Writes the answer to a handler that threw: 500, the event released for its redelivery.
template <reply_writer Writer>
void write_webhook_failure(const webhook_sender& sender, Writer& out) {
  write_problem(make_problem(problem_kind::event_failed,
                             "the event's handler failed; it was released, and runs again when "
                             "the sender delivers it again",
                             sender.specification_uri),
                out);
}

namespace detail {

// A webhook handler's two forms: f(event) and, with a TransactionalStore, f(event, transaction&).
template <class Handler, class Store>
concept transactional_webhook_handler = requires {
  typename Store::transaction;
}
&&std::invocable<Handler&, const webhook_event&, typename Store::transaction&>;

}  // namespace detail

/// One delivery received through `events` (an idem::inbox): checked by `receiver`, `handler` run
/// once per (sender, event id), the answer written to `out`. `handler(const webhook_event&)`,
/// or with a TransactionalStore `handler(const webhook_event&, Store::transaction&)`, run in
/// the transaction that records the event; it returns nothing, or an http_response-like answer.
template <class Inbox, class FieldValues, class Handler, reply_writer Writer>
void receive_webhook(Inbox& events, const webhook_receiver& receiver,
                     const FieldValues& field_values, std::string_view body, Handler& handler,
                     Writer& out) {
  using store_type = typename Inbox::store_type;
  const webhook_check checked =
      receiver.check(field_values, body, std::chrono::system_clock::now());
  if (!checked) return write_problem(*checked.refusal(), out);
  const webhook_event& event = checked.event();
  try {
    if constexpr (detail::transactional_webhook_handler<Handler, store_type>) {
      const auto outcome = events.deduplicate(event.sender, event.id,
                                              [&](typename store_type::transaction& transaction) {
                                                return handler(event, transaction);
                                              });
      write_webhook_outcome(outcome, event, receiver.sender(), out);
    } else {
      static_assert(std::invocable<Handler&, const webhook_event&>,
                    "idem::http::receive_webhook: the handler must be callable as "
                    "f(const webhook_event&), or with a TransactionalStore as "
                    "f(const webhook_event&, Store::transaction&)");
      const auto outcome =
          events.deduplicate(event.sender, event.id, [&] { return handler(event); });
      write_webhook_outcome(outcome, event, receiver.sender(), out);
    }
  } catch (...) {
    write_webhook_failure(receiver.sender(), out);
  }
}

}  // namespace idem::http

#endif  // IDEM_HTTP_WEBHOOK_HPP
