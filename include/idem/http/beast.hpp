// idem on Boost.Beast: an asynchronous handler for boost::beast::http::request that runs an
// idem::async_idempotent, with the protocol of exchange.hpp (the key read as the draft says,
// replays marked Idempotent-Replayed: true, refusals as problem+json with a 409's Retry-After),
// answering a boost::beast::http::response<string_body> ready to write. Needs Boost.Beast, which
// is header-only and part of Boost (CMake: idem::asio is enough); Boost.Asio only, never
// standalone Asio (Beast is built on Boost's). Not part of idem.hpp.
//
//   idem::async_idempotent charges{io.get_executor(),
//       [&](idem::async_handler_context& ctx, const idem::http::beast_request<>& req)
//           -> asio::awaitable<idem::http_response> {
//         co_return idem::http_response{201, {{"Content-Type", "application/json"}},
//                                       co_await charge(req->body(), ctx.downstream_key("c"))};
//       }};
//   auto post_charge = idem::http::post_handler(charges,
//       [](const auto& message) { return authenticated_account(message); });  // never a field
//   auto publish_specification = idem::http::specification_handler(
//       idem::http::specification::of(charges));
//   ...in a connection's coroutine, once a request is read:
//   auto response = co_await post_charge(message);  // or publish_specification(message)
//   co_await beast::http::async_write(stream, response, asio::use_awaitable);
//
// Underneath, async_serve(guarded, scope, message, [request,] spec, token) is one exchange as
// an Asio asynchronous operation: any completion token (use_awaitable, a callback, use_future,
// deferred), completing with void(std::exception_ptr, beast_response). It runs as
// async_idempotent::async_call does, on the completion handler's associated executor (with
// use_awaitable, in the caller's own coroutine) and hearing the handler's cancellation slot: a
// call cancelled before its handler returned answers 503 cancelled. A handler's own exception
// passes through as the exception_ptr (thrown, with use_awaitable), as async_call passes it.
//
// Beast's parser frames most requests strictly, but joins a folded field line and passes a
// transfer coding it does not know before chunked: a connection loop reads the head itself and
// holds it to check_request_head (framing.hpp) before Beast parses it (docs/http.md, "A
// connection loop"); every exchange here checks the fields once more (check_framing), so that
// Transfer-Encoding: gzip, chunked never reaches a handler whatever the loop.
//
// The wrapper's handler takes the request as a beast_request<Body> (a view of Beast's request,
// fingerprinted in place: method, target, body), or as any request type the caller builds from
// it (an idem::http_request, http_request_of(message), when the records keep their requests
// for the reconciler). Its response is an idem::http_response, or anything http_response_like.
#ifndef IDEM_HTTP_BEAST_HPP
#define IDEM_HTTP_BEAST_HPP

#include <idem/async/asio.hpp>

#if defined(IDEM_ASIO_STANDALONE)
#error "idem/http/beast.hpp needs Boost.Asio: Boost.Beast is built on it, not on standalone Asio"
#endif

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <idem/core/request.hpp>
#include <idem/http/exchange.hpp>
#include <idem/http/framing.hpp>
#include <idem/http/idempotency_key.hpp>
#include <idem/http/problem.hpp>
#include <idem/http/specification.hpp>
#include <idem/http/webhook.hpp>
#include <idem/server/detail/async_engine.hpp>
#include <idem/server/outcome.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::http {

/// The response every handler of this header answers: Beast's, with its body in a string.
using beast_response = boost::beast::http::response<boost::beast::http::string_body>;

namespace detail {

inline std::string_view text_of(boost::beast::string_view text) noexcept {
  return {text.data(), text.size()};
}

/// Whether a Beast body keeps its bytes in one piece of chars (string_body, vector_body<char>,
/// span_body<char>), so that idem can fingerprint it in place.
template <class Body>
concept contiguous_text_body = requires(const typename Body::value_type& body) {
  { std::data(body) } -> std::convertible_to<const char*>;
  { std::size(body) } -> std::convertible_to<std::size_t>;
};

}  // namespace detail

