// The four forms of an asynchronous call async_retrying accepts, and what an attempt of each
// produces: `(const attempt_context&, Args&...) -> awaitable`, the same without the context, or an
// Asio initiating function (with or without the context) given a completion token that turns an
// error code into an exception, tried in that order.
#ifndef IDEM_CLIENT_DETAIL_ASYNC_CALL_HPP
#define IDEM_CLIENT_DETAIL_ASYNC_CALL_HPP

#include <functional>
#include <type_traits>
#include <utility>

#include <idem/async/asio.hpp>
#include <idem/client/attempt.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem::detail {

// What an initiating function is given as its completion token.
using error_to =
    decltype(asio::redirect_error(asio::use_awaitable, std::declval<asio_error_code&>()));

// The four forms of an asynchronous call, in the order they are tried.
enum class async_form { none, awaits_with_context, awaits, initiates_with_context, initiates };

template <class Call, class... Args>
constexpr async_form async_form_of() {
  if constexpr (requires(Call & call, const attempt_context& context, Args&... args) {
                  { std::invoke(call, context, args...) } -> an_awaitable;
                }) {
    return async_form::awaits_with_context;
  } else if constexpr (requires(Call & call, Args & ... args) {
                         { std::invoke(call, args...) } -> an_awaitable;
                       }) {
    return async_form::awaits;
  } else if constexpr (requires(Call & call, const attempt_context& context, Args&... args,
                                error_to token) {
                         { std::invoke(call, context, args..., token) } -> an_awaitable;
                       }) {
    return async_form::initiates_with_context;
  } else if constexpr (requires(Call & call, Args & ... args, error_to token) {
                         { std::invoke(call, args..., token) } -> an_awaitable;
                       }) {
    return async_form::initiates;
  } else {
    return async_form::none;
  }
}

template <async_form Form, class Call, class... Args>
struct async_call_awaitable {
  using type = void;
};
template <class Call, class... Args>
struct async_call_awaitable<async_form::awaits_with_context, Call, Args...> {
  using type = std::invoke_result_t<Call&, const attempt_context&, Args&...>;
};
template <class Call, class... Args>
struct async_call_awaitable<async_form::awaits, Call, Args...> {
  using type = std::invoke_result_t<Call&, Args&...>;
};
template <class Call, class... Args>
struct async_call_awaitable<async_form::initiates_with_context, Call, Args...> {
  using type = std::invoke_result_t<Call&, const attempt_context&, Args&..., error_to>;
};
template <class Call, class... Args>
struct async_call_awaitable<async_form::initiates, Call, Args...> {
  using type = std::invoke_result_t<Call&, Args&..., error_to>;
};

/// What an attempt of `Call` with `Args` produces (void for none of the four forms).
template <class Call, class... Args>
using async_call_result_t = typename awaited<
    typename async_call_awaitable<async_form_of<Call, Args...>(), Call, Args...>::type>::type;

}  // namespace idem::detail

IDEM_ASIO_CODE_END

#endif  // IDEM_CLIENT_DETAIL_ASYNC_CALL_HPP