/// Beast's request as idem fingerprints it, without a copy: method, target (the query
/// included) and body, and its headers looked up by name. Points at the request, which must
/// outlive it.
template <class Body = boost::beast::http::string_body>
class beast_request {
  static_assert(detail::contiguous_text_body<Body>,
                "idem::http::beast_request needs a body kept in one piece of chars "
                "(string_body, vector_body<char>, span_body<char>): read the request with one of "
                "those, or build a request of your own from it (http_request_of).");

 public:
  using message_type = boost::beast::http::request<Body>;

  explicit beast_request(const message_type& message) noexcept : message_(&message) {}

  const message_type& operator*() const noexcept { return *message_; }
  const message_type* operator->() const noexcept { return message_; }

  request_view view() const noexcept {
    const auto& body = message_->body();
    return {detail::text_of(message_->method_string()),
            detail::text_of(message_->target()),
            std::string_view(std::data(body), std::size(body)),
            {},
            message_,
            &header_of};
  }

 private:
  static std::string_view header_of(const void* source, std::string_view name) {
    const auto& message = *static_cast<const message_type*>(source);
    const auto found = message.find(boost::beast::string_view(name.data(), name.size()));
    if (found == message.end()) return {};
    const std::string_view value = detail::text_of(found->value());
    // Absent is a null view (request_view::header): a present, empty field must not be one.
    return value.data() == nullptr ? std::string_view("") : value;
  }

  const message_type* message_;
};

template <class Body>
beast_request(const boost::beast::http::request<Body>&) -> beast_request<Body>;

/// Writes an exchange's answer into Beast's response (reply_writer). Fields are inserted, never
/// replaced: a stored response with two Set-Cookie fields is replayed with both.
class beast_writer {
 public:
  explicit beast_writer(beast_response& response) noexcept : response_(&response) {}

  void set_status(int status) { response_->result(static_cast<unsigned>(status)); }
  void add_header(std::string_view name, std::string_view value) {
    response_->insert(boost::beast::string_view(name.data(), name.size()),
                      boost::beast::string_view(value.data(), value.size()));
  }
  void set_body(std::string_view content, std::string_view type) {
    response_->body().assign(content);
    // A response stored without a Content-Type is replayed without one.
    if (!type.empty()) {
      response_->set(boost::beast::http::field::content_type,
                     boost::beast::string_view(type.data(), type.size()));
    }
  }

 private:
  beast_response* response_;
};

/// The request's values of `field`, the first two at most: enough for parse_key_fields and
/// parse_deadline_fields to tell none, one and several apart, without allocating. Views into
/// the request.
class key_field_values {
 public:
  template <class Body>
  key_field_values(const boost::beast::http::request<Body>& message, std::string_view field) {
    const auto [first, last] =
        message.equal_range(boost::beast::string_view(field.data(), field.size()));
    for (auto it = first; it != last && count_ < values_.size(); ++it) {
      values_[count_++] = detail::text_of(it->value());
    }
  }

  const std::string_view* begin() const noexcept { return values_.data(); }
  const std::string_view* end() const noexcept { return values_.data() + count_; }

 private:
  std::array<std::string_view, 2> values_{};
  std::size_t count_ = 0;
};

/// The fields of Beast's request (its header), checked by check_request_fields (framing.hpp):
/// by default the framing rules alone, the sizes being the reading loop's.
template <class Fields>
std::optional<framing_refusal> check_framing(
    const boost::beast::http::header<true, Fields>& message,
    const framing_options& options = framing_options::framing_only()) {
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  for (const auto& field : message) {
    fields.emplace_back(detail::text_of(field.name_string()), detail::text_of(field.value()));
  }
  return check_request_fields(fields, options);
}

/// An owning idem::http_request built from Beast's: method, target, body, and the fields named
/// in `kept_fields` only. For a handler whose records keep their requests (the reconciler
/// resumes them): never every field, because Authorization or Cookie have no place in a store.
template <class Body>
http_request http_request_of(const boost::beast::http::request<Body>& message,
                             std::initializer_list<std::string_view> kept_fields = {}) {
  static_assert(detail::contiguous_text_body<Body>,
                "idem::http::http_request_of needs a body kept in one piece of chars "
                "(string_body, vector_body<char>, span_body<char>).");
  http_request request;
  request.method = detail::text_of(message.method_string());
  request.target = detail::text_of(message.target());
  const auto& body = message.body();
  request.body.assign(std::data(body), std::size(body));
  for (const std::string_view name : kept_fields) {
    const auto [first, last] =
        message.equal_range(boost::beast::string_view(name.data(), name.size()));
    for (auto it = first; it != last; ++it) {
      request.headers.emplace_back(std::string(name), std::string(detail::text_of(it->value())));
    }
  }
  return request;
}

namespace detail {

template <class T>
const T& unwrapped(const T& value) noexcept {
  return value;
}
template <class T>
const T& unwrapped(std::reference_wrapper<T> value) noexcept {
  return value.get();
}

/// The response of the handler behind an idempotent_outcome<R>: R.
template <class Outcome>
struct response_of;
template <class Response>
struct response_of<idempotent_outcome<Response>> {
  using type = Response;
};

/// The response of the wrapper's handler for `Request`, as its async_call answers it.
template <class Guarded, class Request>
using async_response_of = typename response_of<
    typename idem::detail::awaited<decltype(std::declval<Guarded&>().async_call(
        std::string_view{}, std::optional<std::string_view>{}, std::declval<const Request&>(),
        asio::use_awaitable))>::type>::type;

template <class Guarded, class Request>
concept async_guard = requires(Guarded& guarded, const Request& request) {
  guarded.get_executor();
  guarded.async_call(std::string_view{}, std::optional<std::string_view>{}, request,
                     asio::use_awaitable);
};

template <class Guarded, class Request>
constexpr bool check_async_guard() {
  static_assert(async_guard<Guarded, Request>,
                "idem::http::async_serve needs an idem::async_idempotent whose handler takes "
                "this request type (a blocking idem::idempotent serves through exchange() on a "
                "thread of its own instead).");
  if constexpr (async_guard<Guarded, Request>) {
    using response_type = async_response_of<Guarded, Request>;
    static_assert(http_response_like<response_type>,
                  "idem::http::async_serve needs the handler's response to have a status, "
                  "headers as (name, value) pairs and a body, as idem::http_response does.");
    return http_response_like<response_type>;
  }
  return false;
}

/// The response to `message`: 200 until written otherwise, its version and keep-alive.
template <class Body>
beast_response response_to(const boost::beast::http::request<Body>& message) {
  beast_response response{boost::beast::http::status::ok, message.version()};
  response.keep_alive(message.keep_alive());
  return response;
}

/// The refusal of a request framed ambiguously (check_framing), its connection closed and its
/// payload prepared; std::nullopt for one framed well.
template <class Body>
std::optional<beast_response> framing_refused(const boost::beast::http::request<Body>& message) {
  const auto refusal = check_framing(message);
  if (!refusal) return std::nullopt;
  beast_response response = response_to(message);
  beast_writer out{response};
  write_framing_refusal(*refusal, out);
  response.keep_alive(false);
  response.prepare_payload();
  return response;
}

/// One exchange, as a coroutine. Scope, request and specification are taken by value (a
/// string_view, a reference_wrapper or a pointer where the caller keeps them alive; the thing
/// itself where the frame must own it), so that the awaitable outlives whatever made it.
template <class Guarded, class Scope, class Body, class Request, class Spec>
asio::awaitable<beast_response> serve(Guarded& guarded, Scope scope,
                                      const boost::beast::http::request<Body>& message,
                                      Request request, Spec spec) {
  const specification& published = *spec;
  if (auto refused = framing_refused(message)) co_return std::move(*refused);
  beast_response response = response_to(message);
  beast_writer out{response};
  // The key and the caller's deadline, read as exchange reads them (exchange.hpp).
  const call_fields fields(
      [&message](std::string_view name) { return key_field_values(message, name); }, published);
  if (fields.refusal()) {
    write_problem(*fields.refusal(), out);
  } else {
    const auto outcome =
        co_await guarded.async_call(std::string_view(scope), fields.key(), unwrapped(request),
                                    fields.deadline(), asio::use_awaitable);
    write_outcome(outcome, published, out);
  }
  response.prepare_payload();
  co_return response;
}

/// async_serve's body, for any token: the coroutine itself for use_awaitable, else started
/// (co_spawn) where async_idempotent would start the call, hearing every cancellation type.
template <class Guarded, class Token, class Body, class Request>
auto initiate_serve(Guarded& guarded, std::string_view scope,
                    const boost::beast::http::request<Body>& message, Request request,
                    const specification& spec, Token&& token) {
  if constexpr (idem::detail::awaits_in_caller<Token>) {
    return serve(guarded, scope, message, std::move(request), &spec);
  } else {
    return asio::async_initiate<Token, void(std::exception_ptr, beast_response)>(
        [&guarded](auto handler, std::string_view scope,
                   const boost::beast::http::request<Body>* message, Request request,
                   const specification* spec) {
          const auto executor = idem::detail::operation_executor(handler, guarded.get_executor());
          asio::co_spawn(executor,
                         idem::detail::hearing_every_cancellation(
                             serve(guarded, scope, *message, std::move(request), spec)),
                         std::move(handler));
        },
        token, scope, &message, std::move(request), &spec);
  }
}

}  // namespace detail

/// Runs `guarded` for `message` under `scope`, with `request` as its handler's request, and
/// completes with the answer: void(std::exception_ptr, beast_response), the response's version
/// and keep-alive the request's, its payload prepared. Everything passed is read until the
/// operation completes, as Asio reads a buffer: keep it alive until then.
template <class Guarded, class Body, class Request, class Token>
auto async_serve(Guarded& guarded, std::string_view scope,
                 const boost::beast::http::request<Body>& message, const Request& request,
                 const specification& spec, Token&& token) {
  static_assert(detail::check_async_guard<Guarded, Request>());
  return detail::initiate_serve(guarded, scope, message, std::cref(request), spec,
                                std::forward<Token>(token));
}

/// The same, the handler's request being a beast_request of `message`.
template <class Guarded, class Body, class Token>
auto async_serve(Guarded& guarded, std::string_view scope,
                 const boost::beast::http::request<Body>& message, const specification& spec,
                 Token&& token) {
  static_assert(detail::check_async_guard<Guarded, beast_request<Body>>());
  return detail::initiate_serve(guarded, scope, message, beast_request<Body>{message}, spec,
                                std::forward<Token>(token));
}

/// A handler for a connection's coroutine: `handler(message)` is an
/// asio::awaitable<beast_response> that serves `message` through `guarded`, `scope_of(message)`
/// naming the scope (the account, the tenant) and `make_request(message)` the handler's
/// request. The awaitable owns what it needs but `guarded` and `message`, which must outlive it;
/// the handler itself need not.
template <class Guarded, class ScopeOf, class MakeRequest>
auto post_handler(Guarded& guarded, ScopeOf scope_of, MakeRequest make_request,
                  specification spec) {
  return [&guarded, scope_of = std::move(scope_of), make_request = std::move(make_request),
          spec = std::make_shared<const specification>(std::move(spec))](const auto& message) {
    auto request = std::invoke(make_request, message);
    static_assert(detail::check_async_guard<Guarded, decltype(request)>());
    return detail::serve(guarded, std::string(std::invoke(scope_of, message)), message,
                         std::move(request), spec);
  };
}

/// The same, the handler's request being a beast_request.
template <class Guarded, class ScopeOf>
auto post_handler(Guarded& guarded, ScopeOf scope_of, specification spec) {
  return post_handler(
      guarded, std::move(scope_of),
      []<class Body>(const boost::beast::http::request<Body>& message) {
        return beast_request<Body>{message};
      },
      std::move(spec));
}

/// The same, with the specification the wrapper keeps, published at "/idempotency".
template <class Guarded, class ScopeOf>
auto post_handler(Guarded& guarded, ScopeOf scope_of) {
  return post_handler(guarded, std::move(scope_of), specification::of(guarded));
}

namespace detail {

/// One webhook delivery received through an idem::async_inbox, as a coroutine: the framing,
/// the signature, the timestamp and the event id checked (webhook.hpp), the handler run through
/// the inbox, the answer written. Whatever it reads but `events` and `message` it holds.
template <class Inbox, class Handler, class Body>
asio::awaitable<beast_response> receive_webhook(Inbox& events,
                                                std::shared_ptr<const webhook_receiver> receiver,
                                                std::shared_ptr<Handler> handler,
                                                const boost::beast::http::request<Body>& message) {
  if (auto refused = framing_refused(message)) co_return std::move(*refused);
  beast_response response = response_to(message);
  beast_writer out{response};
  const auto& body = message.body();
  const webhook_check checked = receiver->check(
      [&message](std::string_view name) { return key_field_values(message, name); },
      std::string_view(std::data(body), std::size(body)), std::chrono::system_clock::now());
  if (!checked) {
    write_problem(*checked.refusal(), out);
  } else {
    const webhook_event& event = checked.event();
    bool failed = false;
    try {
      const auto outcome = co_await events.async_deduplicate(
          event.sender, event.id, [&handler, &event] { return (*handler)(event); },
          asio::use_awaitable);
      write_webhook_outcome(outcome, event, receiver->sender(), out);
    } catch (...) {
      failed = true;
    }
    if (failed) write_webhook_failure(receiver->sender(), out);
  }
  response.prepare_payload();
  co_return response;
}

}  // namespace detail

/// A handler for a connection's coroutine that receives `receiver`'s webhooks through `events`
/// (an idem::async_inbox): `handler(message)` is an asio::awaitable<beast_response> that checks
/// the delivery and runs `handler(const webhook_event&)`, an asio::awaitable<void> (or of an
/// http_response-like answer), once per event (webhook.hpp has the answers). The awaitable owns
/// what it needs but `events` and `message`, which must outlive it.
template <class Inbox, class Handler>
auto webhook_handler(Inbox& events, webhook_receiver receiver, Handler handler) {
  static_assert(std::is_invocable_v<Handler&, const webhook_event&>,
                "idem::http::webhook_handler: the handler must be callable as "
                "f(const webhook_event&), answering an asio::awaitable");
  return [&events, receiver = std::make_shared<const webhook_receiver>(std::move(receiver)),
          handler = std::make_shared<Handler>(std::move(handler))]<class Body>(
             const boost::beast::http::request<Body>& message) {
    return detail::receive_webhook(events, receiver, handler, message);
  };
}

/// A handler that serves the specification: handler(message) is the beast_response, HTML, or
/// JSON to a request that accepts application/json and not text/html.
inline auto specification_handler(const specification& spec) {
  return [html = specification_html(spec), json = specification_json(spec)]<class Body>(
             const boost::beast::http::request<Body>& message) {
    const std::string_view accept = detail::text_of(message[boost::beast::http::field::accept]);
    const bool wants_json = accept.find("application/json") != std::string_view::npos &&
                            accept.find("text/html") == std::string_view::npos;
    beast_response response{boost::beast::http::status::ok, message.version()};
    response.keep_alive(message.keep_alive());
    response.set(boost::beast::http::field::content_type,
                 wants_json ? "application/json" : "text/html; charset=utf-8");
    response.body() = wants_json ? json : html;
    response.prepare_payload();
    return response;
  };
}

}  // namespace idem::http

IDEM_ASIO_CODE_END

#endif  // IDEM_HTTP_BEAST_HPP
